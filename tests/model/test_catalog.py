from __future__ import annotations

import pytest

from agora_optimizer.model import Billing, Catalog, Resource, Task


@pytest.mark.parametrize(
    ("billing", "lease_s", "billed_s"),
    [
        (Billing(1, 60), 10.0, 60),  # the minimum
        (Billing(1, 60), 61.2, 62),  # per-second steps
        (Billing(10, 0), 30.000000000000004, 30),  # float noise is not a step
        (Billing(3600, 0), 1.0, 3600),  # hourly
        (Billing(1, 0), 0.0, 0),
    ],
)
def test_billing_steps_and_minimum(billing: Billing, lease_s: float, billed_s: float) -> None:
    assert billing.billed_s(lease_s) == billed_s


def test_resource_runtime_fit_and_lease_cost() -> None:
    r = Resource("r", "aws", vcpus=2, memory_gib=1, speed=2.0, price_per_hour_usd=3.6, billing=Billing(1, 60))
    assert r.memory_bytes == 2**30
    assert r.runtime_s(Task("t", 10.0, 1, 1, "t")) == 5.0
    assert r.fits(Task("t", 1.0, 2, 2**30, "t"))
    assert not r.fits(Task("t", 1.0, 3, 1, "t"))
    assert not r.fits(Task("t", 1.0, 1, 2**30 + 1, "t"))
    assert r.lease_cost_usd(30.0) == pytest.approx(0.06)  # 60 s minimum at 0.001 $/s
    assert r.lease_cost_usd(100.5) == pytest.approx(0.101)


def test_a_task_fits_a_type_only_with_as_many_gpus() -> None:
    cpu = Resource("c", "aws", vcpus=8, memory_gib=32, speed=1.0, price_per_hour_usd=1.0)
    gpu = Resource("g", "aws", vcpus=8, memory_gib=32, speed=1.0, price_per_hour_usd=1.0, gpus=2, gpu_model="L4")
    plain, one, three = (Task("t", 1.0, 1, 2**30, "t", gpus=n) for n in (0, 1, 3))
    assert cpu.gpus == 0 and cpu.fits(plain) and not cpu.fits(one)
    assert gpu.fits(plain) and gpu.fits(one) and not gpu.fits(three)
    catalog = Catalog((cpu, gpu), 1.0)
    assert catalog.feasible(one) == [gpu]
    assert catalog.feasible(three) == []
    assert catalog.most_gpus() is gpu


def test_feasible_types_are_the_fitting_types_in_catalog_order_and_a_fresh_list_each_time() -> None:
    """Kept per task shape for speed: the same answer as filtering the types, and a caller's list of its own."""
    from agora_optimizer.io.catalog_file import load_catalog
    from agora_optimizer.model.workflow import Task
    from tests.conftest import AWS_CATALOG

    catalog = load_catalog(AWS_CATALOG)
    task = Task(id="t", runtime_s=1.0, cores=4, memory_bytes=20 * 2**30, category="c")
    first = catalog.feasible(task)
    assert first == [r for r in catalog.resources if r.fits(task)] and 0 < len(first) < len(catalog.resources)
    first.clear()
    assert catalog.feasible(task) == [r for r in catalog.resources if r.fits(task)]

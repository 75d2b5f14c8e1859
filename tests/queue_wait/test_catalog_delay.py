"""The predicted wait becomes the release time of SLURM types (boot_s unchanged), and of nothing else."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agora_optimizer.cli import main
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.plan_file import write_plan
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Objective
from agora_optimizer.optimize.optimize import optimize
from agora_optimizer.queue_wait.catalog_delay import (
    QueueWaitCatalogError,
    predict_catalog_waits,
    with_queue_wait,
)
from agora_optimizer.queue_wait.features import QueueFeatures
from agora_optimizer.queue_wait.model import QueueWaitFallbackWarning, QueueWaitRegressor, features_frame
from agora_optimizer.slurm.queue import QueuedJob, QueueSnapshot
from tests import spec_checker
from tests.conftest import AWS_CATALOG, BUNDLED, CATALOGS, wfformat_15, write_json

SLURM_CATALOG = CATALOGS / "slurm-example.yaml"
LOOPBACK = CATALOGS / "slurm-loopback.yaml"
BLAST = BUNDLED / "blast-chameleon-small-001.json"


@pytest.fixture
def mixed() -> Catalog:
    """Two AWS types and the example's two SLURM partitions, one of them with a boot delay already."""
    aws = load_catalog(AWS_CATALOG).resources[:2]
    slurm = load_catalog(SLURM_CATALOG).resources
    slurm = (replace(slurm[0], boot_s=5.0), *slurm[1:])
    return Catalog(resources=(*aws, *slurm), bandwidth_bytes_per_s=1e9, source="mixed")


def test_the_wait_is_a_release_of_slurm_types_only(mixed: Catalog) -> None:
    delayed = with_queue_wait(mixed, {"compute": 120.0, "bigmem": 30.5})
    assert (delayed.by_name["compute"].release_s, delayed.by_name["bigmem"].release_s) == (120.0, 30.5)
    # boot time is leased and billed; the wait is neither: boot_s stays the catalog's
    assert {r.name: r.boot_s for r in delayed.resources} == {r.name: r.boot_s for r in mixed.resources}
    assert delayed.by_name["compute"].earliest_start_s == 125.0  # released, then booted
    for resource in mixed.resources:
        if resource.backend != "slurm":
            assert delayed.by_name[resource.name] == resource
    assert all(r.release_s == 0.0 for r in mixed.resources)  # the input is not changed
    assert delayed.by_name["compute"].extra["partition"] == "compute"
    assert delayed.bandwidth_bytes_per_s == mixed.bandwidth_bytes_per_s


def test_a_partition_key_delays_every_type_of_that_partition() -> None:
    base = load_catalog(SLURM_CATALOG)
    large = replace(base.resources[0], name="compute-large")
    small = replace(base.resources[0], name="compute-small", vcpus=8)
    catalog = Catalog(resources=(large, small, base.resources[1]), bandwidth_bytes_per_s=base.bandwidth_bytes_per_s)
    assert small.slurm_partition == large.slurm_partition == "compute"
    assert replace(small, extra={}).slurm_partition is None  # (the backend refuses it, naming it)
    delayed = with_queue_wait(catalog, {"compute": 60.0})
    assert delayed.by_name["compute-large"].release_s == delayed.by_name["compute-small"].release_s == 60.0
    assert delayed.by_name["bigmem"].release_s == 0.0
    assert with_queue_wait(catalog, {}) == catalog
    one = with_queue_wait(catalog, {"compute-small": 30.0})  # a type's own name: that type only
    assert (one.by_name["compute-small"].release_s, one.by_name["compute-large"].release_s) == (30.0, 0.0)


@pytest.mark.parametrize(
    ("predictions", "message"),
    [
        ({"gpu": 10.0}, "'gpu': names no SLURM type or partition"),
        ({"compute": -1.0}, ">= 0 seconds"),
        ({"compute": float("inf")}, ">= 0 seconds"),
    ],
)
def test_waits_that_do_not_fit_the_catalog_are_refused(mixed: Catalog, predictions: dict, message: str) -> None:
    with pytest.raises(QueueWaitCatalogError, match=message):
        with_queue_wait(mixed, predictions)


def test_a_wait_for_an_aws_type_is_refused(mixed: Catalog) -> None:
    aws_name = next(r.name for r in mixed.resources if r.backend == "aws")
    with pytest.raises(QueueWaitCatalogError, match=f"'{aws_name}': is a aws type, not SLURM"):
        with_queue_wait(mixed, {aws_name: 10.0})


def test_catalog_waits_from_a_model_and_a_queue(mixed: Catalog) -> None:
    now = datetime.now(UTC)
    queue = QueueSnapshot(
        taken_at=now,
        jobs=(QueuedJob("1", "compute", "pending", 32, 2**30, 3600.0, now),),
        source="test",
    )
    rows = [QueueFeatures.from_snapshot(queue, "compute", 4, 2**30, 600.0)] * 3
    medians = QueueWaitRegressor(min_samples=100).fit(features_frame(rows), [90.0, 100.0, 130.0])
    with pytest.warns(QueueWaitFallbackWarning, match="bigmem"):
        waits = predict_catalog_waits(medians, mixed, queue, 3600.0)
    assert waits == {"compute": 100.0, "bigmem": 0.0}
    delayed = with_queue_wait(mixed, waits)
    assert delayed.by_name["compute"].release_s == 100.0
    assert delayed.by_name["compute"].boot_s == mixed.by_name["compute"].boot_s
    aws_only = mixed.restricted_to([r.name for r in mixed.resources if r.backend == "aws"])
    assert predict_catalog_waits(medians, aws_only, queue, None) == {}


@pytest.mark.parametrize("kind", ["time", pytest.param("cost", marks=pytest.mark.slow)])  # cost: plans for seconds
def test_a_planned_queue_wait_delays_the_leases_and_is_not_billed(tmp_path: Path, kind: str) -> None:
    """Issue 15's reproduction: blast on the loopback cluster with a 120 s wait on every partition.

    The plan names the catalog file; its claimed cost must be what its leases cost there, and
    both ``agora validate`` and the independent checker must accept it."""
    wait_s = 120.0
    catalog = load_catalog(LOOPBACK)
    delayed = with_queue_wait(catalog, {str(r.slurm_partition): wait_s for r in catalog.resources})
    plan = optimize(load_workflow(BLAST), delayed, Objective(kind=kind), str(LOOPBACK), time_limit_s=5.0)
    out = tmp_path / "plan.json"
    write_plan(plan, out)
    document = json.loads(out.read_text())
    assert spec_checker.check_plan(document, BLAST, LOOPBACK) == []
    makespan_s, cost_usd = spec_checker.recompute(document, BLAST, LOOPBACK)
    assert plan.cost_usd == pytest.approx(cost_usd, rel=1e-9)
    assert plan.makespan_s == pytest.approx(makespan_s, rel=1e-9)
    assert main(["validate", str(out), "-w", str(BLAST), "-c", str(LOOPBACK)]) == 0
    for assignment in plan.assignments:  # every type here is SLURM: nothing starts before the wait and the boot
        assert assignment.start_s >= wait_s + catalog.by_name[assignment.resource].boot_s - 1e-6


MIXED_CATALOG = """network: {bandwidth_bytes_per_s: 1.0e9}
resources:
  - {name: hpc, backend: slurm, partition: compute, vcpus: 4, memory_gib: 16, speed: 2.0, price_per_hour_usd: 0.1,
     count: 1, billing: {granularity_s: 1, minimum_s: 0}, boot_s: 0}
  - {name: cloud, backend: aws, vcpus: 4, memory_gib: 16, speed: 1.0, price_per_hour_usd: 0.4,
     count: 1, billing: {granularity_s: 1, minimum_s: 60}, boot_s: 30}
"""


@pytest.mark.parametrize(("wait_s", "expected"), [(0.0, "hpc"), (600.0, "cloud")])
def test_a_long_queue_wait_moves_the_work_from_slurm_to_aws(tmp_path: Path, wait_s: float, expected: str) -> None:
    """Four independent 100 s tasks under the time objective: the SLURM type is twice as fast and
    takes them all at once (50 s), the AWS type boots for 30 s then takes 100 s. A 600 s queue wait
    makes SLURM the slower choice, so the plan moves to AWS; with no wait it stays on SLURM."""
    catalog_path = tmp_path / "mixed.yaml"
    catalog_path.write_text(MIXED_CATALOG)
    tasks = [{"id": f"t{i}", "runtime": 100.0, "parents": [], "memory": 2**30} for i in range(4)]
    workflow_path = write_json(tmp_path / "four.json", wfformat_15(tasks, name="four"))
    catalog = load_catalog(catalog_path)
    hpc, cloud, task = catalog.by_name["hpc"], catalog.by_name["cloud"], load_workflow(workflow_path).tasks[0]
    hpc_end_s, cloud_end_s = wait_s + hpc.boot_s + hpc.runtime_s(task), cloud.boot_s + cloud.runtime_s(task)
    assert (hpc_end_s < cloud_end_s) == (expected == "hpc")  # the premise: each type fits all four at once
    delayed = with_queue_wait(catalog, {"compute": wait_s})
    plan = optimize(load_workflow(workflow_path), delayed, Objective(kind="time"), str(catalog_path), 10.0)
    assert {a.resource for a in plan.assignments} == {expected}
    out = tmp_path / "plan.json"
    write_plan(plan, out)
    assert spec_checker.check_plan(json.loads(out.read_text()), workflow_path, catalog_path) == []

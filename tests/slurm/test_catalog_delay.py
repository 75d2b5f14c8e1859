"""The predicted wait becomes the release time of SLURM types (boot_s unchanged), and of nothing else."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.queue_wait.catalog_delay import (
    QueueWaitCatalogError,
    predict_catalog_waits,
    slurm_partition,
    with_queue_wait,
)
from agora_optimizer.queue_wait.features import QueueFeatures
from agora_optimizer.queue_wait.model import QueueWaitFallbackWarning, QueueWaitRegressor, features_frame
from agora_optimizer.queue_wait.snapshot import QueuedJob, QueueSnapshot
from tests.conftest import AWS_CATALOG, CATALOGS

SLURM_CATALOG = CATALOGS / "slurm-example.yaml"


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
    assert slurm_partition(small) == slurm_partition(large) == "compute"
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

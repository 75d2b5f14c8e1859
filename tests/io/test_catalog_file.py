from __future__ import annotations

import re
from pathlib import Path

import pytest

from agora_optimizer.errors import AgoraError, FieldError
from agora_optimizer.io.catalog_file import load_catalog, merged_catalog
from tests.conftest import AWS_CATALOG, CATALOGS, resource, write_json, write_yaml


@pytest.mark.parametrize("path", sorted(CATALOGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_catalogs_load(path: Path) -> None:
    catalog = load_catalog(path)
    assert catalog.resources
    assert catalog.bandwidth_bytes_per_s > 0


def test_aws_catalog_covers_c_m_r_families_across_generations() -> None:
    catalog = load_catalog(AWS_CATALOG)
    cpu = [r for r in catalog.resources if r.gpus == 0]
    assert len(cpu) >= 12
    families = {re.match(r"([a-z]+)(\d+)", r.name).groups() for r in cpu}  # type: ignore[union-attr]
    assert {f for f, _ in families} == {"c", "m", "r"}
    for family in ("c", "m", "r"):
        assert len({g for f, g in families if f == family}) >= 2
    memory_per_vcpu = {r.name[0]: r.memory_gib / r.vcpus for r in cpu}
    assert memory_per_vcpu == {"c": 2, "m": 4, "r": 8}
    assert all(r.backend == "aws" and r.price_per_hour_usd > 0 for r in catalog.resources)
    assert "2026" in AWS_CATALOG.read_text()  # the prices carry their date and source


def test_aws_catalog_has_gpu_types_of_four_models() -> None:
    catalog = load_catalog(AWS_CATALOG)
    gpu = {r.name: r for r in catalog.resources if r.gpus}
    dearest_cpu = max(r.price_per_hour_usd / r.vcpus for r in catalog.resources if not r.gpus)
    assert {r.gpu_model for r in gpu.values()} == {"NVIDIA A10G", "NVIDIA L4", "NVIDIA A100", "NVIDIA H100"}
    assert (gpu["p4d.24xlarge"].gpus, gpu["p4d.24xlarge"].gpu_memory_gib) == (8, 40)
    assert (gpu["p5.48xlarge"].gpus, gpu["p5.48xlarge"].gpu_memory_gib) == (8, 80)
    for r in gpu.values():  # dearer per vCPU than every CPU type (CPU-only work is cheaper elsewhere)
        assert r.price_per_hour_usd / r.vcpus > dearest_cpu and r.gpu_memory_gib is not None


def test_yaml_reads_exponent_numbers_and_backend_keys(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "network: {bandwidth_bytes_per_s: 1.25e9}\nresources:\n"
        "  - {name: n, backend: slurm, partition: p1, vcpus: 4, memory_gib: 8, speed: 1,"
        " price_per_hour_usd: 0, count: null}\n"
    )
    catalog = load_catalog(path)
    assert catalog.bandwidth_bytes_per_s == 1.25e9
    (node,) = catalog.resources
    assert node.count is None
    assert node.extra["partition"] == "p1"
    assert (node.billing.granularity_s, node.billing.minimum_s, node.boot_s) == (1, 0, 0)


def test_json_catalog(tmp_path: Path) -> None:
    catalog = load_catalog(
        write_json(tmp_path / "c.json", {"network": {"bandwidth_bytes_per_s": 10}, "resources": [resource("a")]})
    )
    assert catalog.by_name["a"].vcpus == 2


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"backend": "gcp"}, r"resources\[1\]\.backend"),
        ({"vcpus": 0}, r"resources\[1\]\.vcpus"),
        ({"vcpus": 1.5}, r"resources\[1\]\.vcpus"),
        ({"memory_gib": -4}, r"resources\[1\]\.memory_gib"),
        ({"speed": "fast"}, r"resources\[1\]\.speed"),
        ({"price_per_hour_usd": True}, r"resources\[1\]\.price_per_hour_usd"),
        ({"count": 0}, r"resources\[1\]\.count"),
        ({"billing": {"granularity_s": 0}}, r"resources\[1\]\.billing\.granularity_s"),
        ({"name": "a"}, r"resources\[1\]\.name.*duplicate"),
        ({"name": "x#1"}, r"resources\[1\]\.name"),
    ],
)
def test_malformed_resource_names_the_field_path(change: dict, field: str, tmp_path: Path) -> None:
    doc = {"network": {"bandwidth_bytes_per_s": 10}, "resources": [resource("a"), resource("b") | change]}
    with pytest.raises(FieldError, match=field):
        load_catalog(write_yaml(tmp_path / "c.yaml", doc))


LONG = "x" * 50_000 + "\nsecond line"


@pytest.mark.parametrize(
    ("change", "field"),
    [({"name": "a#" + LONG}, r"resources\[1\]\.name"), ({"backend": LONG}, r"resources\[1\]\.backend")],
    ids=["name", "backend"],
)
def test_a_bad_value_is_quoted_short_on_one_line(change: dict, field: str, tmp_path: Path) -> None:
    doc = {"network": {"bandwidth_bytes_per_s": 10}, "resources": [resource("a"), resource("b") | change]}
    with pytest.raises(FieldError, match=field) as caught:
        load_catalog(write_yaml(tmp_path / "c.yaml", doc))
    assert "\n" not in str(caught.value)
    assert len(str(caught.value)) < 300


def test_missing_network_is_named(tmp_path: Path) -> None:
    with pytest.raises(FieldError, match="'network': is required"):
        load_catalog(write_yaml(tmp_path / "c.yaml", {"resources": [resource("a")]}))


def test_a_comma_separated_list_is_refused_with_what_to_do_instead() -> None:
    listed = f"{CATALOGS / 'local.yaml'},{CATALOGS / 'slurm-loopback.yaml'}"
    with pytest.raises(AgoraError, match=r"a catalog is one file .*\[agora\] catalog setting takes a comma"):
        load_catalog(listed)


def test_the_catalog_setting_merges_its_files_on_the_slowest_network(tmp_path: Path) -> None:
    fast = write_yaml(tmp_path / "fast.yaml", {"network": {"bandwidth_bytes_per_s": 2e9}, "resources": [resource("a")]})
    slow = write_yaml(tmp_path / "slow.yaml", {"network": {"bandwidth_bytes_per_s": 1e9}, "resources": [resource("b")]})
    merged = merged_catalog(f" {fast}, ,{slow},")
    assert [r.name for r in merged.resources] == ["a", "b"] and merged.bandwidth_bytes_per_s == 1e9
    assert merged.source == f" {fast}, ,{slow},"
    assert merged_catalog(" , ").resources == ()  # no file: an empty catalog


def test_a_resource_declared_in_two_catalog_files_names_it_and_the_second_file(tmp_path: Path) -> None:
    one = write_yaml(tmp_path / "one.yaml", {"network": {"bandwidth_bytes_per_s": 1e9}, "resources": [resource("a")]})
    two = write_yaml(tmp_path / "two.yaml", {"network": {"bandwidth_bytes_per_s": 1e9}, "resources": [resource("a")]})
    with pytest.raises(AgoraError, match=rf"^\[agora\] catalog: resource 'a' is declared twice \(again in {two}\)$"):
        merged_catalog(f"{one},{two}")


def test_a_celery_pool_is_a_resource_of_backend_celery() -> None:
    catalog = load_catalog(CATALOGS / "celery-loopback.yaml")
    assert {r.name: r.backend for r in catalog.resources} == {"pool_small": "celery", "pool_large": "celery"}
    small = catalog.by_name["pool_small"]
    assert (small.vcpus, small.memory_gib, small.count) == (1, 2, 1)


def test_a_misspelt_backend_is_named_with_the_known_ones(tmp_path: Path) -> None:
    doc = {"network": {"bandwidth_bytes_per_s": 10}, "resources": [resource("a", backend="Celery")]}
    with pytest.raises(FieldError, match=r"resources\[0\]\.backend.*aws, slurm, local, celery, got 'Celery'"):
        load_catalog(write_yaml(tmp_path / "c.yaml", doc))


def test_gpu_fields_are_read_with_their_defaults(tmp_path: Path) -> None:
    gpu = resource("g", gpus=4, gpu_model="A10G", gpu_memory_gib=24)
    catalog = load_catalog(
        write_yaml(tmp_path / "c.yaml", {"network": {"bandwidth_bytes_per_s": 10}, "resources": [resource("a"), gpu]})
    )
    plain, accelerated = catalog.resources
    assert (plain.gpus, plain.gpu_model, plain.gpu_memory_gib) == (0, None, None)
    assert (accelerated.gpus, accelerated.gpu_model, accelerated.gpu_memory_gib) == (4, "A10G", 24.0)
    assert "gpus" not in accelerated.extra and "gpu_model" not in accelerated.extra


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gpus": -1}, r"resources\[1\]\.gpus': must be >= 0"),
        ({"gpus": 1.5}, r"resources\[1\]\.gpus': expected a whole number"),
        ({"gpus": "two"}, r"resources\[1\]\.gpus': expected a number"),
        ({"gpu_model": ""}, r"resources\[1\]\.gpu_model"),
        ({"gpu_memory_gib": 0}, r"resources\[1\]\.gpu_memory_gib"),
    ],
)
def test_a_bad_gpu_field_names_the_file_and_field(change: dict, field: str, tmp_path: Path) -> None:
    doc = {"network": {"bandwidth_bytes_per_s": 10}, "resources": [resource("a"), resource("b") | change]}
    with pytest.raises(FieldError, match=r"c\.yaml: field '" + field):
        load_catalog(write_yaml(tmp_path / "c.yaml", doc))


def _spot_doc(*resources: dict) -> dict:
    return {"network": {"bandwidth_bytes_per_s": 10}, "resources": list(resources)}


def test_spot_fields_are_read_and_an_on_demand_type_has_none(tmp_path: Path) -> None:
    spot = resource("a-spot", price_per_hour_usd=0.1, spot=True, interruption_rate_per_hour=0.05, fallback="a")
    catalog = load_catalog(write_yaml(tmp_path / "c.yaml", _spot_doc(resource("a"), spot)))
    plain, interruptible = catalog.resources
    assert (plain.spot, plain.interruption_rate_per_hour, plain.fallback) == (False, None, None)
    assert (interruptible.spot, interruptible.interruption_rate_per_hour, interruptible.fallback) == (True, 0.05, "a")
    assert catalog.fallback_of(interruptible) is plain and catalog.has_spot
    assert "spot" not in interruptible.extra and "fallback" not in interruptible.extra
    assert [r.name for r in catalog.without_spot().resources] == ["a"]


def test_a_spot_type_without_a_fallback_gets_the_cheapest_on_demand_type_that_holds_it(tmp_path: Path) -> None:
    doc = _spot_doc(
        resource("small", vcpus=1, price_per_hour_usd=0.01),  # too small
        resource("dear", vcpus=4, price_per_hour_usd=0.9),
        resource("cheap", vcpus=2, price_per_hour_usd=0.3),
        resource("cheap-slurm", backend="slurm", vcpus=2, price_per_hour_usd=0.0),  # another backend
        resource("s", spot=True, interruption_rate_per_hour=0.0),
    )
    catalog = load_catalog(write_yaml(tmp_path / "c.yaml", doc))
    assert catalog.by_name["s"].fallback == "cheap"


@pytest.mark.parametrize(
    ("spot", "message"),
    [
        ({"spot": True}, r"resources\[1\]\.interruption_rate_per_hour': is required for a spot type"),
        (
            {"spot": True, "interruption_rate_per_hour": None},
            r"resources\[1\]\.interruption_rate_per_hour': is required",
        ),
        (
            {"spot": True, "interruption_rate_per_hour": -0.1},
            r"resources\[1\]\.interruption_rate_per_hour': must be >= 0",
        ),
        ({"spot": True, "interruption_rate_per_hour": 1e6}, r"resources\[1\]\.interruption_rate_per_hour': must be <="),
        (
            {"spot": True, "interruption_rate_per_hour": "often"},
            r"resources\[1\]\.interruption_rate_per_hour': expected",
        ),
        ({"interruption_rate_per_hour": 0.1}, r"resources\[1\]\.interruption_rate_per_hour': is only for a spot type"),
        ({"fallback": "a"}, r"resources\[1\]\.fallback': is only for a spot type"),
        ({"spot": "yes", "interruption_rate_per_hour": 0.1}, r"resources\[1\]\.spot': expected true or false"),
        (
            {"spot": True, "interruption_rate_per_hour": 0.1, "fallback": "z"},
            r"resources\[1\]\.fallback': names 'z', which",
        ),
        (
            {"spot": True, "interruption_rate_per_hour": 0.1, "fallback": "b"},
            r"resources\[1\]\.fallback': names 'b', a spot",
        ),
        (
            {"spot": True, "interruption_rate_per_hour": 0.1, "fallback": "a", "vcpus": 8},
            r"resources\[1\]\.fallback': names 'a' \(2 vCPUs.*smaller than 'b'",
        ),
        (
            {"spot": True, "interruption_rate_per_hour": 0.1, "backend": "slurm"},
            r"resources\[1\]\.fallback': spot type 'b' names no fallback, and no on-demand type of backend 'slurm'",
        ),
    ],
)
def test_a_bad_spot_field_names_the_file_and_field(spot: dict, message: str, tmp_path: Path) -> None:
    doc = _spot_doc(resource("a"), resource("b") | spot)
    with pytest.raises(FieldError, match=r"c\.yaml: field '" + message):
        load_catalog(write_yaml(tmp_path / "c.yaml", doc))


def test_the_spot_catalog_pairs_each_spot_type_with_its_on_demand_twin() -> None:
    spot_catalog = CATALOGS / "aws-us-east-1-spot.yaml"
    catalog = load_catalog(spot_catalog)
    on_demand = {r.name: r for r in load_catalog(AWS_CATALOG).resources}
    spot = [r for r in catalog.resources if r.spot]
    assert {r.name for r in spot} == {f"{f}.{s}-spot" for f in ("c7i", "m7i", "r7i") for s in ("large", "xlarge")}
    for r in spot:
        twin = catalog.fallback_of(r)
        assert twin.name == r.name.removesuffix("-spot") and twin == on_demand[twin.name]
        assert (r.vcpus, r.memory_gib, r.speed, r.boot_s) == (twin.vcpus, twin.memory_gib, twin.speed, twin.boot_s)
        assert r.price_per_hour_usd == pytest.approx(0.35 * twin.price_per_hour_usd, rel=1e-3)
        assert 0 < (r.interruption_rate_per_hour or 0) < 0.01
    assert all(r == on_demand[r.name] for r in catalog.resources if not r.spot)  # the on-demand types as bundled
    assert "ILLUSTRATIVE" in spot_catalog.read_text() and "2026-12-03" in spot_catalog.read_text()

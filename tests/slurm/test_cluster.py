"""The loopback cluster itself, and what the package says when SLURM is down or absent."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.slurm.accounting import read_sacct
from agora_optimizer.slurm.commands import run_slurm
from agora_optimizer.slurm.errors import SlurmCommandError
from agora_optimizer.slurm.queue import read_snapshot
from tests.slurm_cluster import (
    LOOPBACK_CATALOG,
    LOOPBACK_SPOT_CATALOG,
    NODES,
    PARTITIONS,
    SPOT,
    START_SCRIPT,
    SlurmCluster,
)


def test_start_script_is_idempotent_and_the_node_takes_jobs(slurm_cluster: SlurmCluster) -> None:
    started = time.monotonic()
    again = subprocess.run(
        ["bash", str(START_SCRIPT), "start", str(slurm_cluster.state_dir)], capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stdout
    assert time.monotonic() - started < 30
    status = subprocess.run(["bash", str(START_SCRIPT), "status", str(slurm_cluster.state_dir)], capture_output=True)
    assert status.returncode == 0
    states = run_slurm(["sinfo", "--noheader", "--format=%P %t"]).split()
    assert {"debug*", "compute", "spot"} <= set(states[0::2])
    assert set(states[1::2]) <= {"idle", "mix", "alloc"}, states
    done = subprocess.run(["srun", "-p", "debug", "-t", "1", "hostname"], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr


@pytest.mark.usefixtures("controller_down")
def test_squeue_against_a_down_controller_names_the_command() -> None:
    for method in ("json", "format", "auto"):
        with pytest.raises(SlurmCommandError) as caught:
            read_snapshot(method)
        assert "squeue" in str(caught.value)
    with pytest.raises(SlurmCommandError, match=r"squeue --all --json.*SLURM reports"):
        read_snapshot("json")  # exits 0, but says in its JSON that it reached no controller


@pytest.mark.usefixtures("controller_down")
def test_sacct_without_its_database_names_the_command() -> None:
    with pytest.raises(SlurmCommandError, match=r"'sacct .*exit code 1"):
        read_sacct()


def test_a_missing_slurm_binary_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmCommandError, match=r"'squeue' is not installed.*start_slurm\.sh"):
        read_snapshot("format")


def test_node_types_one_per_partition_and_spot_on_computes_node_as_in_the_catalog(
    slurm_cluster: SlurmCluster,
) -> None:
    rows = run_slurm(["sinfo", "--Node", "--noheader", "--format=%N %P %c %m %G"]).split("\n")
    seen = {tuple(row.split()) for row in rows if row.strip()}
    default = {"debug": "debug*"}  # sinfo marks the default partition
    assert seen == {
        (
            n.name,
            default.get(n.partition, n.partition),
            str(n.cpus),
            str(n.memory_mib),
            f"gpu:loopback:{n.gpus}" if n.gpus else "(null)",
        )
        for n in PARTITIONS.values()
    }
    for path in (LOOPBACK_CATALOG, LOOPBACK_SPOT_CATALOG):
        catalog = load_catalog(path)
        for resource in catalog.resources:
            node = PARTITIONS[str(resource.extra["partition"])]
            assert (resource.backend, resource.vcpus, resource.memory_bytes, resource.gpus) == (
                "slurm",
                node.cpus,
                node.memory_mib * 2**20,
                node.gpus,
            )
            assert resource.count == 1
    spot_catalog = load_catalog(LOOPBACK_SPOT_CATALOG)
    [spot] = [r for r in spot_catalog.resources if r.spot]
    assert spot.extra["partition"] == SPOT.partition and not load_catalog(LOOPBACK_CATALOG).has_spot
    assert spot_catalog.fallback_of(spot).extra["partition"] == "compute"  # on-demand, on the same node


def test_spot_is_preemptible_by_compute_and_nothing_else_is(slurm_cluster: SlurmCluster) -> None:
    """Only spot (tier 0) shares a node with a higher tier; every other partition is never preempted."""
    shown: dict[str, dict[str, str]] = {}
    for partition in PARTITIONS:
        tokens = run_slurm(["scontrol", "show", "partition", "--oneliner", partition]).split()
        shown[partition] = dict(token.partition("=")[::2] for token in tokens)
    assert (shown["spot"]["Nodes"], shown["spot"]["PriorityTier"], shown["spot"]["PreemptMode"]) == (
        SPOT.name, "0", "CANCEL"
    )  # fmt: skip
    assert shown["compute"]["Nodes"] == SPOT.name and int(shown["compute"]["PriorityTier"]) > 0
    tiers = {p: int(s["PriorityTier"]) for p, s in shown.items()}
    for partition, node in NODES.items():  # the on-demand partitions: no lower tier shares their nodes
        sharing = [p for p, s in shown.items() if s["Nodes"] == node.name and p != partition]
        assert all(tiers[p] < tiers[partition] for p in sharing), (partition, sharing)
    config = dict(line.split("=", 1) for line in slurm_cluster.conf.read_text().splitlines() if "=" in line)
    assert config["PreemptType"] == "preempt/partition_prio"

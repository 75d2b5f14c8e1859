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
from harness import loopback_slurm
from tests.run_services import run_pytest
from tests.slurm_cluster import (
    LOOPBACK_CATALOG,
    LOOPBACK_SPOT_CATALOG,
    NODES,
    PARTITIONS,
    SPOT,
    START_SCRIPT,
    SlurmCluster,
    SlurmStartError,
    dead_daemons,
    restart_dead_daemons,
)
from tests.slurm_fixtures import cluster_daemons


def test_start_script_is_idempotent_and_the_node_takes_jobs(slurm_cluster: SlurmCluster) -> None:
    started = time.monotonic()
    again = subprocess.run(
        ["bash", str(START_SCRIPT), "start", str(slurm_cluster.state_dir)], capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stdout and loopback_slurm.started_daemons(again.stdout) == ()
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


# -- the cluster a test run starts, it stops (unless it found it running) --------------------------

A_TEST_OF_THE_CLUSTER = """
import os
import subprocess
from pathlib import Path


def test_the_cluster_answers(slurm_cluster):
    states = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, check=True).stdout.split()
    assert states and set(states) <= {"idle", "mix", "alloc"}
    Path(__file__).with_suffix(".worker").write_text(os.environ["PYTEST_XDIST_WORKER"])
"""


def _run_two_workers_on_the_cluster(tmp_path: Path) -> None:
    """A run of two test modules that use the cluster (``slurm_cluster``), one in each pytest-xdist worker,
    as scripts/test.sh runs them."""
    tests = tmp_path / "tests"
    tests.mkdir(parents=True)
    for name in ("test_one.py", "test_two.py"):
        (tests / name).write_text(A_TEST_OF_THE_CLUSTER)
    done = run_pytest(tests, tmp_path / "basetemp", "-n", "2", "--dist", "loadscope")
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert sorted(path.read_text() for path in tests.glob("*.worker")) == ["gw0", "gw1"]  # both used it


@pytest.mark.slow
def test_a_test_run_stops_the_cluster_it_started_and_leaves_one_it_found_running(
    second_cluster: Path, tmp_path: Path
) -> None:
    """munged, MariaDB, slurmdbd, slurmctld and three slurmd outlived the run that started them (issue 32)."""
    assert cluster_daemons(second_cluster) == []
    _run_two_workers_on_the_cluster(tmp_path / "starts")
    assert cluster_daemons(second_cluster) == []
    start = loopback_slurm.start(second_cluster)  # from stopped: seconds
    running = cluster_daemons(second_cluster)
    assert {"mariadbd", "slurmdbd", "slurmctld", "slurmd"} <= {line.split()[0] for line in running}
    _run_two_workers_on_the_cluster(tmp_path / "finds")
    assert cluster_daemons(second_cluster) == running  # the same processes
    loopback_slurm.stop(start)
    assert cluster_daemons(second_cluster) == []


def test_a_start_that_found_the_cluster_running_stops_nothing(slurm_cluster: SlurmCluster) -> None:
    """The script stops every daemon when it is given none to stop: a start that started none must not ask it."""
    start = loopback_slurm.start(slurm_cluster.state_dir)
    assert start.started == ()
    with pytest.raises(ValueError, match="started nothing: there is nothing of it to stop"):
        start.stop_argv()
    running = cluster_daemons(slurm_cluster.state_dir)
    loopback_slurm.stop(start)
    assert cluster_daemons(slurm_cluster.state_dir) == running


@pytest.mark.slow
def test_a_start_that_fails_stops_the_daemons_it_had_started(second_cluster: Path) -> None:
    (second_cluster / "log" / "slurmdbd.log").mkdir(parents=True)  # slurmdbd cannot start: its log is a directory
    with pytest.raises(SlurmStartError, match="slurmdbd did not start") as failed:
        loopback_slurm.start(second_cluster)
    assert "stopping what this start started: " in str(failed.value)
    assert "stopped mariadbd" in str(failed.value)  # started before slurmdbd failed
    assert cluster_daemons(second_cluster) == []


@pytest.mark.slow
def test_a_node_daemon_that_died_is_named_and_started_again_before_the_next_test(second_cluster: Path) -> None:
    """tests/conftest.py's pytest_runtest_setup: a dead slurmd would fail every later job of its partition."""
    start = loopback_slurm.start(second_cluster)
    try:
        assert restart_dead_daemons(second_cluster, record_start=False) is None
        pid = int((second_cluster / "run" / "slurmd-agora-small.pid").read_text())
        subprocess.run(["kill", "-9", str(pid)], check=True)
        deadline = time.monotonic() + 10
        while dead_daemons(second_cluster) != ["slurmd-agora-small"] and time.monotonic() < deadline:
            time.sleep(0.2)
        report = restart_dead_daemons(second_cluster, record_start=False)
        assert report is not None and "found dead before this test: slurmd-agora-small" in report, report
        assert "restarted: slurmd-agora-small" in report and dead_daemons(second_cluster) == []
    finally:
        loopback_slurm.stop(start)

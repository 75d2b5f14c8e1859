"""A real loopback SLURM for tests: started once per session by ``scripts/start_slurm.sh``, stopped when the run ends.

Any test directory can use it (a plain module, not a conftest)::

    from tests.slurm_cluster import SlurmCluster, slurm_cluster_or_skip

    @pytest.fixture(scope="session")
    def slurm_cluster() -> SlurmCluster:
        return slurm_cluster_or_skip()

In CI (``CI=true``) a cluster that cannot start fails the test; elsewhere it skips with the
script's last words as the reason. The first start on a fresh machine installs Debian's
slurm-wlm, munge and MariaDB (about 1.5 minutes); later starts take seconds. The daemons a start
started, the run stops when it ends (tests/run_services.py); a cluster that ran before, it leaves running.

The cluster has three node types, one per partition (:data:`NODES`, as the script's defaults and
``catalogs/slurm-loopback.yaml`` size them): ``debug`` runs on ``agora-small`` only,
``compute`` on ``agora-large`` only and ``accel`` on ``agora-gpu`` only (with two placeholder GPUs,
generic resource ``gpu:loopback``), so the partitions queue independently. A fourth partition,
``spot`` (:data:`SPOT`), is preemptible capacity on ``compute``'s node: a compute job that needs
the cores or memory of a running spot job makes SLURM cancel it (state ``PREEMPTED``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import loopback_slurm
from harness.loopback_slurm import START_SCRIPT as START_SCRIPT  # for the tests that run it themselves
from harness.loopback_slurm import STATE_DIR, SlurmStartError
from tests.run_services import StartedService, record

REPO = Path(__file__).resolve().parents[1]
TEST_JOB_NAME = "agora-test"
LOOPBACK_CATALOG = REPO / "catalogs" / "slurm-loopback.yaml"
LOOPBACK_SPOT_CATALOG = REPO / "catalogs" / "slurm-loopback-spot.yaml"  # the same and slurm-spot


@dataclass(frozen=True)
class SlurmNode:
    """One node of the loopback cluster, the only node of its partition."""

    name: str
    partition: str
    cpus: int
    memory_mib: int
    gpus: int = 0  # generic resource gpu:loopback


NODES = {
    "debug": SlurmNode("agora-small", "debug", cpus=8, memory_mib=8192),
    "compute": SlurmNode("agora-large", "compute", cpus=16, memory_mib=32768),
    "accel": SlurmNode("agora-gpu", "accel", cpus=4, memory_mib=8192, gpus=2),
}
# The preemptible partition (PriorityTier 0, PreemptMode=CANCEL) on the node of compute (tier 1).
SPOT = SlurmNode("agora-large", "spot", cpus=16, memory_mib=32768)
PARTITIONS = {**NODES, SPOT.partition: SPOT}  # every partition, by name


@dataclass(frozen=True)
class SlurmCluster:
    """Where the running cluster keeps its configuration and files."""

    state_dir: Path
    version: str
    start_s: float

    @property
    def conf(self) -> Path:
        return self.state_dir / "slurm.conf"

    @property
    def jobcomp(self) -> Path:
        """The jobcomp/filetxt file: one line per finished job."""
        return self.state_dir / "jobcomp.txt"


@functools.cache
def start_slurm_cluster(state_dir: Path = STATE_DIR, timeout_s: float = 900.0) -> SlurmCluster:
    """Run the start script (idempotent), record what it started for the run's end, and point this
    process's SLURM clients at the cluster."""
    started = time.monotonic()
    start = loopback_slurm.start(state_dir, timeout_s)
    if start.started:
        record(StartedService("SLURM", state_dir, tuple(start.stop_argv())))
    os.environ["SLURM_CONF"] = str(start.conf)
    version = subprocess.run(["sinfo", "--version"], capture_output=True, text=True, check=False).stdout.split()
    return SlurmCluster(
        state_dir=state_dir, version=version[-1] if version else "?", start_s=time.monotonic() - started
    )


def dead_daemons(state_dir: Path = STATE_DIR) -> list[str]:
    """The cluster's daemons whose pid file names a process that no longer runs (``slurmd-agora-small`` ...)."""
    dead = []
    for pid_file in sorted((state_dir / "run").glob("*.pid")):
        try:
            os.kill(int(pid_file.read_text().strip()), 0)
        except ProcessLookupError:
            dead.append(pid_file.stem)
        except (OSError, ValueError):  # unreadable, or a pid owned by another user (alive)
            continue
    return dead


def restart_dead_daemons(state_dir: Path = STATE_DIR, *, record_start: bool = True) -> str | None:
    """Start again the daemons of the session's cluster that died under the tests, and say which and why.

    A test must meet the cluster the session started; one whose node daemon died (last CI: every
    job of ``debug`` timed out after some test, for a reason the logs did not keep) would fail for
    that alone. The start script starts only what does not run; what it starts, the run stops when it
    ends (unless ``record_start`` is false: the caller stops them). Returns the report (each daemon's
    log's last lines), or None when all run.
    """
    if start_slurm_cluster.cache_info().currsize == 0:  # this process did not use the cluster yet
        return None
    dead = dead_daemons(state_dir)
    if not dead:
        return None
    lines = [f"SLURM daemons found dead before this test: {', '.join(dead)}"]
    for daemon in dead:
        log = state_dir / "log" / f"{daemon}.log"
        with contextlib.suppress(OSError):
            lines += [f"{log.name} (last 8 lines):", *log.read_text(errors="replace").splitlines()[-8:]]
    try:
        start = loopback_slurm.start(state_dir)
    except SlurmStartError as exc:
        return "\n".join([*lines, f"restarting them failed: {exc}"])
    if start.started and record_start:
        record(StartedService("SLURM", state_dir, tuple(start.stop_argv())))
    return "\n".join([*lines, f"restarted: {' '.join(start.started) or 'nothing'}"])


def slurm_cluster_or_skip(state_dir: Path = STATE_DIR) -> SlurmCluster:
    """The running cluster; in CI a failure to start fails, elsewhere it skips with the reason."""
    try:
        return start_slurm_cluster(state_dir)
    except SlurmStartError as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"SLURM must start in CI: {exc}")
        pytest.skip(f"no SLURM here: {exc}")


def sbatch(*options: str, command: str = "sleep 1", name: str = TEST_JOB_NAME) -> str:
    """Submit a batch job (output discarded) and return its id."""
    argv = ["sbatch", "--parsable", f"--job-name={name}", "--output=/dev/null", "--chdir=/tmp", *options]
    done = subprocess.run([*argv, f"--wrap={command}"], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, f"sbatch failed: {done.stderr.strip()}"
    return done.stdout.strip().split(";")[0]


def scancel(*job_ids: str) -> None:
    if job_ids:
        subprocess.run(["scancel", *job_ids], capture_output=True, timeout=30, check=False)


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.5) -> None:
    """Poll ``condition`` until it holds; fail the test naming ``what`` after ``timeout_s``, with the
    cluster's state (:func:`cluster_state`) so that a failure in CI says why."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}\n{cluster_state()}")
        time.sleep(every_s)


def _command_output(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({exc})"
    return (done.stdout + done.stderr).strip() or "(nothing)"


def cluster_state(state_dir: Path = STATE_DIR, jobs: int = 15, log_lines: int = 8) -> str:
    """What a failed wait needs to be understood: each node's state and reason, the first jobs of the
    queue with theirs, and the last lines of each node's slurmd log."""
    parts = [
        "the cluster now: sinfo -N",
        _command_output(["sinfo", "-N", "-h", "-o", "%N %P %T %c %m %E"]),
        f"squeue (first {jobs})",
        "\n".join(_command_output(["squeue", "-h", "-o", "%i %P %T %C %m %j %M %R"]).splitlines()[:jobs]),
    ]
    for log in sorted((state_dir / "log").glob("slurmd-*.log")):
        try:
            tail = log.read_text(errors="replace").splitlines()[-log_lines:]
        except OSError as exc:
            tail = [f"({exc})"]
        parts += [f"{log.name} (last {log_lines} lines)", *tail]
    return "\n".join(parts)

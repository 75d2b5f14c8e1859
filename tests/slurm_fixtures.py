"""Fixtures of the session's SLURM cluster (see tests/slurm_cluster.py), for every test directory.

tests/conftest.py loads this module as a plugin, so the tests of the SLURM client (tests/slurm),
of the SLURM backend (tests/executor/backends/slurm) and of the queue-wait model
(tests/queue_wait) share one cluster and one ``recorded_run``. What agora modules a fixture
needs it imports when used, so that sessions without SLURM tests do not load them.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.local_airflow import free_port, processes_under
from tests.slurm_cluster import NODES, START_SCRIPT, SlurmCluster, sbatch, scancel, slurm_cluster_or_skip, wait_until

if TYPE_CHECKING:
    from agora_optimizer.executor.backends.slurm import SlurmBackend
    from agora_optimizer.executor.jobs.spec import JobSpec


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    return slurm_cluster_or_skip()


CLUSTER_DAEMONS = frozenset({"munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd"})  # not the jobs' slurmstepd


def cluster_daemons(state_dir: Path) -> list[str]:
    """The daemons of the cluster of ``state_dir`` (they name it), as 'name pid'."""
    found = processes_under(state_dir)
    return sorted(f"{process.name()} {process.pid}" for process in found if process.name() in CLUSTER_DAEMONS)


@pytest.fixture
def second_cluster(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The state directory of a second loopback cluster, on ports of its own, not started: the session's
    cluster, which other runs on the machine may use, is left alone (the two share munged only)."""
    state_dir = Path(tempfile.mkdtemp(prefix="agora-slurm-"))  # short: MariaDB's socket path must fit 108 bytes
    monkeypatch.setenv("AGORA_SLURM_STATE", str(state_dir))
    for port in ("CTLD", "SLURMD", "LARGE", "GPU", "DBD", "DB"):
        monkeypatch.setenv(f"AGORA_SLURM_{port}_PORT", str(free_port()))
    yield state_dir
    subprocess.run(["bash", str(START_SCRIPT), "stop", str(state_dir)], capture_output=True, timeout=120, check=True)
    shutil.rmtree(state_dir, ignore_errors=True)
    state_dir.with_name(f"{state_dir.name}.lock").unlink(missing_ok=True)  # the script's, beside its directory


@pytest.fixture
def controller_down(slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A configuration whose controller and database ports nothing listens on: SLURM as clients see it down."""
    text = slurm_cluster.conf.read_text()
    lines = [line for line in text.splitlines() if not line.startswith(("SlurmctldPort=", "AccountingStoragePort="))]
    lines += ["SlurmctldPort=1", "AccountingStoragePort=2", "MessageTimeout=1"]
    conf = tmp_path / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))


class Tracked:
    """Backends that remember every SLURM job they made, so that a test leaves none behind."""

    def __init__(self) -> None:
        self.ids: set[str] = set()

    def submit(self, backend: SlurmBackend, spec: JobSpec) -> str:
        external_id = backend.submit(spec)
        self.ids.add(external_id.split("+")[0])
        return external_id


@pytest.fixture
def tracked(slurm_cluster: SlurmCluster) -> Iterator[Tracked]:
    jobs = Tracked()
    yield jobs
    scancel(*jobs.ids)


@dataclass(frozen=True)
class RecordedRun:
    """Jobs submitted in a burst, each recorded with the queue it met, and their waits filled in."""

    store_url: str
    job_ids: tuple[str, ...]
    partitions: dict[str, str]


@pytest.fixture(scope="session")
def recorded_run(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> RecordedRun:
    """Sixteen short jobs of varied size in two partitions, submitted at once so that a queue builds up.

    Each partition has its own node; a job filling each node for 3 s (not recorded) comes first,
    so that every recorded job meets a queue and waits, and a model trained on them predicts a
    wait above 0 s whatever the queue is later.
    """
    from agora_optimizer.queue_wait.recorder import QueueWaitStore, record_submission, update_waits
    from agora_optimizer.slurm.queue import read_snapshot

    store = QueueWaitStore(f"sqlite:///{tmp_path_factory.mktemp('queue') / 'waits.db'}")
    for node in NODES.values():
        sbatch("-p", node.partition, "-c", str(node.cpus), "--mem=100M", "-t", "1", command="sleep 3")
    sizes = [(1, 200), (2, 500), (4, 1000), (8, 300)] * 4
    job_ids: list[str] = []
    partitions: dict[str, str] = {}
    for index, (cores, memory_mib) in enumerate(sizes):
        partition = "debug" if index % 3 == 0 else "compute"
        snapshot = read_snapshot("format")
        job_id = sbatch("-p", partition, "-c", str(cores), f"--mem={memory_mib}M", "-t", "1", command="sleep 1")
        record_submission(store, job_id, partition, cores, memory_mib * 2**20, 60.0, snapshot=snapshot)
        job_ids.append(job_id)
        partitions[job_id] = partition

    def resolved() -> bool:
        return update_waits(store).still_waiting == 0

    wait_until(resolved, 90, "accounting to report every recorded job", every_s=1.0)
    store.close()
    return RecordedRun(store_url=store.url, job_ids=tuple(job_ids), partitions=partitions)


@pytest.fixture(scope="module")
def slurm_queue(slurm_cluster: SlurmCluster) -> Iterator[dict[str, str]]:
    """Jobs holding every core of each node, three with distinct requests behind them, and one held job
    (tests/slurm/test_queue.py, tests/queue_wait/test_features.py), cancelled after the module."""
    from agora_optimizer.slurm.queue import read_snapshot

    jobs = {
        "blocker": sbatch(
            "-p", "compute", f"--cpus-per-task={NODES['compute'].cpus}", "--mem=500M", "-t", "2", command="sleep 60"
        ),
        "debug_blocker": sbatch(
            "-p", "debug", f"--cpus-per-task={NODES['debug'].cpus}", "--mem=500M", "-t", "2", command="sleep 60"
        ),
    }
    jobs["two_cores"] = sbatch("-p", "compute", "-c", "2", "--mem-per-cpu=700M", "-t", "3")
    jobs["debug_gib"] = sbatch("-p", "debug", "-c", "1", "--mem=1G", "-t", "45:00")
    jobs["long"] = sbatch("-p", "compute", "-c", "3", "--mem=300M", "-t", "1-00:00:00")
    jobs["held"] = sbatch("-p", "debug", "--hold", "-c", "1", "--mem=100M", "-t", "1")

    def blockers_run() -> bool:
        snap = read_snapshot("format")
        blocking = [snap.job(jobs[name]) for name in ("blocker", "debug_blocker")]
        return all(job is not None and job.state == "running" for job in blocking)

    wait_until(blockers_run, 60, "the blocking jobs to start (are the nodes busy with other work?)")
    yield jobs
    scancel(*jobs.values())

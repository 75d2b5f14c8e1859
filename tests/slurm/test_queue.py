"""squeue on the real cluster: a few jobs pending behind two that fill each partition's node."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agora_optimizer.model.catalog import GIB
from agora_optimizer.queue_wait.features import QueueFeatures
from agora_optimizer.slurm.queue import QueueSnapshot, read_snapshot
from tests.slurm_cluster import NODES, SlurmCluster, sbatch, scancel, wait_until

MIB = 2**20
NODE_CPUS = NODES["compute"].cpus


@pytest.fixture(scope="module")
def queue(slurm_cluster: SlurmCluster) -> Iterator[dict[str, str]]:
    """Jobs holding every core of each node, three with distinct requests behind them, and one held job."""
    jobs = {
        "blocker": sbatch("-p", "compute", f"--cpus-per-task={NODE_CPUS}", "--mem=500M", "-t", "2", command="sleep 60"),
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


def test_both_squeue_outputs_give_the_same_requests(queue: dict[str, str]) -> None:
    from_json, from_format = read_snapshot("json"), read_snapshot("format")
    assert from_json.source == "squeue --json" and from_format.source == "squeue --Format"
    for job_id in queue.values():
        a, b = from_json.job(job_id), from_format.job(job_id)
        assert a is not None and b is not None, f"job {job_id} missing from a snapshot"
        assert (a.partition, a.cores, a.memory_bytes, a.time_limit_s, a.submitted_at) == (
            b.partition,
            b.cores,
            b.memory_bytes,
            b.time_limit_s,
            b.submitted_at,
        )


@pytest.mark.parametrize("method", ["json", "format"])
def test_snapshot_has_each_request_in_bytes_and_seconds(queue: dict[str, str], method: str) -> None:
    snap = read_snapshot(method)  # type: ignore[arg-type]
    expected = {
        "blocker": ("compute", NODE_CPUS, 500 * MIB, 120.0),
        "two_cores": ("compute", 2, 2 * 700 * MIB, 180.0),  # --mem-per-cpu, multiplied out
        "debug_gib": ("debug", 1, GIB, 2700.0),
        "long": ("compute", 3, 300 * MIB, 86400.0),
    }
    for name, (partition, cores, memory, limit) in expected.items():
        job = snap.job(queue[name])
        assert job is not None
        assert (job.partition, job.cores, job.memory_bytes, job.time_limit_s) == (partition, cores, memory, limit)
    assert snap.job(queue["blocker"]).state == "running"  # type: ignore[union-attr]
    assert snap.job(queue["blocker"]).started_at is not None  # type: ignore[union-attr]
    for name in ("two_cores", "debug_gib", "long", "held"):
        job = snap.job(queue[name])
        assert job is not None and job.state == "pending", f"{name} should wait behind the full node"
    held = snap.job(queue["held"])
    assert held is not None and held.blocked and "JobHeld" in held.reason
    assert {"debug", "compute"} <= set(snap.partitions)


def test_features_count_the_jobs_ahead_and_leave_held_jobs_out(queue: dict[str, str]) -> None:
    snap = read_snapshot()
    pending_compute = [j for j in snap.pending("compute") if not j.blocked]
    features = QueueFeatures.from_snapshot(snap, "compute", cores=4, memory_bytes=2 * GIB, time_limit_s=600.0)
    assert features.pending_jobs == len(pending_compute) >= 2
    assert features.pending_cores == sum(j.cores for j in pending_compute) >= 5
    assert features.running_cores >= NODE_CPUS
    assert 0 < features.running_remaining_h <= 2 * 60 / 3600 * len(snap.running("compute"))
    assert features.other_pending_jobs == len([j for j in snap.pending("debug") if not j.blocked]) >= 1
    assert (features.cores, features.memory_gib, features.time_limit_h) == (4, 2.0, 600.0 / 3600)
    debug = QueueFeatures.from_snapshot(snap, "debug", 1, GIB, None, exclude_job_id=queue["debug_gib"])
    debug_ahead = [j.job_id for j in snap.pending("debug") if not j.blocked and j.job_id != queue["debug_gib"]]
    assert debug.pending_jobs == len(debug_ahead)
    assert queue["held"] not in debug_ahead and queue["debug_gib"] not in debug_ahead


def test_snapshot_of_an_idle_partition_is_empty_but_valid(slurm_cluster: SlurmCluster) -> None:
    snap: QueueSnapshot = read_snapshot()
    features = QueueFeatures.from_snapshot(snap, "no-such-partition", 1, GIB, 60.0)
    assert features.pending_jobs == features.running_jobs == 0
    assert features.other_pending_jobs == len([j for j in snap.pending() if not j.blocked])

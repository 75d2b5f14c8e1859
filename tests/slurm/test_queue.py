"""squeue on the real cluster: a few jobs pending behind two that fill each partition's node (``slurm_queue``)."""

from __future__ import annotations

import pytest

from agora_optimizer.model.catalog import GIB
from agora_optimizer.slurm.queue import read_snapshot
from tests.slurm_cluster import NODES

MIB = 2**20
NODE_CPUS = NODES["compute"].cpus


def test_both_squeue_outputs_give_the_same_requests(slurm_queue: dict[str, str]) -> None:
    from_json, from_format = read_snapshot("json"), read_snapshot("format")
    assert from_json.source == "squeue --json" and from_format.source == "squeue --Format"
    for job_id in slurm_queue.values():
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
def test_snapshot_has_each_request_in_bytes_and_seconds(slurm_queue: dict[str, str], method: str) -> None:
    snap = read_snapshot(method)  # type: ignore[arg-type]
    expected = {
        "blocker": ("compute", NODE_CPUS, 500 * MIB, 120.0),
        "two_cores": ("compute", 2, 2 * 700 * MIB, 180.0),  # --mem-per-cpu, multiplied out
        "debug_gib": ("debug", 1, GIB, 2700.0),
        "long": ("compute", 3, 300 * MIB, 86400.0),
    }
    for name, (partition, cores, memory, limit) in expected.items():
        job = snap.job(slurm_queue[name])
        assert job is not None
        assert (job.partition, job.cores, job.memory_bytes, job.time_limit_s) == (partition, cores, memory, limit)
    assert snap.job(slurm_queue["blocker"]).state == "running"  # type: ignore[union-attr]
    assert snap.job(slurm_queue["blocker"]).started_at is not None  # type: ignore[union-attr]
    for name in ("two_cores", "debug_gib", "long", "held"):
        job = snap.job(slurm_queue[name])
        assert job is not None and job.state == "pending", f"{name} should wait behind the full node"
    held = snap.job(slurm_queue["held"])
    assert held is not None and held.blocked and "JobHeld" in held.reason
    assert {"debug", "compute"} <= set(snap.partitions)

"""Queue features (:mod:`agora_optimizer.queue_wait.features`) from squeue on the real cluster: jobs
pending behind two that fill each partition's node (``slurm_queue``, tests/slurm_fixtures.py)."""

from __future__ import annotations

from agora_optimizer.model.catalog import GIB
from agora_optimizer.queue_wait.features import QueueFeatures
from agora_optimizer.slurm.queue import QueueSnapshot, read_snapshot
from tests.slurm_cluster import NODES, SlurmCluster

NODE_CPUS = NODES["compute"].cpus


def test_features_count_the_jobs_ahead_and_leave_held_jobs_out(slurm_queue: dict[str, str]) -> None:
    snap = read_snapshot()
    pending_compute = [j for j in snap.pending("compute") if not j.blocked]
    features = QueueFeatures.from_snapshot(snap, "compute", cores=4, memory_bytes=2 * GIB, time_limit_s=600.0)
    assert features.pending_jobs == len(pending_compute) >= 2
    assert features.pending_cores == sum(j.cores for j in pending_compute) >= 5
    assert features.running_cores >= NODE_CPUS
    assert 0 < features.running_remaining_h <= 2 * 60 / 3600 * len(snap.running("compute"))
    assert features.other_pending_jobs == len([j for j in snap.pending("debug") if not j.blocked]) >= 1
    assert (features.cores, features.memory_gib, features.time_limit_h) == (4, 2.0, 600.0 / 3600)
    debug = QueueFeatures.from_snapshot(snap, "debug", 1, GIB, None, exclude_job_id=slurm_queue["debug_gib"])
    debug_ahead = [j.job_id for j in snap.pending("debug") if not j.blocked and j.job_id != slurm_queue["debug_gib"]]
    assert debug.pending_jobs == len(debug_ahead)
    assert slurm_queue["held"] not in debug_ahead and slurm_queue["debug_gib"] not in debug_ahead


def test_snapshot_of_an_idle_partition_is_empty_but_valid(slurm_cluster: SlurmCluster) -> None:
    snap: QueueSnapshot = read_snapshot()
    features = QueueFeatures.from_snapshot(snap, "no-such-partition", 1, GIB, 60.0)
    assert features.pending_jobs == features.running_jobs == 0
    assert features.other_pending_jobs == len([j for j in snap.pending() if not j.blocked])

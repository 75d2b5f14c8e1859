"""The SLURM backend records its own jobs' queues and waits on the real loopback cluster, for the
queue-wait model; recording never costs a job anything, even with the store down."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agora_optimizer.executor.backends.slurm import SlurmBackend, SlurmJobRef
from agora_optimizer.queue_wait.model import QueueWaitRegressor, training_data
from agora_optimizer.queue_wait.recorder import QueueWaitStore
from agora_optimizer.queue_wait.submissions import SubmissionLog
from tests.executor.backends.slurm.test_backend import job, wait_finished
from tests.slurm_cluster import NODES, sbatch, scancel, wait_until
from tests.slurm_fixtures import Tracked

BLOCK_S = 4


def test_single_jobs_and_a_pilot_are_recorded_with_the_queue_they_met_and_their_waits(
    tmp_path: Path, tracked: Tracked
) -> None:
    url = f"sqlite:///{tmp_path / 'waits.db'}"
    singles = SlurmBackend(submissions=SubmissionLog(url, min_interval_s=0))
    pilots = SlurmBackend(pilot_max_tasks=3, pilot_window_s=60, submissions=SubmissionLog(url, min_interval_s=0))
    node = NODES["debug"]
    blocker = sbatch("-p", "debug", "-c", str(node.cpus), "--mem=100M", "-t", "1", command=f"sleep {BLOCK_S}")
    try:
        wait_until(lambda: _running(blocker), 30, "the job that fills the debug node to start")
        ids = [tracked.submit(singles, job(tmp_path, f"s{i}", cores=2 + i, memory_mib=300)) for i in range(2)]
        packed = [tracked.submit(pilots, job(tmp_path, f"p{i}", cores=1, memory_mib=200)) for i in range(2)]
        assert len({SlurmJobRef.parse(i).job_id for i in packed}) == 1  # type: ignore[union-attr]
        pilots.tick(force=True)  # closed and released (eligible from now), and recorded then
        wait_finished(singles, ids)
        wait_finished(pilots, packed)
    finally:
        scancel(blocker)
    pilot_id = SlurmJobRef.parse(packed[0]).job_id  # type: ignore[union-attr]
    expected = {*ids, pilot_id}

    def all_waits_known() -> bool:
        singles.status(ids)  # a poll that sees a recorded job started asks accounting (every 5 s at most)
        pilots.status(packed)
        return {o.job_id for o in QueueWaitStore(url).observations()} == expected

    wait_until(all_waits_known, 60, "accounting to report the recorded jobs' waits", every_s=1.0)
    observations = {o.job_id: o for o in QueueWaitStore(url).observations()}
    for index, job_id in enumerate(ids):
        seen = observations[job_id]
        assert (seen.features.partition, seen.features.cores) == ("debug", 2 + index)
        assert seen.features.running_cores >= node.cpus  # the blocker was ahead of it
        assert seen.wait_s > 0.5
    pilot = observations[pilot_id].features
    assert (pilot.cores, pilot.memory_gib) == (2, pytest.approx(400 / 1024))
    assert singles.submissions is not None and singles.submissions.recorded == 2
    model = QueueWaitRegressor(min_samples=1000).fit(*training_data(QueueWaitStore(url).observations()))
    assert "3 recorded waits (per partition: debug: 3)" in model.describe()  # what 'agora queue train' learns from


def test_sampling_records_at_most_one_job_per_interval(tmp_path: Path, tracked: Tracked) -> None:
    log = SubmissionLog(f"sqlite:///{tmp_path / 'waits.db'}", min_interval_s=3600)
    backend = SlurmBackend(submissions=log)
    ids = [tracked.submit(backend, job(tmp_path, f"j{i}")) for i in range(3)]
    wait_finished(backend, ids)
    assert (log.recorded, log.skipped, log.failures) == (1, 2, 0)
    rows = QueueWaitStore(log.store_url).counts()
    assert sum(rows.values()) == 1


def test_a_store_that_is_down_costs_the_jobs_nothing_and_is_logged_once(
    tmp_path: Path, tracked: Tracked, caplog: pytest.LogCaptureFixture
) -> None:
    log = SubmissionLog("postgresql+psycopg://agora:s3cret@127.0.0.1:1/agora", min_interval_s=0)
    backend = SlurmBackend(submissions=log)
    with caplog.at_level(logging.WARNING, logger="agora_optimizer.queue_wait.submissions"):
        ids = [tracked.submit(backend, job(tmp_path, f"j{i}")) for i in range(2)]
        statuses = wait_finished(backend, ids)
    assert [statuses[i].exit_code for i in ids] == [0, 0]
    assert (log.recorded, log.failures) == (0, 2)
    warnings = [r.getMessage() for r in caplog.records if "queue waits" in r.getMessage()]
    assert len(warnings) == 1 and "the job is unaffected" in warnings[0] and "s3cret" not in warnings[0]


def _running(job_id: str) -> bool:
    from agora_optimizer.slurm.queue import read_snapshot

    found = read_snapshot("format").job(job_id)
    return found is not None and found.state == "running"

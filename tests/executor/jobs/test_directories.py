"""The executor's state directory (executor/jobs/directories.py): unwatched jobs swept, expiry, a try queued again."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.jobs.spec import JobSpec, JobStatus, job_key
from tests.executor.test_agora_executor import KEY, MIB, executor, hand_over, placement, workload

__all__ = ["executor"]  # the fixture, imported


class ResultFiles(Backend):
    """Reports a job finished once its directory holds a result file, as SLURM does for a task of an
    allocation (the worker's result is read before the allocation's state)."""

    name = "local"

    def __init__(self) -> None:
        self.dirs: dict[str, Path] = {}

    def submit(self, job: JobSpec) -> str:
        external_id = f"file-{len(self.dirs)}"
        self.dirs[external_id] = job.job_dir
        return external_id

    def status(self, external_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        return {
            external_id: JobStatus("finished", exit_code=0)
            if (self.dirs[external_id] / "result.json").exists()
            else JobStatus("running")
            for external_id in external_ids
        }

    def cancel(self, external_id: str) -> None:
        pass


def _ended_job(state_dir: Path, task_id: str, exit_code: int, ended_ago_s: float = 5.0) -> Path:
    """A job directory as a worker leaves it: the job's record and its result file."""
    import os
    from datetime import UTC, datetime, timedelta

    from agora_optimizer.executor.jobs.records import JobRecord
    from agora_optimizer.executor.jobs.spec import JobResult, job_key

    job_dir = state_dir / job_key("unit", task_id, "r1", 1, -1)
    JobRecord("unit", task_id, "r1", 1, -1, "local-small", "local", 1, 256 * MIB, job_dir.name).write(job_dir)
    ended = datetime.now(UTC) - timedelta(seconds=ended_ago_s)
    started = ended - timedelta(seconds=20)
    result = JobResult(exit_code, False, False, "", "worker-7", started, ended, 99 * MIB, 1.5, None)
    result.write(job_dir / "result.json")
    os.utime(job_dir / "result.json", (ended.timestamp(), ended.timestamp()))
    return job_dir


def test_jobs_that_ended_while_no_scheduler_watched_are_traced_once(executor: Any, tmp_path: Path) -> None:
    """A task that ends while the scheduler is down closes itself: no adoption, so the sweep traces its job."""
    from agora_optimizer.traces.store import TraceStore

    state_dir = tmp_path / "jobs"
    done = _ended_job(state_dir, "done", 0)
    failed = _ended_job(state_dir, "failed", 3)
    _ended_job(state_dir, "ancient", 0, ended_ago_s=3 * 86400)  # older than the sweep looks
    assert executor.job_dirs.sweep_finished_jobs() == 2
    assert (done / "traced").exists() and (failed / "traced").exists()
    with TraceStore(f"sqlite:///{tmp_path / 'traces.db'}") as store:
        rows = {a.task_id: a for a in store.attempts(dag_id="unit")}
    assert set(rows) == {"done", "failed"}
    assert rows["done"].backend == "local" and rows["done"].host == "worker-7"
    assert rows["done"].state == "success" and rows["failed"].state == "failed"
    assert rows["done"].peak_rss_bytes == 99 * MIB
    assert executor.job_dirs.sweep_finished_jobs() == 0  # traced once


def test_the_sweep_traces_only_job_directories_the_executor_made(executor: Any, tmp_path: Path) -> None:
    from agora_optimizer.executor.jobs.records import JobRecord
    from agora_optimizer.traces.store import TraceStore

    state_dir = tmp_path / "jobs"
    elsewhere = _ended_job(tmp_path / "elsewhere", "planted", 0)  # a finished job outside the state dir
    (state_dir / elsewhere.name).symlink_to(elsewhere)  # planted under the name the attempt would have
    forged = _ended_job(state_dir, "forged", 0)
    JobRecord("unit", "other", "r1", 1, -1, "local-small", "local", 1, MIB, "").write(forged)  # names another attempt
    real = _ended_job(state_dir, "real", 0)
    assert executor.job_dirs.sweep_finished_jobs() == 1
    assert (real / "traced").exists()
    assert not (elsewhere / "traced").exists() and not (forged / "traced").exists()
    with TraceStore(f"sqlite:///{tmp_path / 'traces.db'}") as store:
        assert {a.task_id for a in store.attempts(dag_id="unit")} == {"real"}


def _age(path: Path, days: float) -> None:
    """Set the modification time of ``path`` and of everything in it ``days`` back."""
    import os

    moment = time.time() - days * 86400
    for entry in [*path.rglob("*"), path]:
        os.utime(entry, (moment, moment), follow_symlinks=False)


def test_job_directories_done_longer_than_the_retention_are_deleted_and_nothing_else(
    executor: Any, tmp_path: Path
) -> None:
    from dataclasses import replace

    from agora_optimizer.executor.jobs.records import JobRecord

    executor.config = replace(executor.config, job_retention_days=7)
    state_dir = tmp_path / "jobs"
    traced_long_ago = _ended_job(state_dir, "traced_long_ago", 0)
    (traced_long_ago / "traced").touch()
    untraced_long_ago = _ended_job(state_dir, "untraced_long_ago", 0)  # older than the sweep looks: done too
    traced_lately = _ended_job(state_dir, "traced_lately", 0)
    (traced_lately / "traced").touch()
    running = state_dir / job_key("unit", "running", "r1", 1, -1)  # submitted long ago, no result yet
    JobRecord("unit", "running", "r1", 1, -1, "local-small", "local", 1, MIB, "").write(running)
    forged = _ended_job(state_dir, "forged", 0)
    JobRecord("unit", "other", "r1", 1, -1, "local-small", "local", 1, MIB, "").write(forged)
    (forged / "traced").touch()
    elsewhere = _ended_job(tmp_path / "elsewhere", "elsewhere", 0)
    (elsewhere / "traced").touch()
    (state_dir / "pilot-linked").symlink_to(elsewhere)
    pilot_done, pilot_running = state_dir / "pilot-done", state_dir / "pilot-running"
    for pilot, job_dir in ((pilot_done, traced_long_ago), (pilot_running, running)):
        pilot.mkdir()
        tasks = [{"index": 0, "job_dir": str(job_dir)}]
        (pilot / "pilot.json").write_text(json.dumps({"format": "agora-slurm-pilot/1", "tasks": tasks}))
    (pilot_done / "exit.0").write_text("0\n")
    spool = state_dir / ".trace-spool"
    spool.mkdir()
    for path in (traced_long_ago, untraced_long_ago, running, forged, elsewhere, pilot_done, pilot_running, spool):
        _age(path, 8)
    _age(traced_lately, 6)

    assert executor.job_dirs.expire_job_dirs() == 3
    kept = {path.name for path in state_dir.iterdir()}
    assert kept == {traced_lately.name, running.name, forged.name, "pilot-linked", pilot_running.name, spool.name}
    assert (elsewhere / "result.json").is_file()  # a symlink is not followed
    executor.config = replace(executor.config, job_retention_days=0)  # keeps everything
    _age(traced_lately, 30)
    assert executor.job_dirs.expire_job_dirs() == 0 and traced_lately.is_dir()


def test_the_sweep_forgets_the_directories_that_are_gone(executor: Any, tmp_path: Path) -> None:
    import shutil

    state_dir = tmp_path / "jobs"
    done = [_ended_job(state_dir, f"done{i}", 0) for i in range(3)]
    assert executor.job_dirs.sweep_finished_jobs() == 3
    for job_dir in done[:2]:
        shutil.rmtree(job_dir)
    executor.job_dirs.sweep_finished_jobs()
    assert executor.job_dirs.swept == {done[2].name}


def test_a_try_queued_again_gets_a_fresh_job_directory_and_the_earlier_job_is_kept_aside(
    executor: Any, tmp_path: Path
) -> None:
    """Airflow queues a try again with the same try number (a sensor in reschedule mode): the new job must
    not be reported done from the earlier job's result, nor free its machine at the earlier task-ended mark."""
    from airflow.utils.state import TaskInstanceState

    from agora_optimizer.executor.jobs.spec import JobResult, read_task_ended

    backend = ResultFiles()
    executor.backends.use("local", backend)
    job_dir = tmp_path / "jobs" / KEY

    def poke(item: Any) -> list[Any]:
        hand_over(executor, [item])
        executor.sync()
        states = [event[0] for event in executor.get_event_buffer().values()]
        now = datetime.now(UTC)
        JobResult(0, False, False, "", "worker-1", now, now, MIB, 0.1, None).write(job_dir / "result.json")
        (job_dir / "task-ended").write_text(now.isoformat())
        executor.sync()
        return [*states, *(event[0] for event in executor.get_event_buffer().values())]

    item = workload("t", placement(), tmp_path)
    assert poke(item) == [TaskInstanceState.QUEUED, TaskInstanceState.SUCCESS]
    first_end = read_task_ended(job_dir)
    again = workload("t", placement(), tmp_path)  # the same try of the same task, queued again
    hand_over(executor, [again])
    executor.sync()
    assert [event[0] for event in executor.get_event_buffer().values()] == [TaskInstanceState.QUEUED]  # not done
    assert not (job_dir / "result.json").exists() and read_task_ended(job_dir) is None
    aside = tmp_path / "jobs" / f"{KEY}~1"
    assert read_task_ended(aside) == first_end and (aside / "job.json").exists()  # nothing lost
    assert executor.job_dirs.sweep_finished_jobs() == 0  # the try's row is its last job's
    assert poke(again)[-1] == TaskInstanceState.SUCCESS and (tmp_path / "jobs" / f"{KEY}~2").is_dir()

"""The executor's state directory: tracing the jobs that ended while no scheduler watched, and expiry.

A job that ended while no scheduler watched it, its task already closed by the task itself, is never
adopted: every ``SWEEP_INTERVAL_S`` the executor traces the finished jobs in its state directory (a
``result.json``, no ``traced`` mark, not its own) so that their rows still get the executor's part
(backend, host, exit code, peak memory). Every ``EXPIRE_INTERVAL_S`` it deletes the job directories
done longer than ``[agora] job_retention_days`` ago.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import BackendError, job_key, read_result
from agora_optimizer.executor.state_files import write_private

if TYPE_CHECKING:
    from agora_optimizer.executor.jobs.table import JobTable
    from agora_optimizer.executor.jobs.tracing import TraceWriter


SWEEP_INTERVAL_S = 20.0  # how often finished jobs nobody watched are traced (and not before the first adoption)
EXPIRE_INTERVAL_S = 3600.0  # how often job directories older than [agora] job_retention_days are deleted
SWEEP_MAX_AGE_S = 86400.0  # results older than this were traced by an earlier version or are not ours to redo
SWEEP_BATCH = 200  # at most this many traced per sweep: the scheduler's loop must stay short
TRACED_MARK = "traced"
SET_ASIDE = "~"  # KEY~N: the N-th earlier job of a try Airflow queued again (kept until it expires)


class JobDirectories:
    """The executor's state directory: names each attempt's job directory, sweeps the jobs that ended while no
    executor watched them, and expires old job directories.

    ``jobs`` is the executor's job table (whose directories are left alone), ``trace`` writes the sweep's rows,
    ``retention_days`` is ``[agora] job_retention_days``.
    """

    def __init__(self, state_dir: Path, jobs: JobTable, trace: TraceWriter, retention_days: float, log: Any) -> None:
        self.state_dir = state_dir
        self.retention_days = retention_days
        self._jobs = jobs
        self._trace = trace
        self._log = log
        self._swept: set[str] = set()  # job directories the sweep is done with (traced, unreadable or too old)
        self._last_sweep = time.monotonic()  # the first sweep waits an interval: adoption comes first
        self._last_expiry = self._last_sweep - EXPIRE_INTERVAL_S  # the first expiry comes with the first sweep

    @property
    def swept(self) -> frozenset[str]:
        """The names of the job directories the sweep is done with."""
        return frozenset(self._swept)

    def job_dir(self, dag_id: str, task_id: str, run_id: str, try_number: int, map_index: int) -> Path:
        """The one place an attempt's job directory is named: ``STATE_DIR/<job_key>`` (the key is also the job's
        name on every backend, and a pure function of the attempt, so a restart finds it)."""
        return self.state_dir / job_key(dag_id, task_id, run_id, try_number, map_index)

    def maintain(self) -> None:
        """Sweep every :data:`SWEEP_INTERVAL_S`, and expire (with a sweep) every :data:`EXPIRE_INTERVAL_S`."""
        if time.monotonic() - self._last_sweep < SWEEP_INTERVAL_S:
            return
        self._last_sweep = time.monotonic()
        self.sweep_finished_jobs()
        if time.monotonic() - self._last_expiry >= EXPIRE_INTERVAL_S:
            self._last_expiry = time.monotonic()
            self.expire_job_dirs()

    def sweep_finished_jobs(self, max_age_s: float = SWEEP_MAX_AGE_S) -> int:
        """Trace the jobs that ended while no executor watched them; returns how many.

        A task that finishes while the scheduler is down closes itself through the Execution
        API, so no restarted scheduler hands it over for adoption and no poll ever sees its job
        end. Its ``result.json`` is still in the job's directory: that is traced here, once.
        """
        if not self.state_dir.is_dir():
            return 0
        ours = self._jobs.job_dir_names()
        now = time.time()
        traced = 0
        job_dirs = sorted(self.state_dir.iterdir())
        self._swept &= {job_dir.name for job_dir in job_dirs}  # no bigger than the state dir (which expiry bounds)
        for job_dir in job_dirs:
            if traced >= SWEEP_BATCH:
                break
            if job_dir.name in self._swept or job_dir.name in ours:
                continue
            if SET_ASIDE in job_dir.name:  # an earlier job of a try queued again: the try's row is its last job's
                self._swept.add(job_dir.name)
                continue
            if not _own_directory(job_dir):  # a symlink, a file, another user's: nothing the executor made
                self._swept.add(job_dir.name)
                continue
            result_path = job_dir / "result.json"
            if (job_dir / TRACED_MARK).exists() or (
                result_path.is_file() and now - result_path.stat().st_mtime > max_age_s
            ):
                self._swept.add(job_dir.name)
                continue
            if not result_path.is_file():
                continue  # still running, or its result not yet back
            record = JobRecord.read(job_dir)
            try:
                result = read_result(result_path)
            except BackendError as exc:
                self._log.warning("Not tracing %s: %s", job_dir.name, exc)
                mark_traced(job_dir)
                self._swept.add(job_dir.name)
                continue
            if record is None or result is None:
                continue
            if job_dir.name != record.key:  # not a directory the executor made for the attempt its job.json names
                self._log.warning("Not tracing %s: its job.json names another attempt (%s)", job_dir, record.label)
                self._swept.add(job_dir.name)
                continue
            self._trace.write(record, result.status())
            self._swept.add(job_dir.name)
            self._log.info("Traced %s, which ended while no scheduler watched it", record.label)
            traced += 1
        return traced

    def expire_job_dirs(self, retention_days: float | None = None) -> int:
        """Delete the job directories done more than ``[agora] job_retention_days`` ago; returns how many.

        Only directories the executor made and no job of it uses: a job's whose ``job.json``
        names the attempt its name is the key of, that was traced (or whose result is older than
        the sweep looks), and a SLURM pilot's whose tasks are all done or gone; nothing in either
        changed within the retention. 0 days keeps everything.
        """
        days = self.retention_days if retention_days is None else retention_days
        if days <= 0 or not self.state_dir.is_dir():
            return 0
        cutoff = time.time() - days * 86400.0
        ours = self._jobs.job_dir_names()
        deleted = 0
        for job_dir in sorted(self.state_dir.iterdir()):
            if job_dir.name in ours or not _own_directory(job_dir) or not _done_before(job_dir, cutoff):
                continue
            try:
                shutil.rmtree(job_dir)  # never follows a symlink inside it
            except OSError as exc:
                self._log.warning("Cannot delete the expired job directory %s: %s", job_dir, exc)
                continue
            self._swept.discard(job_dir.name)
            deleted += 1
        if deleted:
            self._log.info(
                "Deleted %d job directories in %s done more than %g days ago ([agora] job_retention_days)",
                deleted,
                self.state_dir,
                days,
            )
        return deleted


def _own_directory(path: Path) -> bool:
    """A real directory (not a symlink to one) of this scheduler's user."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()


def _done_before(job_dir: Path, cutoff: float) -> bool:
    """A job's or a SLURM pilot's directory that the executor made, done, and unchanged since ``cutoff``."""
    try:
        if _latest_change(job_dir) >= cutoff:
            return False
    except OSError:  # gone meanwhile, or unreadable: not for deleting
        return False
    record = JobRecord.read(job_dir)
    if record is not None:
        if job_dir.name.partition(SET_ASIDE)[0] != record.key:
            return False
        result = job_dir / "result.json"
        return (job_dir / TRACED_MARK).exists() or (result.is_file() and result.stat().st_mtime < cutoff)
    return job_dir.name.startswith("pilot-") and _pilot_done(job_dir)


def _pilot_done(directory: Path) -> bool:
    """A SLURM pilot whose every task exited, was skipped, or whose job directory is gone or traced."""
    try:
        manifest = json.loads((directory / "pilot.json").read_text())
        if not str(manifest.get("format", "")).startswith("agora-slurm-pilot/"):
            return False
        tasks = [(int(task["index"]), Path(task["job_dir"])) for task in manifest["tasks"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return all(
        (directory / f"exit.{index}").exists()
        or (directory / f"skipped.{index}").exists()
        or not job_dir.exists()
        or (job_dir / TRACED_MARK).exists()
        for index, job_dir in tasks
    )


def _latest_change(directory: Path) -> float:
    """The newest modification time of the directory and of what it holds (not following symlinks)."""
    latest = os.lstat(directory).st_mtime
    with os.scandir(directory) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                latest = max(latest, entry.stat(follow_symlinks=False).st_mtime)
    return latest


def set_aside(job_dir: Path) -> Path | None:
    """Move an earlier job of the same try out of ``job_dir`` (to ``KEY~1``, ``KEY~2`` ...); returns where.

    Airflow queues a try again without a new try number (a sensor in ``reschedule`` mode, a task
    that asked for a reschedule): the new job must not find the old one's result or task-ended
    mark, which every backend would read as its own. None when the directory holds no job yet.
    """
    if not (job_dir / "job.json").exists():
        return None
    earlier = 1
    while (aside := job_dir.with_name(f"{job_dir.name}{SET_ASIDE}{earlier}")).exists():
        earlier += 1
    job_dir.rename(aside)
    return aside


def mark_traced(job_dir: Path) -> None:
    write_private(job_dir / TRACED_MARK, "")

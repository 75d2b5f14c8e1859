"""The SLURM backend's status reports: :class:`StatusReader`, and SLURM's states as the executor's.

Status: one ``squeue --states=all`` for every id asked about (pending and running jobs, and
those SLURM has ended within ``MinJobAge``), then one ``sacct`` for the ids squeue no longer
shows and the ended ones without a result file. The worker's ``result.json`` is authoritative
for exit code, OOM kill, peak RSS and CPU time; SLURM's own records give the state, the node
and the submit, start and end times. ``OUT_OF_MEMORY`` means ``oom_killed``; ``TIMEOUT``,
``CANCELLED``, ``NODE_FAIL`` and ``FAILED`` finish with a nonzero exit code and a reason; an id
neither squeue nor sacct knows is ``lost``. ``PREEMPTED`` (a job of a higher-priority partition
took the node, ``docs/spot.md``) finishes ``interrupted``: the job, or a task of a planned
machine's allocation that had not ended well before, lost its capacity; it did not fail. Only that
state says so: agora's own scancel is ``CANCELLED``, a lost node ``NODE_FAIL``. An error reaching
SLURM raises a transient :class:`~agora_optimizer.executor.jobs.spec.BackendError` (every command has
a timeout, so nothing hangs).

A job's directory comes from what the backend remembers, else from SLURM's record of it
(:class:`~agora_optimizer.executor.backends.slurm.directories.Directories`), so a new instance
reports on the jobs an earlier one submitted.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agora_optimizer.executor.backends.slurm.client import SlurmClient
from agora_optimizer.executor.backends.slurm.directories import Directories
from agora_optimizer.executor.backends.slurm.pilot import PilotPacker
from agora_optimizer.executor.backends.slurm.pilot_files import Manifest
from agora_optimizer.executor.backends.slurm.submission import BACKEND, SlurmJobRef
from agora_optimizer.executor.jobs.spec import (
    OOM_EXIT_CODE,
    BackendError,
    JobPhase,
    JobResult,
    JobStatus,
    read_result,
    read_task_ended,
)
from agora_optimizer.slurm import values
from agora_optimizer.slurm.jobs import SlurmRecord

log = logging.getLogger(__name__)

CANCEL_EXIT = 143  # 128 + SIGTERM
PREEMPTED = "PREEMPTED"
# SLURM's end time is to the second: a lease's task that failed at most this long before its
# allocation's preemption counts as ended by it (SIGTERM reaches the task first, then the driver).
PREEMPTION_SLACK = timedelta(seconds=1)

# SLURM job states that are not final, as the executor sees them.
ACTIVE_PHASES: Mapping[str, JobPhase] = {
    **dict.fromkeys(values.PENDING_STATES, "pending"),
    **dict.fromkeys(values.RUNNING_STATES, "running"),
}
# Final states: the exit code to report when SLURM's is 0 or unknown, and what happened.
# A state in neither table is reported as pending, so that it is polled again, not lost.
FINAL_STATES: Mapping[str, tuple[int, str]] = {
    "COMPLETED": (0, "completed"),
    "FAILED": (1, "failed"),
    "CANCELLED": (CANCEL_EXIT, "was cancelled"),
    "TIMEOUT": (CANCEL_EXIT, "reached its SLURM time limit"),
    "OUT_OF_MEMORY": (OOM_EXIT_CODE, "exceeded its SLURM memory (--mem)"),
    "NODE_FAIL": (OOM_EXIT_CODE, "lost its node (NODE_FAIL)"),
    "BOOT_FAIL": (1, "could not boot its node"),
    "PREEMPTED": (CANCEL_EXIT, "was preempted"),
    "DEADLINE": (CANCEL_EXIT, "missed its deadline"),
    "REVOKED": (1, "was revoked"),
    "SPECIAL_EXIT": (1, "ended in SPECIAL_EXIT"),
}


class StatusReader:
    """Reads the status of the backend's jobs from SLURM and from their files. Not thread-safe: the
    backend calls it under its lock."""

    def __init__(self, client: SlurmClient, directories: Directories, packer: PilotPacker) -> None:
        self.client = client
        self.directories = directories
        self.packer = packer

    def read(self, external_ids: Sequence[str]) -> tuple[dict[str, JobStatus], set[str]]:
        """Each id's status, and the SLURM ids of these jobs that have started (for ``submissions``)."""
        refs = {external_id: SlurmJobRef.parse(external_id) for external_id in external_ids}
        slurm_ids = sorted({ref.job_id for ref in refs.values() if ref is not None}, key=int)
        records = self.client.squeue(slurm_ids)
        manifests: dict[str, Manifest | None] = {}
        for ref in refs.values():
            if ref is not None and ref.index is not None and ref.job_id not in manifests:
                manifests[ref.job_id] = self.directories.manifest(ref.job_id, records.get(ref.job_id))
        self.packer.release_due(records, manifests)
        # sacct for what squeue no longer shows, and for ended jobs of their own without a result file
        # (for MaxRSS and the exit code); a pilot's tasks have their own files.
        wanted = {ref.job_id for ref in refs.values() if ref is not None and ref.job_id not in records}
        wanted |= {
            ref.job_id
            for ref in refs.values()
            if ref is not None
            and ref.index is None
            and ref.job_id in records
            and records[ref.job_id].final
            and not _has_result(self.directories.job_dir(ref, records[ref.job_id], None))
        }
        accounting: dict[str, SlurmRecord] = {}
        if wanted:
            try:
                accounting = self.client.sacct(sorted(wanted, key=int))
            except BackendError:
                # Without accounting, an id squeue has forgotten is lost or finished: only its result can tell.
                blind = [
                    eid
                    for eid, ref in refs.items()
                    if ref is not None
                    and ref.job_id not in records
                    and not _has_result(self.directories.job_dir(ref, None, None))
                ]
                if blind:
                    raise
        started = {  # (a pending job's StartTime in squeue is an estimate)
            r.job_id
            for r in (*records.values(), *accounting.values())
            if r.started_at is not None and ACTIVE_PHASES.get(r.state) != "pending"
        }
        report: dict[str, JobStatus] = {}
        for external_id, ref in refs.items():
            if ref is None:
                report[external_id] = JobStatus("lost", reason=f"{external_id!r} is not a SLURM job id of agora")
                continue
            record, accounted = records.get(ref.job_id), accounting.get(ref.job_id)
            if record is None:
                record = accounted
            elif accounted is not None:  # slurmdbd lags behind slurmctld: take only what squeue lacks
                record = replace(
                    record, max_rss_bytes=accounted.max_rss_bytes, exit_code=record.exit_code or accounted.exit_code
                )
            try:
                if ref.index is None:
                    report[external_id] = self._single_status(ref, record)
                else:
                    report[external_id] = self._task_status(ref, record, manifests.get(ref.job_id))
            except OSError as exc:
                raise BackendError(BACKEND, f"job {external_id}: {exc}", transient=True) from None
        return report, started

    def _result(self, job_dir: Path | None) -> tuple[JobResult | None, str]:
        """The worker's result, or None and why not."""
        if job_dir is None:
            return None, "its job directory is unknown"
        try:
            result = read_result(job_dir / "result.json")
        except BackendError as exc:
            return None, exc.reason
        return result, "" if result is not None else f"the worker wrote no {job_dir / 'result.json'}"

    def _single_status(self, ref: SlurmJobRef, record: SlurmRecord | None) -> JobStatus:
        job_dir = self.directories.job_dir(ref, record, None)
        if record is None:
            result, _ = self._result(job_dir)
            if result is not None:
                return result.status()
            return JobStatus("lost", reason=f"SLURM knows no job {ref.job_id} (neither squeue nor sacct)")
        if not record.final:
            return active_status(record, read_task_ended(job_dir))
        result, missing = self._result(job_dir)
        return final_status(f"SLURM job {ref.job_id}", record, result, missing)

    def _task_status(self, ref: SlurmJobRef, record: SlurmRecord | None, manifest: Manifest | None) -> JobStatus:
        """A packed task: its result file, else the pilot's files (pid, exit, cancel, skipped), else the allocation."""
        job_dir = self.directories.job_dir(ref, record, manifest)
        result, missing = self._result(job_dir)
        directory = manifest.directory if manifest is not None else self.directories.pilot_dir(ref.job_id)

        def marker(name: str) -> bool:
            return directory is not None and (directory / f"{name}.{ref.index}").exists()

        what = f"task {ref.index} of pilot SLURM job {ref.job_id}"
        queued_at = record.submitted_at if record is not None else None
        started_at = record.started_at if record is not None else None
        host = record.node if record is not None else ""
        lease = manifest.lease if manifest is not None else None
        if lease is not None and directory is not None:
            # A planned machine's task starts when the driver reaches it, not with the allocation:
            # handed over when its task file was written, started when its pid file was.
            what = f"task {ref.index} of machine {lease.machine} (SLURM job {ref.job_id})"
            queued_at, started_at = _mtime(directory / f"task.{ref.index}.sh"), _mtime(directory / f"pid.{ref.index}")
        cancelled, started = marker("cancel"), marker("pid")
        if result is not None:
            status = result.status()
            if not status.succeeded and not cancelled and record is not None and record.state == "COMPLETING":
                # Its allocation is ending under it: a preemption shows only once SLURM has ended it.
                return JobStatus("running", host=host, queued_at=queued_at, started_at=started_at)
            interrupted = ended_by_preemption(record, status.exit_code or 0, status.ended_at)
            return JobStatus(
                "finished",
                exit_code=status.exit_code,
                oom_killed=status.oom_killed,
                reason=_preempted(what, record) if interrupted else status.reason,
                host=host or status.host,
                queued_at=queued_at,
                started_at=started_at or status.started_at,
                ended_at=status.ended_at,
                peak_rss_bytes=status.peak_rss_bytes,
                cpu_time_s=status.cpu_time_s,
                interrupted=interrupted,
            )
        allocated = record is not None and ACTIVE_PHASES.get(record.state) == "running"
        if marker("skipped") or (cancelled and not started and not allocated):
            return JobStatus(
                "finished", exit_code=CANCEL_EXIT, reason=f"{what} was cancelled before it started", queued_at=queued_at
            )
        exit_file = directory / f"exit.{ref.index}" if directory is not None else None
        code = _read_int(exit_file) if exit_file is not None else None
        if exit_file is not None and code is not None:
            ended_at = datetime.fromtimestamp(exit_file.stat().st_mtime, UTC)
            if not cancelled and record is not None and record.state == "COMPLETING":
                return JobStatus("running", host=host, queued_at=queued_at, started_at=started_at)
            interrupted = not cancelled and ended_by_preemption(record, code or 1, ended_at)
            why = "was cancelled" if cancelled else f"exited with code {code}{_signal_name(code)}"
            return JobStatus(
                "finished",
                exit_code=code or 1,
                reason=_preempted(what, record) if interrupted else f"{what} {why}, and {missing}",
                host=host,
                queued_at=queued_at,
                started_at=started_at,
                ended_at=ended_at,
                interrupted=interrupted,
            )
        if record is None:
            return JobStatus("lost", reason=f"SLURM knows no job {ref.job_id} (neither squeue nor sacct)")
        if record.final:
            return final_status(f"pilot SLURM job {ref.job_id} (task {ref.index})", record, None, missing)
        if record.held:
            gathering = self.packer.gathering(ref.job_id)
            why = "gathering tasks into the pilot" if gathering else "held until the pilot's window closes"
            return JobStatus("pending", reason=f"{what}: {why}", queued_at=queued_at)
        if allocated and directory is not None and not started:
            why = "the allocation is starting" if lease is None else "waiting for its turn and its cores"
            return JobStatus("pending", reason=f"{what}: {why}", queued_at=queued_at)
        if lease is not None and started:
            return JobStatus(
                "running", host=host, queued_at=queued_at, started_at=started_at, task_ended_at=read_task_ended(job_dir)
            )
        return active_status(record, read_task_ended(job_dir) if started else None)


def active_status(record: SlurmRecord, task_ended_at: datetime | None = None) -> JobStatus:
    """A job SLURM still shows; ``task_ended_at``: its worker's task-ended mark, for a running one."""
    phase = ACTIVE_PHASES.get(record.state, "pending")
    if record.state not in ACTIVE_PHASES:
        reason = f"SLURM state {record.state}, unknown to agora"
    elif phase == "pending":
        reason = "waiting in SLURM's queue" + (f" ({record.reason})" if record.reason else "")
    else:
        reason = "" if record.state == "RUNNING" else record.state
    running = phase == "running"
    return JobStatus(
        phase,
        reason=reason,
        host=record.node if running else "",
        queued_at=record.submitted_at,
        started_at=record.started_at if running else None,
        task_ended_at=task_ended_at if running else None,
    )


def final_status(what: str, record: SlurmRecord, result: JobResult | None, missing: str) -> JobStatus:
    default_code, happened = FINAL_STATES[record.state]
    slurm_oom = record.state == "OUT_OF_MEMORY"
    peak: int | None
    cpu: float | None
    if result is not None:
        exit_code, oom_killed, reason = result.exit_code, result.oom_killed or slurm_oom, result.reason
        if slurm_oom and not result.oom_killed:
            reason = f"{what} {happened}" + (f"; {reason}" if reason else "")
        elif not reason and record.state != "COMPLETED":
            reason = f"{what} {happened}"
        peak, cpu = result.peak_rss_bytes, result.cpu_time_s
    else:
        exit_code = record.exit_code or default_code
        oom_killed = slurm_oom
        code = f"exit code {exit_code}{_signal_name(exit_code)}"
        reason = f"{what} {happened} (SLURM state {record.state}, {code}), and {missing}"
        peak, cpu = record.max_rss_bytes, None
    if oom_killed and exit_code == 0:
        exit_code = OOM_EXIT_CODE
    interrupted = ended_by_preemption(record, exit_code, None)
    if interrupted:
        reason = _preempted(what, record)
    return JobStatus(
        "finished",
        exit_code=exit_code,
        oom_killed=oom_killed,
        reason=reason,
        host=record.node or (result.host if result is not None else ""),
        queued_at=record.submitted_at,
        started_at=record.started_at or (result.started_at if result is not None else None),
        ended_at=record.ended_at or (result.ended_at if result is not None else None),
        peak_rss_bytes=peak,
        cpu_time_s=cpu,
        interrupted=interrupted,
    )


def ended_by_preemption(record: SlurmRecord | None, exit_code: int, ended_at: datetime | None) -> bool:
    """Whether SLURM's preemption of the allocation ended a job (or a lease's task) that exited
    ``exit_code`` at ``ended_at`` (None: when the allocation did). Not a job that exited 0: its work
    is done. Not a task that ended before the preemption (its allocation ran on after it)."""
    if record is None or record.state != PREEMPTED or exit_code == 0:
        return False
    if ended_at is None or record.ended_at is None:
        return True
    return ended_at >= record.ended_at - PREEMPTION_SLACK


def _preempted(what: str, record: SlurmRecord | None) -> str:
    """The reason of an interrupted job: the partition and node SLURM took back."""
    partition = record.partition if record is not None and record.partition else "(unknown)"
    node = f" (node {record.node})" if record is not None and record.node else ""
    return (
        f"{what} was preempted on SLURM partition {partition}{node}: SLURM gave its node to a job of a "
        "higher-priority partition (state PREEMPTED); the capacity vanished, the task did not fail"
    )


def _signal_name(exit_code: int) -> str:
    """`` = SIGKILL`` for a shell's 137 (128 + the signal), '' for an ordinary exit code."""
    with contextlib.suppress(ValueError):
        if exit_code > 128:
            return f" = {signal.Signals(exit_code - 128).name}"
    return ""


def _has_result(job_dir: Path | None) -> bool:
    return job_dir is not None and (job_dir / "result.json").exists()


def _mtime(path: Path) -> datetime | None:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None

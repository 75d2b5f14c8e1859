"""Pilot jobs: short tasks of one partition gathered into one SLURM allocation.

Pilot mode (``pilot_max_tasks`` >= 2), in the spirit of Balsam's pilot jobs: a job with a time
limit of at most ``pilot_max_time_limit_s`` is not submitted alone but gathered with the other
such jobs of its partition into one allocation, whose script runs all their commands at once,
each in its own job directory, each writing its own ``result.json``. A job that needs GPUs is
never gathered: it is a batch job of its own, with its ``--gres``.

- The first job of a gathering opens a pilot: a directory (under ``pilot_root``, by default
  beside the first job's directory) and an ``sbatch --hold`` job, so its SLURM id exists from
  the start and a refusal reaches the ``submit`` that caused it.
- Each further job is appended to the pilot's task list and the held job's request grows
  with ``scontrol update``: cores and memory are summed (the tasks run at once, no waves).
  The time limit is the longest task's. A job joins only while the sum still fits the
  partition's largest node (``sinfo``, asked once per partition) and the pilot is younger
  than ``pilot_window_s``; otherwise the open pilot is closed and a new one opened.
- A pilot is closed and released (``scontrol release``) when it holds ``pilot_max_tasks``
  tasks, or by :meth:`PilotPacker.flush` once its window has passed, which the backend calls before
  every status poll and on every heartbeat (``tick``; ``force=True`` at shutdown closes every open pilot).
- A held pilot whose window passed more than ``ADOPTED_RELEASE_GRACE_S`` ago is released by
  whichever instance reports on it, so a scheduler that died while gathering leaves no job held.
- Cancelling one task writes ``cancel.<index>`` into the pilot directory: the pilot skips the
  task if it has not started, or sends it SIGTERM (the worker writes its result); the
  allocation runs on for the others. Cancelling the last task not yet cancelled cancels the
  allocation.
- A packed task is ``running`` once the pilot has started it (``pid.<index>``), ``pending``
  before. Its ``queued_at`` and ``started_at`` are the allocation's (SLURM has no record of
  the task), its ``ended_at`` the worker's. A task that ended without a result file is
  reported with the exit status the pilot recorded (``exit.<index>``); one whose allocation
  ended first (time limit, node failure, scancel) with the allocation's final state.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from agora_optimizer.executor.backends.slurm.client import SlurmClient, update_argv
from agora_optimizer.executor.backends.slurm.directories import Directories
from agora_optimizer.executor.backends.slurm.pilot_files import PILOT_DRIVER, Capacity, Manifest, Pilot, pilot_task
from agora_optimizer.executor.backends.slurm.settings import SlurmSettings
from agora_optimizer.executor.backends.slurm.submission import (
    BACKEND,
    UNSAFE_CHARS,
    SlurmJobRef,
    job_name,
    task_described,
)
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec
from agora_optimizer.executor.state_files import write_private
from agora_optimizer.model.workflow import shown
from agora_optimizer.slurm.jobs import SlurmRecord
from agora_optimizer.slurm.values import MIB, mib

if TYPE_CHECKING:
    from agora_optimizer.queue_wait.submissions import SubmissionLog

log = logging.getLogger(__name__)

APPEND_MARGIN_S = 1.0  # the gathering instance stops appending this long before a window ends
ADOPTED_RELEASE_GRACE_S = 5.0  # another instance releases a held pilot this long after its window


class PilotPacker:
    """Gathers short tasks into pilots (``pilot_max_tasks`` >= 2), closes and releases them.

    Not thread-safe: the backend calls it under its lock."""

    def __init__(
        self,
        client: SlurmClient,
        directories: Directories,
        settings: SlurmSettings,
        submissions: SubmissionLog | None = None,
    ) -> None:
        self.client = client
        self.directories = directories
        self.settings = settings
        self.submissions = submissions
        self._open: dict[str, Pilot] = {}  # partition -> the pilot gathering its tasks
        self._capacity: dict[str, Capacity] = {}

    def flush(self, *, force: bool = False) -> None:
        """Close and release every open pilot whose window has passed (all of them if ``force``).

        The backend calls it before every status poll and on every heartbeat, so the executor's
        heartbeat ends windows; with ``force=True`` when the scheduler stops, so no pilot waits for a
        heartbeat that never comes. Never raises: a pilot that cannot be released now stays held and
        is released later.
        """
        now = time.time()
        for pilot in list(self._open.values()):
            if force or now >= pilot.release_at:
                self._close(pilot)

    def gathering(self, job_id: str) -> bool:
        """Whether pilot ``job_id`` still gathers tasks here."""
        return any(pilot.job_id == job_id for pilot in self._open.values())

    def forget(self, job_id: str) -> None:
        """Stop gathering into pilot ``job_id`` (cancelled)."""
        for partition, pilot in list(self._open.items()):
            if pilot.job_id == job_id:
                del self._open[partition]

    def submit(self, job: JobSpec, partition: str) -> str:
        """Gather the job into its partition's open pilot (a new one when it does not fit); its external id."""
        capacity = self._partition_capacity(job, partition)
        task_minutes = self.settings.minutes(job.time_limit_s) or 1
        pilot = self._open.get(partition)
        if pilot is not None and not self._fits(pilot, job, task_minutes, capacity):
            self._close(pilot)
            pilot = None
        if pilot is None:
            pilot = self._open_pilot(job, partition, task_minutes, capacity)
            index = 0
        else:
            index = self._append(pilot, job, task_minutes)
        if len(pilot.tasks) >= self.settings.pilot_max_tasks:
            self._close(pilot)
        return str(SlurmJobRef(pilot.job_id, index))

    def _fits(self, pilot: Pilot, job: JobSpec, minutes: int, capacity: Capacity) -> bool:
        return (
            not pilot.closed
            and len(pilot.tasks) < self.settings.pilot_max_tasks
            and time.time() < pilot.release_at - APPEND_MARGIN_S
            and pilot.cores() + job.cores <= capacity.cpus
            and pilot.memory_mib() + mib(job.memory_bytes) <= capacity.memory_mib
            and minutes <= pilot.minutes
        )

    def _open_pilot(self, job: JobSpec, partition: str, task_minutes: int, capacity: Capacity) -> Pilot:
        root = self.settings.pilot_root or job.job_dir.parent
        directory = root / f"pilot-{UNSAFE_CHARS.sub('_', job.key)}"
        minutes = self.settings.minutes(self.settings.pilot_max_time_limit_s) or 1
        if capacity.max_minutes is not None:
            minutes = max(task_minutes, min(minutes, capacity.max_minutes))
        pilot = Pilot(partition, directory, minutes, release_at=time.time() + self.settings.pilot_window_s)
        task = pilot_task(job, 0, task_minutes)
        directory.mkdir(parents=True, exist_ok=True)
        job.job_dir.mkdir(parents=True, exist_ok=True)
        write_private(directory / "pilot.sbatch", PILOT_DRIVER, mode=0o700)
        pilot.write([task])
        name = job_name(f"pilot-{job.key}")
        try:
            pilot.job_id = self.client.sbatch(
                task_described(job, partition),
                name,
                partition=partition,
                cores=job.cores,
                memory_mib=mib(job.memory_bytes),
                directory=directory,
                script=directory / "pilot.sbatch",
                minutes=minutes,
                options=("--hold",),
                arguments=("pilot", "0", "0", "0"),  # every task at once, closed from the start
            )
        except BackendError:
            self.client.cancel_unanswered(name)  # a held job may exist that nobody would ever release
            shutil.rmtree(directory, ignore_errors=True)
            raise
        pilot.tasks = [task]
        try:
            pilot.write(pilot.tasks)
        except OSError as exc:
            self.client.run_quietly(["scancel", pilot.job_id])
            shutil.rmtree(directory, ignore_errors=True)
            raise BackendError(BACKEND, f"{job.label}: pilot directory {directory}: {exc}", transient=True) from None
        self._open[partition] = pilot
        self.directories.pilot(pilot.job_id, directory)
        self.directories.job(str(SlurmJobRef(pilot.job_id, 0)), job.job_dir)
        return pilot

    def _append(self, pilot: Pilot, job: JobSpec, task_minutes: int) -> int:
        task = pilot_task(job, len(pilot.tasks), task_minutes)
        tasks = [*pilot.tasks, task]
        job.job_dir.mkdir(parents=True, exist_ok=True)
        pilot.write(tasks)
        try:
            self.client.update(pilot.job_id, cores=pilot.cores(tasks), memory_mib=pilot.memory_mib(tasks))
        except BackendError as exc:
            pilot.write(pilot.tasks)
            self.client.run_quietly(update_argv(pilot.job_id, cores=pilot.cores(), memory_mib=pilot.memory_mib()))
            raise BackendError(
                BACKEND,
                f"resource {shown(job.resource)} (partition {pilot.partition}): {job.label}: cannot join pilot "
                f"{pilot.job_id}: {exc.reason}",
                transient=exc.transient,
            ) from None
        pilot.tasks = tasks
        self.directories.job(str(SlurmJobRef(pilot.job_id, task.index)), job.job_dir)
        return task.index

    def _close(self, pilot: Pilot) -> None:
        """Mark the pilot closed, lower its time limit to its longest task's, and release it."""
        if self._open.get(pilot.partition) is pilot:
            del self._open[pilot.partition]
        pilot.closed = True
        pilot.release_at = min(pilot.release_at, time.time())
        try:
            pilot.write(pilot.tasks)
        except OSError:
            log.warning("SLURM: cannot mark pilot %s closed in %s", pilot.job_id, pilot.directory, exc_info=True)
        longest = max(task.minutes for task in pilot.tasks)
        if longest < pilot.minutes:
            self.client.run_quietly(["scontrol", "update", f"JobId={pilot.job_id}", f"TimeLimit={longest}"])
        self.client.run_quietly(["scontrol", "release", pilot.job_id])
        if self.submissions is not None:  # released: it queues (is eligible) from now
            limit_s = min(longest, pilot.minutes) * 60.0
            self.submissions.submitted(pilot.job_id, pilot.partition, pilot.cores(), pilot.memory_mib() * MIB, limit_s)

    def release_due(self, records: Mapping[str, SlurmRecord], manifests: Mapping[str, Manifest | None]) -> None:
        """Release held pilots that no instance gathers into any more (closed, or their window long past)."""
        gathering = {pilot.job_id for pilot in self._open.values()}
        now = time.time()
        for job_id, manifest in manifests.items():
            record = records.get(job_id)
            if manifest is None or record is None or not record.held or job_id in gathering:
                continue
            if manifest.closed or now > manifest.release_at + ADOPTED_RELEASE_GRACE_S:
                log.info("SLURM: releasing held pilot %s (its window has passed)", job_id)
                self.client.run_quietly(["scontrol", "release", job_id])

    def _partition_capacity(self, job: JobSpec, partition: str) -> Capacity:
        if partition in self._capacity:
            return self._capacity[partition]
        found = self.client.partition_nodes(partition)
        nodes = [
            Capacity(node.cpus, node.memory_mib, node.max_minutes)
            for node in found
            if node.cpus is not None and node.memory_mib is not None
        ]
        if not nodes:
            raise BackendError(
                BACKEND,
                f"resource {shown(job.resource)}: partition {shown(partition)} has no nodes (sinfo)",
                transient=False,
            )
        self._capacity[partition] = max(nodes, key=lambda node: (node.cpus, node.memory_mib))
        return self._capacity[partition]

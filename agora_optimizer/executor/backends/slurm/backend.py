"""The SLURM backend: the Backend calls, over a SLURM client, a pilot packer and the planned machines' allocations.

:class:`SlurmBackend` holds its parts, each a plain class given what it needs:

- :class:`~agora_optimizer.executor.backends.slurm.client.SlurmClient` runs every SLURM command;
- :class:`~agora_optimizer.executor.backends.slurm.pilot.PilotPacker` gathers short tasks into pilots;
- :class:`~agora_optimizer.executor.backends.slurm.allocations.Allocations` holds a plan's machines;
- :class:`~agora_optimizer.executor.backends.slurm.status.StatusReader` reports on the jobs;
- :class:`~agora_optimizer.executor.backends.slurm.directories.Directories` remembers where each job lives.

``submit`` hands a planned machine's task to its allocation, gathers a short task without GPUs into a
pilot (pilot mode), and submits any other as one batch job of its own
(:func:`~agora_optimizer.executor.backends.slurm.submission.single_script`).

Adoption: the backend keeps no state that a new instance needs. It finds a job's directory
from SLURM's record of it (``WorkDir``, squeue's or sacct's, which is the job directory
because of ``--chdir``; a pilot's is the pilot directory, whose ``pilot.json`` lists its
tasks' job directories). :meth:`SlurmBackend.adopt` takes the directory as a hint too, which
is used first and also lets a result file be read once SLURM has forgotten the job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from agora_optimizer import settings
from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.backends.slurm.allocations import Allocations
from agora_optimizer.executor.backends.slurm.client import SlurmClient, gres_type
from agora_optimizer.executor.backends.slurm.directories import Directories
from agora_optimizer.executor.backends.slurm.pilot import PilotPacker
from agora_optimizer.executor.backends.slurm.pilot_files import Manifest
from agora_optimizer.executor.backends.slurm.settings import (
    DEFAULT_EXPORT,
    ENV_NAME,
    LEASE_IDLE_S,
    REMEMBER_MAX,
    SlurmSettings,
)
from agora_optimizer.executor.backends.slurm.status import StatusReader
from agora_optimizer.executor.backends.slurm.submission import (
    BACKEND,
    SlurmJobRef,
    job_name,
    single_script,
    task_described,
)
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec, JobStatus, MachineLease
from agora_optimizer.executor.state_files import write_private
from agora_optimizer.executor.worker.environment import job_environment
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.workflow import shown
from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.slurm.jobs import SlurmRecord
from agora_optimizer.slurm.values import mib

if TYPE_CHECKING:
    from agora_optimizer.queue_wait.submissions import SubmissionLog

log = logging.getLogger(__name__)


class SlurmBackend(Backend):
    """Runs jobs as SLURM batch jobs, one each, packed into pilots, or in a planned machine's allocation."""

    name = BACKEND

    @classmethod
    def from_settings(cls, resources: Mapping[str, Resource]) -> SlurmBackend:
        """``[agora] slurm_pilot_max_tasks`` and ``slurm_pilot_window_s``, and ``slurm_record_queue_waits`` into
        ``queue_wait_store_url``; AgoraError naming the option of a bad value."""
        from agora_optimizer.queue_wait.submissions import SubmissionLog

        read = SlurmSettings.from_agora()
        record_queue_waits = settings.get_bool("slurm_record_queue_waits")
        store_url = settings.get("queue_wait_store_url")
        return cls(
            pilot_max_tasks=read.pilot_max_tasks,
            pilot_window_s=read.pilot_window_s,
            submissions=SubmissionLog(store_url or None) if record_queue_waits else None,
            resources=resources,
        )

    def __init__(
        self,
        *,
        pilot_max_tasks: int = 0,
        pilot_window_s: float = 5.0,
        pilot_max_time_limit_s: float = 900.0,
        pilot_root: Path | None = None,
        time_grace_s: float = 30.0,
        command_timeout_s: float = 20.0,
        export: Sequence[str] = DEFAULT_EXPORT,
        submissions: SubmissionLog | None = None,
        remember_max: int = REMEMBER_MAX,
        resources: Mapping[str, Resource] | None = None,
        lease_root: Path | None = None,
        lease_idle_s: float = LEASE_IDLE_S,
    ) -> None:
        """The settings are :class:`~agora_optimizer.executor.backends.slurm.settings.SlurmSettings`' (FieldError
        naming a bad one); ``submissions`` records the queue each job met and its wait (for the queue-wait
        model); ``resources`` are the catalog's SLURM resources (a planned machine's partition is its type's)."""
        self.settings = SlurmSettings(
            pilot_max_tasks=pilot_max_tasks,
            pilot_window_s=pilot_window_s,
            pilot_max_time_limit_s=pilot_max_time_limit_s,
            pilot_root=pilot_root,
            time_grace_s=time_grace_s,
            command_timeout_s=command_timeout_s,
            export=export,
            remember_max=remember_max,
            lease_root=lease_root,
            lease_idle_s=lease_idle_s,
        )
        self.submissions = submissions
        self._lock = threading.RLock()
        self.client = SlurmClient(command_timeout_s, self.settings.export)
        self.directories = Directories(remember_max)
        self.packer = PilotPacker(self.client, self.directories, self.settings, submissions)
        self.allocations = Allocations(
            self.client, self.directories, self.settings, resources or {}, self._lock, submissions
        )
        self.statuses = StatusReader(self.client, self.directories, self.packer)

    @property
    def resources(self) -> Mapping[str, Resource]:
        """The catalog's SLURM resources this backend was made for."""
        return self.allocations.resources

    # -- the Backend calls -------------------------------------------------------------------------

    def submit(self, job: JobSpec) -> str:
        partition = job.options.get("partition")
        if not isinstance(partition, str) or not partition:
            raise BackendError(
                BACKEND,
                f"resource {shown(job.resource)}: no SLURM partition (set 'partition' in the catalog), "
                f"so {job.label} cannot be submitted",
                transient=False,
            )
        bad = [name for name in job.environment if not ENV_NAME.match(name)]
        if bad:
            raise BackendError(BACKEND, f"{job.label}: environment names {bad} are not variable names", transient=False)
        job = replace(job, environment=job_environment(job.environment))  # never a scheduler secret
        with self._lock:
            if job.lease is not None:
                return self.allocations.submit(job, job.lease)
            limit = job.time_limit_s
            short = limit is not None and limit <= self.settings.pilot_max_time_limit_s
            if self.settings.pilots and short and not job.gpus:  # a pilot sums cores and memory, not GPUs
                return self.packer.submit(job, partition)
            return self._submit_single(job, partition)

    def status(self, external_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        """Each id's status; first closes the pilots whose window has passed (:meth:`PilotPacker.flush`)."""
        with self._lock:
            self.packer.flush()
            report, started = self.statuses.read(external_ids)
        if self.submissions is not None:  # outside the lock: it may ask sacct
            self.submissions.poll(started)
        return report

    def cancel(self, external_id: str) -> None:
        """scancel, or for a packed task its cancel file (and scancel once no task is left). Never raises."""
        try:
            ref = SlurmJobRef.parse(external_id)
            if ref is None:
                return
            if ref.index is None:
                self.client.run(["scancel", ref.job_id])
                return
            with self._lock:
                self._cancel_task(ref)
        except BackendError as exc:  # the executor's loop must survive a failed cancel
            log.warning("SLURM: cancelling %s failed: %s", external_id, exc.reason)
        except Exception:  # likewise; SLURM's own time limit stays the backstop
            log.warning("SLURM: cancelling %s failed", external_id, exc_info=True)

    def tick(self, *, force: bool = False) -> None:
        """Submit the pilots whose window has passed (every open one if ``force``: the scheduler stops, and no
        heartbeat would end their windows), and store the recorded jobs' queue waits when due (or now)."""
        try:
            with self._lock:
                self.packer.flush(force=force)
        except Exception:  # never raises: a pilot not released now is released later, or by its next reader
            log.warning("SLURM: closing the pilots failed", exc_info=True)
        if self.submissions is not None:
            self.submissions.poll(force=force)

    def close(self) -> None:
        """Store the queue waits still due, and close the queue-wait store."""
        if self.submissions is not None:
            self.submissions.poll(force=True)
            self.submissions.close()

    def adopt(self, external_id: str, job_dir: Path, resource: str | None = None) -> bool:
        """Remember ``job_dir`` for an id another instance submitted (optional: status also finds
        it from SLURM's WorkDir). False for an id this backend never makes."""
        if SlurmJobRef.parse(external_id) is None:
            return False
        self.directories.job(external_id, Path(job_dir))
        return True

    # -- planned machines: Allocations -------------------------------------------------------------

    def open_lease(self, lease: MachineLease) -> None:
        self.allocations.open(lease)

    def lease_lead_s(self, resource: str) -> float:
        return self.allocations.lead_s(resource)

    def close_lease(self, lease: MachineLease) -> None:
        self.allocations.close(lease)

    def finished_leases(self) -> list[LeaseRecord]:
        return self.allocations.finished()

    # -- inside ------------------------------------------------------------------------------------

    def _submit_single(self, job: JobSpec, partition: str) -> str:
        """``job`` as a batch job of its own (:func:`single_script`); its SLURM id."""
        name = job_name(job.key)
        earlier = self.client.find_unanswered(name)
        if earlier is not None:
            self.directories.job(earlier, job.job_dir)
            return earlier
        what = task_described(job, partition)
        wanted_type = gres_type(job.resource, job.options) if job.gpus > 0 else None
        if job.gpus > 0:
            self.client.check_gpus(what, partition, job.gpus, wanted_type)
        job.job_dir.mkdir(parents=True, exist_ok=True)
        script = job.job_dir / "job.sbatch"
        write_private(script, single_script(job), mode=0o700)
        minutes = self.settings.minutes(job.time_limit_s)
        job_id = self.client.sbatch(
            what,
            name,
            partition=partition,
            cores=job.cores,
            memory_mib=mib(job.memory_bytes),
            directory=job.job_dir,
            script=script,
            minutes=minutes,
            environment=job.environment,
            gpus=job.gpus,
            gres_type=wanted_type,
        )
        self.directories.job(job_id, job.job_dir)
        if self.submissions is not None:
            self.submissions.submitted(
                job_id, partition, job.cores, job.memory_bytes, None if minutes is None else minutes * 60.0
            )
        return job_id

    def _cancel_task(self, ref: SlurmJobRef) -> None:
        """A pilot's or an allocation's task: its cancel file; the pilot's scancel once none of its tasks is left."""
        directory = self.directories.pilot_dir(ref.job_id)
        if directory is None:
            directory = self.client.squeue([ref.job_id]).get(ref.job_id, SlurmRecord(ref.job_id, "UNKNOWN")).work_dir
        if directory is None:
            log.warning("SLURM: pilot %s unknown; cannot cancel task %d", ref.job_id, ref.index)
            return
        (directory / f"cancel.{ref.index}").touch()
        manifest = Manifest.read(directory)
        if manifest is None:
            return
        if manifest.lease is not None and not manifest.closed:
            return  # more tasks may come: the allocation is released by close_lease
        if all((directory / f"cancel.{index}").exists() for index in manifest.job_dirs):
            self.client.run(["scancel", ref.job_id])
            self.packer.forget(ref.job_id)

"""Planned machines: one SLURM allocation per machine of a plan, run by the pilot driver (:class:`Allocations`).

Planned machines (:meth:`Allocations.open`, the backend's ``open_lease``): a plan's machine ``TYPE#N`` is one allocation
sized as its type (its vcpus and memory, and its GPUs as ``--gres=gpu[:TYPE]:N`` with the resource's
``gres_type``, in its catalog resource's partition), run by the same driver as a pilot, in a
directory named by the lease key (under ``lease_root``). It starts empty; each task ``submit`` hands
it (a ``JobSpec`` whose ``lease`` is it) becomes its next ``task.I.sh``, and the driver runs them in
that order, several at once while their cores, memory and GPUs fit the machine, each with its own of
the allocation's GPUs as ``CUDA_VISIBLE_DEVICES``. :meth:`Allocations.close` writes
``closed``: the driver ends once its running tasks have, and SLURM releases the allocation, whose
Start and End in accounting :meth:`Allocations.finished` reports. A partition that is not
up, or has no node that can run, or no node with the machine's GPUs, or an sbatch SLURM refuses, is
a BackendError from :meth:`Allocations.open`. A restarted scheduler takes an open allocation over by its job
name (``agora-<lease key>``). A driver that saw no task for ``lease_idle_s`` ends by itself (its
scheduler may be gone); a task handed over after that goes to a new allocation of the machine.
"""

from __future__ import annotations

import contextlib
import logging
import math
import shutil
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from agora_optimizer.executor.backends.slurm.client import SlurmClient, gres_type
from agora_optimizer.executor.backends.slurm.directories import Directories
from agora_optimizer.executor.backends.slurm.pilot_files import PILOT_DRIVER, Manifest, Pilot, pilot_task
from agora_optimizer.executor.backends.slurm.settings import SlurmSettings
from agora_optimizer.executor.backends.slurm.submission import BACKEND, SlurmJobRef, job_name, one_line
from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec, MachineLease
from agora_optimizer.executor.state_files import write_private
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.workflow import shown
from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.slurm.commands import this_user
from agora_optimizer.slurm.jobs import SQUEUE_FORMAT, parse_squeue
from agora_optimizer.slurm.values import MIB, mib

if TYPE_CHECKING:
    from agora_optimizer.queue_wait.submissions import SubmissionLog

log = logging.getLogger(__name__)

LEAD_SAMPLES = 20  # an allocation's predicted queue wait: the median of its partition's last this many


class Allocations:
    """Opens, feeds and closes the allocations of a plan's machines, one per lease, and reports them ended."""

    def __init__(
        self,
        client: SlurmClient,
        directories: Directories,
        settings: SlurmSettings,
        resources: Mapping[str, Resource],
        lock: threading.RLock,
        submissions: SubmissionLog | None = None,
    ) -> None:
        """``resources`` are the catalog's SLURM resources (a planned machine's partition is its type's);
        ``lock`` is the backend's, held while an allocation changes hands."""
        self.client = client
        self.directories = directories
        self.settings = settings
        self.resources: Mapping[str, Resource] = dict(resources)
        self.submissions = submissions
        self._lock = lock
        self._held: dict[str, Pilot] = {}  # lease key -> the allocation its tasks go to now
        self._released: BoundedDict[str, Pilot] = BoundedDict(settings.remember_max)  # SLURM id -> unreported
        # partition -> the queue waits (submit to start, s) of its last allocations: the lead of the next
        self._waits: dict[str, deque[float]] = {}

    def held(self, lease_key: str) -> Pilot | None:
        """The allocation a lease's tasks go to now (None: not open here)."""
        with self._lock:
            return self._held.get(lease_key)

    def job_ids(self) -> list[str]:
        """The SLURM ids of the allocations held, and of those released whose end is not reported yet."""
        with self._lock:
            return [pilot.job_id for pilot in [*self._held.values(), *self._released.values()]]

    def forget(self, lease_key: str) -> None:
        """Let go of a lease's allocation without closing it (another scheduler took it over)."""
        with self._lock:
            self._held.pop(lease_key, None)

    def open(self, lease: MachineLease) -> None:
        """Request the planned machine's allocation, sized as its type, in its type's partition.

        An allocation of this lease that a scheduler before a restart opened and never closed is
        taken over (found by its job name). BackendError, naming the machine and SLURM's words,
        when the partition is unknown, not up, or has no node that can run (or none with the machine's
        GPUs), or sbatch refuses."""
        with self._lock:
            if lease.key in self._held:
                return
            partition = self._lease_partition(lease)
            found = self._find_lease(lease)
            if found is not None:
                log.info("SLURM: took over allocation %s of machine %s", found.job_id, lease.machine)
                self._held[lease.key] = found
                return
            self._check_partition(lease, partition)
            self._held[lease.key] = self._allocate(lease, partition)

    def close(self, lease: MachineLease) -> None:
        """Tell the allocation no more tasks come: its driver ends once the running ones have. Never raises."""
        try:
            with self._lock:
                pilot = self._held.pop(lease.key, None) or self._find_lease(lease)
                if pilot is not None:
                    self._release_lease(pilot)
        except Exception:  # the executor's loop must survive; the driver's idle limit is the backstop
            log.warning("SLURM: closing the allocation of machine %s failed", lease.machine, exc_info=True)

    def finished(self) -> list[LeaseRecord]:
        """The released allocations SLURM accounting has ended, with its Start and End (each once).

        One whose record is not final yet (slurmdbd lags behind slurmctld) waits for a later call;
        one that never started (closed while still queued) held nothing and is not reported."""
        with self._lock:
            waiting = dict(self._released.items())
        if not waiting:
            return []
        try:
            records = self.client.sacct(sorted(waiting, key=int))
        except BackendError as exc:
            log.warning("SLURM: cannot read the accounting of %d released allocations: %s", len(waiting), exc.reason)
            return []
        finished: list[LeaseRecord] = []
        for job_id, pilot in waiting.items():
            record = records.get(job_id)
            if record is None or not record.final or record.ended_at is None or pilot.lease is None:
                continue
            with self._lock:
                self._released.pop(job_id, None)
            if record.started_at is None:
                log.info("SLURM: allocation %s of machine %s never started", job_id, pilot.lease.machine)
                continue
            lease = pilot.lease
            finished.append(lease.record(BACKEND, job_id, record.started_at, record.ended_at, "slurm accounting"))
            if record.submitted_at is not None:
                waited_s = max(0.0, (record.started_at - record.submitted_at).total_seconds())
                with self._lock:
                    self._waits.setdefault(pilot.partition, deque(maxlen=LEAD_SAMPLES)).append(waited_s)
        return finished

    def lead_s(self, resource: str) -> float:
        """The predicted queue wait of an allocation of ``resource``'s partition: the median wait (submit to
        start, from accounting) of its last :data:`LEAD_SAMPLES` allocations; 0 before the first ended."""
        spec = self.resources.get(resource)
        partition = None if spec is None else spec.slurm_partition
        with self._lock:
            waits = sorted(self._waits.get(partition or "", ()))
        return waits[len(waits) // 2] if waits else 0.0

    def _lease_partition(self, lease: MachineLease) -> str:
        resource = self.resources.get(lease.resource)
        partition = None if resource is None else resource.slurm_partition
        if partition is None:
            known = "unknown to this backend" if resource is None else "without a 'partition' in the catalog"
            raise BackendError(
                BACKEND, f"machine {lease.machine}: resource {shown(lease.resource)} is {known}", transient=False
            )
        return partition

    def _check_partition(self, lease: MachineLease, partition: str) -> None:
        """BackendError unless the partition is up and one of its nodes can run (sbatch queues a job in a
        partition that is down, where it would wait until someone brings it up)."""
        what = f"machine {lease.machine} (resource {shown(lease.resource)}, partition {partition})"
        try:
            nodes = self.client.partition_nodes(partition)
        except BackendError as exc:
            raise BackendError(BACKEND, f"{what}: {exc.reason}", transient=exc.transient) from None
        if not nodes:
            raise BackendError(BACKEND, f"{what}: SLURM knows no such partition (sinfo)", transient=False)
        if nodes[0].partition_state != "up":
            raise BackendError(BACKEND, f"{what}: the partition is {nodes[0].partition_state} (sinfo)", transient=False)
        if not any(node.usable for node in nodes):
            said = ", ".join(f"{node.name} {node.state}" for node in sorted(nodes, key=lambda node: node.name))
            raise BackendError(BACKEND, f"{what}: no node can run ({said}, sinfo)", transient=False)
        if lease.gpus > 0:
            self.client.check_gpus(what, partition, lease.gpus, self._lease_gres_type(lease))

    def _lease_gres_type(self, lease: MachineLease) -> str | None:
        resource = self.resources.get(lease.resource)
        return None if resource is None else gres_type(lease.resource, resource.extra)

    def _allocate(self, lease: MachineLease, partition: str) -> Pilot:
        """sbatch the lease's driver, sized as the machine; its directory is the first free of
        ``KEY``, ``KEY.1``, ``KEY.2`` ... (an allocation that ended early is followed by another)."""
        root = self.settings.lease_root or _default_lease_root()
        directory = root / lease.key
        generation = 0
        while directory.exists():
            generation += 1
            directory = root / f"{lease.key}.{generation}"
        memory_mib = mib(lease.memory_bytes)
        what = f"machine {lease.machine} (resource {shown(lease.resource)}, partition {partition})"
        pilot = Pilot(partition, directory, minutes=0, release_at=time.time(), lease=lease)
        try:
            directory.mkdir(parents=True)
            write_private(directory / "pilot.sbatch", PILOT_DRIVER, mode=0o700)
            pilot.write([])
        except OSError as exc:
            raise BackendError(BACKEND, f"{what}: allocation directory {directory}: {exc}", transient=True) from None
        name = job_name(lease.key)
        comment = one_line(f"agora machine {lease.machine} of {lease.dag_id} {lease.run_id}")[:200]
        try:
            pilot.job_id = self.client.sbatch(
                what,
                name,
                partition=partition,
                cores=lease.cores,
                memory_mib=memory_mib,
                directory=directory,
                script=directory / "pilot.sbatch",
                options=(f"--comment={comment}",),
                arguments=(
                    "lease",
                    str(lease.cores),
                    str(memory_mib),
                    str(math.ceil(self.settings.lease_idle_s)),
                    str(lease.gpus),
                ),
                gpus=lease.gpus,
                gres_type=self._lease_gres_type(lease) if lease.gpus > 0 else None,
            )
            pilot.write([])
        except BackendError:
            self.client.cancel_unanswered(name)  # an allocation may exist that nobody would hand tasks to
            shutil.rmtree(directory, ignore_errors=True)
            raise
        except OSError as exc:
            self.client.run_quietly(["scancel", pilot.job_id])
            shutil.rmtree(directory, ignore_errors=True)
            raise BackendError(BACKEND, f"{what}: allocation directory {directory}: {exc}", transient=True) from None
        self.directories.pilot(pilot.job_id, directory)
        if self.submissions is not None:
            self.submissions.submitted(pilot.job_id, partition, lease.cores, memory_mib * MIB, None)
        log.info("SLURM: allocation %s for machine %s (%d cores, %d MiB, %d GPUs)", pilot.job_id, lease.machine,
                 lease.cores, memory_mib, lease.gpus)  # fmt: skip
        return pilot

    def _find_lease(self, lease: MachineLease) -> Pilot | None:
        """The newest allocation of this lease that SLURM still runs and nobody closed, if any."""
        out = self.client.run(["squeue", "--noheader", f"--name={job_name(lease.key)}", this_user(), SQUEUE_FORMAT])
        for record in sorted(parse_squeue(out).values(), key=lambda r: int(r.job_id), reverse=True):
            if record.final or record.work_dir is None:
                continue
            manifest = Manifest.read(record.work_dir)
            if manifest is None or manifest.lease is None or manifest.lease.key != lease.key or manifest.closed:
                continue
            pilot = manifest.pilot()
            pilot.job_id = record.job_id
            self.directories.pilot(record.job_id, record.work_dir)
            for task in pilot.tasks:
                self.directories.job(str(SlurmJobRef(record.job_id, task.index)), task.job_dir)
            return pilot
        return None

    def _release_lease(self, pilot: Pilot) -> None:
        pilot.closed = True
        try:
            pilot.write(pilot.tasks)
            (pilot.directory / "closed").touch()
        except OSError:
            log.warning("SLURM: cannot mark allocation %s closed in %s", pilot.job_id, pilot.directory, exc_info=True)
        if not pilot.tasks:  # it never ran anything: do not wait for it to start only to end
            self.client.run_quietly(["scancel", pilot.job_id])
        self._released[pilot.job_id] = pilot

    def submit(self, job: JobSpec, lease: MachineLease) -> str:
        """Hand the task to its machine's allocation: the next index, claimed with ``mkdir slot.INDEX``."""
        if job.cores > lease.cores or mib(job.memory_bytes) > mib(lease.memory_bytes) or job.gpus > lease.gpus:
            raise BackendError(
                BACKEND,
                f"{job.label}: needs {job.cores} cores, {mib(job.memory_bytes)} MiB and {job.gpus} GPUs, more than "
                f"machine {lease.machine} has ({lease.cores} cores, {mib(lease.memory_bytes)} MiB, {lease.gpus} GPUs)",
                transient=False,
            )
        if lease.key not in self._held:
            self.open(lease)  # a scheduler that restarted hands over a task of a lease it did not open
        pilot = self._held[lease.key]
        if not self._claim(pilot, len(pilot.tasks)):
            # The driver ended (its idle limit, or SLURM stopped the allocation): another allocation
            # for the machine, reported as one more lease record.
            log.warning("SLURM: allocation %s of machine %s has ended; requesting another", pilot.job_id,
                        lease.machine)  # fmt: skip
            self._released[pilot.job_id] = pilot
            del self._held[lease.key]
            self._check_partition(lease, pilot.partition)
            pilot = self._held[lease.key] = self._allocate(lease, pilot.partition)
            self._claim(pilot, 0)
        task = pilot_task(job, len(pilot.tasks), self.settings.minutes(job.time_limit_s) or 0)
        try:
            job.job_dir.mkdir(parents=True, exist_ok=True)
            pilot.write([*pilot.tasks, task])
        except OSError as exc:
            raise BackendError(BACKEND, f"{job.label}: allocation {pilot.directory}: {exc}", transient=True) from None
        pilot.tasks.append(task)
        external_id = str(SlurmJobRef(pilot.job_id, task.index))
        self.directories.job(external_id, job.job_dir)
        return external_id

    def _claim(self, pilot: Pilot, index: int) -> bool:
        """Claim task index ``index`` of the allocation; False if its driver has ended (or claimed it to end)."""
        try:
            (pilot.directory / f"slot.{index}").mkdir()
        except FileExistsError:
            return False
        except OSError as exc:
            raise BackendError(BACKEND, f"allocation {pilot.directory}: {exc}", transient=True) from None
        try:
            record = self.client.squeue([pilot.job_id]).get(pilot.job_id)
        except BackendError:
            (pilot.directory / f"slot.{index}").rmdir()  # unclaimed again, for the retry
            raise
        if record is not None and not record.final:
            return True
        with contextlib.suppress(OSError):
            (pilot.directory / f"slot.{index}").rmdir()
        return False


def _default_lease_root() -> Path:
    """The executor's job directory (``[agora] state_dir``), where pilots go too."""
    from agora_optimizer import settings

    return settings.directory("state_dir", "jobs", mode=0o700)

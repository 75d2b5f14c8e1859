"""Local worker pools: subprocesses on this machine, never more than a pool holds.

A pool is a catalog resource with ``backend: local``: ``vcpus`` x ``count`` cores and
``memory_gib`` x ``count`` of memory, optionally pinned to ``cpu_set`` (the executor
puts ``--cpu-set`` into the worker command, and the worker pins itself and every task
process). Jobs start in submission order as soon as their cores and memory fit the
pool's free capacity; the worker kills a task that goes over its memory.

GPUs: a pool of a type with ``gpus`` holds ``gpus`` x ``count`` of them, the devices ``gpu_ids``
(default ``0 .. gpus x count - 1``): indices into the devices the scheduler may use, which are the
entries of its own ``CUDA_VISIBLE_DEVICES`` when it has one (host numbers, ``GPU-<uuid>`` or MIG ids,
passed on as written), else the host's device numbers (:func:`pool_devices`). A job that reserves
GPUs starts only when that many of its devices are free, and runs with ``CUDA_VISIBLE_DEVICES`` set
to them, so that the jobs running at once never share a device. While any pool has GPUs, every
other job (of any pool) runs with ``CUDA_VISIBLE_DEVICES`` empty and sees no GPU; when none has,
jobs keep the variable as the scheduler has it.

Workers start warm: a fork server (one per scheduler, started with the executor) forks
them after importing Airflow's task path and freezing the garbage collector
(:func:`warm_up`), as the LocalExecutor forks its workers from a scheduler that has
Airflow loaded; a task then pays neither for imports nor for scanning what it inherited
(the processes' side, ``warm_up`` included: :mod:`~agora_optimizer.executor.backends.local.processes`;
the pools' capacity, devices and machines' slices: :mod:`~agora_optimizer.executor.backends.local.pools`).

Planned machines (:class:`~agora_optimizer.executor.jobs.spec.MachineLease`): machine ``TYPE#k`` of a
pool gets its own CPU slice, the k-th run of ``vcpus`` CPUs of the pool's ``cpu_set`` (or of the
CPUs this process may use when it has none), wrapping around when the pool has fewer CPUs than
its machines need (:func:`machine_cpus`), the type's memory, and its GPU slice, the k-th run of the
type's ``gpus`` devices (:func:`machine_gpus`). A job of the machine runs pinned to that slice and
starts when it fits both its machine (the type's cores and memory, counting the machine's running
jobs, and free devices of its GPU slice) and its pool. A job stops counting against either the
moment its task process has exited (the worker's ``task-ended`` mark), not when Airflow's
supervisor exits after reporting, up to seconds later.

Each job runs in its own session, so it survives a scheduler restart: the pid and start
time are written to ``JOB_DIR/local.json``, and a new backend :meth:`LocalBackend.adopt`\\ s
the job from there and reads its result file when it ends.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from multiprocessing.connection import wait as wait_for_sentinels
from multiprocessing.process import BaseProcess
from pathlib import Path

import psutil

from agora_optimizer.executor.backends.base import Backend, worker_argv
from agora_optimizer.executor.backends.local.pools import (
    LocalPool,
    check_disjoint_gpus,
    check_fits,
    check_gpus,
    gpu_environment,
    machine_cpus,
    machine_gpus,
    pinned,
    pool_devices,
    scheduler_devices,
)
from agora_optimizer.executor.backends.local.processes import (
    ended_status,
    fork_context,
    signal_group,
    start_worker,
    worker_exit_code,
)
from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec, JobStatus, MachineLease, read_task_ended
from agora_optimizer.executor.state_files import write_private
from agora_optimizer.model.catalog import Resource
from agora_optimizer.runs.lease_record import LeaseRecord

KILL_GRACE_S = 15.0
DONE_MAX = 10_000  # finished jobs whose status a backend keeps for polls; the executor asks once
PUMP_WAIT_S = 0.25  # how often the pump looks for a task-ended mark between workers' exits


@dataclass
class _Allocation:
    """What the pool holds for a planned machine's lease: its CPU and GPU slices, and when its jobs really ran."""

    lease: MachineLease
    cpus: tuple[int, ...]
    gpu_ids: tuple[str, ...] = ()
    first_start_at: datetime | None = None
    last_end_at: datetime | None = None


@dataclass
class _Running:
    resource: str
    job_dir: Path
    cores: int
    memory_bytes: int
    pid: int
    create_time: float
    queued_at: datetime
    process: subprocess.Popen[bytes] | BaseProcess | None = None  # None when adopted from an earlier scheduler
    cancel_at: float | None = None
    lease_key: str = ""
    task_ended_at: datetime | None = None  # the worker's task-ended mark: its cores, memory and GPUs are free
    gpu_ids: tuple[str, ...] = ()  # the GPU devices it holds (its CUDA_VISIBLE_DEVICES)

    @property
    def holds_capacity(self) -> bool:
        return self.task_ended_at is None


class LocalBackend(Backend):
    """Runs jobs as local subprocesses within the capacity of their pool."""

    name = "local"

    @classmethod
    def from_settings(cls, resources: Mapping[str, Resource]) -> LocalBackend:
        """A pool per local resource (no ``[agora]`` setting of its own); BackendError naming a resource whose
        ``cpu_set`` or ``gpu_ids`` is wrong, or whose GPUs the scheduler's ``CUDA_VISIBLE_DEVICES`` cannot hold."""
        return cls({resource.name: LocalPool.from_resource(resource) for resource in resources.values()})

    def __init__(self, pools: Mapping[str, LocalPool], *, warm: bool = True, done_max: int = DONE_MAX) -> None:
        """``warm``: start agora workers from a fork server that has Airflow imported (as the
        LocalExecutor forks its workers), instead of a new interpreter per task. ``done_max``:
        how many finished jobs' statuses are kept for polls (the oldest are forgotten, and then
        reported unknown, as to a restarted scheduler). The pools' GPUs are looked up in this
        process's ``CUDA_VISIBLE_DEVICES`` now (:func:`pool_devices`): BackendError for a pool
        the scheduler's devices cannot hold, or two pools that claim one device."""
        self.pools = dict(pools)
        visible = scheduler_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
        self._gpus = {name: pool_devices(pool, visible) for name, pool in self.pools.items()}
        check_disjoint_gpus(self._gpus)
        self._hides_gpus = any(self._gpus.values())  # then a job that reserves no GPU is shown none
        self.warm = warm
        self._lock = threading.RLock()
        self._pump: threading.Thread | None = None
        self._queue: list[tuple[JobSpec, datetime]] = []
        self._running: dict[str, _Running] = {}
        self._done: BoundedDict[str, JobStatus] = BoundedDict(done_max)
        self._allocations: dict[str, _Allocation] = {}
        self._released: list[LeaseRecord] = []

    def start_fork_server(self) -> None:
        """Start the fork server now, not at the first job: it loads Airflow for seconds, which the first
        task would wait for (the LocalExecutor, too, forks its workers when it starts)."""
        if self.warm:
            fork_context()
            multiprocessing.forkserver.ensure_running()

    def start(self) -> None:
        self.start_fork_server()

    def worker_command(
        self, job_dir: Path, resource: str, *, memory_bytes: int, time_limit_s: float | None, label: str
    ) -> list[str]:
        """The worker in this interpreter, pinned (``--cpu-set``) to its pool's ``cpu_set`` if it has one (a
        planned machine's job is pinned to its machine's slice when it starts: :func:`pinned`)."""
        pool = self.pools.get(resource)
        return worker_argv(
            sys.executable,
            str(job_dir),
            memory_bytes=memory_bytes,
            time_limit_s=time_limit_s,
            cpu_set=pool.cpu_set if pool is not None else (),
        )

    # -- the Backend calls ---------------------------------------------------------------------

    def submit(self, job: JobSpec) -> str:
        with self._lock:
            external_id = self._submit(job)
        self._ensure_pump()
        return external_id

    def _submit(self, job: JobSpec) -> str:
        pool = self.pools.get(job.resource)
        if pool is None:
            raise BackendError(
                self.name, f"no local pool named {job.resource!r} (known: {sorted(self.pools)})", transient=False
            )
        check_fits(job.label, job.cores, job.memory_bytes, f"pool {pool.name}", pool.cores, pool.memory_bytes)
        check_gpus(job.label, job.gpus, f"pool {pool.name}", pool.gpus)
        if job.lease is not None:
            held = self._open_lease(job.lease).lease  # a lease the executor did not open (a restart) is opened here
            where = f"its machine {held.machine}"
            check_fits(job.label, job.cores, job.memory_bytes, where, held.cores, held.memory_bytes)
            check_gpus(job.label, job.gpus, where, held.gpus)
        if job.key in self._running or any(queued.key == job.key for queued, _ in self._queue):
            return job.key
        # A finished job of the same key is an earlier run of this try (a deferred task that resumes,
        # a reschedule sensor's next poke): its status is not the new job's.
        self._done.pop(job.key, None)
        job.job_dir.mkdir(parents=True, exist_ok=True)
        self._queue.append((job, datetime.now(UTC)))
        self._start_what_fits()
        return job.key

    def status(self, external_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        with self._lock:
            return self._status(external_ids)

    def _status(self, external_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        self._reap()
        self._start_what_fits()
        queued = {job.key: at for job, at in self._queue}
        report: dict[str, JobStatus] = {}
        for external_id in external_ids:
            if external_id in self._done:
                report[external_id] = self._done[external_id]
            elif external_id in queued:
                report[external_id] = JobStatus(
                    "pending", queued_at=queued[external_id], reason="waiting for pool capacity"
                )
            elif external_id in self._running:
                run = self._running[external_id]
                report[external_id] = JobStatus(
                    "running", queued_at=run.queued_at, host=os.uname().nodename, task_ended_at=run.task_ended_at
                )
            else:
                report[external_id] = JobStatus("lost", reason=f"local job {external_id} unknown to this scheduler")
        return report

    def cancel(self, external_id: str) -> None:
        with self._lock:
            self._cancel(external_id)

    def _cancel(self, external_id: str) -> None:
        for index, (job, _) in enumerate(self._queue):
            if job.key == external_id:
                del self._queue[index]
                self._done[external_id] = JobStatus("finished", exit_code=143, reason="cancelled before it started")
                return
        run = self._running.get(external_id)
        if run is None:
            return
        signal_group(run.pid, run.create_time, signal.SIGTERM)  # the worker passes it on to the task
        run.cancel_at = time.monotonic() + KILL_GRACE_S

    # -- planned machines ----------------------------------------------------------------------

    def open_lease(self, lease: MachineLease) -> None:
        """Give the planned machine its CPU and GPU slices; BackendError if its pool cannot hold its type."""
        with self._lock:
            self._open_lease(lease)

    def _open_lease(self, lease: MachineLease) -> _Allocation:
        held = self._allocations.get(lease.key)
        if held is not None:
            return held
        pool = self.pools.get(lease.resource)
        if pool is None:
            raise BackendError(
                self.name, f"machine {lease.machine}: no local pool named {lease.resource!r}", transient=False
            )
        what = f"machine {lease.machine}"
        check_fits(what, lease.cores, lease.memory_bytes, f"pool {pool.name}", pool.cores, pool.memory_bytes)
        check_gpus(what, lease.gpus, f"pool {pool.name}", pool.gpus)
        cpus = machine_cpus(pool.cpu_set or sorted(os.sched_getaffinity(0)), lease.machine, lease.cores)
        held = _Allocation(lease, cpus, machine_gpus(self._gpus[pool.name], lease.machine, lease.gpus))
        self._allocations[lease.key] = held
        return held

    def lease_cpus(self, lease_key: str) -> tuple[int, ...]:
        """The CPU slice of an open lease (empty when it is not open)."""
        with self._lock:
            held = self._allocations.get(lease_key)
            return held.cpus if held is not None else ()

    def lease_gpus(self, lease_key: str) -> tuple[str, ...]:
        """The GPU devices of an open lease (empty when it is not open, or its type has none)."""
        with self._lock:
            held = self._allocations.get(lease_key)
            return held.gpu_ids if held is not None else ()

    def close_lease(self, lease: MachineLease) -> None:
        """Free the machine's slices and report its lease from its first task's start to its last task's end. A
        machine none of whose tasks started here (a repair moved them all away) held nothing and is not reported,
        as AWS Batch's are not: priced from its opening, it cost as if it had run from its first job's arrival."""
        with self._lock:
            held = self._allocations.pop(lease.key, None)
            if held is None or held.first_start_at is None:
                return
            ended_at = held.last_end_at or datetime.now(UTC)
            self._released.append(lease.record(self.name, lease.key, held.first_start_at, ended_at, "task times"))

    def finished_leases(self) -> list[LeaseRecord]:
        with self._lock:
            released, self._released = self._released, []
            return released

    # -- adoption ------------------------------------------------------------------------------

    def adopt(self, external_id: str, job_dir: Path, resource: str) -> bool:
        """Track a job that an earlier scheduler started; False if it never started here."""
        with self._lock:
            adopted = self._adopt(external_id, job_dir, resource)
        self._ensure_pump()
        return adopted

    def _adopt(self, external_id: str, job_dir: Path, resource: str) -> bool:
        if external_id in self._running or external_id in self._done:
            return True
        try:
            state = json.loads((job_dir / "local.json").read_text())
            pid, create_time = int(state["pid"]), float(state["create_time"])
            cores, memory = int(state["cores"]), int(state["memory_bytes"])
            queued_at = datetime.fromisoformat(state["queued_at"])
            lease_key = str(state.get("lease_key") or "")
            gpu_ids = tuple(str(device) for device in state.get("gpu_ids") or ())
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if resource not in self.pools:
            return False
        self._running[external_id] = _Running(
            resource, job_dir, cores, memory, pid, create_time, queued_at, lease_key=lease_key, gpu_ids=gpu_ids
        )
        return True

    # -- inside --------------------------------------------------------------------------------

    def _ensure_pump(self) -> None:
        """A thread that starts the next queued job the moment a running one ends (not at the next poll)."""
        if self._pump is None or not self._pump.is_alive():
            self._pump = threading.Thread(target=self._run_pump, name="agora-local-pool", daemon=True)
            self._pump.start()

    def _run_pump(self) -> None:
        while True:
            with self._lock:
                if not self._running and not self._queue:
                    self._pump = None
                    return
                sentinels = [
                    run.process.sentinel for run in self._running.values() if isinstance(run.process, BaseProcess)
                ]
            if sentinels:
                wait_for_sentinels(sentinels, timeout=PUMP_WAIT_S)
            else:
                time.sleep(0.1)
            with self._lock:
                self._reap()
                self._start_what_fits()

    def _used(self, pool: str, lease_key: str = "") -> tuple[int, int]:
        """Cores and memory held in the pool (or, with ``lease_key``, on that machine) by tasks still running."""
        runs = [
            run
            for run in self._running.values()
            if run.resource == pool and run.holds_capacity and (not lease_key or run.lease_key == lease_key)
        ]
        return sum(run.cores for run in runs), sum(run.memory_bytes for run in runs)

    def _free_gpus(self, pool: LocalPool, job: JobSpec) -> tuple[str, ...] | None:
        """The devices ``job`` would get now (the first free ones of its machine's slice, else of its pool),
        None while fewer than its GPUs are free."""
        if job.gpus < 1:
            return ()
        candidates = self._open_lease(job.lease).gpu_ids if job.lease is not None else self._gpus[pool.name]
        taken = {
            device
            for run in self._running.values()
            if run.resource == pool.name and run.holds_capacity
            for device in run.gpu_ids
        }
        free = [device for device in candidates if device not in taken]
        return tuple(free[: job.gpus]) if len(free) >= job.gpus else None

    def _start_what_fits(self) -> None:
        """Start queued jobs in order while the first one of each pool, and of each machine, fits.

        No overtaking within a pool, nor within a machine; a job that waits for its machine's
        room (cores, memory or free GPUs of its slice) holds back only its machine's later jobs,
        not the pool's other machines.
        """
        blocked: set[str] = set()
        waiting: list[tuple[JobSpec, datetime]] = []
        for job, queued_at in self._queue:
            pool = self.pools[job.resource]
            cores, memory = self._used(pool.name)
            if pool.name in blocked or cores + job.cores > pool.cores or memory + job.memory_bytes > pool.memory_bytes:
                blocked.add(pool.name)
                waiting.append((job, queued_at))
                continue
            devices = self._free_gpus(pool, job)
            if job.lease is not None:
                lease = job.lease
                cores, memory = self._used(pool.name, lease.key)
                if (
                    lease.key in blocked
                    or cores + job.cores > lease.cores
                    or memory + job.memory_bytes > lease.memory_bytes
                    or devices is None
                ):
                    blocked.add(lease.key)
                    waiting.append((job, queued_at))
                    continue
            elif devices is None:
                blocked.add(pool.name)
                waiting.append((job, queued_at))
                continue
            self._start(job, queued_at, devices)
        self._queue = waiting

    def _start(self, job: JobSpec, queued_at: datetime, devices: tuple[str, ...] = ()) -> None:
        lease_key = ""
        if self._hides_gpus:
            job = replace(job, environment=gpu_environment(job.environment, devices))
        if job.lease is not None:
            held = self._open_lease(job.lease)
            lease_key = job.lease.key
            job = replace(job, command=pinned(job.command, held.cpus))
            held.first_start_at = held.first_start_at or datetime.now(UTC)
        try:
            process = start_worker(job, self.warm)
        except OSError as exc:
            self._done[job.key] = JobStatus("finished", exit_code=127, reason=f"cannot start worker: {exc}")
            return
        pid = process.pid or 0
        try:
            create_time = psutil.Process(pid).create_time()
        except psutil.Error:
            create_time = 0.0
        state = {
            "pid": pid,
            "create_time": create_time,
            "resource": job.resource,
            "cores": job.cores,
            "memory_bytes": job.memory_bytes,
            "queued_at": queued_at.isoformat(),
            "lease_key": lease_key,
            "gpu_ids": list(devices),
        }
        write_private(job.job_dir / "local.json", json.dumps(state))
        self._running[job.key] = _Running(
            job.resource,
            job.job_dir,
            job.cores,
            job.memory_bytes,
            pid,
            create_time,
            queued_at,
            process,
            lease_key=lease_key,
            gpu_ids=devices,
        )

    def _task_ended(self, run: _Running) -> None:
        """Note the worker's task-ended mark: the run's cores and memory are free from that moment."""
        if run.task_ended_at is not None:
            return
        run.task_ended_at = read_task_ended(run.job_dir)
        if run.task_ended_at is None:
            return
        held = self._allocations.get(run.lease_key)
        if held is not None:
            held.last_end_at = max(held.last_end_at or run.task_ended_at, run.task_ended_at)

    def _reap(self) -> None:
        for key, run in list(self._running.items()):
            self._task_ended(run)
            exit_code = worker_exit_code(run.process, run.pid, run.create_time)
            if exit_code is None:
                if run.cancel_at is not None and time.monotonic() > run.cancel_at:
                    signal_group(run.pid, run.create_time, signal.SIGKILL)
                continue
            del self._running[key]
            held = self._allocations.get(run.lease_key)
            if held is not None and run.task_ended_at is None:  # no mark (killed, an old worker): its exit ends it
                held.last_end_at = datetime.now(UTC)
            self._done[key] = ended_status(run.job_dir, run.pid, exit_code, run.queued_at)

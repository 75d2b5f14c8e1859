"""A thread that follows a process tree with psutil: peak total resident memory and CPU time.

The tree is a root process and all its descendants, as they appear and disappear.
Every ``interval_s`` the sampler adds up the resident memory of the live tree (the peak of
that sum is ``peak_rss_bytes``) and the CPU time (user + system) of every
process, including the children each process has waited for (``children_user`` and
``children_system``), so that short-lived children between two samples are counted
once they are reaped by a process of the tree. A process that vanishes while its
parent is no longer in the tree (an orphan, or the root itself) keeps the CPU time it
had when last seen.

On Linux the per-process high-water mark (``VmHWM``) also bounds the peak from below,
which catches a spike shorter than the interval: for processes born after
:meth:`ProcessTreeSampler.start`, for the root when it is the sampling process
itself, whose mark is reset at start (``/proc/self/clear_refs``), and for a root
started for the measure (``root_high_water``: the agora worker follows the task process
Airflow forked a moment before, whose whole life is the task's). The peak therefore
includes the root's own memory (a Python task process carries its interpreter), which
is what the machine had to hold.

Where the agora worker follows the task's tree, it sets :data:`SAMPLED_BY_WORKER_ENV`
in the task's environment, so that the trace listener in the task process does not
sample the same tree a second time (the executor's trace row carries the worker's
measure).

Each process's resident memory is its proportional set size (``Pss`` of
``/proc/PID/smaps_rollup``, on Linux 4.14 and later), its RSS elsewhere: a page the tree's
processes share counts once, not once per process. Airflow's supervisor forks the task
process, and the two share every page the supervisor had until one writes it; summed RSS
counted those twice (a task that holds 140 MiB measured 227 MiB for a moment and was killed
for memory).

``cpu_time_s`` counts only the CPU time used between :meth:`start` and :meth:`stop`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

import psutil

from agora_optimizer.errors import AgoraError

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.1
# Set (to "1") in the environment of a task whose process tree the agora worker samples.
SAMPLED_BY_WORKER_ENV = "AGORA_SAMPLED_BY_WORKER"


class SamplerError(AgoraError):
    """The process to follow does not exist or cannot be read."""


@dataclass(frozen=True)
class Sample:
    """What a sampler saw between start and stop."""

    peak_rss_bytes: int
    cpu_time_s: float
    wall_s: float
    samples: int
    processes_seen: int


@dataclass
class _Seen:
    parent: int | None
    cpu_s: float


class ProcessTreeSampler:
    """Follow ``pid`` (default: this process) and its descendants until :meth:`stop`."""

    def __init__(
        self, pid: int | None = None, interval_s: float = DEFAULT_INTERVAL_S, *, root_high_water: bool = False
    ) -> None:
        """``root_high_water``: the root's ``VmHWM`` counts although it was born before :meth:`start`
        (its whole life belongs to the measure)."""
        if interval_s <= 0:
            raise SamplerError(f"sampler interval must be > 0 s, got {interval_s}")
        self.pid = os.getpid() if pid is None else pid
        self.interval_s = interval_s
        self.root_high_water = root_high_water
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._root: psutil.Process | None = None
        self._seen: dict[tuple[int, float], _Seen] = {}
        self._pids_ever: set[tuple[int, float]] = set()
        self._banked_cpu_s = 0.0
        self._baseline_cpu_s = 0.0
        self._cpu_s = 0.0
        self._peak_rss_bytes = 0
        self._samples = 0
        self._started_at = 0.0
        self._start_wall = 0.0
        self._root_hwm_reset = False

    def start(self) -> ProcessTreeSampler:
        """Take a first sample and start the thread; returns ``self``."""
        if self._thread is not None:
            raise SamplerError(f"sampler of process {self.pid} already started")
        try:
            self._root = psutil.Process(self.pid)
            self._root.memory_info()
        except psutil.Error as exc:
            raise SamplerError(f"cannot follow process {self.pid}: {exc}") from None
        self._started_at = time.time()
        self._start_wall = time.monotonic()
        self._root_hwm_reset = self.root_high_water or (self.pid == os.getpid() and _reset_high_water_mark())
        with self._lock:
            self._baseline_cpu_s = self._tick()
        self._thread = threading.Thread(target=self._run, name=f"agora-sampler-{self.pid}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Sample:
        """Stop the thread, take a last sample, and return what was seen."""
        if self._thread is None:
            raise SamplerError(f"sampler of process {self.pid} was not started")
        self._stopping.set()
        self._thread.join()
        with self._lock:
            self._tick()
            return Sample(
                peak_rss_bytes=self._peak_rss_bytes,
                cpu_time_s=max(0.0, self._cpu_s - self._baseline_cpu_s),
                wall_s=time.monotonic() - self._start_wall,
                samples=self._samples,
                processes_seen=len(self._pids_ever),
            )

    @property
    def peak_rss_bytes(self) -> int:
        """The peak total RSS seen so far (a watchdog reads it while the sampler runs)."""
        with self._lock:
            return self._peak_rss_bytes

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            try:
                with self._lock:
                    self._tick()
            except Exception:  # a sampler must never take its process down
                log.exception("agora sampler of process %s: sample failed", self.pid)

    def _tick(self) -> float:
        """One sample; returns the tree's CPU total so far (banked + live)."""
        tree = self._tree()
        live: dict[tuple[int, float], _Seen] = {}
        rss_total = 0
        hwm_max = 0
        for process, identity in tree:
            try:
                with process.oneshot():
                    rss = _resident_bytes(process)
                    times = process.cpu_times()
                    parent = process.ppid()
            except psutil.Error:
                continue  # gone between listing and reading: its parent will count it when it reaps it
            cpu = times.user + times.system + times.children_user + times.children_system
            live[identity] = _Seen(parent=parent, cpu_s=cpu)
            rss_total += rss
            born_after_start = identity[1] >= self._started_at
            if born_after_start or (process.pid == self.pid and self._root_hwm_reset):
                hwm_max = max(hwm_max, _high_water_mark(process.pid))
        live_pids = {pid for pid, _ in live}
        for identity, seen in self._seen.items():
            if identity not in live and (seen.parent is None or seen.parent not in live_pids):
                self._banked_cpu_s += seen.cpu_s  # nobody in the tree will reap it: keep its last reading
        self._seen = live
        self._pids_ever.update(live)
        self._samples += 1
        self._peak_rss_bytes = max(self._peak_rss_bytes, rss_total, hwm_max)
        self._cpu_s = max(self._cpu_s, self._banked_cpu_s + sum(s.cpu_s for s in live.values()))
        return self._cpu_s

    def _tree(self) -> list[tuple[psutil.Process, tuple[int, float]]]:
        root = self._root
        if root is None:
            return []
        try:
            processes = [root, *_descendants(root)]
        except psutil.Error:
            return []
        found = []
        for process in processes:
            try:
                found.append((process, (process.pid, process.create_time())))
            except psutil.Error:
                continue
        return found


def _resident_bytes(process: psutil.Process) -> int:
    """The process's share of resident memory: its PSS where the kernel gives it, else its RSS."""
    try:
        with open(f"/proc/{process.pid}/smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(process.memory_info().rss)


def _descendants(root: psutil.Process) -> list[psutil.Process]:
    """The root's descendants (see :func:`child_pids`)."""
    try:
        found: list[psutil.Process] = []
        frontier = [root.pid]
        while frontier:
            for child in _proc_children(frontier.pop()):
                try:
                    found.append(psutil.Process(child))
                except psutil.Error:
                    continue
                frontier.append(child)
        return found
    except (OSError, ValueError):
        return list(root.children(recursive=True))


def child_pids(pid: int) -> list[int]:
    """The pids of the children of ``pid`` (none if it is gone).

    On Linux from ``/proc/PID/task/TID/children`` (a few small reads per process);
    psutil's ``children()`` reads the status of every process of the machine (~6 ms with
    150 processes), which at ten calls a second costs a busy machine a core.
    """
    try:
        return _proc_children(pid)
    except (OSError, ValueError):
        try:
            return [child.pid for child in psutil.Process(pid).children()]
        except psutil.Error:
            return []


def _proc_children(pid: int) -> list[int]:
    """Children of ``pid`` from ``/proc``: [] once it is gone; OSError where ``/proc`` cannot tell."""
    children: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        if os.path.isdir("/proc/self/task"):
            return []  # the process is gone
        raise
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                children.extend(int(child) for child in handle.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return children


def _reset_high_water_mark() -> bool:
    """Reset this process's peak RSS to its current RSS (Linux ``clear_refs``); False where not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _high_water_mark(pid: int) -> int:
    """``VmHWM`` of a process in bytes (Linux), 0 where unknown."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0

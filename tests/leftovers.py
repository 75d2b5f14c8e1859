"""Processes a test session left running, and daemons a test run left running (tests/conftest.py).

Each session (each pytest-xdist worker) checks its processes when it ends. A process belongs to the
session when its environment, working directory, command line or open files point into the session's
temporary directory (``tmp_path_factory.getbasetemp()``): every Airflow the tests start has its
``AIRFLOW_HOME`` there, moto runs there, the agora workers' job directories are there. Under
pytest-xdist each worker has a directory of its own (``.../popen-gw0``), so a worker sees its own
processes only, not its neighbour's, nor another session's. The services (:data:`SERVICES`:
PostgreSQL, the SLURM and munge daemons, MariaDB), which both workers may share, are left to the run's
check; nor does a session count this process's own multiprocessing helpers (a forkserver the local
backend's tests start), which end with it.

The whole run checks its daemons when it ends, after it has stopped the services it recorded
(tests/run_services.py): :func:`daemons_left` finds every process of :data:`DAEMONS` that belongs to the
run (its environment names the run's directory, which every process the run starts inherits, or it
names a service directory the run recorded: a daemon that rewrote its environment, as Redis and
PostgreSQL's workers do, still works there) and whose name, working directory and command line did not
run before the run (:func:`daemons_running`, noted when the run began). So a daemon that ran before
and that a test restarted (the fault suite's slurmctld) is not counted, nor are other runs' daemons.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

import psutil

from harness import local_airflow

SERVICES = frozenset({"postgres", "slurmctld", "slurmd", "slurmdbd", "slurmstepd", "munged", "mariadbd", "mysqld"})
# What the run checks when it ends, by process name: the services, the Redis of the Celery tests, the
# Docker engine of tests/deploy, the browser of tests/ui; and moto's server, a Python, by its command.
# Not slurmstepd: a job's step works in the cluster's directory whichever run's job it is (and has
# rewritten its environment); a test cancels its jobs.
DAEMONS = (SERVICES - {"slurmstepd"}) | {
    "redis-server",
    "dockerd",
    "containerd",
    "containerd-shim-runc-v2",
    "docker-proxy",
    "chromium",
    "chrome",
}
MOTO_SERVER = "moto.server"  # python -m moto.server

DaemonIdentity = tuple[str, str, tuple[str, ...]]  # name, working directory, command line


def _helper_of_ours(process: psutil.Process) -> bool:
    """A multiprocessing forkserver or resource tracker of this process: it ends when this process does."""
    command = process.cmdline()
    if process.ppid() != os.getpid() or "-c" not in command[:-1]:
        return False
    return command[command.index("-c") + 1].startswith("from multiprocessing.")  # after flags such as -B


def processes_under(root: Path) -> list[psutil.Process]:
    """The live processes that name ``root`` (see ``local_airflow.processes_under``), services aside."""
    found = []
    for process in local_airflow.processes_under(root):
        with contextlib.suppress(psutil.Error):
            if process.name() not in SERVICES and not _helper_of_ours(process):
                found.append(process)
    return found


def describe(process: psutil.Process) -> str:
    try:
        with process.oneshot():
            home = process.environ().get("AIRFLOW_HOME", "-")
            command = " ".join(process.cmdline()).strip()
            return f"pid {process.pid} (ppid {process.ppid()}, AIRFLOW_HOME {home}): {command}"
    except psutil.Error:
        return f"pid {process.pid} (gone)"


def _still_running(find: Callable[[], list[psutil.Process]], grace_s: float) -> list[psutil.Process]:
    """What ``find`` still finds after ``grace_s`` (cancelled SLURM jobs take a few seconds to end)."""
    deadline = time.monotonic() + grace_s
    while True:
        found = find()
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def leftovers(root: Path, grace_s: float = 15.0) -> list[psutil.Process]:
    """What still runs under ``root`` after ``grace_s``."""
    return _still_running(lambda: processes_under(root), grace_s)


def _identity(process: psutil.Process) -> DaemonIdentity | None:
    """A daemon's name, working directory and command line; None for a process of another kind."""
    with process.oneshot():
        name, command = process.name(), tuple(process.cmdline())
        if name not in DAEMONS and not any(MOTO_SERVER in part for part in command):
            return None
        return name, process.cwd(), command


def daemons_running() -> frozenset[DaemonIdentity]:
    """Every daemon that runs now, as :func:`daemons_left` compares them (noted when a run begins)."""
    found = set()
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            identity = _identity(process)
            if identity is not None:
                found.add(identity)
    return frozenset(found)


def _daemons_of(roots: Iterable[Path], before: Collection[DaemonIdentity]) -> list[psutil.Process]:
    found: dict[int, psutil.Process] = {}
    for root in roots:
        for process in local_airflow.processes_under(root):
            with contextlib.suppress(psutil.Error):
                identity = _identity(process)
                if identity is not None and identity not in before:
                    found[process.pid] = process
    return sorted(found.values(), key=lambda process: process.pid)


def daemons_left(
    before: Collection[DaemonIdentity], roots: Iterable[Path], grace_s: float = 5.0
) -> list[psutil.Process]:
    """The daemons that name one of ``roots`` (the run's directory, the service directories it recorded) and
    did not run ``before``, still running after ``grace_s``."""
    roots = list(roots)
    return _still_running(lambda: _daemons_of(roots, before), grace_s)


def kill(processes: list[psutil.Process], term_grace_s: float = 0.0) -> None:
    """SIGKILL the processes, and reap them; SIGTERM first and up to ``term_grace_s`` to end (a daemon's)."""
    if term_grace_s > 0:
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.terminate()
        _, processes = psutil.wait_procs(processes, timeout=term_grace_s)
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(processes, timeout=10)

"""Processes a test session left running: checked when the session ends (tests/conftest.py).

A process belongs to the session when its environment, working directory, command line or
open files point into the session's temporary directory (``tmp_path_factory.getbasetemp()``): every
Airflow the tests start has its ``AIRFLOW_HOME`` there, moto runs there, the agora workers'
job directories are there. Under pytest-xdist each worker has a directory of its own
(``.../popen-gw0``), so a worker sees its own processes only, not its neighbour's, nor another
session's. The shared services (PostgreSQL, the SLURM and munge daemons, MariaDB), started once
per machine by scripts, are never counted, whatever their environment; nor this process's own
multiprocessing helpers (a forkserver the local backend's tests start), which end with it.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import psutil

from harness import local_airflow

SERVICES = frozenset({"postgres", "slurmctld", "slurmd", "slurmdbd", "slurmstepd", "munged", "mariadbd", "mysqld"})


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


def leftovers(root: Path, grace_s: float = 15.0) -> list[psutil.Process]:
    """What still runs under ``root`` after ``grace_s`` (cancelled SLURM jobs take a few seconds to end)."""
    deadline = time.monotonic() + grace_s
    while True:
        found = processes_under(root)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def kill(processes: list[psutil.Process]) -> None:
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(processes, timeout=10)

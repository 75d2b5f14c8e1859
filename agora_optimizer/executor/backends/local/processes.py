"""The local pools' worker processes: the warm fork server, a worker in a session of its own, signals,
and what a worker that has exited says.

Workers start warm: a fork server (one per scheduler, started with the executor) forks them after
importing Airflow's task path and freezing the garbage collector (:func:`warm_up`), as the
LocalExecutor forks its workers from a scheduler that has Airflow loaded (:func:`start_worker`; a
command that is not the agora worker gets an interpreter of its own). Each worker runs in its
own session (:func:`run_worker`), so it survives a scheduler restart; what a dead worker leaves in
its session is killed (:func:`kill_orphans`). Once it has exited (:func:`worker_exit_code`), its
result file gives the job's status (:func:`ended_status`). The pools' bookkeeping is
:mod:`~agora_optimizer.executor.backends.local.backend`.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from multiprocessing.process import BaseProcess
from pathlib import Path

import psutil

from agora_optimizer.executor.backends.base import WORKER_MODULE
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec, JobStatus, read_result
from agora_optimizer.executor.state_files import open_log
from agora_optimizer.executor.worker.environment import is_scheduler_secret, job_environment

# What the pool's fork server imports once: the main script (which multiprocessing would otherwise
# run again in every worker it starts), then the fork_server module, which calls warm_up().
FORK_PRELOAD = ["__main__", "agora_optimizer.executor.backends.local.fork_server"]
# What the agora worker, Airflow's supervisor (execute_workload) and the task process import after
# they start unless their fork server has: ~0.5 s of CPU per task (-X importtime in a task showed
# what; base_executor is ~0.3 s, the DAG bag ~0.2 s).
WARM_MODULES = (
    f"{WORKER_MODULE}.worker",  # the module that holds main(), not only its package
    "airflow.executors.workloads",
    "airflow.sdk.execution_time.execute_workload",
    "airflow.sdk.execution_time.supervisor",
    "airflow.executors.base_executor",  # execute_workload runs the task with BaseExecutor.run_workload
    "airflow.sdk.execution_time.task_runner",
    "airflow.dag_processing.dagbag",  # the task process parses its DAG file with a BundleDagBag
    "airflow.providers.standard.decorators.python",  # @task and the PythonOperator, what most tasks are
    "agora_optimizer.plugin",  # the trace listener, which Airflow's plugins load in the task
    "agora_optimizer.integration.policy",  # the cluster policy, which runs as the task parses its DAG
    "agora_optimizer.traces.store",  # where the listener writes its row
)


def warm_up(modules: Sequence[str] = WARM_MODULES) -> list[str]:
    """Import ``modules``, then freeze the garbage collector; returns the modules that failed to import.

    The fork server does this once (:mod:`~agora_optimizer.executor.backends.local.fork_server`), as
    the LocalExecutor's workers inherit a scheduler that has Airflow loaded and the collector
    frozen (``gc.freeze`` before it forks them): a task then neither imports the task path
    again nor scans, and so copies, the objects it inherited. A module that fails is left to
    the task, whose log then shows the error.
    """
    failed: list[str] = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the fork server must start even when an optional provider is broken
            print(f"agora fork server: cannot preload {name}: {exc}", file=sys.stderr)
            failed.append(name)
    gc.freeze()
    return failed


def fork_context() -> multiprocessing.context.ForkServerContext:
    """The fork server the pools start their workers from (one per scheduler process)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(FORK_PRELOAD)
    return context


def warm_start(job: JobSpec) -> BaseProcess:
    """Run the agora worker of ``job`` in a child of the pool's fork server."""
    process = fork_context().Process(
        target=run_worker,
        args=(list(job.command[3:]), str(job.log_path), str(job.job_dir), dict(job.environment)),
        name=f"agora-worker-{job.key}",
        daemon=False,
    )
    process.start()
    return process


def start_worker(job: JobSpec, warm: bool) -> subprocess.Popen[bytes] | BaseProcess:
    """Start the worker of ``job`` in a session of its own: from the fork server when ``warm`` and the
    command is the agora worker's, else as a new process. Raises OSError."""
    if warm and tuple(job.command[1:3]) == ("-m", WORKER_MODULE):
        return warm_start(job)
    with os.fdopen(open_log(job.log_path), "ab") as log:  # never through a planted symlink
        return subprocess.Popen(
            list(job.command),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=job_environment({**os.environ, **job.environment}),  # no scheduler secret
            cwd=job.job_dir,
        )


def run_worker(argv: list[str], log_path: str, cwd: str, environment: dict[str, str]) -> None:
    """In the forked child: a session of its own, the job's log and environment, then the worker."""
    code = 1
    try:
        os.setsid()
        log = open_log(Path(log_path))
        os.dup2(log, 1)
        os.dup2(log, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.chdir(cwd)
        for name in [name for name in os.environ if is_scheduler_secret(name)]:  # the fork server's, inherited
            del os.environ[name]
        os.environ.update(job_environment(environment))
        from agora_optimizer.executor.worker import worker

        code = worker.main(argv)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            os.fsync(1)
        os._exit(code)


def kill_orphans(session: int) -> int:
    """SIGKILL the processes left in the dead worker's session (``session`` is its pid); returns how many.

    The whole session, not the worker's process group: Airflow's supervisor puts the task process
    in a group of its own. Linux does not reuse a pid while it names a live session or group, so
    the session is still the worker's while any member lives; a process that got the pid since
    would lead a session of its own, and is then left alone.
    """
    if is_live(session):
        return 0
    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if process.pid != session and os.getsid(process.pid) == session:
                members.append(process)
    for process in members:
        with contextlib.suppress(psutil.Error):
            process.kill()
    return len(members)


def is_live(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def signal_group(pid: int, create_time: float, sig: int) -> None:
    try:
        if abs(psutil.Process(pid).create_time() - create_time) > 0.01:
            return  # the pid now belongs to another process
        os.killpg(pid, sig)
    except (psutil.Error, OSError):
        pass


def worker_exit_code(process: subprocess.Popen[bytes] | BaseProcess | None, pid: int, create_time: float) -> int | None:
    """The worker's exit code once it has ended, None while it runs (a worker adopted from an earlier
    scheduler, with no ``process``: 0, the result file tells the rest)."""
    if isinstance(process, subprocess.Popen):
        return process.poll()
    if process is not None:
        return process.exitcode
    try:
        found = psutil.Process(pid)
        if abs(found.create_time() - create_time) > 0.01 or found.status() == psutil.STATUS_ZOMBIE:
            return 0
        return None
    except psutil.Error:
        return 0


def ended_status(job_dir: Path, pid: int, exit_code: int, queued_at: datetime) -> JobStatus:
    """The status of the job whose worker (``pid``) exited with ``exit_code``: its result file's, else
    how the worker died (and what it left running in its session is killed)."""
    try:
        result = read_result(job_dir / "result.json")
    except BackendError as exc:
        return JobStatus("finished", exit_code=exit_code or 1, reason=exc.reason, queued_at=queued_at)
    if result is None:
        # The worker died (kill -9, a crash) with its task possibly still running: stop what is left
        # of its session, so that Airflow's retry never runs beside an orphaned copy.
        left = kill_orphans(pid)
        how = f"killed by {signal.Signals(-exit_code).name}" if exit_code < 0 else f"exited {exit_code}"
        orphans = f"; agora killed the {left} processes it left running" if left else ""
        return JobStatus(
            "finished",
            exit_code=128 - exit_code if exit_code < 0 else exit_code or 1,
            reason=f"the agora worker was {how} before it wrote a result{orphans}; see {job_dir / 'worker.log'}",
            queued_at=queued_at,
        )
    return replace(result.status(), queued_at=queued_at)

"""The agora worker: runs one task attempt on whatever machine a backend chose.

``python -m agora_optimizer.executor.worker --job-dir DIR [--memory-bytes N]
[--cpu-set 0,1] [--time-limit-s T] [--workload-url URL] [--result-url URL] [-- COMMAND ...]``

Without a command it runs Airflow's own entry, ``execute_workload --json-path
DIR/workload.json``, in a forked child (the file is read at start, so the executor may
refresh the workload's token while a job waits in a queue; forking lets a warm process
that has Airflow loaded skip the import). It then watches the task: Airflow's supervisor forks one task process, and the
worker follows that process and its descendants with
:class:`~agora_optimizer.traces.sampler.ProcessTreeSampler` (the same measure the trace
listener records; the worker sets ``$AGORA_SAMPLED_BY_WORKER`` for the task, so that the
listener leaves the sampling to it and the executor's trace row carries the worker's
measure). With an explicit command (tests, benchmarks) it follows the command's whole tree.

- Memory: when the followed tree's resident memory exceeds ``--memory-bytes`` the worker
  kills it with SIGKILL, as a kernel cgroup would, and records ``oom_killed``; Airflow's
  supervisor then fails the task (or schedules its retry) through the Execution API.
- CPU: ``--cpu-set`` pins the worker and so every process it starts (``sched_setaffinity``).
- Time: past ``--time-limit-s`` the tree gets SIGTERM, then SIGKILL after a grace period.
- SIGTERM or SIGINT to the worker (a cancel, ``scancel``) is passed on to the tree.
- On spot capacity (``$AGORA_SPOT``), a SIGTERM first stops Airflow's supervisor where it stands and asks
  the platform whether the job was preempted (:mod:`~agora_optimizer.executor.worker.preemption`): if so, the
  tree is killed before the supervisor can report the task's failure (the try stays running in Airflow
  and the executor re-runs it on the fallback; the result's reason starts with ``preempted``), else the
  supervisor goes on and the SIGTERM is handled as above.

A task that begins and ends between two looks (a tiny task on a busy machine) is measured by the
kernel instead: the command's tree's largest peak RSS and its CPU time, once the command is reaped.

The moment the followed task process has exited, the worker writes ``DIR/task-ended``
(:data:`~agora_optimizer.executor.jobs.spec.TASK_ENDED_MARK`, the time in it): Airflow's supervisor
goes on reporting to the API server for up to seconds, and a local pool frees the task's cores
and memory from the mark, not from the worker's exit.

When the command has ended, the worker writes ``DIR/result.json`` (see
:class:`~agora_optimizer.executor.jobs.spec.JobResult`) and exits with the command's exit code,
or 137 after an OOM kill. ``execute_workload`` exits 0 even when the task failed: the
task's own state lives in Airflow; the exit code speaks only of the process.

Where DIR is not the scheduler's (an AWS Batch container), ``--workload-url`` names the
``s3://`` object to download into ``DIR/workload.json`` first, and ``--result-url`` the one
to upload ``result.json`` to at the end (:mod:`~agora_optimizer.executor.worker.remote_files`;
boto3 is imported only then). A workload that cannot be fetched gives a result with exit
code 1 and the reason, uploaded all the same.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import psutil

from agora_optimizer.executor.jobs.spec import OOM_EXIT_CODE, TASK_ENDED_MARK, BackendError, JobResult
from agora_optimizer.executor.state_files import open_log, write_private
from agora_optimizer.executor.worker.preemption import probe_for
from agora_optimizer.traces.sampler import (
    SAMPLED_BY_WORKER_ENV,
    ProcessTreeSampler,
    Sample,
    SamplerError,
    child_pids,
)

POLL_S = 0.1
KILL_GRACE_S = 10.0


class _ForkedSupervisor:
    """Airflow's ``execute_workload`` in a forked child of this process (a Popen look-alike).

    Forking instead of starting a new interpreter saves the Airflow import (seconds of CPU)
    whenever this process already has Airflow loaded, as a pool's warm fork server does.
    """

    def __init__(self, workload_path: Path, log_handle: int) -> None:
        self.returncode: int | None = None
        pid = os.fork()
        if pid == 0:  # the child: become execute_workload, never return into the worker's code
            code = 1
            try:
                os.dup2(log_handle, 1)
                os.dup2(log_handle, 2)
                os.environ[SAMPLED_BY_WORKER_ENV] = "1"
                sys.argv = ["execute_workload", "--json-path", str(workload_path)]
                from airflow.sdk.execution_time.execute_workload import main as execute_workload

                execute_workload()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self.pid = pid

    def poll(self) -> int | None:
        if self.returncode is None:
            waited, status = os.waitpid(self.pid, os.WNOHANG)
            if waited == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class _Watch:
    """Runs the command and follows the process tree that holds the task's memory."""

    def __init__(self, command: Sequence[str] | Path, *, log_handle: int) -> None:
        self.follow_children = isinstance(command, Path)
        self.process: subprocess.Popen[bytes] | _ForkedSupervisor
        if isinstance(command, Path):
            self.process = _ForkedSupervisor(command, log_handle)
        else:
            self.process = subprocess.Popen(
                list(command),
                stdout=log_handle,
                stderr=subprocess.STDOUT,
                env={**os.environ, SAMPLED_BY_WORKER_ENV: "1"},
            )
        self.sampler: ProcessTreeSampler | None = None
        self.task_pid: int | None = None
        self._task: psutil.Process | None = None

    def attach(self) -> None:
        """Start following the task tree once it exists (Airflow's supervisor forks it late)."""
        if self.sampler is not None:
            return
        pid = self.process.pid
        if self.follow_children:
            children = child_pids(pid)  # ten times a second until the task exists: /proc reads, not a scan
            if not children:
                return
            pid = children[0]
        try:  # the followed process was started for the task: its whole peak (VmHWM) is the task's
            self.sampler = ProcessTreeSampler(pid, interval_s=POLL_S, root_high_water=True).start()
            self.task_pid = pid
        except SamplerError:
            return
        with contextlib.suppress(psutil.Error):
            self._task = psutil.Process(pid)

    def task_exited(self) -> bool:
        """The followed task process has exited (a zombie its supervisor has yet to reap counts as exited)."""
        if self._task is None:
            return False
        try:
            return not self._task.is_running() or self._task.status() == psutil.STATUS_ZOMBIE
        except psutil.Error:
            return True

    def peak_rss_bytes(self) -> int:
        return 0 if self.sampler is None else self.sampler.peak_rss_bytes

    def kill_task(self, sig: int) -> None:
        """Signal the followed tree (or the whole group before the task exists)."""
        targets: list[psutil.Process] = []
        root = self.task_pid if self.task_pid is not None else self.process.pid
        try:
            parent = psutil.Process(root)
            targets = [parent, *parent.children(recursive=True)]
        except psutil.Error:
            pass
        for process in targets:
            try:
                process.send_signal(sig)
            except psutil.Error:
                continue

    def hold(self) -> None:
        """Stop the command's root where it stands: Airflow's supervisor, the one process that reports to Airflow."""
        with contextlib.suppress(OSError):
            os.kill(self.process.pid, signal.SIGSTOP)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.process.pid, signal.SIGCONT)

    def kill_all(self, sig: int) -> None:
        """Signal the command and everything under it (not the worker itself)."""
        try:
            parent = psutil.Process(self.process.pid)
            targets = [parent, *parent.children(recursive=True)]
        except psutil.Error:
            return
        for process in targets:
            with contextlib.suppress(psutil.Error):
                process.send_signal(sig)

    def finish(self) -> Sample | None:
        return None if self.sampler is None else self.sampler.stop()


def run(
    command: Sequence[str] | None,
    job_dir: Path,
    *,
    memory_bytes: int | None,
    time_limit_s: float | None,
) -> JobResult:
    """Run ``command`` under the limits and return what happened (the caller writes it)."""
    started_at = datetime.now(UTC)
    job_dir.mkdir(parents=True, exist_ok=True)
    stopping: list[int] = []
    probe = probe_for(os.environ)  # None unless the job is on spot capacity of a platform that can tell
    watching: list[_Watch] = []
    held: list[int] = []

    def _on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)
        if probe is not None and signum == signal.SIGTERM and watching and not held:
            watching[0].hold()  # before the task's failure (its shell child got the SIGTERM too) reaches Airflow
            held.append(signum)

    log_path = job_dir / "task.log"
    try:
        log_fd = open_log(log_path)  # never through a symlink someone planted in a shared job directory
    except OSError as exc:
        return _not_started(f"agora worker cannot open its log {log_path}: {exc.strerror or exc}", memory_bytes)
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    oom_killed = timed_out = preempted = decided = False
    reason = ""
    deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
    kill_at: float | None = None
    ended_marked = False
    try:
        watch = _Watch(job_dir / "workload.json" if command is None else command, log_handle=log_fd)
        watching.append(watch)
        while watch.process.poll() is None:
            watch.attach()
            if not ended_marked and watch.task_exited():
                ended_marked = _mark_task_ended(job_dir)
            peak = watch.peak_rss_bytes()
            now = time.monotonic()
            if held and not decided and probe is not None:
                decided = True
                preempted_by = probe()
                if preempted_by:  # Airflow hears nothing: its try is still running, the executor re-runs it
                    preempted = True
                    reason = f"preempted: {preempted_by}; the task was stopped before it reported to Airflow"
                    watch.kill_all(signal.SIGKILL)
                    kill_at = now
                else:  # a cancel or a time limit: the supervisor goes on, and the SIGTERM is handled as ever
                    watch.release()
            if preempted:
                pass  # killed already: no other reason applies
            elif memory_bytes is not None and peak > memory_bytes and not oom_killed:
                oom_killed = True
                reason = f"out of memory: peak RSS {peak} bytes > limit {memory_bytes} bytes; killed"
                watch.kill_task(signal.SIGKILL)
                kill_at = now + KILL_GRACE_S
            elif deadline is not None and now > deadline and not timed_out and not oom_killed:
                timed_out = True
                reason = f"time limit of {time_limit_s:g} s exceeded; terminated"
                watch.kill_task(signal.SIGTERM)
                kill_at = now + KILL_GRACE_S
            elif stopping and kill_at is None:
                reason = f"cancelled by signal {signal.Signals(stopping[0]).name}"
                watch.kill_all(signal.SIGTERM)
                kill_at = now + KILL_GRACE_S
            if kill_at is not None and now > kill_at:
                watch.kill_all(signal.SIGKILL)
            time.sleep(POLL_S)
        if not ended_marked:
            _mark_task_ended(job_dir)
        sample = watch.finish() or _reaped_tree_usage()
        returncode = watch.process.returncode if watch.process.returncode is not None else 1
    finally:
        os.close(log_fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopping and not (oom_killed or timed_out or preempted):
        reason = f"cancelled by signal {signal.Signals(stopping[0]).name}"
    if returncode < 0 and not reason:
        reason = f"killed by signal {signal.Signals(-returncode).name}"
    elif returncode > 0 and not reason:
        reason = f"exited with code {returncode}"
    exit_code = OOM_EXIT_CODE if oom_killed else (128 - returncode if returncode < 0 else returncode)
    if preempted:
        exit_code = 128 + signal.SIGTERM  # as SLURM's own record of a preempted job says
    elif stopping and exit_code == 0:
        exit_code = 128 + stopping[0]
    return JobResult(
        exit_code=exit_code,
        oom_killed=oom_killed,
        timed_out=timed_out,
        reason=reason,
        host=socket.gethostname(),
        started_at=started_at,
        ended_at=datetime.now(UTC),
        peak_rss_bytes=0 if sample is None else sample.peak_rss_bytes,
        cpu_time_s=0.0 if sample is None else round(sample.cpu_time_s, 3),
        memory_limit_bytes=memory_bytes,
    )


def _reaped_tree_usage() -> Sample:
    """The measure of a task the worker never saw (it began and ended between two polls): the kernel's.

    Once the command is reaped, ``getrusage(RUSAGE_CHILDREN)`` holds its whole tree (each process
    waited for by its parent): the largest process's peak RSS (the supervisor's or the task's, one
    forked from the other) and all their CPU time. A forked child starts from zero, so in the
    worker this is the one command's tree.
    """
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Sample(
        peak_rss_bytes=usage.ru_maxrss * 1024,  # kibibytes on Linux
        cpu_time_s=usage.ru_utime + usage.ru_stime,
        wall_s=0.0,
        samples=0,
        processes_seen=0,
    )


def _mark_task_ended(job_dir: Path) -> bool:
    """Write ``DIR/task-ended`` with the moment; a directory that refuses it leaves the exit as the end."""
    try:
        write_private(job_dir / TASK_ENDED_MARK, datetime.now(UTC).isoformat())
    except OSError:
        return False
    return True


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    command: list[str] = []
    if "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(prog="python -m agora_optimizer.executor.worker", description=__doc__)
    parser.add_argument(
        "--job-dir", type=Path, required=True, help="where workload.json is read and result.json written"
    )
    parser.add_argument("--memory-bytes", type=int, default=None, help="kill the task above this resident memory")
    parser.add_argument("--cpu-set", default="", help="comma-separated CPU ids to pin the task to")
    parser.add_argument("--time-limit-s", type=float, default=None, help="terminate the task after this long")
    parser.add_argument("--workload-url", default="", help="s3:// URL to download DIR/workload.json from first")
    parser.add_argument("--result-url", default="", help="s3:// URL to upload DIR/result.json to at the end")
    return parser.parse_args(argv), command


def _not_started(reason: str, memory_bytes: int | None) -> JobResult:
    """The result of a task that could not start (its workload could not be fetched)."""
    now = datetime.now(UTC)
    return JobResult(
        exit_code=1,
        oom_killed=False,
        timed_out=False,
        reason=reason,
        host=socket.gethostname(),
        started_at=now,
        ended_at=now,
        peak_rss_bytes=0,
        cpu_time_s=0.0,
        memory_limit_bytes=memory_bytes,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args, command = _parse(sys.argv[1:] if argv is None else argv)
    if args.memory_bytes is not None and args.memory_bytes <= 0:
        print(f"agora worker: --memory-bytes must be > 0, got {args.memory_bytes}", file=sys.stderr)
        return 2
    if args.cpu_set:
        try:
            cpus = {int(cpu) for cpu in args.cpu_set.split(",")}
            os.sched_setaffinity(0, cpus)
        except (ValueError, OSError) as exc:
            print(f"agora worker: cannot pin to CPUs {args.cpu_set!r}: {exc}", file=sys.stderr)
            return 2
    with contextlib.suppress(OSError):
        os.setsid()  # one process group for the whole job: a cancel reaches every process of it
    files = None
    if args.workload_url or args.result_url:
        from agora_optimizer.executor.worker.remote_files import RemoteFiles

        try:
            files = RemoteFiles.from_environment()
        except BackendError as exc:
            print(f"agora worker: {exc}", file=sys.stderr)
            return 2
    result: JobResult | None = None
    if files is not None and args.workload_url:
        args.job_dir.mkdir(parents=True, exist_ok=True)
        try:
            files.download(args.workload_url, args.job_dir / "workload.json")
        except BackendError as exc:
            result = _not_started(f"agora worker could not fetch its workload: {exc}", args.memory_bytes)
            print(result.reason, file=sys.stderr)  # the container's log: CloudWatch on Batch
    if result is None:
        result = run(
            command or None,
            args.job_dir,
            memory_bytes=args.memory_bytes,
            time_limit_s=args.time_limit_s,
        )
    result.write(args.job_dir / "result.json")
    if files is not None and args.result_url:
        try:
            files.upload(args.job_dir / "result.json", args.result_url)
        except BackendError as exc:  # the backend then reports from its own records
            print(f"agora worker: cannot return the result: {exc}", file=sys.stderr)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())

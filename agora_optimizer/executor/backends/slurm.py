"""SLURM: each task attempt is one batch job in its resource's partition, or one task of a pilot.

A catalog resource with ``backend: slurm`` names its partition (``partition: compute``).
:meth:`SlurmBackend.submit` writes ``JOB_DIR/job.sbatch``, which ``exec``\\ s the agora worker,
and submits it with ``sbatch`` with the task's cores (``--cpus-per-task``), memory
(``--mem``, MiB rounded up) and time limit (``--time``: the task's limit plus
``time_grace_s``, rounded up to minutes; none: the partition's default), named
``agora-<key>``, running in the job directory (``--chdir``), its output in
``JOB_DIR/slurm-<id>.log``. ``--export`` names a few variables of this process (``PATH``,
``HOME`` ...) and the job's own environment, whose values sbatch takes from its own
environment (never from its command line, where a comma would split a value).

External ids: ``"<slurm job id>"`` for a job of its own, ``"<slurm job id>+<index>"`` for the
index-th task of a pilot.

Status: one ``squeue --states=all`` for every id asked about (pending and running jobs, and
those SLURM has ended within ``MinJobAge``), then one ``sacct`` for the ids squeue no longer
shows and the ended ones without a result file. The worker's ``result.json`` is authoritative
for exit code, OOM kill, peak RSS and CPU time; SLURM's own records give the state, the node
and the submit, start and end times. ``OUT_OF_MEMORY`` means ``oom_killed``; ``TIMEOUT``,
``CANCELLED``, ``NODE_FAIL`` and ``FAILED`` finish with a nonzero exit code and a reason; an id
neither squeue nor sacct knows is ``lost``. An error reaching SLURM raises a transient
:class:`~agora_optimizer.executor.jobs.BackendError` (every command has a timeout, so nothing hangs).

Adoption: the backend keeps no state that a new instance needs. It finds a job's directory
from SLURM's record of it (``WorkDir``, squeue's or sacct's, which is the job directory
because of ``--chdir``; a pilot's is the pilot directory, whose ``pilot.json`` lists its
tasks' job directories). :meth:`SlurmBackend.adopt` takes the directory as a hint too, which
is used first and also lets a result file be read once SLURM has forgotten the job.

Pilot mode (``pilot_max_tasks`` >= 2), in the spirit of Balsam's pilot jobs: a job with a time
limit of at most ``pilot_max_time_limit_s`` is not submitted alone but gathered with the other
such jobs of its partition into one allocation, whose script runs all their commands at once,
each in its own job directory, each writing its own ``result.json``.

- The first job of a gathering opens a pilot: a directory (under ``pilot_root``, by default
  beside the first job's directory) and an ``sbatch --hold`` job, so its SLURM id exists from
  the start and a refusal reaches the ``submit`` that caused it.
- Each further job is appended to the pilot's task list and the held job's request grows
  with ``scontrol update``: cores and memory are summed (the tasks run at once, no waves).
  The time limit is the longest task's. A job joins only while the sum still fits the
  partition's largest node (``sinfo``, asked once per partition) and the pilot is younger
  than ``pilot_window_s``; otherwise the open pilot is closed and a new one opened.
- A pilot is closed and released (``scontrol release``) when it holds ``pilot_max_tasks``
  tasks, or by :meth:`SlurmBackend.status` (which the executor calls every heartbeat, so it
  doubles as the poll that ends windows) once its window has passed; :meth:`SlurmBackend.flush`
  does the same on demand (``force=True`` at shutdown closes every open pilot).
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

Planned machines (:meth:`SlurmBackend.open_lease`): a plan's machine ``TYPE#N`` is one
allocation sized as its type (its vcpus and memory, in its catalog resource's partition), run
by the same driver as a pilot, in a directory named by the lease key (under ``lease_root``).
It starts empty; each task ``submit`` hands it (a ``JobSpec`` whose ``lease`` is it) becomes
its next ``task.I.sh``, and the driver runs them in that order, several at once while their
cores and memory fit the machine. :meth:`SlurmBackend.close_lease` writes ``closed``: the driver
ends once its running tasks have, and SLURM releases the allocation, whose Start and End in
accounting :meth:`SlurmBackend.finished_leases` reports. A partition that is not up, or has
no node that can run, or an sbatch SLURM refuses, is a BackendError from ``open_lease``. A
restarted scheduler takes an open allocation over by its job name (``agora-<lease key>``).
A driver that saw no task for ``lease_idle_s`` ends by itself (its scheduler may be gone); a
task handed over after that goes to a new allocation of the machine.

Files: ``JOB_DIR/job.sbatch``; in a pilot or lease directory ``pilot.json`` (tasks, window,
the lease), ``pilot.sbatch`` (the driver), ``task.I.sh`` (one ``run_task`` line per task, mode
0600 as it carries the task's environment), ``slot.I`` (index I claimed, by agora before it
writes ``task.I.sh`` or by the driver to end), and ``pid.I``, ``exit.I``, ``cancel.I``,
``skipped.I`` per task.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from agora_optimizer.errors import FieldError
from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.environment import is_scheduler_secret, job_environment
from agora_optimizer.executor.jobs import (
    OOM_EXIT_CODE,
    BackendError,
    JobPhase,
    JobResult,
    JobSpec,
    JobStatus,
    MachineLease,
    read_result,
    read_task_ended,
)
from agora_optimizer.executor.state_files import write_private
from agora_optimizer.model.catalog import Resource
from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.slurm.errors import SlurmOutputError
from agora_optimizer.slurm.values import memory_bytes as parse_memory
from agora_optimizer.slurm.values import time_limit_s as parse_time_limit

if TYPE_CHECKING:
    from agora_optimizer.queue_wait.submissions import SubmissionLog

log = logging.getLogger(__name__)

BACKEND = "slurm"
MIB = 2**20
JOB_NAME_MAX = 96
PILOT_FORMAT = "agora-slurm-pilot/1"
PILOT_SEPARATOR = "+"
DEFAULT_EXPORT: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "VIRTUAL_ENV",
    "PYTHONPATH",
)
APPEND_MARGIN_S = 1.0  # the gathering instance stops appending this long before a window ends
ADOPTED_RELEASE_GRACE_S = 5.0  # another instance releases a held pilot this long after its window
IDS_PER_CALL = 400  # squeue / sacct --jobs per command line
CANCEL_EXIT = 143  # 128 + SIGTERM
LEASE_IDLE_S = 120.0  # a lease's allocation with no task for this long ends (its scheduler may be gone, and it bills)
LEAD_SAMPLES = 20  # an allocation's predicted queue wait: the median of its partition's last this many
REMEMBER_MAX = 10_000  # job and pilot directories a backend remembers; the oldest are found again from SLURM

# SLURM job states that are not final, as the executor sees them.
_ACTIVE_PHASES: Mapping[str, JobPhase] = {
    "PENDING": "pending",
    "CONFIGURING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_HOLD": "pending",
    "REQUEUE_FED": "pending",
    "RESV_DEL_HOLD": "pending",
    "RUNNING": "running",
    "COMPLETING": "running",
    "SUSPENDED": "running",
    "STOPPED": "running",
    "SIGNALING": "running",
    "STAGE_OUT": "running",
    "RESIZING": "running",
}
# Final states: the exit code to report when SLURM's is 0 or unknown, and what happened.
# A state in neither table is reported as pending, so that it is polled again, not lost.
_FINAL_STATES: Mapping[str, tuple[int, str]] = {
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
# Words in a SLURM client's error that mean "SLURM could not be reached now", not "no".
_TRANSIENT_MARKERS = (
    "unable to contact slurm controller",
    "connection refused",
    "connect failure",
    "socket timed out",
    "timed out",
    "temporarily unavailable",
    "try again",
    "slurm_persist_conn",
    "problem talking to the database",
    "zero bytes were transmitted",
    "communication connection failure",
    "unable to establish",
    "slurmctld is busy",
    "job submit limit",
    "maxsubmitjob",
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_SQUEUE_FIELDS = ("JobID", "State", "Reason", "NodeList", "SubmitTime", "StartTime", "EndTime", "exit_code", "WorkDir")
_SACCT_FIELDS = ("JobID", "State", "ExitCode", "MaxRSS", "Submit", "Start", "End", "NodeList", "Reason", "WorkDir")
_NO_TIME = {"", "N/A", "NONE", "UNKNOWN", "0"}
# sinfo's node states (%t, flags stripped) in which a node runs no new job.
_UNUSABLE_NODE_STATES = frozenset({"down", "drain", "drng", "fail", "failg", "maint", "inval", "npc", "futr"})


# -- SLURM's answers, parsed once ------------------------------------------------------------


@dataclass(frozen=True)
class SlurmRecord:
    """What squeue or sacct says of one job (its allocation, not its steps)."""

    job_id: str
    state: str  # SLURM's word: RUNNING, TIMEOUT, OUT_OF_MEMORY ...
    reason: str = ""
    node: str = ""
    work_dir: Path | None = None
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    exit_code: int | None = None  # a shell's view: the code, or 128 + the signal
    max_rss_bytes: int | None = None
    source: str = "squeue"

    @property
    def final(self) -> bool:
        return self.state in _FINAL_STATES

    @property
    def held(self) -> bool:
        return self.state == "PENDING" and self.reason.startswith("JobHeld")


def parse_squeue(text: str) -> dict[str, SlurmRecord]:
    """``squeue --Format`` with ``|`` after each of :data:`_SQUEUE_FIELDS` (WorkDir last, so it may hold a ``|``)."""
    records: dict[str, SlurmRecord] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.removesuffix("|").split("|", len(_SQUEUE_FIELDS) - 1)
        if len(parts) != len(_SQUEUE_FIELDS):
            log.warning("squeue: skipped a line with %d fields: %r", len(parts), line)
            continue
        job_id, state, reason, node, submit, start, end, status, work_dir = (part.strip() for part in parts)
        records[job_id] = SlurmRecord(
            job_id=job_id,
            state=state.split()[0].upper() if state else "UNKNOWN",
            reason="" if reason in ("None", "(null)") else reason,
            node="" if node in ("(null)", "None assigned") else node,
            work_dir=Path(work_dir) if work_dir.startswith("/") else None,
            submitted_at=_epoch(submit),
            started_at=_epoch(start),
            ended_at=_epoch(end),
            exit_code=_wait_status(status),
        )
    return records


def parse_sacct(text: str) -> dict[str, SlurmRecord]:
    """``sacct --parsable2`` with :data:`_SACCT_FIELDS`: the allocation's row, with the batch step's MaxRSS."""
    rows: dict[str, list[str]] = {}
    rss: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split("|", len(_SACCT_FIELDS) - 1)
        if len(parts) != len(_SACCT_FIELDS):
            continue
        job_id, step = parts[0].partition(".")[::2]
        if step:
            peak = _memory(parts[3])
            if peak is not None:
                rss[job_id] = max(rss.get(job_id, 0), peak)
        else:
            rows[job_id] = parts
    records: dict[str, SlurmRecord] = {}
    for job_id, parts in rows.items():
        _, state, exit_code, max_rss, submit, start, end, node, reason, work_dir = parts
        records[job_id] = SlurmRecord(
            job_id=job_id,
            state=state.split()[0].upper() if state else "UNKNOWN",
            reason="" if reason in ("None", "") else reason,
            node="" if node in ("None assigned", "(null)") else node,
            work_dir=Path(work_dir) if work_dir.startswith("/") else None,
            submitted_at=_epoch(submit),
            started_at=_epoch(start),
            ended_at=_epoch(end),
            exit_code=_exit_code(exit_code),
            max_rss_bytes=rss.get(job_id, _memory(max_rss)),
            source="sacct",
        )
    return records


def _epoch(text: str) -> datetime | None:
    """A time printed with ``SLURM_TIME_FORMAT=%s``."""
    value = text.strip()
    if value.upper() in _NO_TIME or not value.isdigit():
        return None
    return datetime.fromtimestamp(int(value), UTC)


def _wait_status(text: str) -> int | None:
    """squeue's ``exit_code``: the raw wait status (code << 8, or the signal)."""
    if not text.strip().isdigit():
        return None
    status = int(text)
    return 128 + (status & 0x7F) if status & 0x7F else status >> 8


def _exit_code(text: str) -> int | None:
    """sacct's ``ExitCode``: ``code:signal``."""
    code, _, signal = text.partition(":")
    if not code.isdigit():
        return None
    return 128 + int(signal) if signal.isdigit() and int(signal) else int(code)


def _memory(text: str) -> int | None:
    if not text.strip():
        return None
    try:
        return parse_memory(text, "sacct", "MaxRSS", default_unit="K")
    except SlurmOutputError:
        return None


# -- ids, names, scripts ---------------------------------------------------------------------


@dataclass(frozen=True)
class SlurmJobRef:
    """An external id: a SLURM job id, and the task's index when the job is a pilot."""

    job_id: str
    index: int | None = None

    @classmethod
    def parse(cls, external_id: str) -> SlurmJobRef | None:
        job_id, separator, index = external_id.partition(PILOT_SEPARATOR)
        if not job_id.isdigit() or (separator and not index.isdigit()):
            return None
        return cls(job_id, int(index) if separator else None)

    def __str__(self) -> str:
        return self.job_id if self.index is None else f"{self.job_id}{PILOT_SEPARATOR}{self.index}"


def job_name(key: str, prefix: str = "agora-") -> str:
    """``agora-<key>``, cut to :data:`JOB_NAME_MAX` characters with a hash of the key when longer."""
    name = prefix + _UNSAFE.sub("_", key)
    if len(name) <= JOB_NAME_MAX:
        return name
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    return f"{name[: JOB_NAME_MAX - len(digest) - 1]}-{digest}"


def _comment(text: str) -> str:
    return " ".join(text.split())


# The job's end waits for its worker's whole session: a worker killed by a signal (kill -9, a node's
# OOM killer) leaves Airflow's supervisor and the task (in a process group of its own) running, and
# SLURM's linuxproc tracking loses processes whose parent died. The job ends only once they are gone,
# so the retry Airflow starts when the job is reported failed never runs beside them.
REAP_SESSION = 'pkill -KILL -s "$1" 2>/dev/null; while pgrep -s "$1" >/dev/null 2>&1; do sleep 0.2; done'


def single_script(job: JobSpec) -> str:
    return (
        "#!/bin/bash\n"
        f"# agora job {_comment(job.key)}: {_comment(job.label)}\n"
        f"# resource {_comment(job.resource)}; written by agora_optimizer.executor.backends.slurm\n"
        f"reap_session() {{ {REAP_SESSION}; }}\n"
        f"setsid {shlex.join(job.command)} &\n"  # the worker leads a session of its own: its pid is the session id
        "worker=$!\n"
        "trap 'kill -TERM \"$worker\" 2>/dev/null' TERM INT  # a cancel or time limit reaches the worker\n"
        'while :; do wait "$worker"; status=$?; kill -0 "$worker" 2>/dev/null || break; done\n'
        'reap_session "$worker"\n'
        'exit "$status"\n'
    )


PILOT_DRIVER = """#!/bin/bash
# agora allocation driver, written by agora_optimizer.executor.backends.slurm, for a pilot and for a
# planned machine's lease alike. Usage: pilot.sbatch MODE CORES MEMORY_MIB IDLE_S, in the allocation's
# directory (--chdir). It runs task.0.sh, task.1.sh ... (each one run_task line) in that order, each in
# its own job directory, several at once while their cores and memory fit CORES and MEMORY_MIB (0: no
# limit); a task that does not fit yet waits, and so do the ones after it. MODE pilot: every task was
# written before the allocation started, so it is closed from the start. MODE lease: tasks keep coming
# until the file "closed" appears, or none came for IDLE_S seconds. To end, the driver claims the next
# index with mkdir slot.NEXT: agora claims an index the same way before writing its task file, so a task
# is either run here or known by agora never to be. A task is skipped when cancel.INDEX exists before it
# starts, and gets SIGTERM when cancel.INDEX appears while it runs; its exit status goes to exit.INDEX.
# A task's cores and memory are free again once its worker writes JOB_DIR/task-ended (the task process
# has exited; Airflow's supervisor may report for seconds more), or at its exit without that mark.
set -u
mode="${1:-pilot}" free_cores="${2:-0}" free_memory="${3:-0}" idle_s="${4:-0}"
[ "$free_cores" -gt 0 ] || free_cores=1000000000
[ "$free_memory" -gt 0 ] || free_memory=1000000000000
[ "$mode" = pilot ] && : >closed
declare -A running=() cores_of=() memory_of=() dir_of=() freed=()
reap_session() { @REAP_SESSION@; }
run_task() {  # run_task INDEX CORES MEMORY_MIB JOB_DIR COMMAND...; status 1: it does not fit yet
  local index="$1" cores="$2" memory="$3" dir="$4"
  shift 4
  if [ -e "cancel.$index" ]; then : >"skipped.$index"; return 0; fi
  if [ "${#running[@]}" -gt 0 ] && { [ "$cores" -gt "$free_cores" ] || [ "$memory" -gt "$free_memory" ]; }; then
    return 1
  fi
  mkdir -p "$dir"
  (cd "$dir" && exec setsid "$@") >>"$dir/slurm-${SLURM_JOB_ID:-pilot}.log" 2>&1 </dev/null &
  running[$index]=$!
  cores_of[$index]=$cores
  memory_of[$index]=$memory
  dir_of[$index]=$dir
  free_cores=$((free_cores - cores))
  free_memory=$((free_memory - memory))
  echo "$!" >"pid.$index"
}
free_task() {  # free_task INDEX: its cores and memory go back, once
  [ -n "${freed[$1]:-}" ] && return 0
  free_cores=$((free_cores + cores_of[$1]))
  free_memory=$((free_memory + memory_of[$1]))
  freed[$1]=1
}
stopping=0
stop_all() {
  local pid
  stopping=1
  for pid in "${running[@]}"; do kill -TERM "$pid" 2>/dev/null; done
}
trap stop_all TERM INT
next=0
failed=0
idle_since=$SECONDS
while :; do
  for index in "${!running[@]}"; do
    pid="${running[$index]}"
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid"
      status=$?
      reap_session "$pid"  # what a killed worker left (its task) dies before its exit is told
      echo "$status" >"exit.$index"
      [ "$status" = 0 ] || failed=1
      free_task "$index"
      unset "running[$index]" "cores_of[$index]" "memory_of[$index]" "dir_of[$index]" "freed[$index]"
      idle_since=$SECONDS
      continue
    fi
    [ -e "${dir_of[$index]}/task-ended" ] && free_task "$index"
    if [ -e "cancel.$index" ] && [ ! -e "stopped.$index" ]; then
      kill -TERM "$pid" 2>/dev/null
      : >"stopped.$index"
    fi
  done
  while [ "$stopping" = 0 ] && [ -e "task.$next.sh" ] && source "./task.$next.sh"; do
    next=$((next + 1))
    idle_since=$SECONDS
  done
  if [ "${#running[@]}" -eq 0 ] && [ "$stopping" = 1 ]; then break; fi
  if [ "${#running[@]}" -eq 0 ] && [ ! -e "task.$next.sh" ]; then
    if [ -e closed ] || { [ "$idle_s" -gt 0 ] && [ $((SECONDS - idle_since)) -ge "$idle_s" ]; }; then
      mkdir "slot.$next" 2>/dev/null && break  # else agora claimed it: its task file is on its way
    fi
  fi
  sleep 0.5
done
[ "$mode" = pilot ] && exit "$failed"  # a lease's allocation completes: its tasks report their own ends
exit 0
""".replace("@REAP_SESSION@", REAP_SESSION)


@dataclass(frozen=True)
class _PilotTask:
    index: int
    key: str
    label: str
    resource: str
    job_dir: Path
    cores: int
    memory_mib: int
    minutes: int
    line: str  # its run_task line, the whole of its task.INDEX.sh


@dataclass
class _Pilot:
    """An allocation this instance hands tasks to: a pilot it gathers (held in SLURM until closed),
    or a planned machine's lease (``lease`` set: running, its tasks handed over one by one)."""

    partition: str
    directory: Path
    minutes: int  # the time limit it was submitted with; lowered to its longest task's on release
    release_at: float  # epoch seconds: the end of its window
    tasks: list[_PilotTask] = field(default_factory=list)
    job_id: str = ""
    closed: bool = False
    lease: MachineLease | None = None

    def cores(self, tasks: Sequence[_PilotTask] | None = None) -> int:
        return sum(task.cores for task in (self.tasks if tasks is None else tasks))

    def memory_mib(self, tasks: Sequence[_PilotTask] | None = None) -> int:
        return sum(task.memory_mib for task in (self.tasks if tasks is None else tasks))

    def manifest(self, tasks: Sequence[_PilotTask]) -> str:
        return json.dumps(
            {
                "format": PILOT_FORMAT,
                "slurm_job_id": self.job_id,
                "partition": self.partition,
                "release_at": self.release_at,
                "closed": self.closed,
                "lease": None if self.lease is None else _lease_fields(self.lease),
                "tasks": [
                    {
                        "index": task.index,
                        "key": task.key,
                        "label": task.label,
                        "resource": task.resource,
                        "job_dir": str(task.job_dir),
                        "cores": task.cores,
                        "memory_mib": task.memory_mib,
                        "minutes": task.minutes,
                    }
                    for task in tasks
                ],
            },
            indent=1,
        )

    def write(self, tasks: Sequence[_PilotTask]) -> None:
        """The files of the tasks not written yet, and the manifest, each replaced at once.

        ``tasks`` shorter than what was written (an append undone) removes the one task file beyond it."""
        for task in tasks[len(self.tasks) :]:
            write_private(self.directory / f"task.{task.index}.sh", task.line)
        (self.directory / f"task.{len(tasks)}.sh").unlink(missing_ok=True)
        write_private(self.directory / "pilot.json", self.manifest(tasks))


def _lease_fields(lease: MachineLease) -> dict[str, object]:
    return {
        "key": lease.key,
        "dag_id": lease.dag_id,
        "run_id": lease.run_id,
        "machine": lease.machine,
        "resource": lease.resource,
        "cores": lease.cores,
        "memory_bytes": lease.memory_bytes,
        "tasks": lease.tasks,
        "planned_start_s": lease.planned_start_s,
        "planned_end_s": lease.planned_end_s,
    }


@dataclass(frozen=True)
class _Manifest:
    """A pilot's ``pilot.json`` as read back (possibly written by another instance)."""

    directory: Path
    job_dirs: Mapping[int, Path]
    release_at: float
    closed: bool
    partition: str = ""
    job_id: str = ""
    tasks: tuple[_PilotTask, ...] = ()
    lease: MachineLease | None = None  # set for a planned machine's allocation

    @classmethod
    def read(cls, directory: Path) -> _Manifest | None:
        try:
            raw = json.loads((directory / "pilot.json").read_text())
            if raw.get("format") != PILOT_FORMAT:
                return None
            tasks = tuple(
                _PilotTask(
                    int(task["index"]),
                    str(task["key"]),
                    str(task["label"]),
                    str(task["resource"]),
                    Path(task["job_dir"]),
                    int(task["cores"]),
                    int(task["memory_mib"]),
                    int(task["minutes"]),
                    line="",  # written already
                )
                for task in raw["tasks"]
            )
            lease = raw.get("lease")
            return cls(
                directory,
                {task.index: task.job_dir for task in tasks},
                float(raw["release_at"]),
                bool(raw["closed"]),
                partition=str(raw["partition"]),
                job_id=str(raw["slurm_job_id"]),
                tasks=tasks,
                lease=None if lease is None else MachineLease(**lease),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def pilot(self) -> _Pilot:
        """The allocation as this instance's own again (adopted after a scheduler restart)."""
        return _Pilot(
            self.partition,
            self.directory,
            minutes=0,
            release_at=self.release_at,
            tasks=list(self.tasks),
            job_id=self.job_id,
            closed=self.closed,
            lease=self.lease,
        )


@dataclass(frozen=True)
class _Capacity:
    """The largest node of a partition, and the partition's time limit."""

    cpus: int
    memory_mib: int
    max_minutes: int | None


class _NoAnswer(BackendError):
    """A SLURM command did not answer within its timeout (it may have acted)."""


# -- the backend -----------------------------------------------------------------------------


class SlurmBackend(Backend):
    """Runs jobs as SLURM batch jobs, one each or packed into pilots; see the module's docstring."""

    name = BACKEND

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
        """``pilot_max_tasks`` of 0 or 1 turns pilots off; ``time_grace_s`` is added to a task's
        limit for SLURM's, so the worker's own limit ends the task first and writes its result;
        ``submissions`` records the queue each job met and its wait (for the queue-wait model);
        ``remember_max`` bounds the job and pilot directories remembered (the oldest are forgotten
        and found again from SLURM's WorkDir). ``resources`` are the catalog's SLURM resources (a
        planned machine's partition is its type's); a lease's allocation lives in a directory under
        ``lease_root`` (default: the executor's job directory, ``[agora] state_dir``) and ends by
        itself once no task came for ``lease_idle_s`` (a scheduler that died never closes it)."""
        checks: dict[str, tuple[float, bool, str]] = {
            "pilot_max_tasks": (pilot_max_tasks, pilot_max_tasks >= 0, "must be >= 0"),
            "pilot_window_s": (pilot_window_s, 0 <= pilot_window_s < math.inf, "must be >= 0 seconds"),
            "pilot_max_time_limit_s": (
                pilot_max_time_limit_s,
                0 < pilot_max_time_limit_s < math.inf,
                "must be > 0 seconds",
            ),
            "time_grace_s": (time_grace_s, 0 <= time_grace_s < math.inf, "must be >= 0 seconds"),
            "command_timeout_s": (command_timeout_s, 0 < command_timeout_s < math.inf, "must be > 0 seconds"),
            "remember_max": (remember_max, remember_max >= 1, "must be >= 1"),
            "lease_idle_s": (lease_idle_s, 1 <= lease_idle_s < math.inf, "must be >= 1 second"),
        }
        for name, (value, ok, rule) in checks.items():
            if not ok:
                raise FieldError("SlurmBackend", name, f"{rule}, got {value!r}")
        bad = [name for name in export if not _ENV_NAME.match(name)]
        if bad:
            raise FieldError("SlurmBackend", "export", f"not variable names: {bad}")
        self.pilot_max_tasks = pilot_max_tasks
        self.pilot_window_s = pilot_window_s
        self.pilot_max_time_limit_s = pilot_max_time_limit_s
        self.pilot_root = pilot_root
        self.time_grace_s = time_grace_s
        self.command_timeout_s = command_timeout_s
        self.export = tuple(export)
        self.submissions = submissions
        self._job_dirs: BoundedDict[str, Path] = BoundedDict(remember_max)  # external id -> job dir
        self._pilot_dirs: BoundedDict[str, Path] = BoundedDict(remember_max)  # SLURM id of a pilot -> its dir
        self._open: dict[str, _Pilot] = {}  # partition -> the pilot gathering its tasks
        self._capacity: dict[str, _Capacity] = {}
        self._unanswered: set[str] = set()  # job names whose sbatch timed out (the job may exist)
        self.resources: Mapping[str, Resource] = dict(resources or {})
        self.lease_root = lease_root
        self.lease_idle_s = lease_idle_s
        self._leases: dict[str, _Pilot] = {}  # lease key -> the allocation its tasks go to now
        self._released: BoundedDict[str, _Pilot] = BoundedDict(remember_max)  # SLURM id -> released, unreported
        # partition -> the queue waits (submit to start, s) of its last allocations: the lead of the next
        self._allocation_waits: dict[str, deque[float]] = {}
        self._lock = threading.RLock()

    # -- the Backend calls ---------------------------------------------------------------------

    def submit(self, job: JobSpec) -> str:
        partition = job.options.get("partition")
        if not isinstance(partition, str) or not partition:
            raise BackendError(
                self.name,
                f"resource {job.resource!r}: no SLURM partition (set 'partition' in the catalog), "
                f"so {job.label} cannot be submitted",
                transient=False,
            )
        bad = [name for name in job.environment if not _ENV_NAME.match(name)]
        if bad:
            raise BackendError(
                self.name, f"{job.label}: environment names {bad} are not variable names", transient=False
            )
        job = replace(job, environment=job_environment(job.environment))  # never a scheduler secret
        with self._lock:
            if job.lease is not None:
                return self._submit_leased(job, job.lease)
            limit = job.time_limit_s
            if self.pilot_max_tasks >= 2 and limit is not None and limit <= self.pilot_max_time_limit_s:
                return self._submit_packed(job, partition)
            return self._submit_single(job, partition)

    def status(self, external_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        """Each id's status; first closes the pilots whose window has passed (see :meth:`flush`)."""
        with self._lock:
            self.flush()
            report, started = self._status(external_ids)
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
                self._run(["scancel", ref.job_id])
                return
            with self._lock:
                self._cancel_task(ref)
        except BackendError as exc:  # the executor's loop must survive a failed cancel
            log.warning("SLURM: cancelling %s failed: %s", external_id, exc.reason)
        except Exception:  # likewise; SLURM's own time limit stays the backstop
            log.warning("SLURM: cancelling %s failed", external_id, exc_info=True)

    def _status(self, external_ids: Sequence[str]) -> tuple[dict[str, JobStatus], set[str]]:
        """Each id's status, and the SLURM ids of these jobs that have started (for ``submissions``)."""
        refs = {external_id: SlurmJobRef.parse(external_id) for external_id in external_ids}
        slurm_ids = sorted({ref.job_id for ref in refs.values() if ref is not None}, key=int)
        records = self._squeue(slurm_ids)
        manifests: dict[str, _Manifest | None] = {}
        for ref in refs.values():
            if ref is not None and ref.index is not None and ref.job_id not in manifests:
                manifests[ref.job_id] = self._manifest(ref.job_id, records.get(ref.job_id))
        self._release_due(records, manifests)
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
            and not _has_result(self._job_dir(ref, records[ref.job_id], None))
        }
        accounting: dict[str, SlurmRecord] = {}
        if wanted:
            try:
                accounting = self._sacct(sorted(wanted, key=int))
            except BackendError:
                # Without accounting, an id squeue has forgotten is lost or finished: only its result can tell.
                blind = [
                    eid
                    for eid, ref in refs.items()
                    if ref is not None and ref.job_id not in records and not _has_result(self._job_dir(ref, None, None))
                ]
                if blind:
                    raise
        started = {  # (a pending job's StartTime in squeue is an estimate)
            r.job_id
            for r in (*records.values(), *accounting.values())
            if r.started_at is not None and _ACTIVE_PHASES.get(r.state) != "pending"
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
                raise BackendError(self.name, f"job {external_id}: {exc}", transient=True) from None
        return report, started

    # -- planned machines: one allocation each -------------------------------------------------

    def open_lease(self, lease: MachineLease) -> None:
        """Request the planned machine's allocation, sized as its type, in its type's partition.

        An allocation of this lease that a scheduler before a restart opened and never closed is
        taken over (found by its job name). BackendError, naming the machine and SLURM's words,
        when the partition is unknown, not up, or has no node that can run, or sbatch refuses."""
        with self._lock:
            if lease.key in self._leases:
                return
            partition = self._lease_partition(lease)
            found = self._find_lease(lease)
            if found is not None:
                log.info("SLURM: took over allocation %s of machine %s", found.job_id, lease.machine)
                self._leases[lease.key] = found
                return
            self._check_partition(lease, partition)
            self._leases[lease.key] = self._allocate(lease, partition)

    def close_lease(self, lease: MachineLease) -> None:
        """Tell the allocation no more tasks come: its driver ends once the running ones have. Never raises."""
        try:
            with self._lock:
                pilot = self._leases.pop(lease.key, None) or self._find_lease(lease)
                if pilot is not None:
                    self._release_lease(pilot)
        except Exception:  # the executor's loop must survive; the driver's idle limit is the backstop
            log.warning("SLURM: closing the allocation of machine %s failed", lease.machine, exc_info=True)

    def finished_leases(self) -> list[LeaseRecord]:
        """The released allocations SLURM accounting has ended, with its Start and End (each once).

        One whose record is not final yet (slurmdbd lags behind slurmctld) waits for a later call;
        one that never started (closed while still queued) held nothing and is not reported."""
        with self._lock:
            waiting = dict(self._released.items())
        if not waiting:
            return []
        try:
            records = self._sacct(sorted(waiting, key=int))
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
            finished.append(lease.record(self.name, job_id, record.started_at, record.ended_at, "slurm accounting"))
            if record.submitted_at is not None:
                waited_s = max(0.0, (record.started_at - record.submitted_at).total_seconds())
                with self._lock:
                    self._allocation_waits.setdefault(pilot.partition, deque(maxlen=LEAD_SAMPLES)).append(waited_s)
        return finished

    def lease_lead_s(self, resource: str) -> float:
        """The predicted queue wait of an allocation of ``resource``'s partition: the median wait (submit to
        start, from accounting) of its last :data:`LEAD_SAMPLES` allocations; 0 before the first ended."""
        spec = self.resources.get(resource)
        partition = None if spec is None else spec.slurm_partition
        with self._lock:
            waits = sorted(self._allocation_waits.get(partition or "", ()))
        return waits[len(waits) // 2] if waits else 0.0

    def _lease_partition(self, lease: MachineLease) -> str:
        resource = self.resources.get(lease.resource)
        partition = None if resource is None else resource.slurm_partition
        if partition is None:
            known = "unknown to this backend" if resource is None else "without a 'partition' in the catalog"
            raise BackendError(
                self.name, f"machine {lease.machine}: resource {lease.resource!r} is {known}", transient=False
            )
        return partition

    def _check_partition(self, lease: MachineLease, partition: str) -> None:
        """BackendError unless the partition is up and one of its nodes can run (sbatch queues a job in a
        partition that is down, where it would wait until someone brings it up)."""
        what = f"machine {lease.machine} (resource {lease.resource!r}, partition {partition})"
        try:
            out = self._run(["sinfo", "--Node", "--noheader", f"--partition={partition}", "--format=%a|%t|%N"])
        except BackendError as exc:
            raise BackendError(self.name, f"{what}: {exc.reason}", transient=exc.transient) from None
        rows = [line.strip().split("|") for line in out.splitlines() if line.count("|") == 2]
        if not rows:
            raise BackendError(self.name, f"{what}: SLURM knows no such partition (sinfo)", transient=False)
        if rows[0][0] != "up":
            raise BackendError(self.name, f"{what}: the partition is {rows[0][0]} (sinfo)", transient=False)
        states = {node: state.rstrip("*~#!%$@^-+") for _, state, node in rows}
        if all(state in _UNUSABLE_NODE_STATES for state in states.values()):
            said = ", ".join(f"{node} {state}" for node, state in sorted(states.items()))
            raise BackendError(self.name, f"{what}: no node can run ({said}, sinfo)", transient=False)

    def _allocate(self, lease: MachineLease, partition: str) -> _Pilot:
        """sbatch the lease's driver, sized as the machine; its directory is the first free of
        ``KEY``, ``KEY.1``, ``KEY.2`` ... (an allocation that ended early is followed by another)."""
        root = self.lease_root or _default_lease_root()
        directory = root / lease.key
        generation = 0
        while directory.exists():
            generation += 1
            directory = root / f"{lease.key}.{generation}"
        memory_mib = _mib(lease.memory_bytes)
        what = f"machine {lease.machine} (resource {lease.resource!r}, partition {partition})"
        pilot = _Pilot(partition, directory, minutes=0, release_at=time.time(), lease=lease)
        try:
            directory.mkdir(parents=True)
            write_private(directory / "pilot.sbatch", PILOT_DRIVER, mode=0o700)
            pilot.write([])
        except OSError as exc:
            raise BackendError(self.name, f"{what}: allocation directory {directory}: {exc}", transient=True) from None
        name = job_name(lease.key)
        argv = [
            "sbatch",
            "--parsable",
            f"--partition={partition}",
            f"--job-name={name}",
            "--nodes=1",
            "--ntasks=1",
            f"--cpus-per-task={lease.cores}",
            f"--mem={memory_mib}M",
            f"--output={directory}/slurm-%j.log",
            f"--chdir={directory}",
            f"--comment={_comment(f'agora machine {lease.machine} of {lease.dag_id} {lease.run_id}')[:200]}",
            self._export(),
            str(directory / "pilot.sbatch"),
            *("lease", str(lease.cores), str(memory_mib), str(math.ceil(self.lease_idle_s))),
        ]
        try:
            pilot.job_id = self._sbatch(argv, what, name, environment={})
            pilot.write([])
        except BackendError:
            if name in self._unanswered:  # an allocation may exist that nobody would hand tasks to
                self._run_quietly(["scancel", f"--name={name}", _mine()])
                self._unanswered.discard(name)
            shutil.rmtree(directory, ignore_errors=True)
            raise
        except OSError as exc:
            self._run_quietly(["scancel", pilot.job_id])
            shutil.rmtree(directory, ignore_errors=True)
            raise BackendError(self.name, f"{what}: allocation directory {directory}: {exc}", transient=True) from None
        self._pilot_dirs[pilot.job_id] = directory
        if self.submissions is not None:
            self.submissions.submitted(pilot.job_id, partition, lease.cores, memory_mib * MIB, None)
        log.info("SLURM: allocation %s for machine %s (%d cores, %d MiB)", pilot.job_id, lease.machine,
                 lease.cores, memory_mib)  # fmt: skip
        return pilot

    def _find_lease(self, lease: MachineLease) -> _Pilot | None:
        """The newest allocation of this lease that SLURM still runs and nobody closed, if any."""
        fmt = "--Format=" + ",".join(f"{name}:|" for name in _SQUEUE_FIELDS)
        out = self._run(["squeue", "--noheader", f"--name={job_name(lease.key)}", _mine(), fmt])
        for record in sorted(parse_squeue(out).values(), key=lambda r: int(r.job_id), reverse=True):
            if record.final or record.work_dir is None:
                continue
            manifest = _Manifest.read(record.work_dir)
            if manifest is None or manifest.lease is None or manifest.lease.key != lease.key or manifest.closed:
                continue
            pilot = manifest.pilot()
            pilot.job_id = record.job_id
            self._pilot_dirs[record.job_id] = record.work_dir
            for task in pilot.tasks:
                self._job_dirs[str(SlurmJobRef(record.job_id, task.index))] = task.job_dir
            return pilot
        return None

    def _release_lease(self, pilot: _Pilot) -> None:
        pilot.closed = True
        try:
            pilot.write(pilot.tasks)
            (pilot.directory / "closed").touch()
        except OSError:
            log.warning("SLURM: cannot mark allocation %s closed in %s", pilot.job_id, pilot.directory, exc_info=True)
        if not pilot.tasks:  # it never ran anything: do not wait for it to start only to end
            self._run_quietly(["scancel", pilot.job_id])
        self._released[pilot.job_id] = pilot

    def _submit_leased(self, job: JobSpec, lease: MachineLease) -> str:
        """Hand the task to its machine's allocation: the next index, claimed with ``mkdir slot.INDEX``."""
        if job.cores > lease.cores or _mib(job.memory_bytes) > _mib(lease.memory_bytes):
            raise BackendError(
                self.name,
                f"{job.label}: needs {job.cores} cores and {_mib(job.memory_bytes)} MiB, more than machine "
                f"{lease.machine} has ({lease.cores} cores, {_mib(lease.memory_bytes)} MiB)",
                transient=False,
            )
        if lease.key not in self._leases:
            self.open_lease(lease)  # a scheduler that restarted hands over a task of a lease it did not open
        pilot = self._leases[lease.key]
        if not self._claim(pilot, len(pilot.tasks)):
            # The driver ended (its idle limit, or SLURM stopped the allocation): another allocation
            # for the machine, reported as one more lease record.
            log.warning("SLURM: allocation %s of machine %s has ended; requesting another", pilot.job_id,
                        lease.machine)  # fmt: skip
            self._released[pilot.job_id] = pilot
            del self._leases[lease.key]
            self._check_partition(lease, pilot.partition)
            pilot = self._leases[lease.key] = self._allocate(lease, pilot.partition)
            self._claim(pilot, 0)
        task = self._task(job, len(pilot.tasks), self._minutes(job.time_limit_s) or 0)
        try:
            job.job_dir.mkdir(parents=True, exist_ok=True)
            pilot.write([*pilot.tasks, task])
        except OSError as exc:
            raise BackendError(self.name, f"{job.label}: allocation {pilot.directory}: {exc}", transient=True) from None
        pilot.tasks.append(task)
        external_id = str(SlurmJobRef(pilot.job_id, task.index))
        self._job_dirs[external_id] = job.job_dir
        return external_id

    def _claim(self, pilot: _Pilot, index: int) -> bool:
        """Claim task index ``index`` of the allocation; False if its driver has ended (or claimed it to end)."""
        try:
            (pilot.directory / f"slot.{index}").mkdir()
        except FileExistsError:
            return False
        except OSError as exc:
            raise BackendError(self.name, f"allocation {pilot.directory}: {exc}", transient=True) from None
        try:
            record = self._squeue([pilot.job_id]).get(pilot.job_id)
        except BackendError:
            (pilot.directory / f"slot.{index}").rmdir()  # unclaimed again, for the retry
            raise
        if record is not None and not record.final:
            return True
        with contextlib.suppress(OSError):
            (pilot.directory / f"slot.{index}").rmdir()
        return False

    # -- pilots and adoption -------------------------------------------------------------------

    def flush(self, *, force: bool = False) -> None:
        """Close and release every open pilot whose window has passed (all of them if ``force``).

        :meth:`status` calls it first, so the executor's heartbeat ends windows; call it with
        ``force=True`` when the scheduler stops, so no pilot waits for a heartbeat that never comes.
        Never raises: a pilot that cannot be released now stays held and is released later.
        """
        with self._lock:
            now = time.time()
            for pilot in list(self._open.values()):
                if force or now >= pilot.release_at:
                    self._close(pilot)

    def poll_queue_waits(self, *, force: bool = False) -> None:
        """Store the recorded jobs' waits when due, also while no job is polled (it costs nothing when not)."""
        if self.submissions is not None:
            self.submissions.poll(force=force)

    def close(self) -> None:
        if self.submissions is not None:
            self.submissions.close()

    def adopt(self, external_id: str, job_dir: Path, resource: str | None = None) -> bool:
        """Remember ``job_dir`` for an id another instance submitted (optional: status also finds
        it from SLURM's WorkDir). False for an id this backend never makes."""
        ref = SlurmJobRef.parse(external_id)
        if ref is None:
            return False
        self._job_dirs[external_id] = Path(job_dir)
        return True

    # -- inside: submitting ---------------------------------------------------------------------

    def _minutes(self, time_limit_s: float | None) -> int | None:
        if time_limit_s is None:
            return None
        return max(1, math.ceil((time_limit_s + self.time_grace_s) / 60))

    def _export(self, extra: Iterable[str] = ()) -> str:
        names = [name for name in self.export if name in os.environ and not is_scheduler_secret(name)]
        names += [name for name in extra if name not in names]
        return "--export=" + (",".join(names) if names else "NONE")

    def _submit_single(self, job: JobSpec, partition: str) -> str:
        name = job_name(job.key)
        earlier = self._find_unanswered(name)
        if earlier is not None:
            self._job_dirs[earlier] = job.job_dir
            return earlier
        job.job_dir.mkdir(parents=True, exist_ok=True)
        script = job.job_dir / "job.sbatch"
        write_private(script, single_script(job), mode=0o700)
        minutes = self._minutes(job.time_limit_s)
        argv = [
            "sbatch",
            "--parsable",
            f"--partition={partition}",
            f"--job-name={name}",
            "--nodes=1",
            "--ntasks=1",
            f"--cpus-per-task={job.cores}",
            f"--mem={_mib(job.memory_bytes)}M",
            *([f"--time={minutes}"] if minutes is not None else []),
            f"--output={job.job_dir}/slurm-%j.log",
            f"--chdir={job.job_dir}",
            self._export(job.environment),
            str(script),
        ]
        job_id = self._sbatch(argv, _what(job, partition), name, environment=job.environment)
        self._job_dirs[job_id] = job.job_dir
        if self.submissions is not None:
            self.submissions.submitted(
                job_id, partition, job.cores, job.memory_bytes, None if minutes is None else minutes * 60.0
            )
        return job_id

    def _sbatch(self, argv: list[str], what: str, name: str, environment: Mapping[str, str]) -> str:
        """sbatch's job id; ``what`` names the resource, partition and task (or machine) in errors."""
        try:
            out = self._run(argv, environment=environment)
        except _NoAnswer as exc:
            self._unanswered.add(name)
            raise BackendError(
                self.name,
                f"{what}: {exc.reason}; the job may exist: the next submit of this attempt looks for it by name",
                transient=True,
            ) from None
        except BackendError as exc:
            raise BackendError(self.name, f"{what}: {exc.reason}", transient=exc.transient) from None
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise BackendError(self.name, f"{what}: sbatch printed no job id: {out.strip()!r}", transient=True)
        return job_id

    def _find_unanswered(self, name: str) -> str | None:
        """The job an earlier, timed-out sbatch of ``name`` created, if it did."""
        if name not in self._unanswered:
            return None
        out = self._run(["squeue", "--noheader", "--states=all", f"--name={name}", _mine(), "--Format=JobID"])
        self._unanswered.discard(name)
        ids = sorted(out.split(), key=int)
        return ids[-1] if ids else None

    def _submit_packed(self, job: JobSpec, partition: str) -> str:
        capacity = self._partition_capacity(job, partition)
        task_minutes = self._minutes(job.time_limit_s) or 1
        pilot = self._open.get(partition)
        if pilot is not None and not self._fits(pilot, job, task_minutes, capacity):
            self._close(pilot)
            pilot = None
        if pilot is None:
            pilot = self._open_pilot(job, partition, task_minutes, capacity)
            index = 0
        else:
            index = self._append(pilot, job, task_minutes)
        if len(pilot.tasks) >= self.pilot_max_tasks:
            self._close(pilot)
        return str(SlurmJobRef(pilot.job_id, index))

    def _fits(self, pilot: _Pilot, job: JobSpec, minutes: int, capacity: _Capacity) -> bool:
        return (
            not pilot.closed
            and len(pilot.tasks) < self.pilot_max_tasks
            and time.time() < pilot.release_at - APPEND_MARGIN_S
            and pilot.cores() + job.cores <= capacity.cpus
            and pilot.memory_mib() + _mib(job.memory_bytes) <= capacity.memory_mib
            and minutes <= pilot.minutes
        )

    def _task(self, job: JobSpec, index: int, minutes: int) -> _PilotTask:
        command = list(job.command)
        if job.environment:
            command = ["env", "--", *(f"{k}={v}" for k, v in job.environment.items()), *command]
        memory = _mib(job.memory_bytes)
        line = f"run_task {index} {job.cores} {memory} {shlex.quote(str(job.job_dir))} {shlex.join(command)}\n"
        return _PilotTask(index, job.key, job.label, job.resource, job.job_dir, job.cores, memory, minutes, line)

    def _open_pilot(self, job: JobSpec, partition: str, task_minutes: int, capacity: _Capacity) -> _Pilot:
        root = self.pilot_root or job.job_dir.parent
        directory = root / f"pilot-{_UNSAFE.sub('_', job.key)}"
        minutes = self._minutes(self.pilot_max_time_limit_s) or 1
        if capacity.max_minutes is not None:
            minutes = max(task_minutes, min(minutes, capacity.max_minutes))
        pilot = _Pilot(partition, directory, minutes, release_at=time.time() + self.pilot_window_s)
        task = self._task(job, 0, task_minutes)
        directory.mkdir(parents=True, exist_ok=True)
        job.job_dir.mkdir(parents=True, exist_ok=True)
        write_private(directory / "pilot.sbatch", PILOT_DRIVER, mode=0o700)
        pilot.write([task])
        name = job_name(f"pilot-{job.key}")
        argv = [
            "sbatch",
            "--parsable",
            "--hold",
            f"--partition={partition}",
            f"--job-name={name}",
            "--nodes=1",
            "--ntasks=1",
            f"--cpus-per-task={job.cores}",
            f"--mem={_mib(job.memory_bytes)}M",
            f"--time={minutes}",
            f"--output={directory}/slurm-%j.log",
            f"--chdir={directory}",
            self._export(),
            str(directory / "pilot.sbatch"),
            *("pilot", "0", "0", "0"),  # every task at once, closed from the start
        ]
        try:
            pilot.job_id = self._sbatch(argv, _what(job, partition), name, environment={})
        except BackendError:
            if name in self._unanswered:  # a held job may exist that nobody would ever release
                self._run_quietly(["scancel", f"--name={name}", _mine()])
                self._unanswered.discard(name)
            shutil.rmtree(directory, ignore_errors=True)
            raise
        pilot.tasks = [task]
        try:
            pilot.write(pilot.tasks)
        except OSError as exc:
            self._run_quietly(["scancel", pilot.job_id])
            shutil.rmtree(directory, ignore_errors=True)
            raise BackendError(self.name, f"{job.label}: pilot directory {directory}: {exc}", transient=True) from None
        self._open[partition] = pilot
        self._pilot_dirs[pilot.job_id] = directory
        self._job_dirs[str(SlurmJobRef(pilot.job_id, 0))] = job.job_dir
        return pilot

    def _append(self, pilot: _Pilot, job: JobSpec, task_minutes: int) -> int:
        task = self._task(job, len(pilot.tasks), task_minutes)
        tasks = [*pilot.tasks, task]
        job.job_dir.mkdir(parents=True, exist_ok=True)
        pilot.write(tasks)
        try:
            self._update(pilot.job_id, cores=pilot.cores(tasks), memory_mib=pilot.memory_mib(tasks))
        except BackendError as exc:
            pilot.write(pilot.tasks)
            self._run_quietly(_update_argv(pilot.job_id, cores=pilot.cores(), memory_mib=pilot.memory_mib()))
            raise BackendError(
                self.name,
                f"resource {job.resource!r} (partition {pilot.partition}): {job.label}: cannot join pilot "
                f"{pilot.job_id}: {exc.reason}",
                transient=exc.transient,
            ) from None
        pilot.tasks = tasks
        self._job_dirs[str(SlurmJobRef(pilot.job_id, task.index))] = job.job_dir
        return task.index

    def _update(self, job_id: str, *, cores: int, memory_mib: int) -> None:
        self._run(_update_argv(job_id, cores=cores, memory_mib=memory_mib))

    def _close(self, pilot: _Pilot) -> None:
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
            self._run_quietly(["scontrol", "update", f"JobId={pilot.job_id}", f"TimeLimit={longest}"])
        self._run_quietly(["scontrol", "release", pilot.job_id])
        if self.submissions is not None:  # released: it queues (is eligible) from now
            limit_s = min(longest, pilot.minutes) * 60.0
            self.submissions.submitted(pilot.job_id, pilot.partition, pilot.cores(), pilot.memory_mib() * MIB, limit_s)

    def _release_due(self, records: Mapping[str, SlurmRecord], manifests: Mapping[str, _Manifest | None]) -> None:
        """Release held pilots that no instance gathers into any more (closed, or their window long past)."""
        gathering = {pilot.job_id for pilot in self._open.values()}
        now = time.time()
        for job_id, manifest in manifests.items():
            record = records.get(job_id)
            if manifest is None or record is None or not record.held or job_id in gathering:
                continue
            if manifest.closed or now > manifest.release_at + ADOPTED_RELEASE_GRACE_S:
                log.info("SLURM: releasing held pilot %s (its window has passed)", job_id)
                self._run_quietly(["scontrol", "release", job_id])

    def _cancel_task(self, ref: SlurmJobRef) -> None:
        directory = self._pilot_dirs.get(ref.job_id)
        if directory is None:
            directory = self._squeue([ref.job_id]).get(ref.job_id, SlurmRecord(ref.job_id, "UNKNOWN")).work_dir
        if directory is None:
            log.warning("SLURM: pilot %s unknown; cannot cancel task %d", ref.job_id, ref.index)
            return
        (directory / f"cancel.{ref.index}").touch()
        manifest = _Manifest.read(directory)
        if manifest is None:
            return
        if manifest.lease is not None and not manifest.closed:
            return  # more tasks may come: the allocation is released by close_lease
        if all((directory / f"cancel.{index}").exists() for index in manifest.job_dirs):
            self._run(["scancel", ref.job_id])
            for partition, pilot in list(self._open.items()):
                if pilot.job_id == ref.job_id:
                    del self._open[partition]

    def _partition_capacity(self, job: JobSpec, partition: str) -> _Capacity:
        if partition in self._capacity:
            return self._capacity[partition]
        out = self._run(["sinfo", "--Node", "--noheader", f"--partition={partition}", "--format=%c|%m|%l"])
        nodes: list[_Capacity] = []
        for line in out.splitlines():
            cpus, memory, limit = [*line.strip().split("|"), "", ""][:3]
            if not (cpus.isdigit() and memory.isdigit()):
                continue
            try:
                limit_s = parse_time_limit(limit, "sinfo", "TimeLimit")
            except SlurmOutputError:
                limit_s = None
            nodes.append(_Capacity(int(cpus), int(memory), None if limit_s is None else int(limit_s // 60)))
        if not nodes:
            raise BackendError(
                self.name, f"resource {job.resource!r}: partition {partition!r} has no nodes (sinfo)", transient=False
            )
        self._capacity[partition] = max(nodes, key=lambda node: (node.cpus, node.memory_mib))
        return self._capacity[partition]

    # -- inside: reporting ----------------------------------------------------------------------

    def _squeue(self, slurm_ids: Sequence[str]) -> dict[str, SlurmRecord]:
        records: dict[str, SlurmRecord] = {}
        fmt = "--Format=" + ",".join(f"{name}:|" for name in _SQUEUE_FIELDS)
        for chunk in _chunks(slurm_ids):
            try:
                out = self._run(["squeue", "--noheader", "--states=all", f"--jobs={','.join(chunk)}", fmt])
            except BackendError as exc:
                if "invalid job id" in exc.reason.lower():
                    continue  # squeue knows none of them
                raise
            _refuse_garbage("squeue", out, len(_SQUEUE_FIELDS), strip="|")
            records.update(parse_squeue(out))
        return records

    def _sacct(self, slurm_ids: Sequence[str]) -> dict[str, SlurmRecord]:
        records: dict[str, SlurmRecord] = {}
        fmt = "--format=" + ",".join(_SACCT_FIELDS)
        for chunk in _chunks(slurm_ids):
            out = self._run(["sacct", "--noheader", "--parsable2", f"--jobs={','.join(chunk)}", fmt])
            _refuse_garbage("sacct", out, len(_SACCT_FIELDS))
            records.update(parse_sacct(out))
        return records

    def _manifest(self, job_id: str, record: SlurmRecord | None) -> _Manifest | None:
        directory = self._pilot_dirs.get(job_id) or (record.work_dir if record else None)
        manifest = None if directory is None else _Manifest.read(directory)
        if manifest is not None:
            self._pilot_dirs[job_id] = directory  # type: ignore[assignment]
        return manifest

    def _job_dir(self, ref: SlurmJobRef, record: SlurmRecord | None, manifest: _Manifest | None) -> Path | None:
        hint = self._job_dirs.get(str(ref))
        if hint is not None:
            return hint
        if ref.index is None:
            return record.work_dir if record is not None else None
        return manifest.job_dirs.get(ref.index) if manifest is not None else None

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
        job_dir = self._job_dir(ref, record, None)
        if record is None:
            result, _ = self._result(job_dir)
            if result is not None:
                return result.status()
            return JobStatus("lost", reason=f"SLURM knows no job {ref.job_id} (neither squeue nor sacct)")
        if not record.final:
            return _active_status(record, read_task_ended(job_dir))
        result, missing = self._result(job_dir)
        return _final_status(f"SLURM job {ref.job_id}", record, result, missing)

    def _task_status(self, ref: SlurmJobRef, record: SlurmRecord | None, manifest: _Manifest | None) -> JobStatus:
        """A packed task: its result file, else the pilot's files (pid, exit, cancel, skipped), else the allocation."""
        job_dir = self._job_dir(ref, record, manifest)
        result, missing = self._result(job_dir)
        directory = manifest.directory if manifest is not None else self._pilot_dirs.get(ref.job_id)

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
        if result is not None:
            status = result.status()
            return JobStatus(
                "finished",
                exit_code=status.exit_code,
                oom_killed=status.oom_killed,
                reason=status.reason,
                host=host or status.host,
                queued_at=queued_at,
                started_at=started_at or status.started_at,
                ended_at=status.ended_at,
                peak_rss_bytes=status.peak_rss_bytes,
                cpu_time_s=status.cpu_time_s,
            )
        cancelled, started = marker("cancel"), marker("pid")
        allocated = record is not None and _ACTIVE_PHASES.get(record.state) == "running"
        if marker("skipped") or (cancelled and not started and not allocated):
            return JobStatus(
                "finished", exit_code=CANCEL_EXIT, reason=f"{what} was cancelled before it started", queued_at=queued_at
            )
        exit_file = directory / f"exit.{ref.index}" if directory is not None else None
        code = _read_int(exit_file) if exit_file is not None else None
        if exit_file is not None and code is not None:
            why = "was cancelled" if cancelled else f"exited with code {code}{_signal_name(code)}"
            return JobStatus(
                "finished",
                exit_code=code or 1,
                reason=f"{what} {why}, and {missing}",
                host=host,
                queued_at=queued_at,
                started_at=started_at,
                ended_at=datetime.fromtimestamp(exit_file.stat().st_mtime, UTC),
            )
        if record is None:
            return JobStatus("lost", reason=f"SLURM knows no job {ref.job_id} (neither squeue nor sacct)")
        if record.final:
            return _final_status(f"pilot SLURM job {ref.job_id} (task {ref.index})", record, None, missing)
        if record.held:
            gathering = any(pilot.job_id == ref.job_id for pilot in self._open.values())
            why = "gathering tasks into the pilot" if gathering else "held until the pilot's window closes"
            return JobStatus("pending", reason=f"{what}: {why}", queued_at=queued_at)
        if allocated and directory is not None and not started:
            why = "the allocation is starting" if lease is None else "waiting for its turn and its cores"
            return JobStatus("pending", reason=f"{what}: {why}", queued_at=queued_at)
        if lease is not None and started:
            return JobStatus(
                "running", host=host, queued_at=queued_at, started_at=started_at, task_ended_at=read_task_ended(job_dir)
            )
        return _active_status(record, read_task_ended(job_dir) if started else None)

    # -- inside: running SLURM's clients --------------------------------------------------------

    def _run(self, argv: Sequence[str], environment: Mapping[str, str] | None = None) -> str:
        """Run a SLURM client and return its output; BackendError (transient if SLURM is unreachable)."""
        env = {**os.environ, **(environment or {}), "SLURM_TIME_FORMAT": "%s"}
        try:
            done = subprocess.run(
                list(argv),
                capture_output=True,
                text=True,
                timeout=self.command_timeout_s,
                env=env,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except FileNotFoundError:
            raise BackendError(
                self.name,
                f"'{argv[0]}' is not installed (scripts/start_slurm.sh installs and starts a loopback SLURM)",
                transient=False,
            ) from None
        except subprocess.TimeoutExpired:
            raise _NoAnswer(
                self.name, f"{argv[0]}: no answer within {self.command_timeout_s:g} s", transient=True
            ) from None
        if done.returncode != 0:
            said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
            message = said[-1].removeprefix(f"{argv[0]}: error: ") if said else f"exit code {done.returncode}"
            text = " ".join(said).lower()
            transient = any(marker in text for marker in _TRANSIENT_MARKERS)
            raise BackendError(self.name, f"{argv[0]} refused: {message}", transient=transient)
        return done.stdout

    def _run_quietly(self, argv: Sequence[str]) -> bool:
        try:
            self._run(argv)
        except BackendError as exc:
            log.warning("SLURM: %s failed: %s", shlex.join(argv), exc.reason)
            return False
        return True


def _refuse_garbage(command: str, text: str, field_count: int, strip: str = "") -> None:
    """A transient BackendError when a line of ``command``'s answer does not have its fields.

    Read as "no such job", such an answer would report running jobs lost and run their tasks
    a second time; as an outage, the executor waits (up to ``[agora] backend_outage_s``).
    """
    for line in text.splitlines():
        if line.strip() and len(line.removesuffix(strip).split("|", field_count - 1)) != field_count:
            raise BackendError(
                BACKEND,
                f"{command} answered a line agora cannot read (not {field_count} fields): {line[:200]!r}",
                transient=True,
            )


def _active_status(record: SlurmRecord, task_ended_at: datetime | None = None) -> JobStatus:
    """A job SLURM still shows; ``task_ended_at``: its worker's task-ended mark, for a running one."""
    phase = _ACTIVE_PHASES.get(record.state, "pending")
    if record.state not in _ACTIVE_PHASES:
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


def _final_status(what: str, record: SlurmRecord, result: JobResult | None, missing: str) -> JobStatus:
    default_code, happened = _FINAL_STATES[record.state]
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
    )


def _default_lease_root() -> Path:
    """The executor's job directory (``[agora] state_dir``), where pilots go too."""
    from agora_optimizer import settings

    return settings.directory("state_dir", "jobs", mode=0o700)


def _what(job: JobSpec, partition: str) -> str:
    return f"resource {job.resource!r} (partition {partition}): {job.label}"


def _signal_name(exit_code: int) -> str:
    """`` = SIGKILL`` for a shell's 137 (128 + the signal), '' for an ordinary exit code."""
    with contextlib.suppress(ValueError):
        if exit_code > 128:
            return f" = {signal.Signals(exit_code - 128).name}"
    return ""


def _update_argv(job_id: str, *, cores: int, memory_mib: int) -> list[str]:
    # NumCPUs and CPUsPerTask together: either alone leaves SLURM 22.05 allocating something else.
    return [
        "scontrol",
        "update",
        f"JobId={job_id}",
        f"NumCPUs={cores}",
        f"CPUsPerTask={cores}",
        f"MinMemoryNode={memory_mib}",
    ]


def _mine() -> str:
    """``--user=<this process's user>``: a look-up or cancel by job name must never reach another user's job."""
    return f"--user={pwd.getpwuid(os.geteuid()).pw_name}"


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


def _mib(memory_bytes: int) -> int:
    return max(1, math.ceil(memory_bytes / MIB))


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), IDS_PER_CALL):
        yield items[start : start + IDS_PER_CALL]

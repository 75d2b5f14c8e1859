"""Submitting one task attempt as one SLURM batch job, and the SLURM commands every part runs.

A catalog resource with ``backend: slurm`` names its partition (``partition: compute``).
:meth:`SlurmBackend.submit` writes ``JOB_DIR/job.sbatch``, which ``exec``\\ s the agora worker,
and submits it with ``sbatch`` with the task's cores (``--cpus-per-task``), memory
(``--mem``, MiB rounded up) and time limit (``--time``: the task's limit plus
``time_grace_s``, rounded up to minutes; none: the partition's default), named
``agora-<key>``, running in the job directory (``--chdir``), its output in
``JOB_DIR/slurm-<id>.log``, never requeued (``--no-requeue``: a preempted job ends as
``PREEMPTED`` even where PreemptMode=REQUEUE). ``--export`` names a few variables of this process (``PATH``,
``HOME`` ...) and the job's own environment, whose values sbatch takes from its own
environment (never from its command line, where a comma would split a value).

External ids: ``"<slurm job id>"`` for a job of its own, ``"<slurm job id>+<index>"`` for the
index-th task of a pilot.

Every SLURM command goes through :mod:`agora_optimizer.slurm` (:meth:`SlurmSubmission._run`),
whose errors become :class:`~agora_optimizer.executor.jobs.spec.BackendError`: transient when SLURM
could not be reached, with the command's own last words.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import re
import shlex
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agora_optimizer.errors import FieldError
from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.backends.slurm.pilot_files import REAP_SESSION, Capacity, Pilot
from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec
from agora_optimizer.executor.state_files import write_private
from agora_optimizer.executor.worker.environment import is_scheduler_secret
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.workflow import shown
from agora_optimizer.slurm.commands import run_slurm, this_user
from agora_optimizer.slurm.errors import SlurmCommandError, SlurmOutputError
from agora_optimizer.slurm.jobs import SlurmRecord, sacct_jobs, squeue_jobs
from agora_optimizer.slurm.nodes import partition_gpus
from agora_optimizer.slurm.values import mib

if TYPE_CHECKING:
    from agora_optimizer.queue_wait.submissions import SubmissionLog

log = logging.getLogger(__name__)

BACKEND = "slurm"
JOB_NAME_MAX = 96
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
LEASE_IDLE_S = 120.0  # a lease's allocation with no task for this long ends (its scheduler may be gone, and it bills)
REMEMBER_MAX = 10_000  # job and pilot directories a backend remembers; the oldest are found again from SLURM
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")
GRES_TYPE = re.compile(r"^[A-Za-z0-9_.-]+$")


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
    name = prefix + UNSAFE_CHARS.sub("_", key)
    if len(name) <= JOB_NAME_MAX:
        return name
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    return f"{name[: JOB_NAME_MAX - len(digest) - 1]}-{digest}"


def one_line(text: str) -> str:
    return " ".join(text.split())


def gres_option(gpus: int, gres_type: str | None) -> str:
    """sbatch's request for ``gpus`` GPUs on the node, of ``gres_type`` when given."""
    return f"--gres=gpu:{gres_type}:{gpus}" if gres_type else f"--gres=gpu:{gpus}"


def single_script(job: JobSpec) -> str:
    # SLURM sets CUDA_VISIBLE_DEVICES for GPUs with device files; count-only GPUs get their job's indices.
    devices = ",".join(str(index) for index in range(job.gpus))
    visible = f'[ -n "${{CUDA_VISIBLE_DEVICES:-}}" ] || export CUDA_VISIBLE_DEVICES="${{SLURM_JOB_GPUS:-{devices}}}"\n'
    return (
        "#!/bin/bash\n"
        f"# agora job {one_line(job.key)}: {one_line(job.label)}\n"
        f"# resource {one_line(job.resource)}; written by agora_optimizer.executor.backends.slurm\n"
        f"reap_session() {{ {REAP_SESSION}; }}\n"
        + (visible if job.gpus > 0 else "")
        + f"setsid {shlex.join(job.command)} &\n"  # the worker leads a session of its own: its pid is the session id
        "worker=$!\n"
        "trap 'kill -TERM \"$worker\" 2>/dev/null' TERM INT  # a cancel or time limit reaches the worker\n"
        'while :; do wait "$worker"; status=$?; kill -0 "$worker" 2>/dev/null || break; done\n'
        'reap_session "$worker"\n'
        'exit "$status"\n'
    )


class _NoAnswer(BackendError):
    """A SLURM command did not answer within its timeout (it may have acted)."""


class SlurmSubmission(Backend):
    """The backend's settings and state, the SLURM commands, and one batch job per task."""

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
        bad = [name for name in export if not ENV_NAME.match(name)]
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
        self._open: dict[str, Pilot] = {}  # partition -> the pilot gathering its tasks
        self._capacity: dict[str, Capacity] = {}
        self._unanswered: set[str] = set()  # job names whose sbatch timed out (the job may exist)
        self.resources: Mapping[str, Resource] = dict(resources or {})
        self.lease_root = lease_root
        self.lease_idle_s = lease_idle_s
        self._leases: dict[str, Pilot] = {}  # lease key -> the allocation its tasks go to now
        self._released: BoundedDict[str, Pilot] = BoundedDict(remember_max)  # SLURM id -> released, unreported
        # partition -> the queue waits (submit to start, s) of its last allocations: the lead of the next
        self._allocation_waits: dict[str, deque[float]] = {}
        self._lock = threading.RLock()

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
        what = task_described(job, partition)
        gres_type = self._gres_type(job.resource, job.options) if job.gpus > 0 else None
        if job.gpus > 0:
            self._check_gpus(what, partition, job.gpus, gres_type)
        job.job_dir.mkdir(parents=True, exist_ok=True)
        script = job.job_dir / "job.sbatch"
        write_private(script, single_script(job), mode=0o700)
        minutes = self._minutes(job.time_limit_s)
        job_id = self._sbatch(
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
            gres_type=gres_type,
        )
        self._job_dirs[job_id] = job.job_dir
        if self.submissions is not None:
            self.submissions.submitted(
                job_id, partition, job.cores, job.memory_bytes, None if minutes is None else minutes * 60.0
            )
        return job_id

    def _sbatch(
        self,
        what: str,
        name: str,
        *,
        partition: str,
        cores: int,
        memory_mib: int,
        directory: Path,
        script: Path,
        minutes: int | None = None,
        options: Sequence[str] = (),
        arguments: Sequence[str] = (),
        environment: Mapping[str, str] | None = None,
        gpus: int = 0,
        gres_type: str | None = None,
    ) -> str:
        """Submit ``script`` as one job of one task on one node, running and logging in ``directory``;
        return its id. ``what`` names the resource, partition and task (or machine) in errors; the job
        gets ``environment`` (its names in ``--export``, its values from sbatch's environment) and
        ``gpus`` GPUs of the node (``--gres``, of ``gres_type`` when given)."""
        environment = environment or {}
        argv = [
            "sbatch",
            "--parsable",
            f"--partition={partition}",
            f"--job-name={name}",
            "--nodes=1",
            "--ntasks=1",
            f"--cpus-per-task={cores}",
            f"--mem={memory_mib}M",
            *([f"--time={minutes}"] if minutes is not None else []),
            *([gres_option(gpus, gres_type)] if gpus > 0 else []),
            f"--output={directory}/slurm-%j.log",
            f"--chdir={directory}",
            # Never requeued (by a preemption with PreemptMode=REQUEUE, or a node failure): SLURM
            # then ends the job (PREEMPTED, NODE_FAIL) and agora decides where it re-runs.
            "--no-requeue",
            *options,
            self._export(environment),
            str(script),
            *arguments,
        ]
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

    def _gres_type(self, resource: str, options: Mapping[str, object]) -> str | None:
        """The resource's ``gres_type`` (the GPU type its nodes declare, asked for as ``--gres=gpu:TYPE:N``);
        None without one (any GPU of the node)."""
        value = options.get("gres_type")
        if value is None:
            return None
        if not isinstance(value, str) or not GRES_TYPE.match(value):
            raise BackendError(
                self.name,
                f"resource {shown(resource)}: 'gres_type' must be a SLURM GPU type such as a100 ([A-Za-z0-9_.-]), "
                f"got {shown(value)}",
                transient=False,
            )
        return value

    def _check_gpus(self, what: str, partition: str, gpus: int, gres_type: str | None) -> None:
        """BackendError naming the partition and the GPUs of its nodes unless one has ``gpus`` (sbatch would
        refuse with no more than "Requested node configuration is not available")."""
        try:
            with self._slurm_errors():
                nodes = partition_gpus(partition, gres_type, self.command_timeout_s)
        except BackendError as exc:
            raise BackendError(self.name, f"{what}: {exc.reason}", transient=exc.transient) from None
        if nodes and max(nodes.values()) >= gpus:
            return
        kind = f"GPUs of type {gres_type}" if gres_type else "GPUs"
        has = ", ".join(f"{node} has {count}" for node, count in sorted(nodes.items())) or "it has no nodes"
        raise BackendError(
            self.name,
            f"{what}: needs {gpus} {kind} on one node, more than partition {partition} has ({has}; sinfo)",
            transient=False,
        )

    def _cancel_unanswered(self, name: str) -> None:
        """Cancel what a timed-out sbatch of ``name`` may have made (a held pilot, an allocation that
        nobody would use), among this user's jobs only."""
        if name in self._unanswered:
            self._run_quietly(["scancel", f"--name={name}", this_user()])
            self._unanswered.discard(name)

    def _find_unanswered(self, name: str) -> str | None:
        """The job an earlier, timed-out sbatch of ``name`` created, if it did."""
        if name not in self._unanswered:
            return None
        out = self._run(["squeue", "--noheader", "--states=all", f"--name={name}", this_user(), "--Format=JobID"])
        self._unanswered.discard(name)
        ids = sorted(out.split(), key=int)
        return ids[-1] if ids else None

    # -- the SLURM commands, through agora_optimizer.slurm ------------------------------------

    def _run(self, argv: Sequence[str], environment: Mapping[str, str] | None = None) -> str:
        """Run a SLURM client and return its output; BackendError (transient if SLURM is unreachable)."""
        with self._slurm_errors():
            return run_slurm(argv, self.command_timeout_s, environment)

    @contextlib.contextmanager
    def _slurm_errors(self) -> Iterator[None]:
        """The SLURM client's errors as BackendError: a refusal with SLURM's last words, a silence as
        :class:`_NoAnswer`, an answer agora cannot read as transient (read as "no such job", it would
        report running jobs lost and run their tasks a second time; as an outage, the executor waits)."""
        try:
            yield
        except SlurmCommandError as exc:
            if exc.missing:
                raise BackendError(self.name, exc.reason, transient=False) from None
            if exc.timed_out:
                reason = f"{exc.program}: no answer within {self.command_timeout_s:g} s"
                raise _NoAnswer(self.name, reason, transient=True) from None
            said = exc.last_words or f"exit code {exc.returncode}"
            raise BackendError(self.name, f"{exc.program} refused: {said}", transient=exc.transient) from None
        except SlurmOutputError as exc:
            raise BackendError(self.name, f"{exc.source} answered {exc.reason}", transient=True) from None

    def _squeue(self, slurm_ids: Sequence[str]) -> dict[str, SlurmRecord]:
        with self._slurm_errors():
            return squeue_jobs(slurm_ids, self.command_timeout_s)

    def _sacct(self, slurm_ids: Sequence[str]) -> dict[str, SlurmRecord]:
        with self._slurm_errors():
            return sacct_jobs(slurm_ids, self.command_timeout_s)

    def _run_quietly(self, argv: Sequence[str]) -> bool:
        try:
            self._run(argv)
        except BackendError as exc:
            log.warning("SLURM: %s failed: %s", shlex.join(argv), exc.reason)
            return False
        return True


def task_described(job: JobSpec, partition: str) -> str:
    return f"resource {shown(job.resource)} (partition {partition}): {job.label}"

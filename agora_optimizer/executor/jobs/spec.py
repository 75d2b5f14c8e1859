"""What the executor hands to a backend, and what a backend says back.

A backend (local pools, SLURM, AWS Batch) knows nothing of Airflow: it runs a
:class:`JobSpec` (a command with cores, memory and a time limit on one catalog
resource) and reports :class:`JobStatus` by the external id it returned from
``submit`` (:class:`~agora_optimizer.executor.backends.base.Backend`). The command is
always the agora worker (:mod:`agora_optimizer.executor.worker.worker`), which runs the Airflow
task, enforces the memory limit and writes a result file; the backends that share a file
system with the scheduler (local, SLURM) read that file, and on AWS Batch the worker
uploads it to S3, where the backend reads it beside Batch's own job record.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.state_files import write_private
from agora_optimizer.runs.lease_record import LeaseRecord

JobPhase = Literal["pending", "running", "finished", "lost"]
RESULT_FORMAT = "agora-job-result/1"
OOM_EXIT_CODE = 137  # 128 + SIGKILL, what a kernel OOM kill looks like to a shell
TASK_ENDED_MARK = "task-ended"  # the worker writes it in the job dir when the task process has exited


class BackendError(AgoraError):
    """A backend refused or failed a request; ``transient`` errors are retried with backoff."""

    def __init__(self, backend: str, reason: str, *, transient: bool) -> None:
        self.backend = backend
        self.reason = reason
        self.transient = transient
        super().__init__(f"{backend}: {reason}")


@dataclass(frozen=True)
class MachineLease:
    """One planned machine of one DAG run: the allocation its tasks run in, in the planned order.

    ``key`` is unique per (dag_id, run_id, machine) and safe as a file or job name
    (:func:`lease_key`); ``cores`` and ``memory_bytes`` are the machine type's, ``tasks`` how many
    tasks the plan puts on it, ``planned_start_s``/``planned_end_s`` its lease in plan time.
    """

    key: str
    dag_id: str
    run_id: str
    machine: str
    resource: str
    cores: int
    memory_bytes: int
    tasks: int
    planned_start_s: float = 0.0
    planned_end_s: float = 0.0
    gpus: int = 0  # the machine type's GPUs (section 5 of the spec), all of them the allocation's

    def record(
        self, backend: str, external_id: str, started_at: datetime, ended_at: datetime, source: str
    ) -> LeaseRecord:
        """This machine's allocation as it really ran, for the run record (every backend reports it so)."""
        return LeaseRecord(
            dag_id=self.dag_id,
            run_id=self.run_id,
            machine=self.machine,
            resource=self.resource,
            backend=backend,
            external_id=external_id,
            started_at=started_at,
            ended_at=ended_at,
            source=source,
        )


def lease_key(dag_id: str, run_id: str, machine: str) -> str:
    """``lease-<readable>-<digest>``: a planned machine of a run, as safe as :func:`job_key`."""
    identity = json.dumps([dag_id, run_id, machine], ensure_ascii=True)
    digest = hashlib.sha256(identity.encode()).hexdigest()[:KEY_DIGEST_HEX]
    return f"lease-{_UNSAFE.sub('_', f'{dag_id}.{machine}')[:KEY_READABLE_MAX]}-{digest}"


@dataclass(frozen=True)
class JobSpec:
    """One task attempt to run on one catalog resource.

    ``key`` is unique per attempt and safe as a file or job name; ``label`` names the task
    for people (``dag_id.task_id run_id try N``). ``options`` are the resource's own
    catalog keys (``partition``, ``cpu_set``, ``job_queue`` ...).
    """

    key: str
    label: str
    resource: str
    cores: int
    memory_bytes: int
    time_limit_s: float | None
    command: tuple[str, ...]
    job_dir: Path
    options: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    environment: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    lease: MachineLease | None = None  # the planned machine it runs on, when its plan placed it on one
    gpus: int = 0  # the GPUs it reserves (its plan's; section 5 of the spec)

    @property
    def result_path(self) -> Path:
        return self.job_dir / "result.json"

    @property
    def log_path(self) -> Path:
        return self.job_dir / "worker.log"

    @property
    def workload_path(self) -> Path:
        return self.job_dir / "workload.json"

    @property
    def task_ended_path(self) -> Path:
        """Written by the worker the moment the task process exits (Airflow's supervisor reports for seconds after)."""
        return self.job_dir / TASK_ENDED_MARK


@dataclass(frozen=True)
class JobStatus:
    """A backend's view of one job. ``exit_code`` and the rest are set once ``finished``.

    ``oom_killed`` means the job was killed for exceeding its memory (by the worker's
    watchdog, the kernel, SLURM or Batch); ``reason`` says why a job failed or was lost
    in words a user can act on. ``task_ended_at``: a running job whose task process has already
    exited (its supervisor still reports to Airflow); its cores and memory are free from then.
    """

    phase: JobPhase
    exit_code: int | None = None
    oom_killed: bool = False
    reason: str = ""
    host: str = ""
    queued_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    peak_rss_bytes: int | None = None
    cpu_time_s: float | None = None
    task_ended_at: datetime | None = None
    # The provider took the machine back under the job (a spot instance reclaimed, a SLURM
    # preemption): the task did not fail, its capacity vanished; it re-runs on its type's fallback.
    interrupted: bool = False

    @property
    def succeeded(self) -> bool:
        """The job ran to its end and exited 0 (the Airflow task may still have failed)."""
        return self.phase == "finished" and self.exit_code == 0 and not self.oom_killed


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
KEY_READABLE_MAX = 48  # characters of the readable prefix; with the digest a key fits a SLURM pilot's job name
KEY_DIGEST_HEX = 32  # 128 bits of SHA-256


def job_key(dag_id: str, task_id: str, run_id: str, try_number: int, map_index: int) -> str:
    """A file- and job-name-safe key for one attempt, stable across scheduler restarts.

    ``<readable>-<digest>``: the readable part (``dag.task.tryN[.mapM]``, unsafe characters as
    ``_``, cut to :data:`KEY_READABLE_MAX`) is for people; the digest, SHA-256 of the raw tuple
    (JSON, so no two tuples share an encoding), is the identity. Two attempts whose readable
    parts are equal (try 1 and 2 of a long task id, run ids that differ in ``+`` and ``_``)
    still get different keys. At most 81 characters, all of ``[A-Za-z0-9_.-]``.
    """
    identity = json.dumps([dag_id, task_id, run_id, int(try_number), int(map_index)], ensure_ascii=True)
    digest = hashlib.sha256(identity.encode()).hexdigest()[:KEY_DIGEST_HEX]
    readable = f"{dag_id}.{task_id}.try{try_number}" + (f".map{map_index}" if map_index >= 0 else "")
    return f"{_UNSAFE.sub('_', readable)[:KEY_READABLE_MAX]}-{digest}"


@dataclass(frozen=True)
class JobResult:
    """The result file the worker writes when the task process tree has ended."""

    exit_code: int
    oom_killed: bool
    timed_out: bool
    reason: str
    host: str
    started_at: datetime
    ended_at: datetime
    peak_rss_bytes: int
    cpu_time_s: float
    memory_limit_bytes: int | None

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": RESULT_FORMAT,
                "exit_code": self.exit_code,
                "oom_killed": self.oom_killed,
                "timed_out": self.timed_out,
                "reason": self.reason,
                "host": self.host,
                "started_at": self.started_at.isoformat(),
                "ended_at": self.ended_at.isoformat(),
                "peak_rss_bytes": self.peak_rss_bytes,
                "cpu_time_s": self.cpu_time_s,
                "memory_limit_bytes": self.memory_limit_bytes,
            },
            indent=1,
        )

    def write(self, path: Path) -> None:
        """Write atomically: a reader sees the whole file or none (mode 0600, never through a symlink)."""
        write_private(path, self.to_json())

    def status(self) -> JobStatus:
        return JobStatus(
            phase="finished",
            exit_code=self.exit_code,
            oom_killed=self.oom_killed,
            reason=self.reason,
            host=self.host,
            started_at=self.started_at,
            ended_at=self.ended_at,
            peak_rss_bytes=self.peak_rss_bytes,
            cpu_time_s=self.cpu_time_s,
        )


def read_result(path: Path) -> JobResult | None:
    """The worker's result file, or None while it does not exist. A corrupt file raises BackendError."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise BackendError("worker", f"result file {path} unreadable: {exc}", transient=False) from None
    try:
        if raw.get("format") != RESULT_FORMAT:
            raise ValueError(f"format {raw.get('format')!r}, expected {RESULT_FORMAT!r}")
        limit = raw["memory_limit_bytes"]
        return JobResult(
            exit_code=int(raw["exit_code"]),
            oom_killed=bool(raw["oom_killed"]),
            timed_out=bool(raw["timed_out"]),
            reason=str(raw["reason"]),
            host=str(raw["host"]),
            started_at=_aware(datetime.fromisoformat(raw["started_at"])),
            ended_at=_aware(datetime.fromisoformat(raw["ended_at"])),
            peak_rss_bytes=int(raw["peak_rss_bytes"]),
            cpu_time_s=float(raw["cpu_time_s"]),
            memory_limit_bytes=None if limit is None else int(limit),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BackendError("worker", f"result file {path} malformed: {exc}", transient=False) from None


def read_task_ended(job_dir: Path | None) -> datetime | None:
    """When the worker marked the task process ended (``DIR/task-ended``), or None before that.
    A mark that does not parse still says the task has ended: it counts from now."""
    if job_dir is None:
        return None
    try:
        text = (job_dir / TASK_ENDED_MARK).read_text().strip()
    except OSError:
        return None
    try:
        return _aware(datetime.fromisoformat(text))
    except ValueError:
        return datetime.now(UTC)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)

"""The live queue of a SLURM cluster: pending and running jobs with what they asked for.

:func:`read_snapshot` asks ``squeue`` (``--json`` where this SLURM has it, else ``--Format``
with a ``|`` after each field) and returns a frozen :class:`QueueSnapshot`. Memory is read from
the job's TRES string, which SLURM has already multiplied out (``--mem-per-cpu`` times cores),
so a job's ``memory_bytes`` is its whole request. Finished jobs that ``squeue`` still lists
(for ``MinJobAge`` seconds) are left out.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from agora_optimizer.slurm import values
from agora_optimizer.slurm.commands import format_fields, run_slurm
from agora_optimizer.slurm.errors import SlurmCommandError, SlurmOutputError

QueuedState = Literal["pending", "running"]
SnapshotMethod = Literal["auto", "json", "format"]

_STATES: Mapping[str, QueuedState] = {
    "PENDING": "pending",
    "RUNNING": "running",
    "COMPLETING": "running",  # still holds its cores and memory
    "CONFIGURING": "running",
}
# Pending for a reason that does not clear as the queue drains: such a job is not ahead of anyone.
_BLOCKED_REASONS = ("JobHeld", "PartitionConfig", "PartitionTimeLimit", "PartitionNodeLimit", "BadConstraints")

FORMAT_FIELDS = (
    "JobID",
    "Partition",
    "State",
    "NumCPUs",
    "tres-alloc",
    "TimeLimit",
    "SubmitTime",
    "StartTime",
    "Reason",
)
FORMAT_ARGV = ("squeue", "--noheader", "--all", "--array", "--Format", format_fields(FORMAT_FIELDS))
JSON_ARGV = ("squeue", "--all", "--json")


@dataclass(frozen=True)
class QueuedJob:
    """One job in the queue. ``partition`` is as SLURM prints it (``"debug,compute"`` for a job
    submitted to two); ``time_limit_s`` is ``None`` for an unlimited job."""

    job_id: str
    partition: str
    state: QueuedState
    cores: int
    memory_bytes: int
    time_limit_s: float | None
    submitted_at: datetime
    started_at: datetime | None = None
    reason: str = ""

    def in_partition(self, name: str) -> bool:
        return name in self.partition.split(",")

    @property
    def blocked(self) -> bool:
        """Pending for a reason that will not clear by itself (held, over a partition's limit)."""
        return self.state == "pending" and self.reason.startswith(_BLOCKED_REASONS)


@dataclass(frozen=True)
class QueueSnapshot:
    """The queue at ``taken_at``, as one ``squeue`` call saw it."""

    taken_at: datetime
    jobs: tuple[QueuedJob, ...]
    source: str

    @property
    def partitions(self) -> tuple[str, ...]:
        return tuple(sorted({name for job in self.jobs for name in job.partition.split(",")}))

    def pending(self, partition: str | None = None) -> tuple[QueuedJob, ...]:
        return tuple(j for j in self.jobs if j.state == "pending" and (partition is None or j.in_partition(partition)))

    def running(self, partition: str | None = None) -> tuple[QueuedJob, ...]:
        return tuple(j for j in self.jobs if j.state == "running" and (partition is None or j.in_partition(partition)))

    def job(self, job_id: str) -> QueuedJob | None:
        return next((j for j in self.jobs if j.job_id == job_id), None)


def read_snapshot(method: SnapshotMethod = "auto", timeout_s: float = 30.0) -> QueueSnapshot:
    """Ask ``squeue`` for the queue now. ``auto`` tries ``--json`` and falls back to ``--Format``."""
    if method in ("auto", "json"):
        taken_at = datetime.now(UTC)
        try:
            return parse_squeue_json(run_slurm(JSON_ARGV, timeout_s), taken_at)
        except SlurmCommandError:
            if method == "json":
                raise
    taken_at = datetime.now(UTC)
    return parse_squeue_format(run_slurm(FORMAT_ARGV, timeout_s), taken_at)


# ---- squeue --Format -------------------------------------------------------------------------------


def parse_squeue_format(text: str, taken_at: datetime) -> QueueSnapshot:
    """Parse ``FORMAT_ARGV``'s output (times as epoch seconds). A malformed line raises
    ``SlurmOutputError`` naming the line: a queue with a line missing would mislead the model."""
    source = "squeue --Format"
    jobs: list[QueuedJob] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) != len(FORMAT_FIELDS) + 1 or cells[-1].strip():
            where = f"line {number}"
            raise SlurmOutputError(source, where, f"expected {len(FORMAT_FIELDS)} fields ended by '|', got {line!r}")
        row = dict(zip(FORMAT_FIELDS, (cell.strip() for cell in cells), strict=False))
        job = _format_job(row, f"{source} line {number}")
        if job is not None:
            jobs.append(job)
    return QueueSnapshot(taken_at=taken_at, jobs=tuple(jobs), source=source)


def _format_job(row: Mapping[str, str], source: str) -> QueuedJob | None:
    state = _STATES.get(values.state(row["State"]))
    if state is None:
        return None
    submitted_at = values.epoch_time(row["SubmitTime"], source, "SubmitTime")
    if submitted_at is None:
        raise SlurmOutputError(source, "SubmitTime", f"job {row['JobID']} has no submit time")
    memory = values.tres_memory_bytes(row["tres-alloc"], source, "tres-alloc")
    return QueuedJob(
        job_id=_job_id(row["JobID"], source),
        partition=_partition(row["Partition"], source),
        state=state,
        cores=values.integer(row["NumCPUs"], source, "NumCPUs"),
        memory_bytes=memory or 0,
        time_limit_s=values.time_limit_s(row["TimeLimit"], source, "TimeLimit"),
        submitted_at=submitted_at,
        started_at=values.epoch_time(row["StartTime"], source, "StartTime") if state == "running" else None,
        reason=values.nothing_as_empty(row["Reason"]),
    )


# ---- squeue --json (22.05's flat numbers, and 23.02+'s {"set", "infinite", "number"} objects) --------


def parse_squeue_json(text: str, taken_at: datetime) -> QueueSnapshot:
    source = "squeue --json"
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmOutputError(source, "(document)", f"not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise SlurmOutputError(source, "(document)", "not a JSON object")
    errors = document.get("errors") or []
    if errors:  # squeue --json exits 0 even when it cannot reach slurmctld; it says so here
        said = "; ".join(_json_error(e) for e in errors) if isinstance(errors, list) else str(errors)
        raise SlurmCommandError(shlex.join(JSON_ARGV), f"SLURM reports: {said}")
    if not isinstance(document.get("jobs"), list):
        raise SlurmOutputError(source, "jobs", "missing, or not a list")
    jobs: list[QueuedJob] = []
    for index, item in enumerate(document["jobs"]):
        where = f"{source} jobs[{index}]"
        if not isinstance(item, dict):
            raise SlurmOutputError(where, "(job)", f"not an object: {item!r}")
        job = _json_job(item, where)
        if job is not None:
            jobs.append(job)
    return QueueSnapshot(taken_at=taken_at, jobs=tuple(jobs), source=source)


def _json_job(item: Mapping[str, Any], source: str) -> QueuedJob | None:
    raw_state = item.get("job_state")
    if isinstance(raw_state, list):  # 23.02+: a list of flags, the base state first
        raw_state = raw_state[0] if raw_state else ""
    state = _STATES.get(values.state(str(raw_state)))
    if state is None:
        return None
    job_id = _required(item, "job_id", source, lambda v: str(_number(v, source, "job_id")))
    array_task = _number(item.get("array_task_id"), source, "array_task_id")
    if array_task is not None and _number(item.get("array_job_id"), source, "array_job_id"):
        job_id = f"{_number(item.get('array_job_id'), source, 'array_job_id')}_{array_task}"
    tres_text = str(item.get("tres_alloc_str") or "") if state == "running" else ""
    tres_text = tres_text or str(item.get("tres_req_str") or "")
    limit_min = _number(item.get("time_limit"), source, "time_limit")
    submitted = _number(item.get("submit_time"), source, "submit_time")
    started = _number(item.get("start_time"), source, "start_time")
    if not submitted:
        raise SlurmOutputError(source, "submit_time", f"job {job_id} has no submit time")
    reason = item.get("state_reason")
    return QueuedJob(
        job_id=job_id,
        partition=_partition(str(item.get("partition") or ""), source),
        state=state,
        cores=_required(item, "cpus", source, lambda v: int(_number(v, source, "cpus") or 0)),
        memory_bytes=values.tres_memory_bytes(tres_text, source, "tres_req_str") or 0,
        time_limit_s=None if limit_min is None else float(limit_min) * 60.0,
        submitted_at=datetime.fromtimestamp(submitted, tz=UTC),
        started_at=datetime.fromtimestamp(started, tz=UTC) if state == "running" and started else None,
        reason=values.nothing_as_empty(str(reason or "")),
    )


def _json_error(error: object) -> str:
    if not isinstance(error, dict):
        return str(error)
    parts = [str(error[k]) for k in ("description", "error", "source") if error.get(k)]
    return " / ".join(parts) or str(error)


def _number(value: object, source: str, field: str) -> int | None:
    """A JSON number: a plain int, ``null``, or ``{"set": bool, "infinite": bool, "number": int}``."""
    if value is None:
        return None
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SlurmOutputError(source, field, f"not a number: {value!r}")
    if value >= 0xFFFFFFFE:  # SLURM's NO_VAL / INFINITE sentinels
        return None
    return int(value)


def _required(item: Mapping[str, Any], field: str, source: str, convert: Callable[[object], Any]) -> Any:
    if field not in item:
        raise SlurmOutputError(source, field, "missing")
    return convert(item[field])


def _job_id(text: str, source: str) -> str:
    if not text or not text.replace("_", "").replace("+", "").isdigit():
        raise SlurmOutputError(source, "JobID", f"not a job id: {text!r}")
    return text


def _partition(text: str, source: str) -> str:
    if not text:
        raise SlurmOutputError(source, "Partition", "empty")
    return text

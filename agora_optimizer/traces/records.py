"""One task attempt, as the trace store keeps it.

A :class:`TaskAttempt` is what every collector (the Airflow listener, the WfFormat
and Airflow importers, the executor) produces and what the predictor learns from.
Build it with :meth:`TaskAttempt.create`, which refuses impossible rows (end before
start, negative memory) with a :class:`TraceRecordError` that names the attempt and
the field, so that a bad row can be skipped and counted while the good ones are kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal, get_args

from agora_optimizer.errors import AgoraError
from agora_optimizer.model.limits import MAX_CORES, MAX_RUNTIME_S, MAX_SPEED
from agora_optimizer.model.workflow import shown

AttemptState = Literal["success", "failed", "oom_killed", "cancelled", "lost", "interrupted"]
ATTEMPT_STATES: tuple[AttemptState, ...] = get_args(AttemptState)

MAX_BYTES = 2**60
MAX_FILES = 10**9  # files one task reads or writes: beyond, a count is absurd
MAX_MAP_WIDTH = 10**6  # instances of one mapped task in one run (Airflow's [core] max_map_length is 1024 by default)


class TraceRecordError(AgoraError):
    """A trace row that cannot be true (end before start, negative memory, unknown state...)."""

    def __init__(self, attempt: str, field: str, reason: str) -> None:
        self.attempt = attempt
        self.field = field
        self.reason = reason
        super().__init__(f"trace {attempt}: field '{field}': {reason}")


@dataclass(frozen=True)
class TaskAttempt:
    """One run of one task instance (one try of one map index of one DAG run).

    Times are timezone-aware UTC datetimes. ``resource_type`` names a catalog type
    (``m7i.large``, ``slurm:compute``, ``local:default``); ``speed`` is that type's
    per-core speed when the collector knows it (WfFormat machines do not say). ``machine``
    and ``plan_version`` say where the plan in force placed the attempt ("" when none did).
    """

    dag_id: str
    task_id: str
    run_id: str
    try_number: int = 1
    map_index: int = -1
    category: str = ""
    operator: str = ""
    resource_type: str = ""
    backend: str = ""
    host: str = ""
    requested_cores: int | None = None
    requested_memory_bytes: int | None = None
    speed: float | None = None
    queued_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    runtime_s: float | None = None
    peak_rss_bytes: int | None = None
    cpu_time_s: float | None = None
    state: AttemptState = "success"
    input_bytes: int | None = None
    output_bytes: int | None = None
    error_text: str = ""
    machine: str = ""  # the machine id (``TYPE#N``) the attempt ran on, when a plan placed it
    plan_version: str = ""  # the version of the plan in force (:func:`~agora_optimizer.plans.store.plan_version`)
    input_files: int | None = None  # how many files ``input_bytes`` sums (None: not recorded)
    output_files: int | None = None  # ... and ``output_bytes``
    map_width: int | None = None  # a mapped task's instances in this run (None: unmapped, or not recorded)

    @property
    def key(self) -> str:
        """``dag_id/task_id[map_index]/run_id#try``: names the attempt in messages."""
        index = f"[{self.map_index}]" if self.map_index >= 0 else ""
        return f"{self.dag_id}/{self.task_id}{index}/{self.run_id}#{self.try_number}"

    @classmethod
    def create(cls, **fields: object) -> TaskAttempt:
        """Build an attempt and check it; ``runtime_s`` is derived from the times when absent."""
        attempt = cls(**fields)  # type: ignore[arg-type]
        return attempt.checked()

    def checked(self) -> TaskAttempt:
        """Return this attempt (with ``runtime_s`` filled in from the times), or raise ``TraceRecordError``."""
        key = self.key
        for name in ("dag_id", "task_id", "run_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise TraceRecordError(key, name, f"must be a non-empty string, got {shown(value)}")
        if self.state not in ATTEMPT_STATES:
            raise TraceRecordError(key, "state", f"must be one of {', '.join(ATTEMPT_STATES)}, got {shown(self.state)}")
        if self.try_number < 1:
            raise TraceRecordError(key, "try_number", f"must be >= 1, got {self.try_number}")
        for name in ("queued_at", "started_at", "ended_at"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise TraceRecordError(key, name, f"must be a timezone-aware datetime, got {shown(value)}")
        if self.started_at and self.ended_at and self.ended_at < self.started_at:
            raise TraceRecordError(key, "ended_at", f"ends ({self.ended_at}) before it starts ({self.started_at})")
        if self.queued_at and self.started_at and self.started_at < self.queued_at:
            reason = f"starts ({self.started_at}) before it is queued ({self.queued_at})"
            raise TraceRecordError(key, "started_at", reason)
        for name, maximum in (
            ("runtime_s", MAX_RUNTIME_S),
            ("cpu_time_s", MAX_RUNTIME_S),
            ("peak_rss_bytes", MAX_BYTES),
            ("input_bytes", MAX_BYTES),
            ("output_bytes", MAX_BYTES),
            ("input_files", MAX_FILES),
            ("output_files", MAX_FILES),
            ("requested_memory_bytes", MAX_BYTES),
            ("requested_cores", MAX_CORES),
            ("speed", MAX_SPEED),
        ):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise TraceRecordError(key, name, f"must be a finite number, got {shown(value)}")
            if value < 0 or (name == "speed" and value == 0):
                raise TraceRecordError(key, name, f"must be {'> 0' if name == 'speed' else '>= 0'}, got {shown(value)}")
            if value > maximum:
                raise TraceRecordError(key, name, f"must be <= {maximum:g}, got {shown(value)} (absurd)")
        if self.map_width is not None:
            width = self.map_width
            if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= MAX_MAP_WIDTH:
                reason = f"must be a whole number in [1, {MAX_MAP_WIDTH}], got {shown(width)}"
                raise TraceRecordError(key, "map_width", reason)
            if self.map_index >= width:
                raise TraceRecordError(key, "map_width", f"must be above the map index {self.map_index}, got {width}")
        if self.runtime_s is None and self.started_at and self.ended_at:
            return replace(self, runtime_s=(self.ended_at - self.started_at).total_seconds())
        return self


def utc(timestamp: float) -> datetime:
    """A POSIX timestamp as an aware UTC datetime."""
    return datetime.fromtimestamp(timestamp, tz=UTC)

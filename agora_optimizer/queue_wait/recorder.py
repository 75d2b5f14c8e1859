"""One row per job the project submits to SLURM: the queue it met, and later how long it waited.

Call :func:`record_submission` right after ``sbatch`` (it reads the queue, leaving the job itself
out) and :func:`update_waits` now and then: it asks accounting about the rows still without a
wait (the SLURM backend of the executor does both itself, see
:mod:`agora_optimizer.queue_wait.submissions`). Rows live in the table ``queue_waits`` of any
SQLAlchemy database: ``[agora] queue_wait_store_url``, by default SQLite at
``$AIRFLOW_HOME/agora/queue_waits.db`` (``AIRFLOW_HOME`` defaults to ``~/airflow``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    DateTime,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import SQLAlchemyError

from agora_optimizer.database import DatabaseError, failure_reason, mask_url, open_engine
from agora_optimizer.errors import AgoraError
from agora_optimizer.queue_wait.features import NUMERIC_COLUMNS, QueueFeatures
from agora_optimizer.slurm.accounting import QueueWaitRecord, Unstarted, read_accounting
from agora_optimizer.slurm.queue import QueueSnapshot, SnapshotMethod, read_snapshot

BUSY_TIMEOUT_S = 5.0  # how long a writer waits for the lock (and at most to reach a PostgreSQL server)
# A row and an accounting record are the same job when the ids match and SLURM's submit time is
# within this of the time the row was recorded (job ids start again on a cluster whose state is wiped).
SUBMIT_TOLERANCE = timedelta(minutes=10)

metadata = MetaData()
queue_waits = Table(
    "queue_waits",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(64), nullable=False),
    Column("partition", String(128), nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    Column("snapshot_source", String(32), nullable=False),
    *(
        Column(name, Integer if name.endswith(("_jobs", "_cores")) or name == "cores" else Float, nullable=False)
        for name in NUMERIC_COLUMNS
    ),
    Column("outcome", String(16), nullable=False, default="waiting"),  # waiting | started | never_started
    Column("started_at", DateTime(timezone=True), nullable=True),
    Column("wait_s", Float, nullable=True),
    UniqueConstraint("job_id", "recorded_at", name="uq_queue_waits_job"),
)


class QueueWaitStoreError(AgoraError):
    """The queue-wait database cannot be opened, read or written."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"queue-wait store {mask_url(url)}: {reason}")


@dataclass(frozen=True)
class QueueWaitObservation:
    """A recorded job whose wait is known: what the model learns from."""

    job_id: str
    recorded_at: datetime
    features: QueueFeatures
    wait_s: float


@dataclass(frozen=True)
class WaitUpdate:
    """What :func:`update_waits` did."""

    started: int
    never_started: int
    still_waiting: int
    skipped: tuple[str, ...]
    source: str


def default_store_url() -> str:
    """``[agora] queue_wait_store_url`` (where the SLURM backend records), else SQLite under ``$AIRFLOW_HOME/agora``."""
    try:
        from agora_optimizer import settings

        configured = settings.get("queue_wait_store_url")
    except ImportError:  # no Airflow here: no [agora] section to read
        configured = ""
    if configured:
        return configured
    home = Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")
    return f"sqlite:///{home / 'agora' / 'queue_waits.db'}"


class QueueWaitStore:
    """The ``queue_waits`` table in the database at ``url`` (created when absent), opened by
    :func:`agora_optimizer.database.open_engine`: a writer waits ``busy_timeout_s`` for the lock."""

    def __init__(self, url: str | None = None, busy_timeout_s: float = BUSY_TIMEOUT_S) -> None:
        self.url = url or default_store_url()
        try:
            self.engine: Engine = open_engine(self.url, busy_timeout_s)
        except DatabaseError as exc:
            raise QueueWaitStoreError(self.url, f"cannot open: {exc.reason}") from None
        try:
            metadata.create_all(self.engine)
        except (SQLAlchemyError, ImportError, ValueError, OSError) as exc:
            self.engine.dispose()
            reason = failure_reason(exc, self.url, busy_timeout_s)
            raise QueueWaitStoreError(self.url, f"cannot open: {reason}") from None

    def close(self) -> None:
        self.engine.dispose()

    def add(self, job_id: str, features: QueueFeatures, recorded_at: datetime, snapshot_source: str) -> bool:
        """Store a submitted job; ``False`` when that job (id and time) is already there."""
        recorded_at = recorded_at.astimezone(UTC)
        row = {"job_id": job_id, "recorded_at": recorded_at, "snapshot_source": snapshot_source, "outcome": "waiting"}
        row.update(features.as_row())
        with self._transaction() as conn:
            known = conn.execute(
                select(queue_waits.c.id).where(queue_waits.c.job_id == job_id, queue_waits.c.recorded_at == recorded_at)
            ).first()
            if known is not None:
                return False
            conn.execute(insert(queue_waits).values(**row))
            return True

    def waiting(self) -> list[tuple[str, datetime]]:
        """``(job_id, recorded_at)`` of the rows whose job has not started yet."""
        with self._transaction() as conn:
            rows = conn.execute(
                select(queue_waits.c.job_id, queue_waits.c.recorded_at).where(queue_waits.c.outcome == "waiting")
            ).all()
        return [(job_id, _aware(at)) for job_id, at in rows]

    def resolve(self, records: Iterable[QueueWaitRecord], unstarted: Iterable[Unstarted] = ()) -> tuple[int, int]:
        """Fill in the waits of the rows these records are about; mark jobs that never started.
        Returns (rows given a wait, rows marked never started)."""
        by_id: dict[str, list[QueueWaitRecord]] = {}
        for record in records:
            by_id.setdefault(record.job_id, []).append(record)
        finished = {u.job_id for u in unstarted if u.finished}
        started = never = 0
        with self._transaction() as conn:
            rows = conn.execute(
                select(queue_waits.c.id, queue_waits.c.job_id, queue_waits.c.recorded_at).where(
                    queue_waits.c.outcome == "waiting"
                )
            ).all()
            for row_id, job_id, recorded_at in rows:
                match = _closest(by_id.get(job_id, []), _aware(recorded_at))
                if match is not None:
                    values: dict[str, Any] = {
                        "outcome": "started",
                        "started_at": match.started_at,
                        "wait_s": match.wait_s,
                    }
                    started += 1
                elif job_id in finished:
                    values = {"outcome": "never_started"}
                    never += 1
                else:
                    continue
                conn.execute(update(queue_waits).where(queue_waits.c.id == row_id).values(**values))
        return started, never

    def observations(self, partition: str | None = None) -> list[QueueWaitObservation]:
        """Every row with a known wait, oldest first."""
        query = select(queue_waits).where(queue_waits.c.outcome == "started").order_by(queue_waits.c.recorded_at)
        if partition is not None:
            query = query.where(queue_waits.c.partition == partition)
        with self._transaction() as conn:
            rows = conn.execute(query).mappings().all()
        names = [f.name for f in fields(QueueFeatures)]
        return [
            QueueWaitObservation(
                job_id=row["job_id"],
                recorded_at=_aware(row["recorded_at"]),
                features=QueueFeatures(**{name: row[name] for name in names}),
                wait_s=float(row["wait_s"]),
            )
            for row in rows
        ]

    def counts(self) -> dict[str, int]:
        """Rows per outcome (waiting, started, never_started)."""
        with self._transaction() as conn:
            rows = conn.execute(select(queue_waits.c.outcome, func.count()).group_by(queue_waits.c.outcome)).all()
        return {outcome: int(count) for outcome, count in rows}

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """``engine.begin()``, with database errors turned into a ``QueueWaitStoreError`` naming the URL."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise QueueWaitStoreError(self.url, str(exc).splitlines()[0]) from None


def record_submission(
    store: QueueWaitStore,
    job_id: str,
    partition: str,
    cores: int,
    memory_bytes: int,
    time_limit_s: float | None,
    snapshot: QueueSnapshot | None = None,
    method: SnapshotMethod = "auto",
) -> QueueFeatures:
    """Record a job just submitted: the queue it met (``snapshot``, read now when not given)."""
    snapshot = snapshot or read_snapshot(method)
    features = QueueFeatures.from_snapshot(snapshot, partition, cores, memory_bytes, time_limit_s, job_id)
    store.add(job_id, features, snapshot.taken_at, snapshot.source)
    return features


def update_waits(store: QueueWaitStore, jobcomp_path: str | Path | None = None) -> WaitUpdate:
    """Ask accounting about every row still waiting and store what it says."""
    waiting = store.waiting()
    if not waiting:
        return WaitUpdate(0, 0, 0, (), "nothing to ask")
    ids = sorted({job_id for job_id, _ in waiting})
    read = read_accounting(job_ids=ids, jobcomp_path=jobcomp_path)
    started, never = store.resolve(read.records, read.unstarted)
    return WaitUpdate(started, never, len(waiting) - started - never, read.skipped, read.source)


def _closest(records: list[QueueWaitRecord], recorded_at: datetime) -> QueueWaitRecord | None:
    near = [r for r in records if abs(r.submitted_at - recorded_at) <= SUBMIT_TOLERANCE]
    return min(near, key=lambda r: abs(r.submitted_at - recorded_at), default=None)


def _aware(value: datetime) -> datetime:
    """SQLite gives naive datetimes back: they were stored as UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

"""The executor's part of each attempt's trace row: written to the trace store, or spooled while it is down.

All of it runs in the scheduler's loop (``sync``), so the store is opened once with the hooks' short busy
timeout (:data:`~agora_optimizer.traces.store.HOOK_BUSY_TIMEOUT_S`), and once a write has failed the rows
go straight to the spool until the next replay (every :data:`REPLAY_INTERVAL_S`) finds the store free: a
store held by another process costs the loop one short wait per interval, not one per job.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.jobs.directories import mark_traced
from agora_optimizer.executor.jobs.records import JobRecord, executor_attempt
from agora_optimizer.executor.jobs.spec import JobStatus
from agora_optimizer.traces.spool import SPOOL_NAME, spool
from agora_optimizer.traces.spool import pending as spool_pending
from agora_optimizer.traces.spool import replay as replay_spool

if TYPE_CHECKING:
    from agora_optimizer.runs.store import RunStore

REPLAY_INTERVAL_S = 5.0  # how often rows spooled while the trace store was down are written again


class TraceWriter:
    """Writes each ended job's row (backend, host, exit code, peak memory) to the trace store, which also holds
    the run records (:meth:`store`); a row the store cannot take waits in the spool of ``state_dir``."""

    def __init__(self, state_dir: Path, log: Any) -> None:
        self._state_dir = state_dir
        self._log = log
        self._store: RunStore | None = None
        self._last_replay = 0.0
        self._retry_at = 0.0  # after a failed write, rows go to the spool until then

    def write(self, record: JobRecord, status: JobStatus) -> None:
        """The job's row; its directory is then marked traced, which the sweep leaves alone."""
        try:
            if time.monotonic() < self._retry_at:
                raise AgoraError("it failed a moment ago; the spool's next replay tries it again")
            try:
                store = self.store()
                key = (record.dag_id, record.task_id, record.run_id, record.try_number, record.map_index)
                store.add([executor_attempt(record, status, store.attempt(*key))])
            except Exception:
                self._retry_at = time.monotonic() + REPLAY_INTERVAL_S
                raise
        except Exception as exc:  # traces must never fail a task: the row waits in the spool for the store
            try:
                kept = spool(executor_attempt(record, status, None), "executor", self._state_dir / SPOOL_NAME)
            except Exception:
                self._log.exception("Could not write the trace of %s, nor keep it for later (%s)", record.label, exc)
                return
            self._log.warning("Trace store unavailable (%s); the row of %s waits in %s", exc, record.label, kept)
        job_dir = self._state_dir / record.key
        with contextlib.suppress(OSError):
            if job_dir.is_dir():
                mark_traced(job_dir)  # the sweep leaves it alone

    def store(self) -> RunStore:
        """The trace store (with its run records), opened once: a finished job must not pay for an engine."""
        if self._store is None:
            from agora_optimizer.runs.store import RunStore
            from agora_optimizer.traces.store import HOOK_BUSY_TIMEOUT_S, default_store_url

            self._store = RunStore(default_store_url(), busy_timeout_s=HOOK_BUSY_TIMEOUT_S)
        return self._store

    def replay(self) -> None:
        """Write the rows that waited in the trace spool while the store was down (at most every few seconds)."""
        if time.monotonic() - self._last_replay < REPLAY_INTERVAL_S:
            return
        self._last_replay = time.monotonic()
        spool_dir = self._state_dir / SPOOL_NAME
        try:
            if not spool_pending(spool_dir):
                return
            written = replay_spool(self.store(), spool_dir)
            self._retry_at = 0.0  # free again: rows are written at once again
        except Exception as exc:  # still down: the rows keep waiting
            self._retry_at = time.monotonic() + REPLAY_INTERVAL_S
            waiting = spool_pending(spool_dir)
            self._log.warning("Trace store still unavailable (%s); %d rows wait in the spool", exc, waiting)
            return
        if written:
            self._log.info("Wrote %d trace rows that waited in the spool while the trace store was down", written)

    def close(self) -> None:
        """Close the store (a later row opens it again)."""
        if self._store is not None:
            self._store.close()
            self._store = None

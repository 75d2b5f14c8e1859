"""``SubmissionLog``: the SLURM backend records the queue each of its jobs met, and later its wait.

This is how the queue-wait model learns from the project's own runs without anyone calling
``agora queue record``: the backend calls :meth:`SubmissionLog.submitted` right after ``sbatch``
(for a pilot: right after ``scontrol release``, when it becomes eligible) and
:meth:`SubmissionLog.poll` with every status poll. Rows go to the queue-wait store
(``[agora] queue_wait_store_url``), where ``agora queue train`` finds them.

It samples: one fresh ``squeue`` per recorded job, and at most one recorded job per
``min_interval_s`` (a burst of submissions would otherwise cost a burst of ``squeue`` calls). It
asks accounting about the waiting rows when the backend has seen one of the jobs it recorded
start (at most every ``min_update_gap_s``: slurmdbd may lag behind, so it asks again later), and
at least every ``update_interval_s`` once it has recorded a job (each update also fills in the
rows an earlier process left waiting). It never raises:
a store or SLURM command that fails is logged (once, then every ``LOG_EVERY`` failures) and
counted in :attr:`failures`, and the job runs as it would without it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from agora_optimizer.errors import AgoraError
from agora_optimizer.slurm.queue import SnapshotMethod

if TYPE_CHECKING:
    from agora_optimizer.queue_wait.recorder import QueueWaitStore

log = logging.getLogger(__name__)
LOG_EVERY = 100


class SubmissionLog:
    """Records sampled submissions of one backend into the queue-wait store at ``store_url``."""

    def __init__(
        self,
        store_url: str | None = None,
        *,
        min_interval_s: float = 1.0,
        update_interval_s: float = 60.0,
        min_update_gap_s: float = 5.0,
        command_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store_url = store_url
        self.min_interval_s = min_interval_s
        self.update_interval_s = update_interval_s
        self.min_update_gap_s = min_update_gap_s
        self.command_timeout_s = command_timeout_s
        self._clock = clock
        self._store: QueueWaitStore | None = None
        self._method: SnapshotMethod = "auto"
        self._last_recorded = -float("inf")
        self._last_update = -float("inf")
        self._unresolved: set[str] = set()  # jobs recorded here whose wait is not stored yet
        self._lock = threading.Lock()
        self.recorded = 0  # jobs recorded
        self.skipped = 0  # jobs left out by the sampling
        self.failures = 0  # records or updates that failed (logged)

    def submitted(self, job_id: str, partition: str, cores: int, memory_bytes: int, time_limit_s: float | None) -> bool:
        """Record ``job_id``, just submitted (or released), with the queue it meets now; ``True`` if recorded."""
        from agora_optimizer.queue_wait.recorder import record_submission
        from agora_optimizer.slurm.queue import read_snapshot

        with self._lock:
            now = self._clock()
            if now - self._last_recorded < self.min_interval_s:
                self.skipped += 1
                return False
            self._last_recorded = now
            try:
                snapshot = read_snapshot(self._method, self.command_timeout_s)
                self._method = "json" if snapshot.source == "squeue --json" else "format"
                record_submission(self._open(), job_id, partition, cores, memory_bytes, time_limit_s, snapshot)
            except (AgoraError, OSError) as exc:
                self._failed(f"recording SLURM job {job_id}'s queue", exc)
                return False
            self.recorded += 1
            self._unresolved.add(job_id)
            return True

    def poll(self, started: Iterable[str] = (), *, force: bool = False) -> None:
        """Store the waits accounting knows, when due: ``started`` are SLURM ids the backend saw started."""
        from agora_optimizer.queue_wait.recorder import update_waits

        with self._lock:
            now = self._clock()
            since = now - self._last_update
            news = bool(self._unresolved.intersection(started)) and since >= self.min_update_gap_s
            if self.recorded == 0 or not (force or news or since >= self.update_interval_s):
                return
            self._last_update = now
            try:
                store = self._open()
                update_waits(store)
                self._unresolved.intersection_update(job_id for job_id, _ in store.waiting())
            except (AgoraError, OSError) as exc:
                self._failed("reading the recorded jobs' waits from SLURM accounting", exc)

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def _open(self) -> QueueWaitStore:
        from agora_optimizer.queue_wait.recorder import QueueWaitStore

        if self._store is None:
            self._store = QueueWaitStore(self.store_url)
        return self._store

    def _failed(self, what: str, exc: Exception) -> None:
        self.failures += 1
        if self.failures == 1 or self.failures % LOG_EVERY == 0:
            log.warning(
                "queue waits: %s failed (%d failure(s) so far; the job is unaffected): %s", what, self.failures, exc
            )

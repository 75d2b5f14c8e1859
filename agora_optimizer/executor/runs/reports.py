"""The run record's share of the executor's work, on its way to the run store: the leases backends released
(with their real start and end), the leases of interrupted spot jobs, and each repair of a run.

Both wait in memory while the run store is down and are written again later (:class:`RunReports`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.runs.record import Repair

REPORTS_MAX = 10_000  # leases and repairs kept while the run store is down
RETRY_INTERVAL_S = 5.0  # how often writing them is tried again
RELEASED_MAX = 10_000  # released leases kept for the run record (AgoraExecutor.lease_records)


class _Log(Protocol):
    def warning(self, msg: Any, /, *args: Any) -> Any: ...


class _RunWriter(Protocol):
    def add_leases(self, records: list[LeaseRecord]) -> int: ...
    def add_repair(self, dag_id: str, run_id: str, repair: Repair) -> None: ...


class RunReports:
    """The leases backends released and the repairs made, on their way to the run store.

    Written at the next :meth:`flush`; while the store is down they wait (at most :data:`REPORTS_MAX`
    of each, the oldest dropped first) and writing is tried again every :data:`RETRY_INTERVAL_S`,
    with one warning per try. They wait in memory only: a scheduler restart loses what waited.
    """

    def __init__(self) -> None:
        self.leases: list[LeaseRecord] = []
        self.repairs: list[tuple[str, str, Repair]] = []
        self.released: list[LeaseRecord] = []  # the backends' released leases, kept for the run record
        self._failed_at = -math.inf

    def add_leases(self, records: list[LeaseRecord]) -> None:
        self.leases.extend(records)
        del self.leases[:-REPORTS_MAX]

    def add_released(self, records: list[LeaseRecord]) -> None:
        """Leases a backend released (real start and end): kept (the last :data:`RELEASED_MAX`), and written."""
        self.released.extend(records)
        del self.released[:-RELEASED_MAX]
        self.add_leases(records)

    def add_repair(self, dag_id: str, run_id: str, repair: Repair) -> None:
        self.repairs.append((dag_id, run_id, repair))
        del self.repairs[:-REPORTS_MAX]

    def flush(self, store: Callable[[], _RunWriter], now_s: float, log: _Log) -> int:
        """Write what waits (not within :data:`RETRY_INTERVAL_S` of a failed try); how many were written."""
        if not (self.leases or self.repairs) or now_s - self._failed_at < RETRY_INTERVAL_S:
            return 0
        written = 0
        try:
            writer = store()
            if self.leases:
                writer.add_leases(self.leases)
                written += len(self.leases)
                self.leases = []
            while self.repairs:
                writer.add_repair(*self.repairs[0])
                self.repairs.pop(0)
                written += 1
        except Exception as exc:  # the run store is the trace store's database: down, the reports wait
            self._failed_at = now_s
            log.warning(
                "agora: run store unreachable (%s); %d leases and %d repairs wait to be written",
                exc, len(self.leases), len(self.repairs),
            )  # fmt: skip
        return written

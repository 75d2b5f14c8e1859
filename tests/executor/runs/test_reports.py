"""The run reports (executor/runs/reports.py): released leases and repairs wait while the run store is down."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agora_optimizer.executor.runs.reports import RELEASED_MAX, RunReports
from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.runs.record import Repair
from agora_optimizer.runs.store import RunStore

MOMENT = datetime(2026, 12, 1, tzinfo=UTC)


def run_store(tmp_path: Path) -> RunStore:
    return RunStore(f"sqlite:///{tmp_path / 'traces.db'}")


class DownStore:
    """A run store that is down until ``up`` (what a PostgreSQL restart looks like to the executor)."""

    def __init__(self, store: RunStore) -> None:
        self.store, self.up = store, False

    def add_leases(self, records: list[LeaseRecord]) -> int:
        if not self.up:
            raise ConnectionError("connection refused")
        return self.store.add_leases(records)

    def add_repair(self, dag_id: str, run_id: str, repair: Repair) -> None:
        if not self.up:
            raise ConnectionError("connection refused")
        self.store.add_repair(dag_id, run_id, repair)


def test_reports_wait_while_the_run_store_is_down_and_are_written_later(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = DownStore(run_store(tmp_path))
    reports = RunReports()
    reports.add_leases([LeaseRecord("d", "r", "m#0", "m", "local", "", MOMENT, MOMENT, "task times")])
    reports.add_repair("d", "r", Repair(1.0, "task a ended 35 % later than planned", ("b",), "kept"))
    log = logging.getLogger("agora.test.reports")
    assert reports.flush(lambda: store, 0.0, log) == 0
    assert "run store unreachable" in caplog.text and "1 leases and 1 repairs wait" in caplog.text
    store.up = True
    assert reports.flush(lambda: store, 1.0, log) == 0  # not again within the retry interval
    assert reports.flush(lambda: store, 10.0, log) == 2
    assert [r.machine for r in store.store.leases("d", "r")] == ["m#0"]
    assert store.store.repairs("d", "r") == [Repair(1.0, "task a ended 35 % later than planned", ("b",), "kept")]
    assert reports.flush(lambda: store, 20.0, log) == 0  # written once


def test_released_leases_are_kept_for_the_run_record_the_last_few_only_and_written_too() -> None:
    reports = RunReports()
    released = [LeaseRecord("d", "r", f"m#{i}", "m", "local", "", MOMENT, MOMENT, "task times") for i in range(3)]
    reports.add_released(released[:1])
    reports.add_leases(released[1:2])  # an interrupted job's spot time: written, not a released lease
    assert reports.released == released[:1] and reports.leases == released[:2]
    reports.add_released(released * RELEASED_MAX)
    assert len(reports.released) == RELEASED_MAX and reports.released[-1] == released[-1]

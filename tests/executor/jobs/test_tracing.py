"""The executor's trace rows (executor/jobs/tracing.py) in the scheduler's loop: a store another process holds
costs one short wait, and no row."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import JobStatus
from agora_optimizer.traces.spool import SPOOL_NAME, pending
from agora_optimizer.traces.store import HOOK_BUSY_TIMEOUT_S, TraceStore
from tests.conftest import CATALOGS
from tests.traces.conftest import write_lock_held

JOBS = 6


@pytest.fixture
def executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from agora_optimizer.executor.agora_executor import AgoraExecutor

    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(CATALOGS / "slurm-loopback.yaml"))  # no pool to start
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", f"sqlite:///{tmp_path / 'traces.db'}")
    monkeypatch.setenv("AIRFLOW__AGORA__AIRFLOW_POOLS", "False")
    executor = AgoraExecutor()
    executor.start()
    yield executor
    executor.end()


def _record(i: int) -> JobRecord:
    return JobRecord("unit", f"t{i}", "r1", 1, -1, resource="slurm-debug", backend="slurm", cores=1, memory_bytes=2**28)


@pytest.mark.slow
def test_a_store_another_process_holds_costs_the_loop_one_short_wait_and_the_rows_land_once_it_is_free(
    executor: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    executor.trace.store()  # opened (the schema made) at the first job, as in a scheduler that has run tasks
    with write_lock_held(tmp_path / "traces.db", hold_s=10):
        started = time.monotonic()
        for i in range(JOBS):
            executor.trace.write(_record(i), JobStatus("finished", exit_code=0, host="node-1"))
        held_s = time.monotonic() - started
        assert held_s < HOOK_BUSY_TIMEOUT_S + 1.0, f"{JOBS} ended jobs held the scheduler's loop {held_s:.1f} s"
        assert pending(tmp_path / "jobs" / SPOOL_NAME) == JOBS
    executor.sync()
    assert pending(tmp_path / "jobs" / SPOOL_NAME) == 0
    executor.trace.write(_record(JOBS), JobStatus("finished", exit_code=0, host="node-1"))  # written at once again
    assert pending(tmp_path / "jobs" / SPOOL_NAME) == 0
    with TraceStore(url) as store:
        rows = store.attempts(dag_id="unit")
    assert sorted(a.task_id for a in rows) == sorted(f"t{i}" for i in range(JOBS + 1))
    assert {(a.resource_type, a.backend, a.host, a.state) for a in rows} == {
        ("slurm-debug", "slurm", "node-1", "success")
    }

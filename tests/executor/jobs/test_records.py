"""The executor's trace row: what it adds to the listener's row of the same attempt."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from agora_optimizer.executor.jobs.records import JobRecord, executor_attempt
from agora_optimizer.executor.jobs.spec import JobStatus
from agora_optimizer.traces.records import TaskAttempt

MIB = 2**20
START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
RECORD = JobRecord("dag", "task", "run", 1, -1, "local-small", "local", 1, 512 * MIB, "key")
FINISHED = JobStatus(
    "finished",
    exit_code=0,
    host="node-1",
    queued_at=START - timedelta(seconds=2),
    started_at=START,
    ended_at=START + timedelta(seconds=3),
    peak_rss_bytes=300 * MIB,
    cpu_time_s=2.5,
)


def listener_row(*, peak_rss_bytes: int | None, cpu_time_s: float | None) -> TaskAttempt:
    return TaskAttempt.create(
        dag_id="dag",
        task_id="task",
        run_id="run",
        operator="_PythonDecoratedOperator",
        started_at=START + timedelta(seconds=1),
        ended_at=START + timedelta(seconds=2),
        peak_rss_bytes=peak_rss_bytes,
        cpu_time_s=cpu_time_s,
        state="success",
    )


def test_a_listener_row_without_a_measure_gets_the_workers() -> None:
    row = executor_attempt(RECORD, FINISHED, listener_row(peak_rss_bytes=None, cpu_time_s=None))
    assert (row.peak_rss_bytes, row.cpu_time_s) == (300 * MIB, 2.5)  # the worker sampled the task's tree
    assert (row.operator, row.started_at) == ("_PythonDecoratedOperator", START + timedelta(seconds=1))
    assert (row.resource_type, row.backend, row.host, row.requested_memory_bytes) == (
        "local-small",
        "local",
        "node-1",
        512 * MIB,
    )


def test_a_listener_row_with_a_measure_keeps_it() -> None:
    row = executor_attempt(RECORD, FINISHED, listener_row(peak_rss_bytes=200 * MIB, cpu_time_s=0.0))
    assert (row.peak_rss_bytes, row.cpu_time_s) == (200 * MIB, 0.0)


def test_without_a_listener_row_the_executor_writes_the_workers_measure() -> None:
    row = executor_attempt(RECORD, replace(FINISHED, exit_code=1, reason="exited with code 1"), None)
    assert (row.peak_rss_bytes, row.cpu_time_s, row.state) == (300 * MIB, 2.5, "failed")
    assert row.error_text == "exited with code 1"

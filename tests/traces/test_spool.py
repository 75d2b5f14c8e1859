"""The trace spool: rows kept while the store is down are written later, merged, none lost."""

from __future__ import annotations

import os
import stat
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.spool import merge, pending, replay, spool
from agora_optimizer.traces.store import TraceStore

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
T1 = datetime(2026, 12, 1, 12, 1, tzinfo=UTC)
LISTENER = TaskAttempt(
    "d", "t", "r1", operator="PythonOperator", started_at=T0, ended_at=T1, runtime_s=60.0, state="failed",
    error_text="ValueError: boom",
)  # fmt: skip
EXECUTOR = TaskAttempt(
    "d", "t", "r1", resource_type="local-small", backend="local", host="h", requested_cores=1,
    requested_memory_bytes=2**28, started_at=T0, ended_at=T1, peak_rss_bytes=5, cpu_time_s=1.5, state="failed",
    error_text="exited with code 1",
)  # fmt: skip


def test_either_order_of_the_two_writers_gives_the_same_row(tmp_path: Path) -> None:
    rows = []
    for first, second in (
        ((LISTENER, "listener"), (EXECUTOR, "executor")),
        ((EXECUTOR, "executor"), (LISTENER, "listener")),
    ):
        spool_dir = tmp_path / f"spool-{first[1]}"
        with TraceStore(f"sqlite:///{tmp_path / first[1]}.db") as store:
            store.add([first[0]])  # one writer reached the store, the other found it down
            spool(second[0], second[1], spool_dir)  # type: ignore[arg-type]
            assert pending(spool_dir) == 1
            assert replay(store, spool_dir) == 1 and pending(spool_dir) == 0
            (row,) = store.attempts()
        rows.append(row)
    assert rows[0] == rows[1]
    row = rows[0]
    assert (row.operator, row.backend, row.resource_type, row.requested_memory_bytes) == (
        "PythonOperator", "local", "local-small", 2**28,
    )  # fmt: skip
    assert (row.state, row.error_text, row.peak_rss_bytes) == ("failed", "ValueError: boom", 5)  # the task's words


def test_a_backend_failure_of_the_executor_wins_over_the_listener() -> None:
    killed = TaskAttempt("d", "t", "r1", backend="local", state="oom_killed", error_text="out of memory")
    assert (merge(LISTENER, killed).state, merge(LISTENER, killed).error_text) == ("oom_killed", "out of memory")


def test_a_row_alone_in_the_spool_is_written_as_it_is_and_a_bad_file_is_kept_aside(tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    spool(LISTENER, "listener", spool_dir)
    (spool_dir / "broken.listener.json").write_text("{not json")
    with TraceStore(f"sqlite:///{tmp_path / 't.db'}") as store:
        assert replay(store, spool_dir) == 1
        assert store.attempts() == [LISTENER]
    assert pending(spool_dir) == 0 and (spool_dir / "broken.listener.bad").exists()


def test_a_task_process_that_creates_the_state_directory_leaves_it_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agora_optimizer.executor.state_files import check_state_dir
    from agora_optimizer.traces.spool import spool_dir

    state = tmp_path / "jobs"
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(state))
    old = os.umask(0o002)  # a group-writable umask, as some sites run
    try:
        spool_dir()
    finally:
        os.umask(old)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    check_state_dir(state)  # the executor, started later, accepts it


def test_a_spooled_row_is_private_and_a_replay_skips_files_another_replay_took(tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    first = spool(LISTENER, "listener", spool_dir)
    assert stat.S_IMODE(first.stat().st_mode) == 0o600  # a row holds the task's error text
    other = replace(LISTENER, task_id="u")
    second = spool(other, "listener", spool_dir)
    with TraceStore(f"sqlite:///{tmp_path / 't.db'}") as store:
        real_read = Path.read_text

        def taken_by_the_other_replay(self: Path, *args: object, **kwargs: object) -> str:
            if self == first:
                self.unlink()  # the executor (or another task's listener) wrote it a moment ago
            return real_read(self, *args, **kwargs)  # type: ignore[arg-type]

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Path, "read_text", taken_by_the_other_replay)
            assert replay(store, spool_dir) == 1
        assert [a.task_id for a in store.attempts()] == ["u"]
    assert not second.exists() and not list(spool_dir.glob("*.bad"))


def test_the_listener_writes_the_waiting_rows_once_the_store_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deployments that run tasks on other executors have no AgoraExecutor to replay the spool."""
    from agora_optimizer.integration.trace_listener import TraceListener

    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "state"))
    down = TraceListener(store_url="postgresql+psycopg://agora:pw@127.0.0.1:9/none")  # nothing listens on port 9
    down._write(LISTENER)  # the store is unreachable: the row is spooled
    assert pending() == 1
    up = TraceListener(store_url=f"sqlite:///{tmp_path / 't.db'}")
    up._write(replace(LISTENER, task_id="next"))  # the next task's row is written, and the waiting one after it
    assert pending() == 0
    with TraceStore(f"sqlite:///{tmp_path / 't.db'}") as store:
        assert sorted(a.task_id for a in store.attempts()) == ["next", "t"]

"""The one opener of agora's SQL databases (database.py): what it sets up, and what it says when it cannot open."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import OperationalError

from agora_optimizer.database import READ_ONLY, DatabaseError, failure_reason, mask_url, open_engine
from tests.traces.conftest import write_lock_held

SHORT_TIMEOUT_S = 0.5


def test_sqlite_is_in_wal_mode_with_its_directory_made(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "x.db"
    engine = open_engine(f"sqlite:///{path}", SHORT_TIMEOUT_S)
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 500
    engine.dispose()
    assert path.is_file()


@pytest.mark.slow
def test_a_sqlite_writer_waits_its_busy_timeout_for_the_lock_and_a_reader_does_not(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    engine = open_engine(url, SHORT_TIMEOUT_S)
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE t (x INTEGER)")
    with write_lock_held(tmp_path / "x.db", hold_s=10):
        started = time.monotonic()
        with engine.connect() as connection:
            assert connection.execution_options(**READ_ONLY).exec_driver_sql("SELECT count(*) FROM t").scalar() == 0
        assert time.monotonic() - started < SHORT_TIMEOUT_S
        with pytest.raises(OperationalError) as locked, engine.begin() as connection:
            connection.exec_driver_sql("SELECT count(*) FROM t")  # BEGIN IMMEDIATE: a writer queues for the lock
        waited_s = time.monotonic() - started
        assert SHORT_TIMEOUT_S * 0.8 <= waited_s < SHORT_TIMEOUT_S + 1.0
    assert failure_reason(locked.value, url, SHORT_TIMEOUT_S) == "database is locked (still locked after waiting 0.5 s)"
    engine.dispose()


@pytest.mark.parametrize(
    ("url", "backends", "reason"),
    [
        ("not a url", (), r"^not a database URL \(Could not parse"),
        ("mysql://u:p@db/x", ("sqlite", "postgresql"), r"^unsupported database 'mysql' \(use sqlite or postgresql\)$"),
        ("postgresql+pg8000://u:p@localhost/db", (), r"^no database driver: .*pg8000.* \(install psycopg: pip install"),
        ("mysql+pymysql://u:p@localhost/db", (), r"^no database driver: No module named 'pymysql'$"),
    ],
)
def test_a_database_it_cannot_open_is_one_line_saying_why(url: str, backends: tuple[str, ...], reason: str) -> None:
    with pytest.raises(DatabaseError, match=reason) as refused:
        open_engine(url, SHORT_TIMEOUT_S, backends)
    assert "\n" not in str(refused.value) and refused.value.reason == str(refused.value)


def test_a_password_is_never_shown() -> None:
    url = "postgresql+psycopg://agora:s3cret@db.example:5432/traces"
    assert mask_url(url) == "postgresql+psycopg://agora:***@db.example:5432/traces"
    assert mask_url("not a url") == "<unparseable URL>"
    said = failure_reason(RuntimeError("connection to agora:s3cret@db.example\n  refused"), url, SHORT_TIMEOUT_S)
    assert said == "connection to agora:***@db.example refused"


@pytest.mark.slow
def test_a_postgresql_server_that_never_answers_is_given_up_on_after_the_connect_timeout() -> None:
    with socket.socket() as silent:  # takes connections (the kernel's backlog) and never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        port = silent.getsockname()[1]
        engine = open_engine(f"postgresql+psycopg://agora:pw@127.0.0.1:{port}/agora", 2.0)
        started = time.monotonic()
        with pytest.raises(sa.exc.OperationalError, match="timeout"):
            engine.connect()
        assert time.monotonic() - started < 2.0 + 3.0
        engine.dispose()

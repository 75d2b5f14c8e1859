"""The one opener of agora's SQL databases: the trace store (with the run records in it), the view's
reader of it, and the queue-wait store.

:func:`open_engine` makes a SQLAlchemy engine for a URL and a busy timeout, how long a writer waits
for a lock:

- SQLite: the database's directory is created; WAL, ``PRAGMA busy_timeout``, and ``BEGIN IMMEDIATE``
  for every transaction but those of a connection with :data:`READ_ONLY`, so that writers queue on
  the lock instead of failing;
- PostgreSQL (``postgresql+psycopg://`` URLs, psycopg 3): a connect timeout (the busy timeout, within
  :data:`PG_CONNECT_TIMEOUT_S`), ``lock_timeout``, and each pooled connection checked before use;
- another database SQLAlchemy knows: as SQLAlchemy opens it.

What cannot be opened raises :class:`DatabaseError` with the reason (a missing psycopg says how to
install it), for the store to name itself and the URL; :func:`failure_reason` words a driver's error
the same way, and :func:`mask_url` shows a URL without its password.
"""

from __future__ import annotations

import math
import random
import sqlite3
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from agora_optimizer.errors import AgoraError

PG_CONNECT_TIMEOUT_S = (2, 10)  # libpq's least, and the most any store waits to reach its server
READ_ONLY = {"agora_read_only": True}  # a connection's execution options for reading: SQLite's plain BEGIN


class DatabaseError(AgoraError):
    """A database cannot be opened; ``reason`` says why (the store that raises its own error names the URL)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def mask_url(url: str) -> str:
    """The URL with its password replaced by ``***`` (for messages and logs)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "<unparseable URL>"


def sqlite_file(url: str) -> Path | None:
    """The file of an SQLite URL; None for another database, an in-memory one, a ``file:`` URI or a bad URL."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None
    return _sqlite_path(parsed) if parsed.get_backend_name() == "sqlite" else None


def _sqlite_path(parsed: URL) -> Path | None:
    database = parsed.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        return Path(database).expanduser()
    return None


def open_engine(url: str, busy_timeout_s: float, backends: Collection[str] = ()) -> Engine:
    """An engine for the database at ``url`` (see the module's docstring); ``backends``, when given, are
    the only databases accepted (``sqlite``, ``postgresql``). Raises DatabaseError, password masked."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise DatabaseError(f"not a database URL ({exc})") from None
    backend = parsed.get_backend_name()
    if backends and backend not in backends:
        raise DatabaseError(f"unsupported database '{backend}' (use {' or '.join(backends)})")
    try:
        if backend == "sqlite":
            if (path := _sqlite_path(parsed)) is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
            engine = sa.create_engine(parsed, connect_args={"timeout": busy_timeout_s})
            _configure_sqlite(engine, busy_timeout_s)
        elif backend == "postgresql":
            least, most = PG_CONNECT_TIMEOUT_S
            connect_args = {
                "connect_timeout": max(least, min(most, math.ceil(busy_timeout_s))),
                "options": f"-c lock_timeout={max(1, round(busy_timeout_s * 1000))}",
            }
            engine = sa.create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
        else:
            engine = sa.create_engine(parsed)
    except (NoSuchModuleError, ImportError) as exc:
        hint = " (install psycopg: pip install 'psycopg[binary]')" if backend == "postgresql" else ""
        raise DatabaseError(f"no database driver: {exc}{hint}") from None
    except (SQLAlchemyError, OSError, ValueError) as exc:
        raise DatabaseError(failure_reason(exc, url, busy_timeout_s)) from None
    return engine


def failure_reason(exc: BaseException, url: str, busy_timeout_s: float) -> str:
    """A database error on one line, the URL's password masked, saying how long a lock was waited for."""
    original = getattr(exc, "orig", None) or exc
    reason = " ".join(str(original).split()) or type(original).__name__
    password = _password(url)
    if password:
        reason = reason.replace(password, "***")
    if "database is locked" in reason or "lock timeout" in reason:
        reason += f" (still locked after waiting {busy_timeout_s:g} s)"
    return reason


def _configure_sqlite(engine: Engine, busy_timeout_s: float) -> None:
    """WAL, a busy timeout, and BEGIN IMMEDIATE for writers (the SQLAlchemy recipe for pysqlite)."""

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself, below
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {max(1, round(busy_timeout_s * 1000))}")
        _switch_to_wal(cursor, busy_timeout_s)
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        read_only = connection.get_execution_options().get("agora_read_only", False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def _switch_to_wal(cursor: Any, busy_timeout_s: float) -> None:
    """WAL mode, retried: SQLite answers "locked" at once, without its busy handler, when another
    process holds the new database while this one changes its journal mode (seen with four
    writers opening a new store together)."""
    deadline = time.monotonic() + busy_timeout_s
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.01, 0.1))


def _password(url: str) -> str:
    try:
        return make_url(url).password or ""
    except (ArgumentError, ValueError):
        return ""

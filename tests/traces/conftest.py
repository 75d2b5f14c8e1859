"""Trace-store fixtures: a real PostgreSQL server (started by scripts/start_postgres.sh), a fresh store per
test, and :func:`write_lock_held`: another process holding a SQLite store's write lock.

The server is a throwaway cluster under /tmp, started once per session and stopped at the end
(and recorded for the run's end, tests/run_services.py, which stops it if its session did not).
Where PostgreSQL is absent and cannot be installed (no apt-get, not root), the PostgreSQL cases
are skipped, except in CI (env CI set), where that fails them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from tests.conftest import REPO
from tests.run_services import StartedService, record

START_POSTGRES = REPO / "scripts" / "start_postgres.sh"
CANNOT_INSTALL = 3  # the script's exit code when PostgreSQL is absent and apt-get cannot run


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class PostgresServer:
    url: str
    directory: Path


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server on 127.0.0.1 (role 'agora', may create databases), kept in a directory under /tmp."""
    directory = Path(tempfile.mkdtemp(prefix="agora-pg-", dir="/tmp"))  # the postgres user must reach it
    env = {**os.environ, "AGORA_PG_PORT": str(_free_port())}
    try:
        started = subprocess.run(
            ["bash", str(START_POSTGRES), str(directory)], capture_output=True, text=True, env=env, timeout=900
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(directory, ignore_errors=True)
        pytest.fail("scripts/start_postgres.sh did not finish within 15 minutes")
    if started.returncode != 0:
        shutil.rmtree(directory, ignore_errors=True)
        message = f"scripts/start_postgres.sh failed ({started.returncode}): {started.stderr.strip()[-2000:]}"
        if started.returncode == CANNOT_INSTALL and not os.environ.get("CI"):
            pytest.skip(message)
        pytest.fail(message)
    url = started.stdout.strip().splitlines()[-1]
    stop = ("bash", str(START_POSTGRES), "stop", str(directory))
    record(StartedService("PostgreSQL", directory, stop))
    try:
        yield PostgresServer(url=url, directory=directory)
    finally:
        subprocess.run(stop, capture_output=True, timeout=120)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """The SQLAlchemy URL of the session's PostgreSQL server."""
    return postgres_server.url


@pytest.fixture
def fresh_postgres_url(postgres_url: str) -> Iterator[str]:
    """A new, empty PostgreSQL database for one test, dropped afterwards."""
    name = f"agora_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh trace-store URL on each database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'traces.db'}"
    return str(request.getfixturevalue("fresh_postgres_url"))


class _Handler(BaseHTTPRequestHandler):
    """A real HTTP server that answers every request from ``self.server.answers`` (path prefix -> reply)."""

    def _reply(self) -> None:
        answers: dict[str, tuple[int, str]] = self.server.answers  # type: ignore[attr-defined]
        status, body = next((reply for prefix, reply in answers.items() if self.path.startswith(prefix)), (404, ""))
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _reply

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[tuple[str, dict[str, tuple[int, str]]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    answers: dict[str, tuple[int, str]] = {}
    server.answers = answers  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answers
    finally:
        server.shutdown()
        server.server_close()


# Holds SQLite's write lock in another process until released (or ``hold_s`` passes): what another writer,
# a long import or a stuck process does to the scheduler's trace store.
_HOLD_THE_LOCK = """
import sqlite3, sys, time
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


class WriteLock:
    """The write lock of a SQLite database held by another process (:func:`write_lock_held`)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def release(self) -> None:
        """End the holder (SQLite releases a dead process's lock; it wrote nothing)."""
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(30)


@contextmanager
def write_lock_held(database: Path, hold_s: float = 30.0) -> Iterator[WriteLock]:
    """Another process holds ``database``'s write lock (``BEGIN IMMEDIATE``) inside the block, at most ``hold_s``."""
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLD_THE_LOCK, str(database), str(hold_s)], stdout=subprocess.PIPE, text=True
    )
    lock = WriteLock(process)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "held"
        yield lock
    finally:
        lock.release()

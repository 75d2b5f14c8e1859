"""A real Redis server for the Celery tests (started by scripts/start_redis.sh), and what they ask it.

The server keeps its directory under the session's temporary folder, so the leftover check
(tests/leftovers.py) sees it, by its working directory, if a test session ever left it running; a
start is recorded for the run's end too (tests/run_services.py), which stops it if its session did not.
Where Redis is absent and cannot be installed (no apt-get, not root), the tests that use it are
skipped, except in CI (env CI set), where that fails them.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import REPO
from tests.run_services import StartedService, record

START_REDIS = REPO / "scripts" / "start_redis.sh"
CANNOT_INSTALL = 3  # the script's exit code when Redis is absent and apt-get cannot run


@dataclass(frozen=True)
class RedisServer:
    url: str  # redis://127.0.0.1:PORT/0
    directory: Path

    def database(self, number: int) -> str:
        """The URL of database ``number`` of this server (the broker on 0, Celery's results on 1)."""
        return self.url.rsplit("/", 1)[0] + f"/{number}"

    def command(self, *words: str) -> bytes:
        """One command in Redis's inline protocol; its reply line (``:0``, ``+PONG``, ``$-1`` ...)."""
        where = urlsplit(self.url)
        with socket.create_connection((where.hostname or "127.0.0.1", where.port or 6379), timeout=5) as connection:
            connection.sendall(" ".join(words).encode() + b"\r\n")
            return connection.makefile("rb").readline().rstrip(b"\r\n")


def start_redis(directory: Path) -> RedisServer:
    """Start a server kept in ``directory`` (skips, or fails in CI, where Redis cannot be had)."""
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    env = {**os.environ, "AGORA_REDIS_PORT": str(port)}
    try:
        started = subprocess.run(
            ["bash", str(START_REDIS), str(directory)], capture_output=True, text=True, env=env, timeout=600
        )
    except subprocess.TimeoutExpired:
        pytest.fail("scripts/start_redis.sh did not finish within 10 minutes")
    if started.returncode != 0:
        message = f"scripts/start_redis.sh failed ({started.returncode}): {started.stderr.strip()[-2000:]}"
        if started.returncode == CANNOT_INSTALL and not os.environ.get("CI"):
            pytest.skip(message)
        pytest.fail(message)
    record(StartedService("Redis", directory, _stop_argv(directory)))
    return RedisServer(url=started.stdout.strip().splitlines()[-1], directory=directory)


def _stop_argv(directory: Path) -> tuple[str, ...]:
    return ("bash", str(START_REDIS), "stop", str(directory))


def stop_redis(server: RedisServer) -> None:
    subprocess.run(_stop_argv(server.directory), capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis server on 127.0.0.1 for the session, stopped at its end."""
    server = start_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        stop_redis(server)

"""The end-of-session check (tests/leftovers.py) finds a process by what it names, and only below its root."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.leftovers import kill, processes_under

HOLD_FILE = "import sys, time; f = open(sys.argv[1], 'w'); print('ready', flush=True); time.sleep(60)"


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        with contextlib.suppress(psutil.Error):
            kill(psutil.Process(process.pid).children(recursive=True))
        process.kill()
        process.wait(10)


def _start(started: list[subprocess.Popen[str]], argv: list[str], **kwargs: object) -> int:
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, **kwargs)  # type: ignore[call-overload]
    started.append(process)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return int(process.pid)


@pytest.mark.parametrize("how", ["environment", "cwd", "open file"])
def test_a_process_naming_the_root_is_found_and_killed(
    tmp_path: Path, started: list[subprocess.Popen[str]], how: str
) -> None:
    root, elsewhere = tmp_path / "session", tmp_path / "session-2"  # a sibling whose name starts alike
    root.mkdir()
    elsewhere.mkdir()
    held = elsewhere / "held.txt"
    if how == "environment":
        pid = _start(started, [sys.executable, "-c", HOLD_FILE, str(held)], env={"AIRFLOW_HOME": str(root / "h")})
    elif how == "cwd":
        pid = _start(started, [sys.executable, "-c", HOLD_FILE, str(held)], cwd=root)
    else:
        script = HOLD_FILE.replace("sys.argv[1]", "bytes.fromhex(sys.argv[1]).decode()")  # argv names no path
        pid = _start(started, [sys.executable, "-c", script, str(root / "log.txt").encode().hex()])
    assert [p.pid for p in processes_under(root)] == [pid]
    assert processes_under(tmp_path / "sess") == []  # a prefix of the name is not the root
    kill(processes_under(root))
    assert not psutil.pid_exists(pid) and processes_under(root) == []  # killed and reaped


def test_a_process_naming_another_root_is_not_ours(tmp_path: Path, started: list[subprocess.Popen[str]]) -> None:
    _start(started, [sys.executable, "-c", HOLD_FILE, str(tmp_path / "held.txt")])
    assert processes_under(tmp_path / "other") == []


def test_a_multiprocessing_helper_of_this_process_is_not_a_leftover_but_one_of_a_child_is(
    tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    """The forkserver and resource tracker that tests start in this process end with it."""
    helper = "from multiprocessing.util import debug; import time; print('ready', flush=True); time.sleep(60)"
    _start(started, [sys.executable, "-B", "-c", helper], cwd=tmp_path)  # -B: as PYTHONDONTWRITEBYTECODE passes on
    assert processes_under(tmp_path) == []
    shell = f'{sys.executable} -c "{helper}" & wait'  # the same helper, of a process the tests started
    child = _start(started, ["bash", "-c", shell], cwd=tmp_path)
    assert sorted(p.ppid() for p in processes_under(tmp_path)) == sorted([os.getpid(), child])


@pytest.mark.celery
def test_a_redis_server_left_in_the_session_directory_is_found_and_its_stop_leaves_nothing(tmp_path: Path) -> None:
    from tests.redis_server import start_redis, stop_redis

    server = start_redis(tmp_path / "redis")  # a daemon: neither our child nor in our session
    try:
        assert [process.name() for process in processes_under(tmp_path)] == ["redis-server"]
        assert server.command("PING") == b"+PONG"
    finally:
        stop_redis(server)
    assert processes_under(tmp_path) == []

"""The end-of-session check (tests/leftovers.py) finds a process by what it names, and only below its root;
the end-of-run check finds the daemons the run started and left, not those that ran before it."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from harness.local_airflow import free_port
from tests.leftovers import daemons_left, daemons_running, kill, processes_under
from tests.run_services import run_pytest

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


@pytest.mark.celery
def test_a_daemon_started_after_the_run_began_is_left_but_one_that_ran_before_is_not_even_restarted(
    tmp_path: Path,
) -> None:
    from tests.redis_server import start_redis, stop_redis

    before_run = start_redis(tmp_path / "before")
    try:
        before = daemons_running()
        during_run = start_redis(tmp_path / "during")
        try:
            stop_redis(before_run)
            before_run = start_redis(tmp_path / "before")  # a new process: the same command in the same directory
            [left] = daemons_left(before, [tmp_path], grace_s=0)
            assert left.pid == int((during_run.directory / "redis.pid").read_text())
            assert daemons_left(before, [tmp_path / "elsewhere"], grace_s=0) == []  # not the run's
        finally:
            stop_redis(during_run)
    finally:
        stop_redis(before_run)


A_TEST_THAT_LEAVES_POSTGRESQL = """
import os
import subprocess


def test_start_a_postgresql_server_and_leave_it():
    env = {**os.environ, "AGORA_PG_PORT": "%(port)d"}
    done = subprocess.run(["bash", "%(script)s", "%(directory)s"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
"""


@pytest.mark.postgres
@pytest.mark.slow
def test_a_run_that_leaves_a_daemon_running_fails_naming_it_and_ends_it(tmp_path: Path) -> None:
    """A PostgreSQL server left by a test, outside the run's temporary folders (the sessions' check does not see it)."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "start_postgres.sh"
    directory = Path(tempfile.mkdtemp(prefix="agora-pg-", dir="/tmp"))  # the postgres user must reach it
    tests = tmp_path / "tests"
    tests.mkdir()
    source = A_TEST_THAT_LEAVES_POSTGRESQL % {"port": free_port(), "script": script, "directory": directory}
    (tests / "test_leave.py").write_text(source)
    try:
        done = run_pytest(tests, tmp_path / "basetemp")
        output = done.stdout + done.stderr
        assert done.returncode == 1 and "1 passed" in output, output[-3000:]
        assert "1 daemons started by the test run outlived it (ended now)" in output, output[-3000:]
        [named] = [line for line in output.splitlines() if line.startswith("pid ") and str(directory) in line]
        assert "postgres -D" in named
        assert not psutil.pid_exists(int(named.split()[1]))
    finally:
        subprocess.run(["bash", str(script), "stop", str(directory)], capture_output=True, timeout=120)
        shutil.rmtree(directory, ignore_errors=True)

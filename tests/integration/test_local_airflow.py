"""The test harness's Airflow (harness/local_airflow.py) leaves no process behind.

A scheduler forks its LocalExecutor workers (which ignore SIGTERM: they inherit its handler)
and a serve-logs server into its process group; killed on its own, as the adoption tests kill
it, it leaves them running. ``stop_all`` must stop them, and every other component's tree.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import psutil
import pytest

from harness.local_airflow import AirflowDeployment, stop_processes, wait_until

WORKERS = 3  # [core] parallelism: the LocalExecutor forks this many workers at start


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _scheduler_tree(airflow: AirflowDeployment) -> list[psutil.Process]:
    return psutil.Process(airflow.processes["scheduler"].pid).children(recursive=True)


def _scheduler_ready(airflow: AirflowDeployment) -> bool:
    """Its workers forked and its serve-logs answering on the deployment's own log port."""
    return len(_scheduler_tree(airflow)) >= WORKERS + 1 and _listening(airflow.log_server_port)


@pytest.mark.airflow
def test_stop_all_stops_every_process_also_those_a_killed_scheduler_left(tmp_path: Path) -> None:
    (tmp_path / "dags").mkdir()
    airflow = AirflowDeployment(
        home=tmp_path / "home",
        dags_folder=tmp_path / "dags",
        executor="LocalExecutor",
        extra_env={"AIRFLOW__CORE__PARALLELISM": str(WORKERS)},
    )
    airflow.migrate()
    with airflow:  # stops everything also when an assertion below fails
        airflow.start()
        wait_until(lambda: _scheduler_ready(airflow), 120, "the scheduler's workers and serve-logs", airflow)
        left_by_the_first = _scheduler_tree(airflow)
        airflow.kill_scheduler_only()  # as the adoption tests do
        assert all(process.is_running() for process in left_by_the_first)  # they outlive it, in its group
        airflow.start("scheduler")
        wait_until(lambda: len(_scheduler_tree(airflow)) >= WORKERS, 120, "the second scheduler's workers", airflow)
        assert airflow.leftover_processes()
        airflow.stop_all()
        assert [" ".join(process.cmdline()) for process in airflow.leftover_processes()] == []
    assert not _listening(airflow.log_server_port) and not _listening(airflow.port)
    assert airflow.log_server_port != 8793  # a port of its own: two deployments do not share one


def test_stop_processes_kills_a_tree_that_ignores_sigterm_also_what_left_its_group() -> None:
    script = "trap '' TERM; sleep 300 & setsid sleep 301 & echo ready; wait"
    shell = subprocess.Popen(["bash", "-c", script], start_new_session=True, stdout=subprocess.PIPE, text=True)
    root = psutil.Process(shell.pid)
    members = [root]
    try:
        assert shell.stdout is not None and shell.stdout.readline().strip() == "ready"

        def one_left_the_group() -> bool:  # setsid runs in the forked child a moment after the fork
            members[:] = [root, *root.children(recursive=True)]
            return sorted(os.getpgid(p.pid) == shell.pid for p in members) == [False, True, True]

        wait_until(one_left_the_group, 10, "both sleeps, one of them in a session of its own")
        stop_processes(members, {shell.pid}, signal.SIGTERM, timeout_s=1)  # SIGTERM is ignored: SIGKILL after 1 s
        assert shell.wait(5) == -signal.SIGKILL
        assert not [p.pid for p in members if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    finally:
        for process in members:
            if process.is_running():
                process.kill()
        shell.wait(5)

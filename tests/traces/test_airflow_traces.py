"""Traces from a real Airflow 3.3: the listener in real task processes, the REST importer against a real API server.

One module fixture builds an Airflow home (SQLite metadata DB), runs four DAGs with
``dag.test()`` in a subprocess (a succeeding DAG with a task that fails once then
succeeds on retry, a failing DAG, a DAG run where the environment names the resource,
and a DAG whose trace store is unreachable), and
starts ``airflow api-server`` on the same metadata DB meanwhile. The listener's rows
are then checked against what the DAGs did, and the importer's against the listener's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agora_optimizer.cli.traces import traces_app
from agora_optimizer.traces.airflow_import import AirflowApiError, import_airflow_history
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore
from harness.local_airflow import free_port, migrate_database, wait_healthy

pytestmark = pytest.mark.airflow

MIB = 2**20
PASSWORD = "agora-test-pw"
UNREACHABLE_STORE = "postgresql+psycopg://agora:pw@127.0.0.1:1/none"

DAGS = textwrap.dedent(
    """
    from datetime import datetime, timedelta

    from airflow.sdk import dag, get_current_context, task

    START = datetime(2026, 1, 1)


    @dag(dag_id="agora_trace_ok", schedule=None, start_date=START, catchup=False)
    def ok_dag():
        @task(executor_config={"agora": {"resource_type": "m7i.large", "backend": "aws"}})
        def allocate():
            import time

            block = b"x" * (150 * 1024 * 1024)
            started = time.process_time()
            while time.process_time() - started < 0.5:
                pass
            return len(block)

        @task(retries=1, retry_delay=timedelta(seconds=0))
        def flaky():
            if get_current_context()["ti"].try_number == 1:
                raise RuntimeError("first try fails on purpose")

        allocate() >> flaky()


    @dag(dag_id="agora_trace_fail", schedule=None, start_date=START, catchup=False)
    def fail_dag():
        @task(queue="slurm:compute")
        def boom():
            raise ValueError("agora test failure")

        boom()


    @dag(dag_id="agora_trace_env", schedule=None, start_date=START, catchup=False)
    def env_dag():
        @task(executor_config={"agora": {"resource_type": "m7i.large", "backend": "aws"}})
        def placed():
            return 1

        placed()


    @dag(dag_id="agora_trace_unreachable", schedule=None, start_date=START, catchup=False)
    def unreachable_dag():
        @task
        def quiet():
            return 1

        quiet()


    DAGS = {
        "agora_trace_ok": ok_dag(),
        "agora_trace_fail": fail_dag(),
        "agora_trace_env": env_dag(),
        "agora_trace_unreachable": unreachable_dag(),
    }
    """
)

RUN_DAGS = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    from agora_trace_dags import DAGS
    # each DAG's end state, in a file of its own: Airflow's log lines on stdout can land inside a printed line
    states = {}
    for dag_id in ("agora_trace_ok", "agora_trace_fail"):
        states[dag_id] = str(DAGS[dag_id].test().state)
    # what an agora worker says: where the task runs, and that the worker samples it
    os.environ.update(AGORA_RESOURCE_TYPE="local:big", AGORA_BACKEND="local", AGORA_SAMPLED_BY_WORKER="1")
    states["agora_trace_env"] = str(DAGS["agora_trace_env"].test().state)
    os.environ["AIRFLOW__AGORA__TRACE_STORE_URL"] = sys.argv[2]  # the listener reads the config at each write
    states["agora_trace_unreachable"] = str(DAGS["agora_trace_unreachable"].test().state)
    with open(sys.argv[3], "w") as out:
        json.dump(states, out)
    """
)


@dataclass(frozen=True)
class AirflowRun:
    home: Path
    store_url: str
    api_url: str
    states: dict[str, str]
    log: str


def _airflow_env(home: Path, store_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
            "AIRFLOW__AGORA__TRACE_STORE_URL": store_url,
        }
    )
    return env


@pytest.fixture(scope="module")
def airflow_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowRun]:
    home = tmp_path_factory.mktemp("airflow-home")
    (home / "dags").mkdir()
    (home / "dags" / "agora_trace_dags.py").write_text(DAGS)
    (home / "run_dags.py").write_text(RUN_DAGS)
    (home / "passwords.json").write_text(json.dumps({"admin": PASSWORD}))
    store_url = f"sqlite:///{home / 'traces.db'}"
    env = _airflow_env(home, store_url)
    airflow = str(Path(sys.executable).with_name("airflow"))
    migrate_database(env)

    port = free_port()
    api_url = f"http://127.0.0.1:{port}"
    server_log = open(home / "api-server.log", "wb")  # noqa: SIM115 - closed in the finally below
    server = subprocess.Popen(
        [airflow, "api-server", "--apps", "core", "-H", "127.0.0.1", "-p", str(port), "-w", "1"],
        env=env,
        stdout=server_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the teardown stops the server and its worker
    )
    try:
        runner = subprocess.run(
            [
                sys.executable,
                str(home / "run_dags.py"),
                str(home / "dags"),
                UNREACHABLE_STORE,
                str(home / "states.json"),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        log = runner.stdout + runner.stderr
        assert runner.returncode == 0, log[-5000:]
        states = json.loads((home / "states.json").read_text())
        wait_healthy(api_url, server, 180)
        yield AirflowRun(home=home, store_url=store_url, api_url=api_url, states=states, log=log)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(20)
        server_log.close()


def _by_key(attempts: list[TaskAttempt] | tuple[TaskAttempt, ...]) -> dict[tuple[str, str, int], TaskAttempt]:
    return {(a.dag_id, a.task_id, a.try_number): a for a in attempts}


def test_the_dags_ran_as_designed(airflow_run: AirflowRun) -> None:
    assert airflow_run.states == {
        "agora_trace_ok": "success",
        "agora_trace_fail": "failed",
        "agora_trace_env": "success",
        "agora_trace_unreachable": "success",
    }


def test_the_listener_writes_one_row_per_attempt_with_memory_and_cpu(airflow_run: AirflowRun) -> None:
    with TraceStore(airflow_run.store_url) as store:
        rows = _by_key(store.attempts())
    assert set(rows) == {
        ("agora_trace_ok", "allocate", 1),
        ("agora_trace_ok", "flaky", 1),
        ("agora_trace_ok", "flaky", 2),
        ("agora_trace_fail", "boom", 1),
        ("agora_trace_env", "placed", 1),
    }
    allocate = rows[("agora_trace_ok", "allocate", 1)]
    assert allocate.state == "success"
    assert allocate.peak_rss_bytes is not None and allocate.peak_rss_bytes >= 150 * MIB
    assert allocate.cpu_time_s is not None and allocate.cpu_time_s >= 0.45
    assert (allocate.resource_type, allocate.backend) == ("m7i.large", "aws")  # from executor_config
    assert allocate.host and "Python" in allocate.operator
    assert allocate.started_at is not None and allocate.ended_at is not None
    assert allocate.runtime_s == pytest.approx((allocate.ended_at - allocate.started_at).total_seconds())

    first, second = rows[("agora_trace_ok", "flaky", 1)], rows[("agora_trace_ok", "flaky", 2)]
    assert (first.state, second.state) == ("failed", "success")
    assert "first try fails on purpose" in first.error_text and second.error_text == ""
    assert first.run_id == second.run_id

    boom = rows[("agora_trace_fail", "boom", 1)]
    assert boom.state == "failed"
    assert boom.error_text == "ValueError: agora test failure"
    assert boom.resource_type == "slurm:compute"  # a non-default queue names the resource
    assert boom.peak_rss_bytes is not None and boom.cpu_time_s is not None

    placed = rows[("agora_trace_env", "placed", 1)]
    assert (placed.resource_type, placed.backend) == ("local:big", "local")  # the environment beats executor_config
    assert placed.peak_rss_bytes is None and placed.cpu_time_s is None  # left to the worker, not sampled twice
    assert placed.state == "success" and placed.started_at is not None


def test_an_unreachable_trace_store_does_not_fail_the_task(airflow_run: AirflowRun) -> None:
    assert airflow_run.states["agora_trace_unreachable"] == "success"
    line = next(x for x in airflow_run.log.splitlines() if "agora_trace_unreachable/quiet" in x)
    assert "agora: cannot record the trace of task instance agora_trace_unreachable/quiet" in line
    assert "cannot reach the database" in line and "the row waits in" in line  # the spool keeps it, nothing lost
    assert "pw@" not in airflow_run.log.split("agora_trace_unreachable/quiet", 1)[1][:3000]  # password masked


def test_the_importer_reads_every_try_from_the_rest_api(airflow_run: AirflowRun) -> None:
    found = import_airflow_history(airflow_run.api_url, "admin", PASSWORD)
    imported = _by_key(found.attempts)
    with TraceStore(airflow_run.store_url) as store:
        recorded = _by_key(store.attempts())
    assert set(imported) == {*recorded, ("agora_trace_unreachable", "quiet", 1)}
    assert found.skipped == ()
    assert found.task_instances == 5  # one per task: the earlier try of flaky comes from /tries
    for key, listened in recorded.items():
        api = imported[key]
        assert (api.run_id, api.map_index, api.state, api.host) == (
            listened.run_id,
            listened.map_index,
            listened.state,
            listened.host,
        ), key
        if key[0] != "agora_trace_env":  # there the worker's environment overrode executor_config
            assert api.resource_type == listened.resource_type, key  # executor_config arrives as str(dict)
        assert api.started_at is not None and listened.started_at is not None
        assert abs(api.started_at - listened.started_at) <= timedelta(seconds=5), key
        assert api.peak_rss_bytes is None and api.cpu_time_s is None  # Airflow does not know them
    assert imported[("agora_trace_ok", "allocate", 1)].backend == "aws"
    assert imported[("agora_trace_env", "placed", 1)].resource_type == "m7i.large"  # the API knows only the config


def test_the_importer_can_keep_to_one_dag(airflow_run: AirflowRun) -> None:
    found = import_airflow_history(airflow_run.api_url, "admin", PASSWORD, dag_id="agora_trace_fail")
    assert [(a.dag_id, a.task_id, a.state) for a in found.attempts] == [("agora_trace_fail", "boom", "failed")]


def test_refused_credentials_and_missing_credentials_are_clear_errors(airflow_run: AirflowRun) -> None:
    with pytest.raises(AirflowApiError, match=r"credentials of user 'admin' were refused") as caught:
        import_airflow_history(airflow_run.api_url, "admin", "wrong")
    assert airflow_run.api_url in str(caught.value)
    with pytest.raises(AirflowApiError, match=r"not authorised \(HTTP 401\)"):
        import_airflow_history(airflow_run.api_url)


def test_the_cli_imports_then_lists_the_attempts(airflow_run: AirflowRun, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'imported.db'}"
    runner = CliRunner()
    result = runner.invoke(
        traces_app,
        ["import-airflow", "--api-url", airflow_run.api_url, "--user", "admin", "--store", store],
        env={"AGORA_AIRFLOW_PASSWORD": PASSWORD},
    )
    assert result.exit_code == 0, result.output
    assert "imported 6 attempt(s) from 5 task instance(s)" in result.output
    listed = runner.invoke(traces_app, ["list", "--store", store, "--json"])
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)
    assert sorted((r["task_id"], r["try_number"]) for r in rows) == [
        ("allocate", 1),
        ("boom", 1),
        ("flaky", 1),
        ("flaky", 2),
        ("placed", 1),
        ("quiet", 1),
    ]
    again = runner.invoke(
        traces_app,
        ["import-airflow", "--api-url", airflow_run.api_url, "--user", "admin", "--store", store],
        env={"AGORA_AIRFLOW_PASSWORD": PASSWORD},
    )
    assert again.exit_code == 0
    with TraceStore(store) as trace_store:
        assert trace_store.count() == 6  # importing twice updates, never duplicates

"""A deferrable sensor in a real Airflow 3.3, through the AgoraExecutor: its wait is a release, not work.

``wait`` (a ``TimeDeltaSensor``, ``deferrable=True``) waits until 25 s after the run began, between
``prep`` and ``after`` (past runs say it waited 16 s);
``busy_1 -> busy_2`` (3 s each) run beside it. The catalog has one pool of one core (``local-small``), so a
wait that held its worker would hold the only core. With past runs in the trace store, ``agora
optimize airflow:agora_waits --apply`` leaves ``wait`` out of the plan and makes its 16 s a release
time of ``after``. The run then shows it: ``busy_1`` runs while the sensor waits on the triggerer
(the core was free), ``after`` starts after the wait ends, and the sensor's own short runs (before
it defers, after it resumes) went to the smallest pool as a wait, with no planned machine.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agora_optimizer.io.plan_file import load_plan
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore
from harness.local_airflow import agora_deployment

pytestmark = pytest.mark.airflow

DAG_ID = "agora_waits"
WAIT_S = 16.0  # what past runs say the sensor waited
DELTA_S = 25  # the sensor waits until this long after the run began
PAST = {"prep": 1.0, "wait": WAIT_S, "busy_1": 3.0, "busy_2": 3.0, "after": 1.0}
CATALOG = """
network: {bandwidth_bytes_per_s: 2000000000}
resources:
  - {name: local-small, backend: local, vcpus: 1, memory_gib: 4, speed: 1.0, price_per_hour_usd: 0.0, count: 1,
     billing: {granularity_s: 1, minimum_s: 0}, boot_s: 0, cpu_set: [0]}
"""
DAG = """
import time
from datetime import datetime, timedelta
from airflow.sdk import DAG, task
from airflow.providers.standard.sensors.time_delta import TimeDeltaSensor

@task
def prep():
    return 1

@task
def busy_1(x):
    time.sleep(3)

@task
def busy_2():
    time.sleep(3)

@task
def after():
    return 2

with DAG(dag_id="agora_waits", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    first = prep()
    wait = TimeDeltaSensor(task_id="wait", delta=timedelta(seconds=25), deferrable=True)
    first >> wait >> after()
    busy_1(first) >> busy_2()
"""


def past_runs() -> list[TaskAttempt]:
    rows = []
    for run in range(3):
        start = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(hours=run)
        for task_id, runtime_s in PAST.items():
            rows.append(
                TaskAttempt.create(
                    dag_id=DAG_ID,
                    task_id=task_id,
                    run_id=f"manual__{run}",
                    resource_type="local-small",
                    backend="local",
                    started_at=start,
                    ended_at=start + timedelta(seconds=runtime_s),
                    peak_rss_bytes=200 * 2**20,
                )
            )
    return rows


def _span(ti: dict) -> tuple[datetime, datetime]:
    return datetime.fromisoformat(ti["start_date"]), datetime.fromisoformat(ti["end_date"])


def test_a_deferrable_sensor_frees_its_core_and_its_wait_releases_its_child(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "agora_waits.py").write_text(DAG)
    catalog = tmp_path / "one-core.yaml"
    catalog.write_text(CATALOG)
    store = f"sqlite:///{tmp_path / 'traces.db'}"
    with TraceStore(store) as traces:
        traces.add(past_runs())
    airflow = agora_deployment(
        tmp_path,
        catalog,
        store,
        extra_env={"AIRFLOW__AGORA__DEFAULT_RESOURCE": "local-small", "AIRFLOW__AGORA__REPLAN_SLACK": "0"},
    )
    airflow.migrate()
    optimize = [
        sys.executable, "-m", "agora_optimizer", "optimize", f"airflow:{DAG_ID}",
        "--catalog", str(catalog), "--dag-folder", str(dags), "--store", store,
        "--time-limit-s", "30", "--apply", "-o", str(tmp_path / "plan.json"),
    ]  # fmt: skip
    result = subprocess.run(optimize, capture_output=True, text=True, env=airflow.env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "waits without a worker, planned as release times of the tasks after them: wait" in result.stderr
    plan = {a.task: a for a in load_plan(tmp_path / "plan.json").assignments}
    assert sorted(plan) == ["after", "busy_1", "busy_2", "prep"]  # the wait is no work on a machine
    assert plan["after"].start_s >= plan["prep"].end_s + WAIT_S - 1e-6  # ... but a release of its child
    assert plan["busy_1"].start_s < plan["prep"].end_s + WAIT_S  # and the core works during it

    with airflow:
        airflow.start("api-server", "dag-processor", "scheduler", "triggerer")
        airflow.wait_for_dag(DAG_ID)
        run_id = airflow.trigger(DAG_ID)
        assert airflow.wait_for_run(DAG_ID, run_id, timeout_s=600) == "success"
        tis = airflow.task_instances(DAG_ID, run_id)
        run = airflow.request("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}")
    assert {task_id: ti["state"] for task_id, ti in tis.items()} == dict.fromkeys(PAST, "success")
    wait_start = _span(tis["wait"])[0]
    wait_end = datetime.fromisoformat(run["run_after"]) + timedelta(seconds=DELTA_S)  # the sensor's target
    assert wait_end > wait_start + timedelta(seconds=5)  # it had a wait to defer (prep ended well before)
    busy = [_span(tis[task_id]) for task_id in ("busy_1", "busy_2")]
    assert any(start < wait_end and end > wait_start for start, end in busy), tis  # the core worked in the wait
    assert _span(tis["after"])[0] >= wait_end
    with TraceStore(store) as traces:
        attempts = {a.task_id: a for a in traces.attempts(DAG_ID) if a.run_id == run_id}
    assert attempts["wait"].resource_type == "local-small"
    assert attempts["wait"].machine == ""  # a wait: no planned machine
    assert attempts["after"].machine == plan["after"].machine

"""A window of many DAG runs planned together, put in force, and run in a real Airflow 3.3 with the AgoraExecutor.

Two DAGs on the two local pools of ``catalogs/local.yaml`` (``local-small`` is CPU 0, ``local-large``
CPU 1, one core and one machine each): ``win_twice`` runs every 5 s from T0 to T0 + 5 s, so the
window [T0, T0 + 10 s) holds two of its runs, and ``win_once`` one run at T0. Each task is planned for
10 s (its hint) and sleeps 1 s. ``win_twice``'s runs have a 24 s deadline: the second starts 5 s after
the first, while the first holds its machine until 20 s, so the window's plan must put the two runs on
different pools. ``agora optimize --dags tag:window --window 10s --apply`` (the CLI, as a user runs it)
keeps each run's plan; the DAGs' current plans are their first runs'. The scheduler then creates the
runs itself (catchup), and each task writes the CPUs the operating system let it run on.

Measured: each run's tasks ran on the pool and machine of its own run plan (the second run of
``win_twice`` on the other CPU than its parse-time placement says), the trace rows and the run
records (``agora runs show --json``) name each run's own plan, and each record has its planned and
actual makespan.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from agora_optimizer.io.plan_file import load_plan
from agora_optimizer.plans.store import PlanStore, plan_version
from harness.local_airflow import AirflowDeployment, agora_deployment, wait_until
from tests.conftest import CATALOGS

pytestmark = pytest.mark.airflow
T0 = "2026-01-01T00:00:00+00:00"
RUNS = {"win_twice": 2, "win_once": 1}
TASKS = {"win_twice": ("first", "second"), "win_once": ("only",)}

DAGS = """
import json, os, time
from datetime import datetime, timedelta
from pathlib import Path
from airflow.sdk import DAG, task

T0 = datetime.fromisoformat("{t0}")
HINT = {{"agora": {{"runtime_s": 10, "cores": 1, "memory_gib": 0.25}}}}


def _run(of_dag, of_task, of_run):  # not dag, run_id: names of Airflow's context
    started = time.time()
    time.sleep(1)
    Path("{reports}", f"{{of_dag}}.{{of_run}}.{{of_task}}.json").write_text(json.dumps(
        {{"cpus": sorted(os.sched_getaffinity(0)), "started": started, "ended": time.time()}}
    ))


def build(dag_id, every_s, tasks):
    with DAG(dag_id, schedule=timedelta(seconds=every_s), start_date=T0, end_date=T0 + timedelta(seconds=5),
             catchup=True, tags=["window"]) as dag:
        previous = None
        for name in tasks:
            step = task(task_id=name, executor_config=HINT)(_run)(dag_id, name, "{{{{ run_id }}}}")
            if previous is not None:
                previous >> step
            previous = step
    return dag


win_twice = build("win_twice", 5, ["first", "second"])
win_once = build("win_once", 3600, ["only"])
"""


def _agora(airflow: AirflowDeployment, *args: str) -> subprocess.CompletedProcess[str]:
    """``agora ARGS`` with the deployment's settings, as a user on its machine runs it."""
    command = [sys.executable, "-m", "agora_optimizer", *args]
    return subprocess.run(command, capture_output=True, text=True, env=airflow.env, timeout=300, check=False)


def _finished_runs(airflow: AirflowDeployment) -> dict[str, list[dict[str, Any]]]:
    return {
        dag_id: [
            run
            for run in airflow.request("GET", f"/dags/{dag_id}/dagRuns")["dag_runs"]
            if run["state"] in ("success", "failed")
        ]
        for dag_id in RUNS
    }


def test_a_window_runs_each_dag_run_on_its_own_plan_and_records_it_against_that_plan(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "window_dags.py").write_text(DAGS.format(t0=T0, reports=reports))
    shutil.copy(CATALOGS / "local.yaml", tmp_path / "local.yaml")
    cpus = {r["name"]: r["cpu_set"] for r in yaml.safe_load((tmp_path / "local.yaml").read_text())["resources"]}
    airflow = agora_deployment(
        tmp_path,
        tmp_path / "local.yaml",
        extra_env={"AIRFLOW__AGORA__AIRFLOW_POOLS": "False", "AIRFLOW__AGORA__DEADLINES": "win_twice=24s"},
    )
    airflow.migrate()
    planned = _agora(
        airflow, "optimize", "--dags", "tag:window", "--window", "10s", "--window-start", T0,
        "--catalog", str(tmp_path / "local.yaml"), "--platform-latency", "none", "--time-limit-s", "15",
        "--out", str(tmp_path / "window"), "--json", "--apply",
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr[-3000:]
    rows = json.loads(planned.stdout)["runs"]
    assert sorted((row["dag_id"], row["offset_s"]) for row in rows) == [
        ("win_once", 0.0), ("win_twice", 0.0), ("win_twice", 5.0),
    ]  # fmt: skip
    store = PlanStore(tmp_path / "plans")
    plans = {}  # (dag_id, run_after) -> the run's plan, as kept for the executor
    for row in rows:
        kept = store.run_plan(row["dag_id"], datetime.fromisoformat(row["run_after"]))
        assert kept is not None and kept.plan == load_plan(row["plan"])
        plans[(row["dag_id"], row["run_after"])] = kept
    twice = [plans[key] for key in sorted(plans) if key[0] == "win_twice"]
    pools = [{a.resource for a in run.plan.assignments} for run in twice]
    assert all(len(used) == 1 for used in pools) and pools[0] != pools[1], pools  # the deadline's doing
    current = store.current("win_twice")  # what the policy routes by at parse time: the first run's
    assert current is not None and current.plan == twice[0].plan

    with airflow:
        airflow.start()
        wait_until(
            lambda: all(len(runs) == RUNS[dag_id] for dag_id, runs in _finished_runs(airflow).items()),
            180, "the window's runs to finish", airflow,
        )  # fmt: skip
        finished = _finished_runs(airflow)
        scheduler_log = airflow.log("scheduler")
    for dag_id, runs in finished.items():
        for run in runs:
            assert run["state"] == "success", (dag_id, run["dag_run_id"], scheduler_log[-3000:])
            run_after = datetime.fromisoformat(run["run_after"].replace("Z", "+00:00")).isoformat()
            kept = plans[(dag_id, run_after)]
            version = plan_version(kept.path.read_bytes())
            placed = {a.task: a for a in kept.plan.assignments}
            for name in TASKS[dag_id]:  # on its own plan's pool: that pool's CPUs
                seen = json.loads((reports / f"{dag_id}.{run['dag_run_id']}.{name}.json").read_text())
                assert seen["cpus"] == cpus[placed[name].resource], (dag_id, run_after, name, scheduler_log[-3000:])
            shown = _agora(airflow, "runs", "show", dag_id, run["dag_run_id"], "--json")
            assert shown.returncode == 0, shown.stderr[-2000:]
            record = json.loads(shown.stdout)  # recorded when the run ended: against its own plan
            assert record["planned"] and record["plan_version"] == version, (dag_id, run_after, record["notes"])
            assert record["planned_makespan_s"] == pytest.approx(kept.plan.makespan_s)
            assert record["actual_makespan_s"] is not None and record["actual_makespan_s"] > 1.0
            assert record["makespan_ratio"] == pytest.approx(record["actual_makespan_s"] / kept.plan.makespan_s)
            tasks = {t["task_id"]: t for t in record["tasks"]}
            assert set(tasks) == set(TASKS[dag_id])
            for name, task in tasks.items():
                assert (task["planned_machine"], task["actual_machine"]) == (placed[name].machine,) * 2
                assert task["actual_resource"] == placed[name].resource and task["state"] == "success"

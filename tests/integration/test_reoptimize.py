"""The rerun DAG: retrain on new traces, re-plan the DAGs that opted in, keep the plan history."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agora_optimizer.integration.reoptimize import RERUN_DAG_ID, retrain
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.plans.store import PlanStore, plan_version
from agora_optimizer.runs.store import RunStore
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore
from harness.local_airflow import migrate_database
from tests.conftest import CATALOGS, REPO
from tests.runs.test_store import record as recorded_run

MIB = 2**20
RUN = """
import sys
from airflow.dag_processing.dagbag import DagBag
from agora_optimizer.integration.reoptimize import opted_in_dags
bag = DagBag(sys.argv[1], safe_mode=False, load_op_links=False)
assert not bag.import_errors, bag.import_errors
print("OPTED", ",".join(opted_in_dags(sys.argv[1], "agora")), flush=True)
print("STATE", bag.dags["agora_reoptimize"].test(run_conf={"dag_id": sys.argv[2]}).state, flush=True)
"""


TASKS = [("extract", 2.0, 120), ("clean", 2.0, 120), ("profile", 1.0, 120), ("load", 1.0, 120)]


def history(dag_id: str, seconds: float, peak_mib: int, runs: int = 3) -> list[TaskAttempt]:
    start = datetime(2026, 11, 1, tzinfo=UTC)
    return [
        TaskAttempt(
            dag_id=dag_id,
            task_id=task,
            run_id=f"r{run}",
            resource_type="local-small",
            backend="local",
            started_at=start,
            ended_at=start + timedelta(seconds=s),
            runtime_s=s,
            peak_rss_bytes=p * MIB,
            state="success",
        )
        for run in range(runs)
        for task, s, p in [("aggregate", seconds, peak_mib), *TASKS]
    ]


def stale_plan() -> Plan:
    solver = SolverInfo("earlier", "heuristic", None, 0.0)
    assignments = (Assignment("aggregate", "local-small", "local-small#0", 0.0, 5.0, 1, 2**30),)
    return Plan(
        "agora_example_etl", "catalogs/local.yaml", Objective(), 5.0, 0.0, assignments, solver, "2026-11-01T00:00:00Z"
    )


@pytest.mark.slow  # trains three models
def test_retrain_skips_when_nothing_new_was_recorded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    models = tmp_path / "model"
    assert not retrain(url, models).trained  # empty store
    with TraceStore(url) as store:
        store.add(history("etl", 40.0, 700))
    first = retrain(url, models)
    assert first.trained and first.attempts == 15 and (models / "metadata.json").exists()
    assert not retrain(url, models).trained
    with TraceStore(url) as store:
        store.add(history("etl", 41.0, 710, runs=4))  # one more run
    assert retrain(url, models).trained


@pytest.mark.slow  # trains a model
def test_retrain_does_not_learn_from_the_rerun_dags_own_attempts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    models = tmp_path / "model"
    with TraceStore(url) as store:
        store.add(history("etl", 40.0, 700))
    assert retrain(url, models).attempts == 15
    with TraceStore(url) as store:  # what a scheduled rerun leaves in the store: its own tasks' attempts
        store.add(
            TaskAttempt.create(dag_id=RERUN_DAG_ID, task_id=task, run_id="scheduled__1", runtime_s=3.0, state="success")
            for task in ("retrain", "dags_to_replan", "replan")
        )
    again = retrain(url, models)
    assert (again.trained, again.attempts, again.reason) == (False, 15, "no new attempts since the last training")


@pytest.mark.airflow
def test_the_rerun_dag_replans_opted_in_dags_from_the_traces_and_keeps_history(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    for name in ("agora_example_etl.py", "agora_reoptimize.py"):
        shutil.copy(REPO / "dags" / name, dags)
    store_url = f"sqlite:///{tmp_path / 'traces.db'}"
    with TraceStore(store_url) as store:
        store.add(history("agora_example_etl", 40.0, 700))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {
        "AIRFLOW_HOME": str(tmp_path / "home"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__AGORA__CATALOG": str(CATALOGS / "local.yaml"),
        "AIRFLOW__AGORA__PLAN_DIR": str(tmp_path / "plans"),
        "AIRFLOW__AGORA__MODEL_DIR": str(tmp_path / "model"),
        "AIRFLOW__AGORA__TRACE_STORE_URL": store_url,
        "AIRFLOW__AGORA__PLAN_TIME_LIMIT_S": "5",
        "AIRFLOW__AGORA__RUNTIME_QUANTILE": "p90",  # not the default's p50 (no deadline): the setting is read
        "AIRFLOW__AGORA__PLAN_HISTORY_MAX": "1",
    }
    migrate_database(env)
    plans = PlanStore(tmp_path / "plans")
    plans.save("agora_example_etl", replace(stale_plan(), cost_usd=1.0))  # an older plan no run names
    stale = plans.save("agora_example_etl", stale_plan())  # the plan in force before the rerun
    with RunStore(store_url) as runs:  # a recorded run names it: past the limit of 1, it is kept all the same
        runs.put(recorded_run(dag_id="agora_example_etl", plan_version=plan_version(stale.path.read_bytes())))
    run = [sys.executable, "-c", RUN, str(dags), "agora_example_etl"]  # a run asked for one DAG, as the UI does
    result = subprocess.run(run, capture_output=True, text=True, env=env, timeout=300)
    assert "STATE success" in result.stdout, (result.stdout + result.stderr)[-5000:]
    assert "OPTED agora_example_etl\n" in result.stdout  # tagged "agora"; the rerun DAG itself is not
    assert plans.dag_ids() == ["agora_example_etl"]
    # the old plan kept, the new one in force; the older one, past [agora] plan_history_max = 1, removed
    assert len(plans.history("agora_example_etl")) == 2 and plans.history("agora_example_etl")[0] == stale.path
    current = plans.current("agora_example_etl")
    assert current is not None
    aggregate = next(a for a in current.plan.assignments if a.task == "aggregate")
    assert 35.0 <= aggregate.end_s - aggregate.start_s <= 50.0  # learned from the traces, not the 5 s hint
    assert aggregate.memory_bytes >= 700 * MIB
    assert current.plan.runtime_quantile == "p90"  # the plan says which runtimes it was made from
    assert (tmp_path / "model" / "metadata.json").exists()

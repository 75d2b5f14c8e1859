"""The rerun DAG on its schedule in a real Airflow 3.3: traces in, a model and a plan out, the next run on the plan.

A real scheduler, dag-processor and api-server (harness/local_airflow.py), no ``dag.test()``. The trace
store holds three past runs of ``agora_example_etl`` (tag ``agora``: it opted in), whose ``aggregate``
took 40 s and 1,000 MiB; no model has been trained; the plan in force is a stale one that gives
``aggregate`` the 5 s of its hint. ``[agora] reoptimize_schedule`` is ``* * * * *``: a cron schedule is
Airflow 3's ``CronTriggerTimetable``, which with ``catchup=False`` makes its first run at the last minute
boundary before the DAG was parsed, so the run comes as soon as the rerun DAG is unpaused (DAGs are paused at
creation here, as Airflow ships), and one a minute after, one at a time (``max_active_runs=1``).

1. A user unpauses ``agora_reoptimize``; its first run is ``scheduled`` (not ``manual``) and succeeds. The
   model directory then holds a model trained on the 15 attempts, the DAG's plan in force changed, the stale one
   is kept first in the history, and ``aggregate`` is planned with the 40 s and 1,000 MiB of its traces.
2. The user pauses the rerun (a second run may have begun: it stops where it is, and learns nothing from
   the first one's own attempts); once the serialized DAG carries the plan in force, a triggered run of
   ``agora_example_etl`` is placed by it: every attempt and the run record name its version.
3. Unpaused again, the next scheduled run learns from that run: the model is trained on 20 attempts (the
   rerun DAG's own tasks are not learned from) and one more plan is put in force.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.plans.store import PlanStore, plan_version
from agora_optimizer.predict.model_store import read_metadata
from agora_optimizer.runs.store import RunStore
from agora_optimizer.traces.store import TraceStore
from harness.local_airflow import AirflowDeployment, agora_deployment, wait_until
from tests.conftest import CATALOGS, REPO
from tests.integration.test_reoptimize import MIB, history, stale_plan

pytestmark = [pytest.mark.airflow, pytest.mark.slow]
RERUN = "agora_reoptimize"
ETL = "agora_example_etl"
SEEDED = history(ETL, 40.0, 1000)  # three runs of five tasks; aggregate 40 s, 1,000 MiB (it holds 600 MiB)
ETL_TASKS = {"extract", "clean", "aggregate", "profile", "load"}


def _runs(airflow: AirflowDeployment, dag_id: str) -> list[dict[str, Any]]:
    return list(airflow.request("GET", f"/dags/{dag_id}/dagRuns", params={"limit": 100})["dag_runs"])


def _when(value: str | None) -> datetime:
    assert value is not None
    return datetime.fromisoformat(value)


def _set_paused(airflow: AirflowDeployment, dag_id: str, paused: bool) -> None:
    """What a user does with the toggle in Airflow's UI (``PATCH /dags/{dag_id}``)."""
    airflow.request("PATCH", f"/dags/{dag_id}", json={"is_paused": paused})


def _wait_scheduled_success(airflow: AirflowDeployment, after: datetime | None, timeout_s: float) -> dict[str, Any]:
    """The first scheduled run of the rerun DAG that started after ``after`` (any, if None), once it succeeded."""
    found: list[dict[str, Any]] = []

    def ended() -> bool:
        runs = [
            run
            for run in _runs(airflow, RERUN)
            if run["run_type"] == "scheduled"
            and run["start_date"] is not None
            and (after is None or _when(run["start_date"]) > after)
        ]
        runs.sort(key=lambda run: _when(run["start_date"]))
        if runs and runs[0]["state"] in ("success", "failed"):
            found[:] = runs[:1]
        return bool(found)

    wait_until(ended, timeout_s, "a scheduled run of the rerun DAG", airflow)
    assert found[0]["state"] == "success", airflow.log("scheduler")[-4000:]
    return found[0]


def _wait_quiet(airflow: AirflowDeployment, dag_id: str) -> None:
    """Until no task of ``dag_id`` is queued or running, three polls in a row.

    A paused DAG's running run stops where it is: its started tasks end, no other task is scheduled
    until the DAG is unpaused (a second rerun may have begun the moment the first ended).
    """
    quiet: list[bool] = []

    def idle() -> bool:
        answer = airflow.request(
            "GET", f"/dags/{dag_id}/dagRuns/~/taskInstances", params={"state": ["queued", "running"]}
        )
        quiet.append(answer["total_entries"] == 0)
        return quiet[-3:] == [True] * 3

    wait_until(idle, 120, f"the tasks of {dag_id} to end", airflow)


def _wait_serialized_with(airflow: AirflowDeployment, dag_id: str, version: str) -> None:
    """Until the serialized DAG the scheduler runs ``dag_id`` from carries plan ``version``'s placements.

    The cluster policy applies a plan when the dag-processor parses the file (every ``min_file_process_interval``),
    and Airflow rewrites a serialized DAG at most every ``[core] min_serialized_dag_update_interval`` (30 s).
    Read from Airflow's metadata database: the REST API does not show a task's ``executor_config``.
    """

    def carried() -> bool:
        with closing(sqlite3.connect(airflow.home / "airflow.db")) as db:
            query = "SELECT data FROM serialized_dag WHERE dag_id = ? ORDER BY last_updated DESC LIMIT 1"
            row = db.execute(query, (dag_id,)).fetchone()
        return row is not None and row[0] is not None and version in row[0]  # placements name their plan's version

    wait_until(carried, 90, f"the serialized {dag_id} to carry plan {version}", airflow)


def _trained_on(models: Path) -> int:
    """How many attempts the model in ``models`` was trained on (``store: N attempts, ...``)."""
    (source,) = read_metadata(models)["training_data"]["sources"]
    found = re.match(r"store: (\d+) attempts", source)
    assert found is not None, source
    return int(found.group(1))


def test_the_scheduled_rerun_retrains_replans_and_the_next_run_uses_the_plan(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    for name in (f"{ETL}.py", f"{RERUN}.py"):
        shutil.copy(REPO / "dags" / name, dags)
    store_url = f"sqlite:///{tmp_path / 'traces.db'}"
    with TraceStore(store_url) as store:
        store.add(SEEDED)
    models = tmp_path / "model"
    airflow = agora_deployment(
        tmp_path,
        CATALOGS / "local.yaml",
        store_url,
        extra_env={
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",  # Airflow's default: a user unpauses the rerun
            "AIRFLOW__AGORA__REOPTIMIZE_SCHEDULE": "* * * * *",
            "AIRFLOW__AGORA__MODEL_DIR": str(models),
            "AIRFLOW__AGORA__PLAN_TIME_LIMIT_S": "5",
        },
    )
    airflow.migrate()
    plans = PlanStore(tmp_path / "plans")
    stale = plans.save(ETL, stale_plan())
    stale_version = plan_version(stale.path.read_bytes())
    with airflow:
        airflow.start()
        airflow.wait_for_dag(RERUN)
        airflow.wait_for_dag(ETL)
        assert _runs(airflow, RERUN) == [] and not models.exists()  # paused: nothing ran, no model yet
        _set_paused(airflow, RERUN, False)

        # 1. The first scheduled run: a model from the traces, a new plan in force, the stale one kept.
        first = _wait_scheduled_success(airflow, None, 150)
        assert _trained_on(models) == len(SEEDED) == 15
        _set_paused(airflow, RERUN, True)  # no rerun re-plans while the ETL runs below
        _wait_quiet(airflow, RERUN)
        entries = plans.history(ETL)
        assert len(entries) >= 2 and entries[0].read_bytes() == stale.path.read_bytes()
        replanned = plans.find(ETL, plan_version(entries[1].read_bytes()))  # the first run's plan
        assert replanned is not None
        aggregate = next(a for a in replanned.plan.assignments if a.task == "aggregate")
        assert 35.0 <= aggregate.end_s - aggregate.start_s <= 50.0  # the traces' 40 s, not the stale 5 s
        assert aggregate.memory_bytes >= 1000 * MIB
        assert {a.task for a in replanned.plan.assignments} == ETL_TASKS
        current_path = plans.current_path(ETL)
        current_version = plan_version(current_path.read_bytes())
        assert current_version != stale_version
        assert current_path.read_bytes() == entries[-1].read_bytes()

        # 2. The next run of the opted-in DAG is placed by the plan in force.
        _wait_serialized_with(airflow, ETL, current_version)
        _set_paused(airflow, ETL, False)
        run_id = airflow.trigger(ETL)
        assert airflow.wait_for_run(ETL, run_id, timeout_s=180) == "success"
        with TraceStore(store_url) as store:
            attempts = store.attempts(dag_id=ETL, run_id=run_id)
        assert sorted(a.task_id for a in attempts) == sorted(ETL_TASKS)  # one attempt each
        assert {a.plan_version for a in attempts} == {current_version}
        with RunStore(store_url) as runs:
            wait_until(lambda: runs.get(ETL, run_id) is not None, 60, f"the record of run {run_id}", airflow)
            record = runs.get(ETL, run_id)
        assert record is not None and record.planned and record.plan_version == current_version
        etl_ended = _when(airflow.request("GET", f"/dags/{ETL}/dagRuns/{run_id}")["end_date"])

        # 3. The next scheduled run learns from that run and puts one more plan in force.
        history_before = len(plans.history(ETL))
        _set_paused(airflow, RERUN, False)
        second = _wait_scheduled_success(airflow, etl_ended, 180)
        assert second["dag_run_id"] != first["dag_run_id"]
        assert {run["run_type"] for run in _runs(airflow, RERUN)} == {"scheduled"}  # nobody triggered the rerun
    assert _trained_on(models) == len(SEEDED) + len(attempts)  # not the rerun DAG's own attempts
    assert len(plans.history(ETL)) > history_before
    assert plan_version(plans.current_path(ETL).read_bytes()) != current_version

"""Run records in a real Airflow 3.3 (api-server, dag-processor, scheduler on SQLite).

One DAG has a plan over the two local pools and runs on the AgoraExecutor; another has none and
runs on the LocalExecutor. When each run ends, the plugin's run listener (in the scheduler)
records it; the record's numbers must be Airflow's own task instance times, counted from the DAG
run's start. ``agora runs record`` then re-records the finished runs from the metadata database.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import pytest

from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.plans.store import PlanStore, plan_version
from agora_optimizer.runs.record import RunRecord
from agora_optimizer.runs.store import RunStore
from harness.local_airflow import AirflowDeployment, agora_deployment, wait_until
from tests.conftest import CATALOGS

pytestmark = pytest.mark.airflow
MIB = 2**20
PLANNED, UNPLANNED = "agora_runs_planned", "agora_runs_unplanned"
DAGS = f"""
import time
from datetime import datetime
from airflow.sdk import DAG, task

for dag_id in ("{PLANNED}", "{UNPLANNED}"):
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
        @task(retries=0)
        def first():
            time.sleep(1)

        @task(retries=0)
        def second():
            time.sleep(1)

        first() >> second()
"""
PLAN = Plan(
    "runs", "catalogs/local.yaml", Objective(), 10.0, 0.0,
    (Assignment("first", "local-small", "local-small#0", 0.0, 5.0, 1, 256 * MIB),
     Assignment("second", "local-large", "local-large#0", 5.0, 10.0, 1, 256 * MIB)),
    SolverInfo("test", "heuristic", None, 0.0), "2026-12-01T00:00:00Z",
)  # fmt: skip


@dataclass
class Deployment:
    airflow: AirflowDeployment
    store_url: str
    version: str

    def record(self, dag_id: str, run_id: str) -> RunRecord:
        """The run's record once the listener has written it."""
        found: list[RunRecord] = []

        def recorded() -> bool:
            with RunStore(self.store_url) as store:
                record = store.get(dag_id, run_id)
            found[:] = [record] if record is not None else []
            return bool(found)

        wait_until(recorded, 60, f"the run record of {dag_id}/{run_id}", self.airflow)
        return found[0]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("agora-runs")
    dags = root / "dags"
    dags.mkdir()
    (dags / "agora_runs.py").write_text(DAGS)
    store_url = f"sqlite:///{root / 'traces.db'}"
    airflow = agora_deployment(root, CATALOGS / "local.yaml", store_url)
    airflow.migrate()
    stored = PlanStore(root / "plans").save(PLANNED, PLAN)
    try:
        airflow.start()
        for dag_id in (PLANNED, UNPLANNED):
            airflow.wait_for_dag(dag_id)
        yield Deployment(airflow, store_url, plan_version(stored.path.read_bytes()))
    finally:
        airflow.stop_all()


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _check_against_airflow(deployment: Deployment, dag_id: str, run_id: str, record: RunRecord) -> None:
    """Every task's actual times and the makespan are Airflow's own, from the DAG run's start."""
    run = deployment.airflow.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
    start = _time(run["start_date"])
    assert record.state == run["state"] == "success"
    assert record.started_at == start and record.ended_at == _time(run["end_date"])
    instances = deployment.airflow.task_instances(dag_id, run_id)
    assert {t.task_id for t in record.tasks} == set(instances) == {"first", "second"}
    for task in record.tasks:
        ti = instances[task.task_id]
        assert task.state == ti["state"] == "success" and task.try_number == ti["try_number"]
        assert task.actual_start_s == pytest.approx((_time(ti["start_date"]) - start).total_seconds(), abs=1e-6)
        assert task.actual_end_s == pytest.approx((_time(ti["end_date"]) - start).total_seconds(), abs=1e-6)
    last_end = max(_time(ti["end_date"]) for ti in instances.values())
    assert record.actual_makespan_s == pytest.approx((last_end - start).total_seconds(), abs=1e-6)


def test_a_planned_run_ends_with_a_record_of_its_plan_and_airflows_times(deployment: Deployment) -> None:
    run_id = deployment.airflow.trigger(PLANNED)
    assert deployment.airflow.wait_for_run(PLANNED, run_id) == "success"
    record = deployment.record(PLANNED, run_id)
    _check_against_airflow(deployment, PLANNED, run_id, record)
    assert record.planned and record.plan_version == deployment.version
    assert (record.planned_makespan_s, record.planned_cost_usd) == (10.0, 0.0)
    second = next(t for t in record.tasks if t.task_id == "second")
    assert (second.planned_machine, second.actual_machine, second.actual_resource) == (
        "local-large#0", "local-large#0", "local-large",
    )  # fmt: skip
    assert {lease.machine for lease in record.leases} == {"local-small#0", "local-large#0"}
    assert record.actual_cost_usd == 0.0  # local pools cost nothing
    assert not any("not in" in note for note in record.notes), record.notes


def test_an_unplanned_run_ends_with_an_unplanned_record_and_agora_runs_record_rebuilds_it(
    deployment: Deployment,
) -> None:
    run_id = deployment.airflow.trigger(UNPLANNED)
    assert deployment.airflow.wait_for_run(UNPLANNED, run_id) == "success"
    record = deployment.record(UNPLANNED, run_id)
    _check_against_airflow(deployment, UNPLANNED, run_id, record)
    assert not record.planned and record.plan_version == "" and record.planned_makespan_s is None
    assert all(t.planned_machine == "" and t.actual_machine == "" for t in record.tasks)

    with RunStore(deployment.store_url) as store:  # a record lost: the command rebuilds it from Airflow's DB
        store.put(RunRecord(UNPLANNED, run_id, "failed", False, "", None, None, None, None, None, 0.0))
    command = [sys.executable, "-m", "agora_optimizer", "runs", "record", "--dag", UNPLANNED]
    done = subprocess.run(command, env=deployment.airflow.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "recorded" in done.stdout
    with RunStore(deployment.store_url) as store:
        rebuilt = store.get(UNPLANNED, run_id)
    assert rebuilt is not None
    _check_against_airflow(deployment, UNPLANNED, run_id, rebuilt)

    shown = subprocess.run(
        [sys.executable, "-m", "agora_optimizer", "runs", "show", UNPLANNED, run_id, "--json"],
        env=deployment.airflow.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["actual_makespan_s"] == pytest.approx(rebuilt.actual_makespan_s)

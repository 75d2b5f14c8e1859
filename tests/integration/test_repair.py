"""A run that drifts from its plan is repaired in a real Airflow 3.3, and the repair is in its run record.

Four tasks on two planned machines of the local pools (``catalogs/local.yaml``: ``local-small`` is
CPU 0, ``local-large`` CPU 1, one core each): ``a``, then ``x``, then ``b`` (a's child) on
local-small#0, and ``c`` on local-large#0. ``x`` is planned for minutes, so ``b`` is planned to wait
for it. The run's conf makes ``a`` sleep 12 s where the plan gave it 3: it ends far later than
planned, the executor re-plans the tasks not yet queued, and ``b`` is placed on local-large#0, free
since ``c`` ended (moved while held, or given the new placement when Airflow hands it over: either
happens, as Airflow may schedule ``b`` before the executor's poll sees ``a``'s job end). Each task
writes the CPUs it may run on, as the operating system tells it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.model.workflow import Edge, Task, Workflow
from agora_optimizer.plans.store import PlanStore
from agora_optimizer.runs.store import RunStore
from harness.local_airflow import agora_deployment
from tests.conftest import CATALOGS

pytestmark = pytest.mark.airflow
MIB = 2**20
DAG_ID = "agora_repair"

DAG = """
import json, os, time
from datetime import datetime
from pathlib import Path
from airflow.sdk import DAG, task

def _run(name, report_dir, seconds):
    started = time.time()
    time.sleep(float(seconds))
    Path(report_dir, name + ".json").write_text(json.dumps(
        {"cpus": sorted(os.sched_getaffinity(0)), "started": started, "ended": time.time()}
    ))

with DAG(dag_id="agora_repair", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    runs = {
        name: task(task_id=name)(_run)(
            name, "{{ dag_run.conf['report_dir'] }}", "{{ dag_run.conf['sleep_s'].get('" + name + "', 0) }}"
        )
        for name in ("a", "x", "b", "c")
    }
    runs["a"] >> runs["b"]
"""

PLAN = {  # task -> (machine, planned start, planned end)
    "a": ("local-small#0", 0.0, 3.0),
    "x": ("local-small#0", 3.0, 200.0),
    "b": ("local-small#0", 200.0, 203.0),
    "c": ("local-large#0", 0.0, 30.0),
}
SLEEP_S = {"a": 12}


def _plan_and_workflow() -> tuple[Plan, Workflow]:
    assignments = tuple(
        Assignment(task, machine.split("#")[0], machine, start, end, 1, 256 * MIB)
        for task, (machine, start, end) in PLAN.items()
    )
    plan = Plan(
        DAG_ID, "catalogs/local.yaml", Objective(kind="time"), 203.0, 0.0, assignments,
        SolverInfo("test", "heuristic", None, 0.0), "2026-12-01T00:00:00Z",
    )  # fmt: skip
    # each its own category: a category's tasks that end early would be learned from (issue 34) and re-planned first
    tasks = [Task(task, end - start, 1, 256 * MIB, task) for task, (_, start, end) in PLAN.items()]
    return plan, Workflow.create(DAG_ID, tasks, [Edge("a", "b")])


def test_a_slowed_task_gets_its_run_repaired_and_the_repair_recorded(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{DAG_ID}.py").write_text(DAG)
    shutil.copy(CATALOGS / "local.yaml", tmp_path / "local.yaml")
    store_url = f"sqlite:///{tmp_path / 'traces.db'}"
    airflow = agora_deployment(
        tmp_path, tmp_path / "local.yaml", store_url, extra_env={"AIRFLOW__AGORA__AIRFLOW_POOLS": "False"}
    )
    airflow.migrate()
    PlanStore(tmp_path / "plans").save(DAG_ID, *_plan_and_workflow())
    reports = tmp_path / "reports"
    reports.mkdir()
    with airflow:
        airflow.start()
        airflow.wait_for_dag(DAG_ID)
        run_id = airflow.trigger(DAG_ID, {"report_dir": str(reports), "sleep_s": SLEEP_S})
        assert airflow.wait_for_run(DAG_ID, run_id, timeout_s=300) == "success"
        scheduler_log = airflow.log("scheduler")
    seen = {task: json.loads((reports / f"{task}.json").read_text()) for task in PLAN}
    assert seen["a"]["cpus"] == [0] and seen["x"]["cpus"] == [0] and seen["c"]["cpus"] == [1]
    assert seen["b"]["cpus"] == [1], scheduler_log[-3000:]  # re-placed on local-large#0 when it arrived
    with RunStore(store_url) as store:
        repairs = store.repairs(DAG_ID, run_id)
        record = store.get(DAG_ID, run_id)
    assert repairs, scheduler_log[-3000:]
    first = repairs[0]
    assert first.reason.startswith("task a ended ") and "% later than planned" in first.reason
    assert "b" in first.tasks and "b local-small#0 -> local-large#0" in first.detail
    assert 12 < first.at_s < 120
    assert record is not None and record.repairs == tuple(repairs)  # the run's record shows it

"""A plan's machines in a real Airflow 3.3: each task on its planned machine's CPUs, in the planned order.

Four independent tasks on two planned machines of the local pools (``catalogs/local.yaml``:
``local-small`` is CPU 0, ``local-large`` CPU 1, one core each). Airflow alone would start them
by priority, the planned-later task of each machine first (its priority weight is higher); the
AgoraExecutor holds it until the machine's planned-first task has run. Each task writes the
CPUs it may run on and when it started and ended, as the operating system tells it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.plans.store import PlanStore
from harness.local_airflow import agora_deployment
from tests.conftest import CATALOGS

pytestmark = pytest.mark.airflow
MIB = 2**20

DAG = """
import json, os, time
from datetime import datetime
from pathlib import Path
from airflow.sdk import DAG, task

def _run(name, report_dir):
    started = time.time()
    time.sleep(2)
    Path(report_dir, name + ".json").write_text(json.dumps(
        {"cpus": sorted(os.sched_getaffinity(0)), "started": started, "ended": time.time()}
    ))

with DAG(dag_id="agora_machines", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    for name, weight in [("small_first", 1), ("small_second", 10), ("large_first", 1), ("large_second", 10)]:
        run = task(task_id=name, priority_weight=weight, weight_rule="absolute")(_run)
        run(name, "{{ dag_run.conf['report_dir'] }}")
"""

PLAN = {  # task -> (machine, planned start, planned end)
    "small_first": ("local-small#0", 0.0, 3.0),
    "small_second": ("local-small#0", 3.0, 6.0),
    "large_first": ("local-large#0", 0.0, 3.0),
    "large_second": ("local-large#0", 3.0, 6.0),
}
CPUS = {"local-small#0": [0], "local-large#0": [1]}


def _plan() -> Plan:
    assignments = tuple(
        Assignment(task, machine.split("#")[0], machine, start, end, 1, 256 * MIB)
        for task, (machine, start, end) in PLAN.items()
    )
    return Plan(
        "machines", "catalogs/local.yaml", Objective(), 6.0, 0.0, assignments,
        SolverInfo("test", "heuristic", None, 0.0), "2026-12-01T00:00:00Z",
    )  # fmt: skip


def test_tasks_run_on_their_planned_machines_cpus_in_the_planned_order(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "agora_machines.py").write_text(DAG)
    shutil.copy(CATALOGS / "local.yaml", tmp_path / "local.yaml")
    # No Airflow pools: every task reaches the executor at once, and the order is the executor's.
    airflow = agora_deployment(tmp_path, tmp_path / "local.yaml", extra_env={"AIRFLOW__AGORA__AIRFLOW_POOLS": "False"})
    airflow.migrate()
    PlanStore(tmp_path / "plans").save("agora_machines", _plan())
    reports = tmp_path / "reports"
    reports.mkdir()
    with airflow:
        airflow.start()
        airflow.wait_for_dag("agora_machines")
        run_id = airflow.trigger("agora_machines", {"report_dir": str(reports)})
        assert airflow.wait_for_run("agora_machines", run_id, timeout_s=300) == "success"
    seen = {task: json.loads((reports / f"{task}.json").read_text()) for task in PLAN}
    for task, (machine, _, _) in PLAN.items():
        assert seen[task]["cpus"] == CPUS[machine], task  # pinned to its machine's slice
    for first, second in (("small_first", "small_second"), ("large_first", "large_second")):
        assert seen[first]["ended"] <= seen[second]["started"], (first, second)  # the planned order
    jobs = list((tmp_path / "jobs").iterdir())
    assert all((job / "task-ended").exists() for job in jobs if (job / "result.json").exists())

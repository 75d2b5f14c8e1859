"""Waits without a worker: which Airflow tasks they are, and how the planner turns them into release times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from agora_optimizer.integration.waits import release_waits, smallest_fitting, wait_s
from agora_optimizer.model import GIB, Billing, Catalog, Edge, Resource, Task, Workflow

SLOW = Resource("slow", "local", 1, 2, 0.5, 0.0, 1, Billing(1.0, 0.0))
FAST = Resource("fast", "local", 4, 16, 2.0, 0.0, 1, Billing(1.0, 0.0), boot_s=3.0)
CATALOG = Catalog((FAST, SLOW), 1e9)


def _task(task_id: str, runtime_s: float, memory_bytes: int = GIB) -> Task:
    return Task(task_id, runtime_s, 1, memory_bytes, task_id)


def test_a_root_wait_is_the_release_of_its_children_and_is_left_out() -> None:
    # the wait runs on the smallest fitting type (slow, speed 0.5): its 10 s reference runtime waits 20 s
    workflow = Workflow.create("w", [_task("wait", 10.0), _task("child", 4.0)], [Edge("wait", "child", 0)])
    released, waits = release_waits(workflow, CATALOG, ["wait"])
    assert [t.id for t in released.tasks] == ["child"] and released.edges == ()
    assert released.by_id["child"].release_s == pytest.approx(20.0)
    assert [(w.task_id, w.wait_s, w.ends_s) for w in waits] == [("wait", 20.0, 20.0)]


def test_a_wait_after_work_counts_from_the_earliest_its_parent_can_end_and_the_child_keeps_that_parent() -> None:
    # prep ends first on fast: boot 3 s + 8 / 2 = 7 s; slow would end it at 16 s
    tasks = [_task("prep", 8.0), _task("wait", 5.0), _task("after", 1.0), _task("side", 1.0)]
    edges = [Edge("prep", "wait"), Edge("wait", "after"), Edge("prep", "side", 100)]
    released, _ = release_waits(Workflow.create("w", tasks, edges), CATALOG, ["wait"])
    assert released.by_id["after"].release_s == pytest.approx(7.0 + 10.0)
    assert released.by_id["side"].release_s == 0.0 and released.by_id["prep"].release_s == 0.0
    assert {(e.parent, e.child, e.bytes) for e in released.edges} == {("prep", "after", 0), ("prep", "side", 100)}


def test_waits_in_a_row_add_up_and_an_own_release_stays_when_larger() -> None:
    tasks = [_task("w1", 2.0), _task("w2", 3.0), replace_release(_task("end", 1.0), 100.0)]
    released, waits = release_waits(
        Workflow.create("w", tasks, [Edge("w1", "w2"), Edge("w2", "end")]), CATALOG, ["w1", "w2"]
    )
    assert [w.ends_s for w in waits] == [4.0, 10.0]
    assert released.by_id["end"].release_s == 100.0
    shorter = [_task("w1", 2.0), _task("w2", 3.0), replace_release(_task("end", 1.0), 5.0)]
    released, _ = release_waits(
        Workflow.create("w", shorter, [Edge("w1", "w2"), Edge("w2", "end")]), CATALOG, ["w1", "w2"]
    )
    assert released.by_id["end"].release_s == 10.0


def test_a_wait_needs_no_type_to_fit_it_and_no_waits_changes_nothing() -> None:
    huge = Task("wait", 6.0, 64, 1024 * GIB, "wait")  # fits no type: a wait runs on none in the plan
    workflow = Workflow.create("w", [huge, _task("child", 1.0)], [Edge("wait", "child")])
    released, waits = release_waits(workflow, CATALOG, ["wait"])
    assert released.by_id["child"].release_s == 6.0 and waits[0].wait_s == wait_s(huge, CATALOG) == 6.0
    assert release_waits(workflow, CATALOG, []) == (workflow, [])


def test_the_smallest_fitting_resource_is_fewest_cores_then_least_memory() -> None:
    assert smallest_fitting(CATALOG.resources, 1, GIB) is SLOW
    assert smallest_fitting(CATALOG.resources, 2, GIB) is FAST
    assert smallest_fitting(CATALOG.resources, 1, 3 * GIB) is FAST
    assert smallest_fitting(CATALOG.resources, 8, GIB) is None


def replace_release(task: Task, release_s: float) -> Task:
    return replace(task, release_s=release_s)


SENSORS = """
from datetime import datetime, timedelta
from airflow.sdk import DAG, task
from airflow.providers.standard.sensors.python import PythonSensor
from airflow.providers.standard.sensors.time_delta import TimeDeltaSensor
from airflow.providers.standard.operators.empty import EmptyOperator

@task.sensor(poke_interval=5, timeout=60, mode="reschedule")
def decorated():
    return True

with DAG(dag_id="sensors", schedule=None, start_date=datetime(2026, 1, 1)):
    deferred = TimeDeltaSensor(task_id="deferred", delta=timedelta(seconds=5), deferrable=True)
    rescheduled = PythonSensor(task_id="rescheduled", python_callable=lambda: True, mode="reschedule")
    poking = PythonSensor(task_id="poking", python_callable=lambda: True)
    mapped = PythonSensor.partial(task_id="mapped", mode="reschedule").expand(python_callable=[bool, bool])
    work = EmptyOperator(task_id="work")
    [deferred, rescheduled, poking, decorated()] >> work
"""
REPORT = """
import json, sys
from agora_optimizer.integration.airflow_dag import load_dag
print("REPORT" + json.dumps({t.task_id: t.waits for t in load_dag("sensors", sys.argv[1]).tasks}))
"""


@pytest.mark.airflow
def test_deferrable_and_reschedule_mode_tasks_wait_without_a_worker_and_poking_ones_do_not(tmp_path: Path) -> None:
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "sensors.py").write_text(SENSORS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {"AIRFLOW_HOME": str(tmp_path / "home"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    result = subprocess.run(
        [sys.executable, "-c", REPORT, str(tmp_path / "dags")], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("REPORT"))
    assert json.loads(line.removeprefix("REPORT")) == {
        "deferred": True,
        "rescheduled": True,
        "poking": False,
        "mapped": True,
        "decorated": True,
        "work": False,
    }

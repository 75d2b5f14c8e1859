"""``bench/compat_example_dags.py`` in CI size: a handful of Airflow's own example DAGs, Local then Agora.

The suite runs every example DAG of Airflow 3.3 and its standard provider (docs/results.md);
this runs the same code on one DAG per feature the AgoraExecutor must not change: dynamic task
mapping (three map indexes of a ``@task.expand``), branching (nested ``@task.branch``), a task
group, setup/teardown tasks, trigger rules over a skipped task, a short-circuit, a DAG that
fails by design, and a DAG scheduled by assets only (triggered by hand). Each runs under the
LocalExecutor, is planned with ``agora optimize --apply``, and runs again under its plan; the task
instances must end the same, and every task that ran a process after planning must have run in an
AgoraExecutor job.

Not here: ``example_external_task`` (a deferrable ExternalTaskSensor, which Airflow's trigger polls once a
minute: 76 s of each phase, most of this suite's). The full suite runs it; a deferrable sensor that resumes
on a worker under the same try as its deferral is tests/integration/test_waits_run.py's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.airflow
DAGS = {  # DAG id -> (task instances, of which mapped)
    "example_dynamic_task_mapping": (4, 3),
    "example_nested_branch_dag": (9, 0),
    "example_task_group": (9, 0),
    "example_setup_teardown_taskflow": (9, 0),
    "example_skip_dag": (8, 0),
    "example_short_circuit_decorator": (14, 0),
    "example_failed_dag": (1, 0),
    "asset_consumes_1": (1, 0),  # scheduled by assets only: the suite triggers it by hand
}
ORDER = list(DAGS)  # the suite runs the DAGs in this order, a few at once (--agora-parallel 3 here)


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("compat")  # under the session's base: the leftover check looks there
    out = root / "compat.json"
    # Airflow's metadata on PostgreSQL, a fresh database per run, as in production: on SQLite, beside
    # another test run, the LocalExecutor phase timed out on the database's lock (docs/results.md)
    command = [sys.executable, str(REPO / "bench" / "compat_example_dags.py"), "--dags", ",".join(ORDER),
               "--agora-parallel", "3", "--out", str(out), "--work-dir", str(root),
               "--database-url", postgres_url]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode in (0, 1) and out.exists(), (done.stdout + done.stderr)[-6000:]  # 1: a DAG differs
    document: dict[str, Any] = json.loads(out.read_text())
    document["table"] = out.with_suffix(".md").read_text()
    return document


def by_id(suite: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {d["dag_id"]: d for d in suite["dags"]}


def test_each_dag_ends_the_same_under_both_executors(suite: dict[str, Any]) -> None:
    dags = by_id(suite)
    assert set(dags) == set(DAGS)
    for dag_id, (count, mapped) in DAGS.items():
        dag = dags[dag_id]
        assert dag["verdict"] == "same", dag
        local = {(t["task_id"], t["map_index"]): (t["state"], t["try_number"]) for t in dag["local_tis"]}
        agora = {(t["task_id"], t["map_index"]): (t["state"], t["try_number"]) for t in dag["agora_tis"]}
        assert local == agora and len(local) == count, dag_id
        assert sum(1 for _, index in local if index >= 0) == mapped, dag_id
        assert dag["differences"] == [] and dag["routing"] == [] and dag["error"] == "", dag_id
    assert dags["example_failed_dag"]["local_state"] == dags["example_failed_dag"]["agora_state"] == "failed"
    states = {t["task_id"]: t["state"] for t in dags["example_nested_branch_dag"]["agora_tis"]}
    assert states["false_1"] == "skipped" and states["join_1"] == "success"  # the branch was taken, not ignored
    assert dags["asset_consumes_1"]["asset_scheduled"] == "AssetTriggeredTimetable"
    assert dags["asset_consumes_1"]["local_state"] == dags["asset_consumes_1"]["agora_state"] == "success"


def test_the_local_runs_never_touched_the_agora_executor_and_the_planned_ones_ran_on_it(suite: dict[str, Any]) -> None:
    for dag_id, dag in by_id(suite).items():
        assert all(t["executor"] in (None, "LocalExecutor") for t in dag["local_tis"]), dag_id
        ran = [t for t in dag["agora_tis"] if t["ran"]]
        assert ran and all(t["executor"] == "agora" for t in ran), dag_id  # mapped task instances too
        # each of them in a job of the AgoraExecutor (routing() checked the job directories)
        assert dag["agora_jobs"] >= len(ran), dag_id
        # Planned after the Local run: a mapped task as many instances as that run had (its history)
        assert dag["plan"] and dag["planned_tasks"] == len(dag["local_tis"]), dag_id


def test_the_table_has_the_command_and_a_row_per_dag(suite: dict[str, Any]) -> None:
    table = suite["table"]
    assert f"--dags {','.join(ORDER)}" in table
    dags = by_id(suite)
    for dag_id in ORDER:
        row = f"| {dag_id}{' *(assets)*' if dags[dag_id]['asset_scheduled'] else ''} |"  # the mark: run by hand
        assert row in table and table.count(row) == 1

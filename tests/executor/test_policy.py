"""The cluster policy, as Airflow runs it: DagBag parsing through the ``airflow.policy`` entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.io.plan_file import write_plan
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.plans.store import PlanStore
from tests.conftest import CATALOGS

GIB = 2**30
DAGS = """
from datetime import datetime, timedelta
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

for dag_id in ("planned", "unplanned", "stale"):
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1)):
        a = EmptyOperator(task_id="a", execution_timeout=timedelta(minutes=5))
        b = EmptyOperator(task_id="b", executor_config={"agora": {"cores": 1, "memory_gib": 2}})
        new = EmptyOperator(task_id="new", executor_config={"agora": {"memory_gib": 0.75}})
        a >> b >> new
"""
REPORT = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(sys.argv[1], safe_mode=False, load_op_links=False)
out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}, "tasks": {}}
for dag_id, dag in bag.dags.items():
    for task in dag.tasks:
        out["tasks"][f"{dag_id}.{task.task_id}"] = {
            "executor": task.executor, "queue": task.queue, "pool": task.pool, "pool_slots": task.pool_slots,
            "config": task.executor_config,
        }
print("REPORT" + json.dumps(out))
"""


def plan(tasks: dict[str, str]) -> Plan:
    assignments = tuple(
        Assignment(task, resource, f"{resource}#0", float(i), float(i + 1), 1, GIB)
        for i, (task, resource) in enumerate(tasks.items())
    )
    return Plan(
        workflow="w",
        catalog="catalogs/local.yaml",
        objective=Objective(),
        makespan_s=float(len(tasks)),
        cost_usd=0.0,
        assignments=assignments,
        solver=SolverInfo("test", "heuristic", None, 0.0),
        created_at="2026-11-30T00:00:00Z",
    )


def parse(tmp_path: Path, **settings: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {
        "AIRFLOW_HOME": str(tmp_path / "home"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor,agora:agora_optimizer.executor.agora_executor.AgoraExecutor",
        "AIRFLOW__AGORA__CATALOG": str(CATALOGS / "local.yaml"),
        "AIRFLOW__AGORA__PLAN_DIR": str(tmp_path / "plans"),
        "AIRFLOW__AGORA__DEFAULT_RESOURCE": "local-large",
    }
    env |= {f"AIRFLOW__{k.split('__')[0].upper()}__{k.split('__')[1].upper()}": v for k, v in settings.items()}
    result = subprocess.run(
        [sys.executable, "-c", REPORT, str(tmp_path / "dags")], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("REPORT"))
    report: dict[str, Any] = json.loads(line.removeprefix("REPORT"))
    report["log"] = result.stderr + result.stdout
    return report


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("policy")
    (root / "dags").mkdir()
    (root / "dags" / "three.py").write_text(DAGS)
    store = PlanStore(root / "plans")
    store.save("planned", plan({"a": "local-small", "b": "local-large"}))
    store.save("stale", plan({"a": "gpu-node", "b": "local-small"}))
    return parse(root)


def test_planned_tasks_go_to_the_agora_executor_on_their_planned_resource(parsed: dict[str, Any]) -> None:
    a, b = parsed["tasks"]["planned.a"], parsed["tasks"]["planned.b"]
    assert (a["executor"], a["queue"], b["executor"], b["queue"]) == ("agora", "local-small", "agora", "local-large")
    placement = a["config"]["agora"]["placement"]
    assert (
        placement["resource"] == "local-small"
        and placement["memory_bytes"] == GIB
        and placement["machine"] == "local-small#0"
    )
    assert placement["time_limit_s"] == 300.0  # from execution_timeout
    assert b["config"]["agora"]["memory_gib"] == 2  # the author's hints are kept beside the placement


def test_a_task_missing_from_the_plan_runs_on_the_default_resource_with_its_hints(parsed: dict[str, Any]) -> None:
    new = parsed["tasks"]["planned.new"]
    assert new["executor"] == "agora" and new["queue"] == "local-large"
    placement = new["config"]["agora"]["placement"]
    assert placement["source"] == "default" and placement["memory_bytes"] == int(0.75 * GIB)


def test_a_dag_without_a_plan_is_left_alone(parsed: dict[str, Any]) -> None:
    for task in ("a", "b", "new"):
        entry = parsed["tasks"][f"unplanned.{task}"]
        assert entry["executor"] is None and "placement" not in (entry["config"].get("agora") or {})


def test_a_plan_naming_an_unknown_resource_leaves_that_task_alone_and_says_why(parsed: dict[str, Any]) -> None:
    assert parsed["errors"] == {}  # a stale plan never stops the DAG
    assert parsed["tasks"]["stale.a"]["executor"] is None
    assert parsed["tasks"]["stale.b"]["queue"] == "local-small"
    assert "stale.a" in parsed["log"] and "'gpu-node'" in parsed["log"] and "does not declare" in parsed["log"]


def test_nothing_is_routed_when_the_agora_executor_is_not_configured(tmp_path: Path) -> None:
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "three.py").write_text(DAGS)
    PlanStore(tmp_path / "plans").save("planned", plan({"a": "local-small", "b": "local-large"}))
    report = parse(tmp_path, core__executor="LocalExecutor")
    assert report["tasks"]["planned.a"]["executor"] is None
    assert "is not in [core] executor" in report["log"]


def test_the_plan_store_keeps_history_and_the_current_plan(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    first, second = plan({"a": "local-small"}), plan({"a": "local-large"})
    store.save("d", first)
    store.save("d", second)
    current = store.current("d")
    assert current is not None and current.plan.assignments[0].resource == "local-large"
    assert len(store.history("d")) == 2 and store.dag_ids() == ["d"]
    assert store.current("other") is None


def test_a_corrupt_current_plan_is_an_error_naming_the_dag(tmp_path: Path) -> None:
    from agora_optimizer.plans.store import PlanStoreError

    store = PlanStore(tmp_path)
    store.current_path("d").parent.mkdir(parents=True)
    store.current_path("d").write_text("{")
    with pytest.raises(PlanStoreError, match="current plan of DAG 'd' unreadable"):
        store.current("d")
    with pytest.raises(PlanStoreError, match="not a valid Airflow DAG id"):
        store.current("../etc")


def test_agora_plans_apply_checks_resources_against_the_catalog(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agora_optimizer.cli import app

    path = tmp_path / "plan.json"
    write_plan(plan({"a": "gpu-node"}), path)
    runner = CliRunner()
    refused = runner.invoke(
        app, ["plans", "apply", "d", str(path), "--catalog", str(CATALOGS / "local.yaml"), "--plan-dir", str(tmp_path)]
    )
    assert refused.exit_code == 2 and "'gpu-node'" in refused.output
    write_plan(plan({"a": "local-small"}), path)
    applied = runner.invoke(
        app, ["plans", "apply", "d", str(path), "--catalog", str(CATALOGS / "local.yaml"), "--plan-dir", str(tmp_path)]
    )
    assert applied.exit_code == 0, applied.output
    shown = runner.invoke(app, ["plans", "show", "d", "--plan-dir", str(tmp_path)])
    assert json.loads(shown.output)["assignments"][0]["resource"] == "local-small"


def test_airflow_pools_named_after_resources_when_asked(tmp_path: Path) -> None:
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "three.py").write_text(DAGS)
    PlanStore(tmp_path / "plans").save("planned", plan({"a": "local-small", "b": "local-large"}))
    report = parse(tmp_path, agora__airflow_pools="True")
    assert report["tasks"]["planned.a"]["pool"] == "agora_local-small"
    assert report["tasks"]["planned.b"]["pool"] == "agora_local-large"
    assert report["tasks"]["planned.a"]["pool_slots"] == 1  # its planned cores
    assert report["tasks"]["unplanned.a"]["pool"] == "default_pool"


def test_a_resources_pool_has_a_slot_per_core_and_no_limit_without_a_count() -> None:
    from dataclasses import replace

    from agora_optimizer.integration.airflow_pools import UNLIMITED, pool_name, pool_slots
    from agora_optimizer.io.catalog_file import load_catalog

    compute = load_catalog(CATALOGS / "slurm-loopback.yaml").by_name["slurm-compute"]
    assert pool_slots(compute) == 16 and pool_slots(replace(compute, count=3)) == 48
    assert pool_slots(replace(compute, count=None)) == UNLIMITED  # an elastic cloud type
    assert pool_name(compute.name) == "agora_slurm-compute"

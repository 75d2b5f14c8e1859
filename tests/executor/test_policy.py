"""The cluster policy, as Airflow runs it: DagBag parsing through the ``airflow.policy`` entry point."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
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
WAITS = """
from datetime import datetime, timedelta
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.sensors.python import PythonSensor
from airflow.providers.standard.sensors.time_delta import TimeDeltaSensor
from airflow.sdk import DAG

with DAG(dag_id="waiting", schedule=None, start_date=datetime(2026, 1, 1)):
    deferred = TimeDeltaSensor(task_id="deferred", delta=timedelta(seconds=5), deferrable=True)
    poking = PythonSensor(task_id="poking", python_callable=lambda: True)
    deferred >> poking >> EmptyOperator(task_id="work")
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


def plan(tasks: dict[str, str], workflow: str = "w") -> Plan:
    """A plan of ``tasks`` (task id -> resource), one after the other, each on machine 0 of its resource."""
    assignments = tuple(
        Assignment(task, resource, f"{resource}#0", float(i), float(i + 1), 1, GIB)
        for i, (task, resource) in enumerate(tasks.items())
    )
    return Plan(
        workflow=workflow,
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
    (root / "dags" / "waits.py").write_text(WAITS)
    store = PlanStore(root / "plans")
    store.save("planned", plan({"a": "local-small", "b": "local-large"}))
    store.save("waiting", plan({"poking": "local-large", "work": "local-large"}))
    store.save("stale", plan({"a": "gpu-node", "b": "local-small"}))
    return parse(root)


@pytest.mark.slow  # Airflow parses the DAGs in a Python of its own (the parsed fixture)
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


@pytest.mark.slow  # Airflow parses the DAGs in a Python of its own (the parsed fixture)
def test_a_task_missing_from_the_plan_runs_on_the_default_resource_with_its_hints(parsed: dict[str, Any]) -> None:
    new = parsed["tasks"]["planned.new"]
    assert new["executor"] == "agora" and new["queue"] == "local-large"
    placement = new["config"]["agora"]["placement"]
    assert placement["source"] == "default" and placement["memory_bytes"] == int(0.75 * GIB)


@pytest.mark.slow  # Airflow parses the DAGs in a Python of its own (the parsed fixture)
def test_a_task_that_waits_without_a_worker_runs_on_the_smallest_resource_as_a_wait(parsed: dict[str, Any]) -> None:
    # the planner made the deferrable sensor's wait a release time of its children: it is not in the plan
    deferred, poking = parsed["tasks"]["waiting.deferred"], parsed["tasks"]["waiting.poking"]
    assert deferred["executor"] == "agora" and deferred["queue"] == "local-small"  # 1 core, 4 GiB: the smallest
    placement = deferred["config"]["agora"]["placement"]
    assert placement["source"] == "wait" and placement["machine"] == "" and placement["cores"] == 1
    assert poking["config"]["agora"]["placement"]["source"] == "plan"  # a poking sensor holds its worker: work


@pytest.mark.slow  # Airflow parses the DAGs in a Python of its own (the parsed fixture)
def test_a_dag_without_a_plan_is_left_alone(parsed: dict[str, Any]) -> None:
    for task in ("a", "b", "new"):
        entry = parsed["tasks"][f"unplanned.{task}"]
        assert entry["executor"] is None and "placement" not in (entry["config"].get("agora") or {})


@pytest.mark.slow  # Airflow parses the DAGs in a Python of its own (the parsed fixture)
def test_a_plan_naming_an_unknown_resource_leaves_the_dag_alone_and_says_why_once(parsed: dict[str, Any]) -> None:
    assert parsed["errors"] == {}  # a stale plan never stops the DAG
    for task in ("a", "b", "new"):  # the whole DAG stays on its declared executor
        entry = parsed["tasks"][f"stale.{task}"]
        assert entry["executor"] is None and entry["queue"] == "default"
        assert "placement" not in (entry["config"].get("agora") or {})
    lines = [line for line in parsed["log"].splitlines() if "agora policy" in line]
    assert len(lines) == 1, lines  # one line per DAG and parse, not one per task
    assert "DAG stale" in lines[0] and "'gpu-node'" in lines[0] and "does not declare" in lines[0]
    assert "stale/current.json" in lines[0] and " a " in lines[0]  # the plan file and the task it misplaces


@pytest.mark.slow  # starts a Python that imports Airflow
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


@pytest.mark.slow  # starts a Python that imports Airflow
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

    from agora_optimizer.executor.airflow_pools import UNLIMITED, pool_name, pool_slots
    from agora_optimizer.io.catalog_file import load_catalog

    compute = load_catalog(CATALOGS / "slurm-loopback.yaml").by_name["slurm-compute"]
    assert pool_slots(compute) == 16 and pool_slots(replace(compute, count=3)) == 48
    assert pool_slots(replace(compute, count=None)) == UNLIMITED  # an elastic cloud type
    assert pool_name(compute.name) == "agora_slurm-compute"


# ---- The policy in this process, on real operators: a plan must never break a DAG (issue 15) ----

POLICY_LOG = "agora_optimizer.integration.policy"


@pytest.fixture
def policy_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PlanStore]:
    """The settings of ``parse`` for an in-process policy; the store of its plans."""
    from agora_optimizer.integration import policy

    monkeypatch.setenv(
        "AIRFLOW__CORE__EXECUTOR", "LocalExecutor,agora:agora_optimizer.executor.agora_executor.AgoraExecutor"
    )
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(CATALOGS / "local.yaml"))
    monkeypatch.setenv("AIRFLOW__AGORA__PLAN_DIR", str(tmp_path / "plans"))
    monkeypatch.setenv("AIRFLOW__AGORA__DEFAULT_RESOURCE", "local-large")
    monkeypatch.setenv("AIRFLOW__AGORA__AIRFLOW_POOLS", "True")
    policy.configured_executor_names.cache_clear()
    yield PlanStore(tmp_path / "plans")
    policy.configured_executor_names.cache_clear()


def run_policy(dag: Any) -> None:
    """What Airflow's DagBag.bag_dag does with the policy: call it for every task of the DAG."""
    from agora_optimizer.integration.policy import task_policy

    for task in dag.tasks:
        task_policy(task)


def as_written(task: Any) -> dict[str, Any]:
    """The attributes the policy may change, copied."""
    import copy

    return copy.deepcopy(
        {name: getattr(task, name) for name in ("executor", "queue", "pool", "pool_slots", "executor_config")}
    )


def policy_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == POLICY_LOG and r.levelno >= logging.INFO]


def test_a_setter_that_raises_leaves_the_task_exactly_as_written(
    policy_env: PlanStore, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    class Locked(EmptyOperator):
        """An operator whose executor_config cannot be set once built (as a mapped operator's executor)."""

        locked = False

        def __setattr__(self, key: str, value: Any) -> None:
            if key == "executor_config" and self.locked:
                raise AttributeError("executor_config is read-only here")
            super().__setattr__(key, value)

    with DAG("locked", schedule=None) as dag:
        task = Locked(task_id="a", queue="mine", pool="p", pool_slots=2, executor_config={"agora": {"cores": 1}})
    task.locked = True
    before = as_written(task)
    policy_env.save("locked", plan({"a": "local-small"}))
    run_policy(dag)  # raises nothing
    assert as_written(task) == before
    lines = policy_lines(caplog)
    assert len(lines) == 1 and "locked.a" in lines[0] and "read-only" in lines[0]


def mapped_dag() -> Any:
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG, task

    @task
    def double(x: int) -> int:
        return 2 * x

    with DAG("mapped", schedule=None) as dag:
        plain = EmptyOperator(task_id="plain")
        doubled = double.expand(x=[1, 2])
        bashed = BashOperator.partial(task_id="bashed", queue="q").expand(bash_command=["true", "false"])
        plain >> [doubled, bashed]
    return dag


def test_a_mapped_operator_gets_each_planned_instance_in_its_partial_kwargs(
    policy_env: PlanStore, caplog: pytest.LogCaptureFixture
) -> None:
    dag = mapped_dag()
    rows = {"plain": "local-small", "double[0]": "local-small", "double[1]": "local-large", "bashed": "local-large"}
    policy_env.save("mapped", plan(rows))
    run_policy(dag)
    double, bashed = dag.get_task("double"), dag.get_task("bashed")
    kwargs = double.partial_kwargs
    assert (kwargs["executor"], double.executor, double.queue) == ("agora", "agora", "local-small")
    instances = kwargs["executor_config"]["agora"]["instances"]
    assert {index: node["resource"] for index, node in instances.items()} == {"0": "local-small", "1": "local-large"}
    assert double.executor_config["agora"]["placement"]["source"] == "overflow"
    assert (double.pool, double.pool_slots) == ("default_pool", 1)  # [agora] airflow_pools is on: not for mapped tasks
    assert (bashed.executor, bashed.queue, bashed.executor_config["agora"]["placement"]["source"]) == (
        "agora",
        "local-large",
        "plan",
    )
    assert policy_lines(caplog) == []


def test_a_mapped_operator_whose_partial_kwargs_refuse_a_value_is_left_exactly_as_written(
    policy_env: PlanStore, caplog: pytest.LogCaptureFixture
) -> None:
    class Refusing(dict):  # type: ignore[type-arg]
        def __setitem__(self, key: str, value: Any) -> None:
            if key == "executor_config" and value:  # the policy's value; the author's empty one goes back
                raise TypeError("executor_config is frozen here")
            super().__setitem__(key, value)

    dag = mapped_dag()
    double = dag.get_task("double")
    double.partial_kwargs = Refusing(double.partial_kwargs)
    before = as_written(double) | {"partial_kwargs": dict(double.partial_kwargs)}
    policy_env.save("mapped", plan({"plain": "local-small", "double[0]": "local-small", "double[1]": "local-large"}))
    run_policy(dag)  # raises nothing
    assert as_written(double) | {"partial_kwargs": dict(double.partial_kwargs)} == before
    assert "executor" not in double.partial_kwargs  # set, then taken back
    assert dag.get_task("plain").executor == "agora"  # the DAG's other tasks are still placed
    lines = policy_lines(caplog)
    assert len(lines) == 1 and "mapped.double" in lines[0] and "frozen" in lines[0]


def test_a_corrupt_plan_is_read_once_per_version_and_logged_once_per_dag_and_parse(
    policy_env: PlanStore, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from agora_optimizer.io import plan_file

    reads: list[str] = []
    real_load_plan = plan_file.load_plan

    def counting_load_plan(path: str | Path) -> Plan:
        reads.append(str(path))
        return real_load_plan(path)

    monkeypatch.setattr(plan_file, "load_plan", counting_load_plan)
    policy_env.save("corrupt", plan({"t0": "local-small"}))
    policy_env.current_path("corrupt").write_text('{"format": "agora-plan/1", "assignments": [')

    def one_parse() -> list[Any]:
        with DAG("corrupt", schedule=None) as dag:
            tasks = [EmptyOperator(task_id=f"t{i}") for i in range(50)]
        before = [as_written(t) for t in tasks]
        run_policy(dag)
        assert [as_written(t) for t in tasks] == before  # the whole DAG stays as written
        return tasks

    one_parse()
    lines = policy_lines(caplog)
    assert len(reads) == 1 and len(lines) == 1
    assert "corrupt" in lines[0] and str(policy_env.current_path("corrupt")) in lines[0]
    one_parse()  # the DAG processor parses the file again: the same broken version is not read again
    assert len(reads) == 1 and len(policy_lines(caplog)) == 2


def test_a_dag_with_a_unicode_id_and_no_plan_is_left_alone_silently(
    policy_env: PlanStore, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    with DAG("données_été", schedule=None) as dag:
        tasks = [EmptyOperator(task_id=f"t{i}") for i in range(3)]
    before = [as_written(t) for t in tasks]
    run_policy(dag)
    assert [as_written(t) for t in tasks] == before
    assert policy_lines(caplog) == []


def test_a_dag_with_a_unicode_id_and_a_plan_is_placed(policy_env: PlanStore, caplog: pytest.LogCaptureFixture) -> None:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    with DAG("données_été", schedule=None) as dag:
        task = EmptyOperator(task_id="t")
    policy_env.save("données_été", plan({"t": "local-small"}))
    run_policy(dag)
    assert (task.executor, task.queue, task.executor_config["agora"]["placement"]["resource"]) == (
        "agora",
        "local-small",
        "local-small",
    )
    assert policy_lines(caplog) == []


def test_a_mapped_task_with_an_instance_on_a_celery_pool_sends_every_instance_to_the_overflows_queue(
    policy_env: PlanStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from agora_optimizer.integration import policy

    monkeypatch.setenv(
        "AIRFLOW__CORE__EXECUTOR",
        "LocalExecutor,agora:agora_optimizer.executor.agora_executor.AgoraExecutor,"
        "airflow.providers.celery.executors.celery_executor.CeleryExecutor",
    )
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", f"{CATALOGS / 'local.yaml'},{CATALOGS / 'celery-loopback.yaml'}")
    policy.configured_executor_names.cache_clear()
    dag = mapped_dag()
    rows = {"plain": "local-small", "double[0]": "pool_small", "double[1]": "pool_small", "double[2]": "local-large"}
    policy_env.save("mapped", plan(rows))
    run_policy(dag)
    double = dag.get_task("double")
    agora = double.executor_config["agora"]
    assert (double.executor, double.queue, agora["placement"]["resource"]) == (
        "CeleryExecutor",
        "pool_small",
        "pool_small",
    )
    assert "instances" not in agora  # one queue for the task: no instance may claim another
    assert (agora["backend"], agora["resource_type"]) == ("celery", "pool_small")
    assert policy_lines(caplog) == []


@pytest.mark.slow  # starts a Python that imports Airflow
def test_a_bad_hint_of_a_task_the_plan_does_not_name_is_one_line_naming_the_task_and_field(tmp_path: Path) -> None:
    """Such a task reserves its declared needs on the default resource: a need that is not one leaves the task as
    written and says which (before: ``ValueError: invalid literal for int() with base 10: 'four'``)."""
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "hinted.py").write_text(
        DAGS.replace('("planned", "unplanned", "stale")', '("hinted",)').replace(
            '{"memory_gib": 0.75}', '{"cores": "four"}'
        )
    )
    PlanStore(tmp_path / "plans").save("hinted", plan({"a": "local-small", "b": "local-large"}))
    report = parse(tmp_path)
    assert report["errors"] == {} and report["tasks"]["hinted.a"]["queue"] == "local-small"
    assert report["tasks"]["hinted.new"]["executor"] is None  # left as written
    (line,) = [line for line in report["log"].splitlines() if "agora policy" in line or "left as written" in line]
    assert "task hinted.new left as written" in line
    assert "field 'new.executor_config.agora.cores': expected a number, got 'four'" in line

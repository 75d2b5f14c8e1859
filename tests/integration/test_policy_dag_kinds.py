"""The cluster policy on a DAG of every kind Airflow ships, parsed by the DAG processor's own code (issue 15).

``policy_dags/all_kinds.py`` is a third-party DAG file as a new user would write it: mapped tasks
(``@task`` + ``.expand()``, ``BashOperator.partial().expand()``, a mapped ``@task_group``), a task
group, setup/teardown tasks, and one task of every operator, sensor and task decorator of Airflow's
standard provider, twice (``agora_kinds`` and ``données_été``). Each parse runs in a fresh process
through ``airflow.dag_processing.processor._parse_file``, the function the dag-processor's child
runs for a file: the DagBag with the policy registered through the ``airflow.policy`` entry point,
then serialization. Tasks are compared as serialized, which is what the scheduler reads.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.plans.store import PlanStore
from tests.conftest import CATALOGS
from tests.executor.test_policy import plan

pytestmark = pytest.mark.airflow

DAG_FILE = Path(__file__).parent / "policy_dags" / "all_kinds.py"
DAG_ID = "agora_kinds"
UNICODE_DAG_ID = "données_été"
# Tasks that are mapped (by .expand() or inside the mapped task group per_item).
MAPPED = {"double", "bash_mapped", "per_item.scale", "per_item.report"}
PLANNED_INSTANCES = {"double[0]", "double[1]", "double[2]", "per_item.scale[0]", "per_item.scale[1]"}
# The plan in force: plain tasks of many kinds (a task group's, setup/teardown, a branch, a
# reschedule sensor, a deferrable sensor, a trigger, latest-only) and mapped ones.
PLANNED = {
    "start": "local-small",
    "create_cluster": "local-small",
    "delete_cluster": "local-small",
    "plain_group.bash": "local-large",
    "plain_group.python": "local-small",
    "branch": "local-small",
    "python_sensor": "local-small",
    "timedelta_sensor": "local-small",
    "trigger": "local-large",
    "latest_only": "local-small",
    "double[0]": "local-large",  # a mapped task's planned instances: two on local-large, one on local-small
    "double[1]": "local-small",
    "double[2]": "local-large",
    "bash_mapped": "local-large",  # a plan that planned a mapped task as one task: every instance there
    "per_item.scale[0]": "local-small",  # a mapped task group's task
    "per_item.scale[1]": "local-large",
}
REPORT = """
import json, pathlib, sys
import structlog
from airflow.dag_processing.processor import DagFileParseRequest, _parse_file
from airflow.serialization.serialized_objects import DagSerialization

path = pathlib.Path(sys.argv[1])
request = DagFileParseRequest(file=str(path), bundle_path=path.parent, bundle_name="dags")
result = _parse_file(request, structlog.get_logger())
out = {"errors": result.import_errors, "dags": {}}
for lazy in result.serialized_dags:
    dag = DagSerialization.from_dict(lazy.data)
    serialized = {entry["__var"]["task_id"]: entry for entry in lazy.data["dag"]["tasks"]}
    out["dags"][dag.dag_id] = {
        task.task_id: {
            "executor": task.executor, "queue": task.queue, "pool": task.pool, "pool_slots": task.pool_slots,
            "config": task.executor_config, "type": task.task_type, "mapped": task.is_mapped,
            "serialized": serialized[task.task_id],
        }
        for task in dag.tasks
    }
print("REPORT" + json.dumps(out, default=str))
"""


def parse(root: Path, plans: Path) -> dict[str, Any]:
    """One parse of the DAG file by the dag-processor's parsing function, in a fresh process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {
        "AIRFLOW_HOME": str(root / "home"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor,agora:agora_optimizer.executor.agora_executor.AgoraExecutor",
        "AIRFLOW__AGORA__CATALOG": str(CATALOGS / "local.yaml"),
        "AIRFLOW__AGORA__PLAN_DIR": str(plans),
        "AIRFLOW__AGORA__DEFAULT_RESOURCE": "local-large",
        # The virtualenv operators' template_fields come from a set: the same order in every parse.
        "PYTHONHASHSEED": "0",
    }
    result = subprocess.run(
        [sys.executable, "-c", REPORT, str(DAG_FILE)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("REPORT"))
    report: dict[str, Any] = json.loads(line.removeprefix("REPORT"))
    log = result.stderr + result.stdout
    report["policy_lines"] = [line for line in log.splitlines() if "agora policy" in line]
    return report


@pytest.fixture(scope="module")
def parses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The same file parsed with no plan, with a plan in force, and with a corrupt plan."""
    root = tmp_path_factory.mktemp("kinds")
    PlanStore(root / "planned").save(DAG_ID, plan(PLANNED, DAG_ID))
    corrupt = PlanStore(root / "corrupt")
    corrupt.save(DAG_ID, plan(PLANNED, DAG_ID))
    corrupt.current_path(DAG_ID).write_text('{"format": "agora-plan/1", "assignments": [')
    return {name: parse(root, root / name) for name in ("none", "planned", "corrupt")}


WAITS_REPORT = """
import json, sys
from agora_optimizer.integration.airflow_dag import load_dag
print("WAITS" + json.dumps(sorted(t.task_id for t in load_dag(sys.argv[1], sys.argv[2]).tasks if t.waits)))
"""


@pytest.fixture(scope="module")
def planner_waits(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The tasks the planner leaves out of a plan as waits without a worker (integration/waits.py)."""
    root = tmp_path_factory.mktemp("waits")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {"AIRFLOW_HOME": str(root / "home"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    command = [sys.executable, "-c", WAITS_REPORT, DAG_ID, str(DAG_FILE.parent)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("WAITS"))
    return set(json.loads(line.removeprefix("WAITS")))


def test_the_dag_file_has_every_operator_kind_the_standard_provider_ships(parses: dict[str, Any]) -> None:
    """The check that keeps the DAG file honest: a kind Airflow adds later fails here until it is added."""
    import importlib
    import inspect

    from airflow.providers.standard.get_provider_info import get_provider_info
    from airflow.sdk import BaseOperator

    info = get_provider_info()
    modules = [m for kind in ("operators", "sensors") for entry in info[kind] for m in entry["python-modules"]]
    shipped = {
        name
        for module in map(importlib.import_module, modules)
        for name, cls in vars(module).items()
        if inspect.isclass(cls)
        and issubclass(cls, BaseOperator)
        and cls.__module__ == module.__name__
        and not name.startswith("_")
        and name != "BaseBranchOperator"  # abstract: choose_branch is the user's
    }
    assert len(shipped) > 25
    present = {task["type"] for task in parses["none"]["dags"][DAG_ID].values()}
    assert shipped - present == set()
    source = DAG_FILE.read_text()
    for decorator in (entry["name"] for entry in info["task-decorators"]):
        assert ("@task\n" if decorator == "python" else f"@task.{decorator}") in source, decorator
    for marker in ("@setup", "@teardown", "@task_group", ".expand(", ".partial(", "TaskGroup(", "deferrable=True"):
        assert marker in source, marker


def test_every_dag_imports_and_keeps_every_task(parses: dict[str, Any]) -> None:
    baseline = parses["none"]["dags"]
    assert set(baseline) == {DAG_ID, UNICODE_DAG_ID} and len(baseline[DAG_ID]) >= 45
    assert {t for t, task in baseline[DAG_ID].items() if task["mapped"]} == {"double", "bash_mapped"}
    for name, report in parses.items():
        assert report["errors"] == {}, name
        assert {d: set(tasks) for d, tasks in report["dags"].items()} == {d: set(t) for d, t in baseline.items()}


def test_planned_tasks_of_every_kind_get_their_placement(parses: dict[str, Any], planner_waits: set[str]) -> None:
    tasks = parses["planned"]["dags"][DAG_ID]
    for task_id, resource in PLANNED.items():
        if task_id in PLANNED_INSTANCES:
            continue
        task = tasks[task_id]
        placement = task["config"]["agora"]["placement"]
        assert (task["executor"], task["queue"], placement["resource"], placement["source"]) == (
            "agora",
            resource,
            resource,
            "plan",
        ), task_id
    assert tasks["plain_group.bash"]["config"]["agora"]["placement"]["time_limit_s"] == 300.0
    assert tasks["start"]["config"]["agora"]["cores"] == 1  # the author's hints stay beside the placement
    unnamed = set(tasks) - set(PLANNED) - MAPPED  # not in the plan: [agora] default_resource, or a wait
    waits = planner_waits  # waits without a worker: the planner made them release times
    assert {"timedelta_sensor", "file_sensor", "python_sensor"} <= waits and "bash_sensor" not in waits
    sources = {t: tasks[t]["config"]["agora"]["placement"]["source"] for t in unnamed}
    assert unnamed - waits and all(sources[t] == "default" for t in unnamed - waits), sources
    assert unnamed & waits and all(sources[t] == "wait" for t in unnamed & waits), sources
    for t in unnamed & waits:  # on the smallest resource of the catalog
        assert tasks[t]["config"]["agora"]["placement"]["resource"] == "local-small", t


def test_each_planned_instance_of_a_mapped_task_gets_its_placement_and_the_rest_the_overflow(
    parses: dict[str, Any],
) -> None:
    tasks = parses["planned"]["dags"][DAG_ID]
    for task_id, overflow in (("double", "local-large"), ("per_item.scale", "local-small")):
        task = tasks[task_id]
        agora = task["config"]["agora"]
        planned = {f"{task_id}[{index}]": node["resource"] for index, node in agora["instances"].items()}
        assert planned == {name: PLANNED[name] for name in PLANNED_INSTANCES if name.startswith(f"{task_id}[")}
        assert all(node["source"] == "plan" and node["machine"] for node in agora["instances"].values())
        placement = agora["placement"]  # instances beyond the planned width: the resource most are on, no machine
        assert (placement["resource"], placement["source"], placement["machine"]) == (overflow, "overflow", "")
        assert (task["executor"], task["queue"]) == ("agora", overflow), task_id
    # A mapped operator keeps these in partial_kwargs: what the scheduler reads for each instance.
    assert tasks["double"]["serialized"]["__var"]["partial_kwargs"]["executor"] == "agora"
    bash = tasks["bash_mapped"]  # planned as one task (a plan from before instances): that placement for all
    assert (bash["executor"], bash["queue"], bash["config"]["agora"]["placement"]["resource"]) == (
        "agora",
        "local-large",
        "local-large",
    )
    assert "instances" not in bash["config"]["agora"]
    report = tasks["per_item.report"]["config"]["agora"]["placement"]  # a mapped task the plan does not name
    assert (report["resource"], report["source"]) == ("local-large", "default")
    assert parses["planned"]["policy_lines"] == []  # nothing was left as written


def test_mapped_tasks_keep_what_their_author_wrote_beside_the_plan(parses: dict[str, Any]) -> None:
    written, planned = parses["none"]["dags"][DAG_ID], parses["planned"]["dags"][DAG_ID]
    for task_id in MAPPED:
        assert (
            planned[task_id]["type"] == written[task_id]["type"]
            and planned[task_id]["mapped"] == written[task_id]["mapped"]
        )
        assert planned[task_id]["pool_slots"] == written[task_id]["pool_slots"], task_id  # pools: as written
    assert written["bash_mapped"]["queue"] == "theirs"


def test_a_corrupt_plan_leaves_every_task_as_written_with_exactly_one_line(parses: dict[str, Any]) -> None:
    written, corrupt = parses["none"]["dags"], parses["corrupt"]["dags"]
    for dag_id in (DAG_ID, UNICODE_DAG_ID):
        for task_id, task in written[dag_id].items():
            assert corrupt[dag_id][task_id]["serialized"] == task["serialized"], f"{dag_id}.{task_id}"
    lines = parses["corrupt"]["policy_lines"]
    assert len(lines) == 1, lines
    assert f"DAG {DAG_ID}" in lines[0] and re.search(rf"{DAG_ID}/current\.json", lines[0]), lines[0]


def test_a_unicode_dag_id_without_a_plan_is_parsed_untouched_and_silently(parses: dict[str, Any]) -> None:
    for name, report in parses.items():
        for task_id, task in report["dags"][UNICODE_DAG_ID].items():
            assert task["serialized"] == parses["none"]["dags"][UNICODE_DAG_ID][task_id]["serialized"], task_id
        assert not any(UNICODE_DAG_ID in line for line in report["policy_lines"]), name
    assert parses["none"]["policy_lines"] == []

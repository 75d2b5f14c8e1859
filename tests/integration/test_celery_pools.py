"""Celery pools: how the policy routes a task planned on one, how the AgoraExecutor refuses one that reaches it
anyway, and which worker the listener names.

The policy's routing is checked twice: on its own (:func:`routed`), and as Airflow runs it, by
parsing DAG files with ``DagBag`` in a fresh process with the ``airflow.policy`` entry point (the
helpers of tests/executor/test_policy.py), with and without the CeleryExecutor in ``[core] executor``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.executor.jobs.building import CeleryPoolRefused, refuse_celery_pool
from agora_optimizer.integration.celery_pools import WORKER_NAME_ENV, CeleryExecutorNotConfigured, routed, worker_name
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.plans.store import PlanStore
from tests.conftest import CATALOGS
from tests.executor.test_agora_executor import workload
from tests.executor.test_policy import DAGS, parse, plan

RESOURCES = load_catalog(CATALOGS / "celery-loopback.yaml").by_name | load_catalog(CATALOGS / "local.yaml").by_name
AGORA_AND_CELERY = {"agora", "AgoraExecutor", "CeleryExecutor"}
BOTH_CATALOGS = f"{CATALOGS / 'local.yaml'},{CATALOGS / 'celery-loopback.yaml'}"
WITH_CELERY = "LocalExecutor,agora:agora_optimizer.executor.agora_executor.AgoraExecutor,CeleryExecutor"
WITHOUT_CELERY = "LocalExecutor,agora:agora_optimizer.executor.agora_executor.AgoraExecutor"


def changes(resource: str) -> dict[str, Any]:
    """What the policy has worked out for a task before the routing: the AgoraExecutor, the resource's queue."""
    placement = {"resource": resource, "cores": 1, "memory_bytes": 2**28, "machine": f"{resource}#0"}
    config = {"retries_note": "the author's", "agora": {"memory_gib": 0.25, "placement": placement}}
    return {"executor": "agora", "queue": resource, "executor_config": config}


def test_a_task_on_a_celery_pool_goes_to_the_celery_executor_on_the_pools_queue() -> None:
    before = changes("pool_small")
    after = routed(before, RESOURCES["pool_small"], AGORA_AND_CELERY)
    assert (after["executor"], after["queue"]) == ("CeleryExecutor", "pool_small")
    agora = after["executor_config"]["agora"]
    assert (agora["backend"], agora["resource_type"]) == ("celery", "pool_small")  # where the listener says it ran
    assert agora["placement"] == before["executor_config"]["agora"]["placement"] and agora["memory_gib"] == 0.25
    assert after["executor_config"]["retries_note"] == "the author's"
    assert "backend" not in before["executor_config"]["agora"]  # the policy's own values are not changed in place


def test_a_task_on_another_backend_is_left_to_the_agora_executor() -> None:
    before = changes("local-small")
    assert routed(before, RESOURCES["local-small"], AGORA_AND_CELERY) == before
    assert routed(before, None, AGORA_AND_CELERY) == before


def test_without_the_celery_executor_configured_the_task_is_refused_naming_the_pool_and_the_setting() -> None:
    with pytest.raises(CeleryExecutorNotConfigured) as refused:
        routed(changes("pool_large"), RESOURCES["pool_large"], {"agora", "LocalExecutor"})
    message = str(refused.value)
    assert "Celery pool 'pool_large'" in message and "[agora] celery_executor 'CeleryExecutor'" in message
    assert "not in [core] executor (LocalExecutor, agora)" in message


def test_a_task_placed_on_a_celery_pool_is_refused_naming_the_task_the_pool_and_what_to_change() -> None:
    with pytest.raises(CeleryPoolRefused) as refused:
        refuse_celery_pool(RESOURCES["pool_small"], "d.t")
    said = str(refused.value)
    assert said.startswith("task d.t: resource 'pool_small' is a Celery pool") and "celery_executor" in said
    refuse_celery_pool(RESOURCES["local-small"], "d.t")  # another backend's resource: the AgoraExecutor runs it


def test_a_long_pool_name_is_quoted_short_on_one_line() -> None:
    name = "pool_" + "x" * 50_000 + "\nsecond line"
    with pytest.raises(CeleryPoolRefused, match=r"resource 'pool_xxx.*' is a Celery pool") as refused:
        refuse_celery_pool(replace(RESOURCES["pool_small"], name=name), "d.t")
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 600


def test_the_agora_executor_fails_a_task_placed_on_a_celery_pool_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.utils.state import TaskInstanceState

    from agora_optimizer.executor.agora_executor import AgoraExecutor

    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", BOTH_CATALOGS)
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", f"sqlite:///{tmp_path / 'traces.db'}")
    executor = AgoraExecutor()
    executor.start()
    item = workload("t", {"resource": "pool_small", "cores": 1, "memory_bytes": 2**28}, tmp_path)
    executor.queue_workload(item, session=None)
    executor.trigger_tasks(executor.parallelism)
    events: dict[Any, Any] = {}
    deadline = time.monotonic() + 20
    while item.ti.key not in events and time.monotonic() < deadline:
        executor.sync()
        events |= {k: v for k, v in executor.get_event_buffer().items() if v[0] != TaskInstanceState.QUEUED}
        time.sleep(0.05)
    state, info = events[item.ti.key]
    assert state == TaskInstanceState.FAILED
    assert "unit.t" in info and "'pool_small' is a Celery pool" in info and "celery_executor" in info
    assert "after" not in info  # refused once, not retried


def test_the_celery_executors_name_is_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__AGORA__CELERY_EXECUTOR", "celery")  # listed by an alias: celery:CeleryExecutor
    after = routed(changes("pool_small"), RESOURCES["pool_small"], {"agora", "celery", "CeleryExecutor"})
    assert after["executor"] == "celery"
    with pytest.raises(CeleryExecutorNotConfigured, match="'celery' is not in"):
        routed(changes("pool_small"), RESOURCES["pool_small"], {"agora", "CeleryExecutor"})


def test_the_worker_name_is_the_environments_else_the_running_celery_tasks_else_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from celery import Celery
    from celery._state import _task_stack

    monkeypatch.delenv(WORKER_NAME_ENV, raising=False)
    assert worker_name() == ""  # no Celery task runs here
    app = Celery("agora-test", set_as_current=False)

    @app.task
    def workload() -> None: ...

    _task_stack.push(workload)  # as a worker's tracer does before it runs a task, with the worker's node name
    workload.push_request(hostname="pool_small@node1")
    try:
        assert worker_name() == "pool_small@node1"
        monkeypatch.setenv(WORKER_NAME_ENV, "small-worker-3")
        assert worker_name() == "small-worker-3"  # a deployment's own name wins
    finally:
        workload.pop_request()
        _task_stack.pop()


# -- the policy as Airflow runs it -------------------------------------------------------------------


@pytest.fixture(scope="module")
def dags(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("celery-policy")
    (root / "dags").mkdir()
    (root / "dags" / "three.py").write_text(DAGS)
    PlanStore(root / "plans").save("planned", plan({"a": "pool_small", "b": "local-large"}))
    return root


@pytest.mark.slow  # Airflow parses the DAGs in a Python of its own
def test_the_policy_routes_the_planned_celery_task_to_celery_and_the_others_to_agora(dags: Path) -> None:
    report = parse(dags, core__executor=WITH_CELERY, agora__catalog=BOTH_CATALOGS)
    a, b, new = (report["tasks"][f"planned.{task}"] for task in ("a", "b", "new"))
    assert (a["executor"], a["queue"]) == ("CeleryExecutor", "pool_small")
    assert a["config"]["agora"]["placement"]["machine"] == "pool_small#0"
    assert (a["config"]["agora"]["backend"], a["config"]["agora"]["resource_type"]) == ("celery", "pool_small")
    assert (b["executor"], b["queue"]) == (new["executor"], new["queue"]) == ("agora", "local-large")
    assert "backend" not in b["config"]["agora"]
    assert report["tasks"]["unplanned.a"]["executor"] is None
    assert [line for line in report["log"].splitlines() if "agora policy" in line] == []


@pytest.mark.slow  # Airflow parses the DAGs in a Python of its own
def test_without_the_celery_executor_the_celery_task_is_left_as_written_with_one_log_line(dags: Path) -> None:
    report = parse(dags, core__executor=WITHOUT_CELERY, agora__catalog=BOTH_CATALOGS)
    assert report["errors"] == {}  # never an import error
    a, b = report["tasks"]["planned.a"], report["tasks"]["planned.b"]
    assert (a["executor"], a["queue"], a["pool"]) == (None, "default", "default_pool")
    assert "agora" not in a["config"]  # no placement, no hints: exactly as its author wrote it
    assert (b["executor"], b["queue"]) == ("agora", "local-large")  # its neighbour on a local pool is placed
    lines = [line for line in report["log"].splitlines() if "agora policy" in line]
    assert len(lines) == 1, lines
    assert "task planned.a left as written" in lines[0] and "'pool_small'" in lines[0]
    assert "[agora] celery_executor 'CeleryExecutor' is not in [core] executor" in lines[0]

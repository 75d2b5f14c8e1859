"""The cluster policy that applies each DAG's current plan when Airflow parses the DAG.

Registered through the ``airflow.policy`` entry point, so Airflow's DAG processor calls
:func:`task_policy` for every task it parses. For a DAG with a current plan in the plan
store (``[agora] plan_dir``), each task gets:

- ``executor``: the AgoraExecutor's name (``[agora] executor``, which must be one of
  ``[core] executor``: Airflow validates executor names before policies run, so the policy
  checks the name itself and leaves the DAG alone if it is not configured);
- ``queue``: the planned resource's name (visible in Airflow's UI);
- ``pool`` and ``pool_slots``: ``agora_<resource>`` and the planned cores, when ``[agora]
  airflow_pools`` is on (:mod:`agora_optimizer.integration.airflow_pools`);
- ``executor_config["agora"]["placement"]``: resource, cores, reserved memory, machine,
  planned start, and a time limit from the task's ``execution_timeout``.

Tasks the plan does not name (added since the last optimization) go to
``[agora] default_resource`` with their declared hints. DAGs without a plan are not
touched. A plan that cannot be applied (unreadable, naming a resource the catalog does not
know) leaves the task where it was and logs an error that names the DAG, the task and the
plan file: a stale plan must not stop a DAG from running.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import cache
from typing import Any

from airflow.policies import hookimpl

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.placement import PLACEMENT_KEY, Placement
from agora_optimizer.integration.airflow_pools import pool_name
from agora_optimizer.model.catalog import GIB, Resource
from agora_optimizer.model.plan import Assignment

log = logging.getLogger(__name__)
DEFAULT_MEMORY_BYTES = GIB // 2


@hookimpl
def task_policy(task: Any) -> None:
    """Airflow's hook: route one parsed task by its DAG's plan."""
    try:
        apply_plan(task)
    except AgoraError as exc:
        log.error("agora policy: task %s.%s left on its executor: %s", _dag_id(task), task.task_id, exc)


def apply_plan(task: Any) -> Placement | None:
    """Set the task's executor, queue, pool and placement from its DAG's plan; the placement, or None."""
    if not settings.get_bool("apply_plans"):
        return None
    executor = settings.get("executor")
    if executor not in configured_executor_names():
        _warn_once(f"[agora] executor {executor!r} is not in [core] executor; plans are not applied")
        return None
    dag_id = _dag_id(task)
    assignments = _plan_assignments(dag_id)
    if assignments is None:
        return None
    resources = _resources(settings.get("catalog"))
    placement = _placement(task, assignments.get(task.task_id), resources, dag_id)
    if placement is None:
        return None
    task.executor = executor
    task.queue = placement.resource
    if settings.get_bool("airflow_pools"):  # the executor creates missing pools when it starts
        task.pool = pool_name(placement.resource)
        task.pool_slots = placement.cores
    config = dict(task.executor_config or {})
    agora = dict(config.get("agora") or {})
    agora[PLACEMENT_KEY] = placement.to_config()
    config["agora"] = agora
    task.executor_config = config
    return placement


def _placement(
    task: Any, assignment: Assignment | None, resources: Mapping[str, Resource], dag_id: str
) -> Placement | None:
    timeout = getattr(task, "execution_timeout", None)
    limit = timeout.total_seconds() if timeout is not None else None
    if assignment is not None:
        if assignment.resource not in resources:
            raise AgoraError(
                f"the plan of DAG {dag_id} puts task {task.task_id} on {assignment.resource!r}, "
                f"which [agora] catalog does not declare"
            )
        return Placement(
            resource=assignment.resource,
            cores=assignment.cores,
            memory_bytes=assignment.memory_bytes,
            time_limit_s=limit,
            machine=assignment.machine,
            planned_start_s=assignment.start_s,
        )
    default = settings.get("default_resource")
    if not default:
        log.warning(
            "agora policy: task %s.%s is not in its DAG's plan and [agora] default_resource is empty",
            dag_id,
            task.task_id,
        )
        return None
    resource = resources.get(default)
    if resource is None:
        raise AgoraError(f"[agora] default_resource {default!r} is not a resource of [agora] catalog")
    hints = (task.executor_config or {}).get("agora") or {}
    cores = int(hints.get("cores", 1))
    memory = int(hints.get("memory_bytes") or float(hints.get("memory_gib") or 0) * GIB or DEFAULT_MEMORY_BYTES)
    if cores > resource.vcpus or memory > resource.memory_bytes:
        raise AgoraError(
            f"task {task.task_id} (not in the plan) needs {cores} cores and {memory} bytes; "
            f"default resource {default} has {resource.vcpus} and {resource.memory_bytes}"
        )
    return Placement(resource=default, cores=cores, memory_bytes=memory, time_limit_s=limit, source="default")


def _plan_assignments(dag_id: str) -> dict[str, Assignment] | None:
    from agora_optimizer.plans.store import default_plan_store

    store = default_plan_store()
    path = store.current_path(dag_id)
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return None
    return _read_assignments(str(path), stamp)


@cache
def _read_assignments(path: str, _mtime_ns: int) -> dict[str, Assignment]:
    """The plan's assignments by task (cached per file version: the DAG processor parses often)."""
    from agora_optimizer.io.plan_file import load_plan

    return {assignment.task: assignment for assignment in load_plan(path).assignments}


@cache
def _resources(catalogs: str) -> dict[str, Resource]:
    from agora_optimizer.executor.resources import load_resources

    return load_resources(catalogs)


@cache
def configured_executor_names() -> frozenset[str]:
    """Every name by which ``[core] executor`` lists an executor (alias, module path, class name)."""
    from airflow.configuration import conf

    names: set[str] = set()
    for entry in str(conf.get("core", "executor", fallback="")).split(","):
        entry = entry.strip()
        if not entry:
            continue
        alias, _, path = entry.rpartition(":")
        names.update(name for name in (alias, path, path.rsplit(".", 1)[-1]) if name)
    return frozenset(names)


@cache
def _warn_once(message: str) -> None:
    log.warning("agora policy: %s", message)


def _dag_id(task: Any) -> str:
    dag = getattr(task, "dag", None)
    return str(getattr(dag, "dag_id", "") or getattr(task, "dag_id", ""))

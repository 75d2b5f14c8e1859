"""The cluster policy that applies each DAG's current plan when Airflow parses the DAG.

Registered through the ``airflow.policy`` entry point, so Airflow's DAG processor calls
:func:`task_policy` for every task it parses. For a DAG with a current plan in the plan
store (``[agora] plan_dir``), each task gets:

- ``executor``: the AgoraExecutor's name (``[agora] executor``, which must be one of
  ``[core] executor``: Airflow validates executor names before policies run, so the policy
  checks the name itself and leaves the DAG alone if it is not configured);
- ``queue``: the planned resource's name (visible in Airflow's UI);
- on a Celery pool (``backend: celery``), ``executor`` is the CeleryExecutor's instead
  (:mod:`agora_optimizer.integration.celery_pools`);
- ``pool`` and ``pool_slots``: ``agora_<resource>`` and the planned cores, when ``[agora]
  airflow_pools`` is on (:mod:`agora_optimizer.executor.airflow_pools`);
- ``executor_config["agora"]["placement"]``: resource, cores, reserved memory, machine,
  planned start, and a time limit from the task's ``execution_timeout``;
- ``priority_weight`` (``weight_rule`` absolute): higher the earlier the plan starts the task, for
  a task whose author left both at Airflow's defaults. Airflow queues ready tasks by weight up to
  the DAG's ``max_active_tasks``; by its default weights, 16 tasks the plan starts late could fill
  those slots, held by the executor for their machines' turns, while a task planned to start now
  could not be queued at all.

Tasks the plan does not name (added since the last optimization) go to
``[agora] default_resource`` with their declared hints; a task that waits without a worker (a
deferrable task, a reschedule-mode sensor: the planner made its wait a release time of its
children, :mod:`agora_optimizer.integration.waits`) goes to the smallest resource that fits it.
DAGs without a plan are not touched, whatever their id.

A plan must never break a DAG. Any exception raised inside the policy would make Airflow
turn the whole DAG file into an import error (``AirflowClusterPolicyError``), so
:func:`task_policy` catches every exception and the task stays exactly as its author wrote
it: the new values are all computed first, then set, and if setting one fails the ones
already set are restored. In particular:

- a stale or corrupt plan (unreadable, or naming a resource ``[agora] catalog`` does not
  declare) leaves the whole DAG on its declared executor;
- a mapped task (``.expand()`` on an operator or a ``@task``, or a task of a mapped task group)
  is planned as its expected instances ``task[0]``, ``task[1]``, ...: the policy writes each
  instance's placement under ``executor_config["agora"]["instances"]`` (by map index; the
  executor picks by the task instance's ``map_index``) and, as ``placement``, the overflow: where
  instances beyond the planned width run (the resource most instances are on, no machine). A
  mapped operator's ``executor`` and ``executor_config`` live in its ``partial_kwargs`` (no
  setter): they are set there. Airflow pools are left as written for mapped tasks (one pool for
  instances on several resources would count them wrongly). A task has one queue: when any
  instance is planned on a Celery pool, every instance goes to the overflow's resource;
- a plan file is read once per version (path and mtime), whether it reads or fails, not once
  per task: a broken plan must not make a 5,000-task DAG miss ``dag_file_processor_timeout``.

Per DAG and parse, the policy works out the DAG's plan and settings once, at its first task,
and logs at most one line (later problems of the same parse go to DEBUG). A parse is
recognised by the DAG object: every parse of a file builds new DAG objects, and the policy
gets each task with its DAG, so "the first task seen of this DAG object" is exactly "the first
of this parse", in the DAG processor's per-file child processes and in a long-lived process
re-parsing with ``DagBag`` alike. A key of (dag_id, plan mtime) would instead stay silent on
every later parse of an unchanged broken plan, and a time window would guess. The DAG objects
are held by weak reference only, so remembering them keeps no parsed DAG alive.
"""

from __future__ import annotations

import contextlib
import logging
import weakref
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from airflow.policies import hookimpl

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.airflow_pools import pool_name
from agora_optimizer.executor.runs.machine_order import priority_weights
from agora_optimizer.integration.celery_pools import routed
from agora_optimizer.integration.waits import smallest_fitting, waits_without_worker
from agora_optimizer.model.catalog import CELERY_BACKEND, GIB, Resource
from agora_optimizer.model.instances import split_instance
from agora_optimizer.model.placement import OVERFLOW, WAIT, Placement
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.task_hints import (
    EXECUTOR_CONFIG_KEY,
    INSTANCES_KEY,
    PLACEMENT_KEY,
    agora_config,
    declared_needs,
    task_source,
)

log = logging.getLogger(__name__)
DEFAULT_MEMORY_BYTES = GIB // 2
PLAN_VERSIONS_KEPT = 256  # plan files (path, mtime) whose reading the policy remembers
# What the policy may set on a task, in the order it sets them (and restores them in reverse).
TASK_ATTRIBUTES = ("executor", "queue", "pool", "pool_slots", "executor_config", "priority_weight", "weight_rule")
AIRFLOW_DEFAULT_WEIGHT = (1, "downstream")  # a task's priority_weight and weight_rule as Airflow leaves them


class PlanNotApplicable(AgoraError):
    """The DAG's current plan cannot be applied (unreadable, or stale against the catalog)."""


@hookimpl
def task_policy(task: Any) -> None:
    """Airflow's hook: route one parsed task by its DAG's plan; never raises."""
    try:
        apply_plan(task)
    except PlanNotApplicable as exc:
        _log_once_per_parse(task, "DAG %s left as written: %s", _dag_id(task), exc)
    except Exception as exc:  # anything raised here makes Airflow drop the DAG file
        _log_once_per_parse(task, "task %s.%s left as written: %s", _dag_id(task), _task_id(task), _reason(exc))


def apply_plan(task: Any) -> Placement | None:
    """Set the task's executor, queue, pool and placement from its DAG's plan; the placement, or None.

    Raises when the plan cannot be applied to this task; the task is then as it was.
    """
    state = _parse_of(getattr(task, "dag", None))
    if state.plan is None and not state.error:
        try:
            state.plan = _dag_plan(_dag_id(task)) or NO_PLAN
        except Exception as exc:
            state.error = _reason(exc)
    if state.error:  # a fresh exception each time: re-raising one would grow its traceback per task
        raise PlanNotApplicable(state.error)
    plan = state.plan
    if plan is None or plan is NO_PLAN:
        return None
    mapped = _is_mapped(task)
    instances = plan.instances.get(task.task_id, {}) if mapped else {}
    limit = _time_limit_s(task)
    placement = _overflow(instances, limit, plan.version) if instances else _placement(task, plan)
    if placement is None:
        return None
    changes: dict[str, Any] = {"executor": plan.executor, "queue": placement.resource}
    if plan.airflow_pools and not mapped:  # the executor creates missing pools when it starts
        changes |= {"pool": pool_name(placement.resource), "pool_slots": placement.cores}
    weight = plan.priorities.get(task.task_id)
    if weight is not None and not mapped and _airflow_weight(task) == AIRFLOW_DEFAULT_WEIGHT:
        changes |= {"priority_weight": weight, "weight_rule": "absolute"}
    config = dict(task.executor_config or {})
    agora = dict(agora_config(config)) | {PLACEMENT_KEY: placement.to_config()}
    if instances:
        agora[INSTANCES_KEY] = {
            str(index): _planned(assignment, limit, plan.version).to_config()
            for index, assignment in sorted(instances.items())
        }
    if instances and any(_on_celery(plan, a.resource) for a in instances.values()):
        agora.pop(INSTANCES_KEY)  # one Celery queue per task: every instance goes to the overflow's
    config[EXECUTOR_CONFIG_KEY] = agora
    changes["executor_config"] = config
    changes = routed(changes, plan.resources.get(placement.resource), configured_executor_names())
    _set_all_or_none(task, changes)
    return placement


def _on_celery(plan: _DagPlan, resource: str) -> bool:
    found = plan.resources.get(resource)
    return found is not None and found.backend == CELERY_BACKEND


def _overflow(instances: Mapping[int, Assignment], limit: float | None, version: str) -> Placement:
    """Where a mapped task's instances beyond its planned width run: the resource most of its planned
    instances are on (the lowest index breaks a tie), reserving the most any of them there reserves,
    on no planned machine."""
    counts = Counter(assignment.resource for assignment in instances.values())
    first = {a.resource: index for index, a in sorted(instances.items(), reverse=True)}
    resource = max(counts, key=lambda name: (counts[name], -first[name]))
    on_it = [a for a in instances.values() if a.resource == resource]
    return Placement(
        resource=resource,
        cores=max(a.cores for a in on_it),
        memory_bytes=max(a.memory_bytes for a in on_it),
        gpus=max(a.gpus for a in on_it),
        time_limit_s=limit,
        source=OVERFLOW,
        plan_version=version,
    )


@dataclass(frozen=True)
class _DagPlan:
    """What the policy needs for every task of one DAG, worked out once per DAG and parse."""

    dag_id: str
    executor: str
    assignments: Mapping[str, Assignment]
    instances: Mapping[str, Mapping[int, Assignment]]  # a mapped task's planned instances, by map index
    version: str
    resources: Mapping[str, Resource]
    default_resource: str
    airflow_pools: bool
    priorities: Mapping[str, int] = field(default_factory=dict)  # by task id: higher, planned to start earlier


NO_PLAN = _DagPlan("", "", {}, {}, "", {}, "", False)  # the DAG has no plan to apply: its tasks are left alone


def _dag_plan(dag_id: str) -> _DagPlan | None:
    """The DAG's plan and settings; None when nothing is to be applied; PlanNotApplicable for a bad plan."""
    if not settings.get_bool("apply_plans"):
        return None
    executor = settings.get("executor")
    if executor not in configured_executor_names():
        _warn_once(f"[agora] executor {executor!r} is not in [core] executor; plans are not applied")
        return None
    read = _plan_assignments(dag_id)
    if read is None:
        return None
    return _DagPlan(
        dag_id=dag_id,
        executor=executor,
        assignments=read.assignments,
        instances=_instances(read.assignments),
        version=read.version,
        resources=settings.configured_catalog().by_name,
        default_resource=settings.get("default_resource"),
        airflow_pools=settings.get_bool("airflow_pools"),
        priorities=planned_priorities(read.assignments),
    )


def planned_priorities(assignments: Mapping[str, Assignment]) -> dict[str, int]:
    """Each unmapped planned task's priority weight (:func:`~agora_optimizer.executor.runs.machine_order.
    priority_weights`)."""
    return priority_weights({name: a.start_s for name, a in assignments.items()})


def _instances(assignments: Mapping[str, Assignment]) -> dict[str, dict[int, Assignment]]:
    """The plan's rows of mapped task instances (``task[i]``), by task and map index."""
    instances: dict[str, dict[int, Assignment]] = {}
    for name, assignment in assignments.items():
        task_id, index = split_instance(name)
        if index >= 0:
            instances.setdefault(task_id, {})[index] = assignment
    return instances


def _set_all_or_none(task: Any, changes: Mapping[str, Any]) -> None:
    """Set every attribute of ``changes`` on the task, or, if one cannot be set, none of them.

    A mapped operator keeps these attributes in ``partial_kwargs`` (what ``.partial()`` was given;
    ``executor`` and ``executor_config`` have no setter): they are set there directly, and a value
    the author did not give is removed again on restoring (not set to its default).
    """
    kwargs = getattr(task, "partial_kwargs", None) if getattr(task, "is_mapped", False) else None
    direct = set(TASK_ATTRIBUTES) if isinstance(kwargs, dict) else set()
    missing = object()
    originals = {
        name: kwargs.get(name, missing) if name in direct and kwargs is not None else getattr(task, name)
        for name in TASK_ATTRIBUTES
        if name in changes
    }

    def put(name: str, value: Any) -> None:
        if name not in direct or kwargs is None:
            setattr(task, name, value)
        elif value is missing:
            kwargs.pop(name, None)
        else:
            kwargs[name] = value

    done: list[str] = []
    try:
        for name in TASK_ATTRIBUTES:
            if name in changes:
                put(name, changes[name])
                done.append(name)
    except Exception:
        for name in reversed(done):
            try:
                put(name, originals[name])
            except Exception:  # restore the others; the caller logs the first failure
                log.debug("agora policy: could not restore %s of task %s", name, _task_id(task), exc_info=True)
        raise


def _airflow_weight(task: Any) -> tuple[int, str]:
    """The task's priority weight and weight rule (a custom strategy's class path: never the default)."""
    rule = getattr(task, "weight_rule", "downstream")
    return getattr(task, "priority_weight", 1), rule if isinstance(rule, str) else repr(rule)


def _is_mapped(task: Any) -> bool:
    if getattr(task, "is_mapped", False):
        return True
    closest = getattr(task, "get_closest_mapped_task_group", None)
    return callable(closest) and closest() is not None


def _time_limit_s(task: Any) -> float | None:
    timeout = getattr(task, "execution_timeout", None)
    return timeout.total_seconds() if timeout is not None else None


def _planned(assignment: Assignment, limit: float | None, version: str) -> Placement:
    return Placement(
        resource=assignment.resource,
        cores=assignment.cores,
        memory_bytes=assignment.memory_bytes,
        gpus=assignment.gpus,
        time_limit_s=limit,
        machine=assignment.machine,
        planned_start_s=assignment.start_s,
        plan_version=version,
    )


def _placement(task: Any, plan: _DagPlan) -> Placement | None:
    limit = _time_limit_s(task)
    assignment = plan.assignments.get(task.task_id)
    if assignment is not None:
        return _planned(assignment, limit, plan.version)
    cores, memory = _hinted_need(task)
    if waits_without_worker(task):  # a sensor or deferrable task: its wait was a release, not work
        smallest = smallest_fitting(plan.resources.values(), cores, memory)
        if smallest is not None:
            return Placement(smallest.name, cores, memory, time_limit_s=limit, source=WAIT, plan_version=plan.version)
    default = plan.default_resource
    if not default:
        _log_once_per_parse(
            task,
            "task %s.%s is not in its DAG's plan and [agora] default_resource is empty",
            plan.dag_id,
            task.task_id,
        )
        return None
    resource = plan.resources.get(default)
    if resource is None:
        raise AgoraError(f"[agora] default_resource {default!r} is not a resource of [agora] catalog")
    gpus = _hinted_gpus(task)
    if cores > resource.vcpus or memory > resource.memory_bytes or gpus > resource.gpus:
        raise AgoraError(
            f"task {task.task_id} (not in the plan) needs {cores} cores, {memory} bytes and {gpus} GPUs; "
            f"default resource {default} has {resource.vcpus}, {resource.memory_bytes} and {resource.gpus}"
        )
    return Placement(
        resource=default, cores=cores, memory_bytes=memory, gpus=gpus, time_limit_s=limit, source="default"
    )


def _hinted_need(task: Any) -> tuple[int, int]:
    """The cores and memory a task the plan does not name reserves: its declared hints, else 1 core and
    :data:`DEFAULT_MEMORY_BYTES`; a bad hint raises a ``FieldError`` naming the task and the field."""
    needs = declared_needs(task, task_source(task))
    return needs.cores, needs.memory_bytes or DEFAULT_MEMORY_BYTES


def _hinted_gpus(task: Any) -> int:
    """The GPUs a task the plan does not name needs (its ``gpus``, a need), else 0."""
    return declared_needs(task, task_source(task)).gpus


def _plan_assignments(dag_id: str) -> _Read | None:
    """The DAG's current plan (assignments and version), None if it has none; PlanNotApplicable if it cannot be used."""
    from agora_optimizer.plans.store import PlanStoreError, default_plan_store

    try:
        path = default_plan_store().current_path(dag_id)
    except PlanStoreError:  # an id the store cannot name a directory after: it has no plan there
        return None
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return None
    read = _read_assignments(str(path), stamp, settings.get("catalog"))
    if read.error:
        raise PlanNotApplicable(f"its current plan is not applied: {read.error}")
    return read


@dataclass(frozen=True)
class _Read:
    """What reading one version of a plan file gave: its assignments and version, or why it cannot be used."""

    assignments: dict[str, Assignment]
    error: str = ""
    version: str = ""


@lru_cache(maxsize=PLAN_VERSIONS_KEPT)
def _read_assignments(path: str, _mtime_ns: int, _catalog: str) -> _Read:
    """The plan's assignments by task, checked against ``[agora] catalog``; cached per file version and
    value of the setting, failures too."""
    from agora_optimizer.io import plan_file
    from agora_optimizer.plans.store import plan_version

    try:
        version = plan_version(Path(path).read_bytes())
        assignments = {assignment.task: assignment for assignment in plan_file.load_plan(path).assignments}
    except Exception as exc:  # cached and reported by the caller, once per DAG and parse
        return _Read({}, _reason(exc))
    resources = settings.configured_catalog().by_name
    unknown = sorted({a.resource for a in assignments.values()} - resources.keys())
    if unknown:
        tasks = sorted(a.task for a in assignments.values() if a.resource in unknown)
        shown = ", ".join(tasks[:5]) + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")
        listed = ", ".join(map(repr, unknown))
        return _Read({}, f"{path}: it puts {shown} on {listed}, which [agora] catalog does not declare")
    return _Read(assignments, version=version)


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


@dataclass
class _Parse:
    """The policy's state for one DAG object, that is one parse of the DAG (see the module's docstring)."""

    plan: _DagPlan | None = None  # worked out at the DAG's first task; NO_PLAN when there is none
    error: str = ""  # why the plan cannot be applied, if it cannot
    logged: bool = False  # whether this parse has had its one log line


# id(dag) -> (a weak reference to that DAG object, its parse's state); an entry goes with its DAG.
_PARSES: dict[int, tuple[weakref.ref[Any], _Parse]] = {}


def _parse_of(dag: Any) -> _Parse:
    """The state of this DAG object's parse: new for a DAG object not seen before."""
    if dag is None:
        return _Parse()
    key = id(dag)
    seen = _PARSES.get(key)
    if seen is not None and seen[0]() is dag:
        return seen[1]
    state = _Parse()

    def forget(ref: weakref.ref[Any], key: int = key) -> None:
        entry = _PARSES.get(key)
        if entry is not None and entry[0] is ref:
            del _PARSES[key]

    with contextlib.suppress(TypeError):  # not weakly referenceable: a state per task, never a guess
        _PARSES[key] = (weakref.ref(dag, forget), state)
    return state


def _log_once_per_parse(task: Any, message: str, *args: Any) -> None:
    """Log ``message`` as the policy's one line for this task's DAG in this parse; later ones at DEBUG."""
    state = _parse_of(getattr(task, "dag", None))
    if state.logged:
        log.debug("agora policy: " + message, *args)
        return
    state.logged = True
    log.error("agora policy: " + message + " (any further problem with this DAG in this parse: DEBUG)", *args)


def _reason(exc: Exception) -> str:
    """An error as one line: agora's own message, else the exception's type and text (a bug's, not the input's)."""
    return str(exc) if isinstance(exc, AgoraError) else f"{type(exc).__name__}: {exc}"


def _dag_id(task: Any) -> str:
    dag = getattr(task, "dag", None)
    return str(getattr(dag, "dag_id", "") or getattr(task, "dag_id", ""))


def _task_id(task: Any) -> str:
    return str(getattr(task, "task_id", "?"))

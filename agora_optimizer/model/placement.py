"""Where one task runs: the plan's choice, carried in the task's ``executor_config``.

The contract between the cluster policy, the executor and the listeners, as data and its parsing
(no Airflow): the policy writes ``executor_config["agora"]["placement"]`` at parse time; the
executor reads it back from each workload, and the run recorder from each task instance. The DAG
author's hints (``cores``, ``memory_gib``, ``runtime_s``) stay beside it under
``executor_config["agora"]`` untouched, so planning never reads its own output as input. Where the
executor ran a task is in the task's environment (:func:`placement_environment`), which the trace
listener reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agora_optimizer.errors import FieldError
from agora_optimizer.model.limits import MAX_GPUS
from agora_optimizer.model.task_hints import INSTANCES_KEY, PLACEMENT_KEY, agora_config
from agora_optimizer.model.workflow import MAX_CORES, MAX_MEMORY_BYTES, shown

OVERFLOW = "overflow"  # the placement source of a mapped task's instances beyond its planned width
WAIT = "wait"  # the placement source of a task that waits without a worker (its wait is a release in the plan)
# Where the AgoraExecutor ran a task, in the task's environment: the trace listener's row says so (the
# executor may run it elsewhere than executor_config says: a run's own plan, a repair).
RESOURCE_ENV = "AGORA_RESOURCE_TYPE"
BACKEND_ENV = "AGORA_BACKEND"
MACHINE_ENV = "AGORA_MACHINE"
PLAN_VERSION_ENV = "AGORA_PLAN_VERSION"


@dataclass(frozen=True)
class Placement:
    """The resource a task runs on and what it reserves there."""

    resource: str
    cores: int
    memory_bytes: int
    time_limit_s: float | None = None
    machine: str = ""
    planned_start_s: float | None = None
    # "plan", "default", "overflow" (a mapped task's instance the plan did not expect) or "wait"
    source: str = "plan"
    plan_version: str = ""  # which plan placed it (:func:`agora_optimizer.plans.store.plan_version`)
    gpus: int = 0  # the GPUs it reserves (section 5 of the spec)

    def to_config(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "cores": self.cores,
            "memory_bytes": self.memory_bytes,
            "time_limit_s": self.time_limit_s,
            "machine": self.machine,
            "planned_start_s": self.planned_start_s,
            "source": self.source,
            "plan_version": self.plan_version,
            "gpus": self.gpus,
        }


def placement_environment(placement: Placement, backend: str) -> dict[str, str]:
    """The variables that tell a task's process where the executor runs it (the trace listener reads them)."""
    return {
        RESOURCE_ENV: placement.resource,
        BACKEND_ENV: backend,
        MACHINE_ENV: placement.machine,
        PLAN_VERSION_ENV: placement.plan_version,
    }


def placement_from_config(
    executor_config: Mapping[str, Any] | None, label: str, map_index: int = -1
) -> Placement | None:
    """The placement in a task's executor_config, None if it has none; malformed raises FieldError naming the task.

    A mapped task's instance (``map_index`` >= 0) gets its own planned placement when the plan
    expected it (``instances``), else the mapped task's ``placement``: the overflow's.
    """
    agora = agora_config(executor_config)
    if PLACEMENT_KEY not in agora:
        return None
    where = f"task {label}"
    instances = agora.get(INSTANCES_KEY)
    if map_index >= 0 and instances is not None and not isinstance(instances, Mapping):
        raise FieldError(where, f"executor_config.agora.{INSTANCES_KEY}", "must map map indexes to placements")
    node = placement_node(agora, map_index)
    field = (
        f"executor_config.agora.{INSTANCES_KEY}.{map_index}"
        if node is not agora[PLACEMENT_KEY]
        else f"executor_config.agora.{PLACEMENT_KEY}"
    )
    if not isinstance(node, Mapping):
        raise FieldError(where, field, f"must be a mapping, got {type(node).__name__}")
    resource = node.get("resource")
    if not isinstance(resource, str) or not resource:
        raise FieldError(where, f"{field}.resource", "must name a catalog resource")
    cores = _number(node, "cores", where, field, 1, MAX_CORES)
    memory = _number(node, "memory_bytes", where, field, 1, MAX_MEMORY_BYTES)
    limit = node.get("time_limit_s")
    if limit is not None:
        limit = _number(node, "time_limit_s", where, field, 1, 1e8)
    start = node.get("planned_start_s")
    if start is not None:
        start = _number(node, "planned_start_s", where, field, 0, 1e12)
    gpus = node.get("gpus")
    if gpus is not None:
        gpus = _number(node, "gpus", where, field, 0, MAX_GPUS)
    return Placement(
        resource=resource,
        gpus=0 if gpus is None else int(gpus),
        cores=int(cores),
        memory_bytes=int(memory),
        time_limit_s=None if limit is None else float(limit),
        machine=_text(node, "machine", where, field, ""),
        planned_start_s=None if start is None else float(start),
        source=_text(node, "source", where, field, "plan"),
        plan_version=_text(node, "plan_version", where, field, ""),
    )


def placement_node(agora: Mapping[str, Any], map_index: int = -1) -> Any:
    """The raw placement of one task instance in ``executor_config["agora"]``: a mapped task's instance's
    own (``instances``, by map index) where the plan expected it, else ``placement``; None if none."""
    instances = agora.get(INSTANCES_KEY)
    if map_index >= 0 and isinstance(instances, Mapping) and str(map_index) in instances:
        return instances[str(map_index)]
    return agora.get(PLACEMENT_KEY)


def _number(node: Mapping[str, Any], key: str, where: str, field: str, low: float, high: float) -> float:
    value = node.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise FieldError(where, f"{field}.{key}", f"must be a number in [{low:g}, {high:g}], got {shown(value)}")
    return float(value)


def _text(node: Mapping[str, Any], key: str, where: str, field: str, default: str) -> str:
    """The string at ``key``, ``default`` where it is absent or empty; anything else raises naming the field."""
    value = node.get(key)
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        raise FieldError(where, f"{field}.{key}", f"must be a string, got {shown(value)}")
    return value

"""A task's agora hints: what its ``executor_config["agora"]`` says, read in one place.

A DAG author declares there what a task needs and reads (:data:`DECLARED_KEYS`); agora itself writes
the plan's placement there (:data:`WRITTEN_KEYS`, by the cluster policy). Every reader goes through
this module, with no Airflow imported (a task or a task instance is read by its attributes):

- :func:`agora_config` / :func:`task_agora_config`: the dict itself, ``{}`` where there is none or it is
  not a mapping (the readers inside Airflow's processes never raise: the trace listener, the executor);
- :func:`declared_category`: the declared category, "" where none is declared (or it is not text);
- :func:`declared_needs`: the declared cores, GPUs, runtime and memory, checked: a bad value raises a
  :class:`~agora_optimizer.errors.FieldError` naming the source, the task and the field
  (``dags/etl.py: field 'train.executor_config.agora.cores': expected a number, got 'four'``);
- :func:`unknown_key`: the first key neither declared nor written (planning refuses a DAG that has one,
  as a typo would otherwise be ignored).

What a task reads (``input_bytes``, ``input_files``: a number, a template or a callable) is evaluated by
:mod:`agora_optimizer.integration.task_inputs`, which takes the dict from here and names the field with
:func:`hint_field`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agora_optimizer.errors import FieldError
from agora_optimizer.model.catalog import GIB
from agora_optimizer.model.limits import MAX_GPUS
from agora_optimizer.model.workflow import MAX_CORES, MAX_MEMORY_BYTES, MAX_RUNTIME_S, check_number, shown

EXECUTOR_CONFIG_KEY = "agora"
PLACEMENT_KEY = "placement"
INSTANCES_KEY = "instances"  # a mapped task's planned instances' placements, by map index (a string)
INPUT_KEYS = ("input_bytes", "input_files")
# What a DAG author may declare. "resource_type" and "backend" say where a task ran when no agora executor
# did (the trace listener reads them).
DECLARED_KEYS = frozenset(
    {"cores", "gpus", "memory_gib", "memory_bytes", "runtime_s", "category", "resource_type", "backend", *INPUT_KEYS}
)
WRITTEN_KEYS = frozenset({PLACEMENT_KEY, INSTANCES_KEY})  # what the cluster policy writes (model/placement.py)


@dataclass(frozen=True)
class DeclaredNeeds:
    """What a task declares it needs: cores and GPUs (needs), runtime and memory (hints the predictor falls back
    to), and its category ("" where none is declared)."""

    cores: int = 1
    gpus: int = 0
    runtime_s: float | None = None
    memory_bytes: int | None = None
    category: str = ""


def agora_config(executor_config: object) -> Mapping[str, Any]:
    """``executor_config["agora"]``; ``{}`` where there is none, or either is not a mapping."""
    agora = executor_config.get(EXECUTOR_CONFIG_KEY) if isinstance(executor_config, Mapping) else None
    return agora if isinstance(agora, Mapping) else {}


def task_agora_config(task: Any, task_instance: Any = None) -> Mapping[str, Any]:
    """The agora dict of ``task`` (an operator), else of ``task_instance``'s own ``executor_config``."""
    config = getattr(task, "executor_config", None) or getattr(task_instance, "executor_config", None)
    return agora_config(config)


def hint_field(task: Any, name: str = "") -> str:
    """``train.executor_config.agora.cores``: how an error names a hint of ``task`` (the dict itself without
    ``name``)."""
    where = f"{getattr(task, 'task_id', '?')}.executor_config.{EXECUTOR_CONFIG_KEY}"
    return f"{where}.{name}" if name else where


def task_source(task: Any) -> str:
    """``dags/etl.py (DAG 'etl')``: where an error about ``task``'s hints points (its DAG's file and id, as far as
    the task knows them)."""
    dag = getattr(task, "dag", None)
    fileloc, dag_id = getattr(dag, "fileloc", None), getattr(task, "dag_id", None)
    named = f"DAG '{dag_id}'" if isinstance(dag_id, str) and dag_id else ""
    if isinstance(fileloc, str) and fileloc:
        return f"{fileloc} ({named})" if named else fileloc
    return named or f"task {getattr(task, 'task_id', '?')}"


def declared_category(hints: Mapping[str, Any]) -> str:
    """The category ``hints`` declare, stripped; "" where none is (or it is not text: :func:`declared_needs`
    refuses it at planning)."""
    category = hints.get("category")
    return category.strip() if isinstance(category, str) else ""


def unknown_key(hints: Mapping[str, Any]) -> str | None:
    """The first key (in sorted order) that is neither declared nor written by agora, None when all are known."""
    unknown = sorted(str(key) for key in hints if key not in DECLARED_KEYS | WRITTEN_KEYS)
    return unknown[0] if unknown else None


def declared_needs(task: Any, source: str) -> DeclaredNeeds:
    """The needs ``task`` declares in its ``executor_config["agora"]``; a value that cannot be one raises a
    ``FieldError`` naming ``source`` (the DAG's file), the task and the field. ``memory_bytes`` wins over
    ``memory_gib``."""
    config = getattr(task, "executor_config", None) or {}
    hints = config.get(EXECUTOR_CONFIG_KEY, {}) if isinstance(config, Mapping) else {}
    if not isinstance(hints, Mapping):
        raise FieldError(source, hint_field(task), f"expected a mapping, got {type(hints).__name__}")

    def number(name: str, **limits: Any) -> float:
        return check_number(source, hint_field(task, name), hints[name], **limits)

    cores = int(number("cores", minimum=1, maximum=MAX_CORES, integer=True)) if "cores" in hints else 1
    gpus = int(number("gpus", maximum=MAX_GPUS, integer=True)) if "gpus" in hints else 0
    runtime = None
    if hints.get("runtime_s") is not None:
        runtime = number("runtime_s", maximum=MAX_RUNTIME_S, strictly_positive=True)
    memory: float | None = None
    if "memory_bytes" in hints:
        memory = number("memory_bytes", maximum=MAX_MEMORY_BYTES)
    elif "memory_gib" in hints:
        memory = number("memory_gib", maximum=MAX_MEMORY_BYTES / GIB) * GIB
    category = hints.get("category", "")
    if not isinstance(category, str) or (category != "" and not category.strip()):
        raise FieldError(source, hint_field(task, "category"), f"expected a non-empty string, got {shown(category)}")
    return DeclaredNeeds(
        cores=cores,
        gpus=gpus,
        runtime_s=runtime,
        memory_bytes=int(memory) if memory is not None else None,
        category=category.strip(),
    )

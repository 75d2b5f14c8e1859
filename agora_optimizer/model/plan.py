"""Objectives and plans: what the optimizer was asked for and what it decided.

Section 4 of ``docs/spec/agora-model.md``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Container, Iterable
from dataclasses import dataclass
from typing import Literal

ObjectiveKind = Literal["time", "cost", "balanced"]
OBJECTIVE_KINDS: tuple[ObjectiveKind, ...] = ("time", "cost", "balanced")
SolverStatus = Literal["optimal", "feasible", "heuristic"]
PLAN_FORMAT = "agora-plan/1"


@dataclass(frozen=True)
class Objective:
    """Minimise makespan, cost, or ``alpha*T/T_lb + (1-alpha)*C/C_lb``, under optional limits."""

    kind: ObjectiveKind = "balanced"
    alpha: float = 0.5
    deadline_s: float | None = None
    budget_usd: float | None = None


@dataclass(frozen=True)
class Assignment:
    """Task ``task`` runs on machine ``machine`` (of type ``resource``) over [start_s, end_s)."""

    task: str
    resource: str
    machine: str
    start_s: float
    end_s: float
    cores: int
    memory_bytes: int
    gpus: int = 0  # GPUs reserved (section 5 of the spec): at least the task's, at most the type's


@dataclass(frozen=True)
class SolverInfo:
    method: str
    status: SolverStatus
    gap: float | None
    wall_s: float


@dataclass(frozen=True)
class SpotFigures:
    """A plan's figures with spot capacity (``docs/spot.md``; not in the spec, which ignores them):
    the tasks on spot types, their expected re-runs, the expected cost with those re-runs, and the
    worst-case makespan: the latest end of a run in which one spot task is interrupted at the last
    moment (what the deadline holds)."""

    spot_tasks: int
    expected_reruns: float
    expected_cost_usd: float
    worst_case_makespan_s: float


@dataclass(frozen=True)
class Plan:
    workflow: str
    catalog: str
    objective: Objective
    makespan_s: float
    cost_usd: float
    assignments: tuple[Assignment, ...]
    solver: SolverInfo
    created_at: str
    format: str = PLAN_FORMAT
    spot: SpotFigures | None = None  # only where some task is on a spot type
    # The quantile of the predicted runtimes the plan was made from ("p50", "p90"); None: the workflow's own
    # runtimes (a file's recorded ones). Not in the spec, which ignores it.
    runtime_quantile: str | None = None
    # What the plan was made from, as the command was given it: a workflow file (from the working directory
    # then) or airflow:DAG_ID; None where not recorded (plans written before it). agora validate, gantt and
    # simulate read the workflow from it when not given one. Not in the spec, which ignores it.
    workflow_source: str | None = None


def machine_type(machine: str) -> str:
    """``c5.large#3`` -> ``c5.large``."""
    return machine.rsplit("#", 1)[0]


def unused_machine_id(type_name: str, used: Container[str]) -> str:
    """The first id of the type, ``type_name#0``, ``#1``, ..., not in ``used``."""
    n = 0
    while f"{type_name}#{n}" in used:
        n += 1
    return f"{type_name}#{n}"


def tasks_by_machine(machine_of: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Each machine's tasks, in the order given, from (task, machine) pairs."""
    tasks: dict[str, list[str]] = defaultdict(list)
    for task, machine in machine_of:
        tasks[machine].append(task)
    return tasks

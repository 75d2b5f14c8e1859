"""Repairing a run that drifts from its plan: when to re-plan, and what the re-plan changes (no Airflow).

A plan is a prediction. When a planned task of a run **ends later than planned by more than
``[agora] replan_slack`` times its planned duration**, or **fails**, or is **OOM-killed**, the rest
of the plan was made for a run that is no longer happening: its successors are planned to start on
machines and at times that no longer hold. The executor then asks the re-planner
(:class:`~agora_optimizer.executor.runs.replanner.Replanner`, over :func:`agora_optimizer.planning.replan.replan`)
where the run's tasks that are not queued yet should go now, around what has run (:func:`replan_state`),
and the run machine (:mod:`~agora_optimizer.executor.runs.machine`) applies the answer (:func:`repaired`):

- the run's machine order becomes the re-planned schedule's (what ran, and what is re-planned), so
  held tasks wait for their new turn, and machines that lost all their tasks have ended (their
  leases close);
- every re-planned task gets an *override*: its new resource, machine and reservation, which a task
  that Airflow hands over later runs with instead of the placement in its ``executor_config``;
- a held job whose task moved is moved (``lifecycle.Moved``) to its new machine.

Times are the run's plan clock: 0 is when the executor saw the run's first planned task
(:class:`~agora_optimizer.executor.runs.machine_order.RunBook`), the same clock the machine order uses
(the DAG run's start would cost a read of Airflow's database; the two differ by the first task's
queueing, a second or two). Each repair is recorded in the run record
(:class:`~agora_optimizer.runs.record.Repair`), through
:class:`~agora_optimizer.executor.runs.reports.RunReports`. A repair never stops a run: any error leaves
the run as planned, with one log line.

This module is pure (no Airflow, no plan store): the drift rule (:class:`RunRepairs`), the re-planner's
view of a run and what its answer changes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.jobs.spec import JobStatus
from agora_optimizer.executor.runs.machine_order import MachineOrder, PlannedTask, RunBook
from agora_optimizer.model.catalog import CELERY_BACKEND, Catalog, Resource
from agora_optimizer.model.plan import Assignment, Plan
from agora_optimizer.planning.run_state import Done, Pending, Replan, Running, TaskState, late_by_s
from agora_optimizer.runs.record import Repair

REPLAN_INTERVAL_S = 5.0  # at most one re-plan per run this often: drifts in between wait for the next
FAILED_STATES = frozenset({"failed", "up_for_retry"})  # Airflow's word for a try that failed in the task
SHIFT_TOLERANCE_S = 1e-6
MOVES_SHOWN = 20  # moves listed in a repair's detail; the rest are counted
RUNS_MAX = 1024  # runs whose repair state is kept


@dataclass(frozen=True)
class Drift:
    """Why a run no longer follows its plan: one task's late end or failure, in words for the record."""

    task_id: str
    reason: str


def late_end(task: PlannedTask, end_s: float, slack: float, min_late_s: float = 0.0) -> Drift | None:
    """A drift if ``task`` ended (plan clock ``end_s``) later than planned by more than ``slack`` times its
    planned duration and more than ``min_late_s`` (the platform's jitter: a 5 s task one second late has not
    drifted); None if it did not, or ``slack`` <= 0 (repair off)."""
    late_s = late_by_s(task.start_s, task.end_s, end_s, slack, min_late_s)
    if late_s is None:
        return None
    return Drift(
        task.task_id,
        f"task {task.task_id} ended {100 * late_s / task.duration_s:.0f} % later than planned "
        f"(at {end_s:.1f} s, planned {task.end_s:.1f} s)",
    )


@dataclass
class RunRepair:
    """One run's repair state: drifts waiting for a re-plan, the re-planned placements, failed tasks to retry.

    ``retries``: tasks whose try failed and whose next try has not started, with what it reserves
    (0: as planned; more after an OOM kill); the re-planner treats them as pending.
    """

    dag_id: str
    run_id: str
    drifts: list[Drift] = field(default_factory=list)
    last_s: float = -math.inf  # the executor's monotonic clock at the last re-plan
    overrides: dict[str, Assignment] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    failed_seen: set[str] = field(default_factory=set)  # tries Airflow failed, drifted for once (task@start)
    repairs: int = 0

    def drift(self, drift: Drift) -> None:
        self.drifts.append(drift)

    def due(self, now_s: float) -> bool:
        """Drifts wait, and the last re-plan of the run is :data:`REPLAN_INTERVAL_S` old."""
        return bool(self.drifts) and now_s - self.last_s >= REPLAN_INTERVAL_S

    def started(self, task_id: str) -> None:
        """A try of the task started: it is no longer a failed task waiting for its retry."""
        self.retries.pop(task_id, None)


def replan_state(book: RunBook, clock_s: float, retries: Mapping[str, int]) -> dict[str, TaskState]:
    """Each planned task's state for the re-planner at plan clock ``clock_s``.

    Running: started, not ended (since its release). Pending: a failed task whose retry is to come
    (with the memory it reserves). Done: ended (its real times), or gone (never comes: its planned
    times, cut at now). Anything else is pending (not in the map).
    """
    state: dict[str, TaskState] = {}
    for task_id, task in book.order.by_task.items():
        if task_id in book.started and task_id not in book.ended:
            state[task_id] = Running(task.machine, min(book.started_s.get(task_id, clock_s), clock_s))
        elif task_id in retries:
            state[task_id] = Pending(retries[task_id] or None)
        elif task_id in book.ended:
            end_s = min(book.ended_s.get(task_id, clock_s), clock_s)
            state[task_id] = Done(task.machine, end_s, min(book.started_s.get(task_id, end_s), end_s))
        elif task_id in book.gone:
            end_s = min(task.end_s, clock_s)
            state[task_id] = Done(task.machine, end_s, min(task.start_s, end_s))
    return state


@dataclass(frozen=True)
class Repaired:
    """What a re-plan changes in a run: its new machine order, each re-planned task's placement, the record."""

    order: MachineOrder
    overrides: dict[str, Assignment]
    moved: dict[str, Assignment]  # the re-planned tasks now on another machine
    repair: Repair
    runtime_factors: Mapping[str, float] = field(default_factory=dict)  # by task: the runtimes it was planned from
    memory_factors: Mapping[str, float] = field(default_factory=dict)  # by task: the reservations it was raised by


def repaired(
    book: RunBook,
    answer: Replan,
    resources: Mapping[str, Resource],
    drifts: list[Drift],
    clock_s: float,
    runtime_factors: Mapping[str, float] | None = None,
    note: str = "",
    memory_factors: Mapping[str, float] | None = None,
) -> Repaired:
    """The run ``book`` after the re-plan ``answer`` (made at plan clock ``clock_s`` for ``drifts``, from its
    runtimes corrected by ``runtime_factors`` and its reservations raised by ``memory_factors``, which ``note``
    says in words); its repair carries the run's forecast on the plan clock (the wall clock is the run machine's
    to add)."""
    before = book.order.by_task
    order = replace(
        MachineOrder.from_assignments(answer.schedule, resources, book.order.objective),
        categories=book.order.categories,
        fixed_memory=book.order.fixed_memory,
        parents=book.order.parents,
    )
    changed = [
        a
        for a in answer.assignments
        if a.task not in before
        or before[a.task].machine != a.machine
        or abs(before[a.task].start_s - a.start_s) > SHIFT_TOLERANCE_S
    ]
    moved = {a.task: a for a in changed if a.task not in before or before[a.task].machine != a.machine}
    shown = [f"{task} {before[task].machine if task in before else '-'} -> {a.machine}" for task, a in moved.items()]
    more = f" and {len(shown) - MOVES_SHOWN} more" if len(shown) > MOVES_SHOWN else ""
    detail = (
        f"{answer.method} schedule in {answer.wall_s:.2f} s: {len(changed)} of {len(answer.assignments)} tasks "
        f"not yet queued re-placed, {len(moved)} on another machine"
        + (f" ({', '.join(shown[:MOVES_SHOWN])}{more})" if shown else "")
        + f"; predicted makespan {answer.makespan_s:.1f} s, cost {answer.cost_usd:.4f} USD"
        + (f"; {note}" if note else "")
    )
    reasons = list(dict.fromkeys(drift.reason for drift in drifts))
    if answer.deadline_note:
        reasons.append(answer.deadline_note)
    repair = Repair(
        round(clock_s, 3),
        "; ".join(reasons),
        tuple(a.task for a in changed),
        detail,
        forecast_end_s=round(answer.makespan_s, 3),
        forecast_cost_usd=answer.cost_usd,
    )
    return Repaired(
        order,
        {a.task: a for a in answer.assignments},
        moved,
        repair,
        dict(runtime_factors or {}),
        dict(memory_factors or {}),
    )


class RepairError(AgoraError):
    """A run that cannot be re-planned (its plan kept no workflow, the catalog lost a type...)."""


def repair_catalog(catalog: Catalog, plan: Plan) -> Catalog:
    """The types a re-plan may move tasks to: every type the executor runs itself, and a Celery pool
    only where the plan already put tasks (those run on Celery workers, which the AgoraExecutor cannot
    send a task to: a task moved onto a pool it was not planned on would fail)."""
    planned = {a.resource for a in plan.assignments}
    kept = tuple(r for r in catalog.resources if r.backend != CELERY_BACKEND or r.name in planned)
    return catalog if len(kept) == len(catalog.resources) else replace(catalog, resources=kept)


class RunRepairs:
    """Each run's repair state (:class:`RunRepair`, by ``(dag_id, run_id)``) and the drift rule that fills it.

    ``slack`` is ``[agora] replan_slack`` (0 or less: no drift is ever noted, nothing is re-planned),
    ``min_late_s`` ``[agora] replan_min_late_s``. Pure: the re-plan itself, which reads the plan store and
    the catalog, is :class:`~agora_optimizer.executor.runs.replanner.Replanner`'s.
    """

    def __init__(self, slack: float = 0.0, min_late_s: float = 0.0) -> None:
        self.slack = slack
        self.min_late_s = min_late_s
        self.runs: BoundedDict[tuple[str, str], RunRepair] = BoundedDict(RUNS_MAX)

    @property
    def on(self) -> bool:
        return self.slack > 0

    def run(self, dag_id: str, run_id: str) -> RunRepair:
        """The run's repair state, made empty the first time it is asked for."""
        found = self.runs.get((dag_id, run_id))
        if found is None:
            found = self.runs[(dag_id, run_id)] = RunRepair(dag_id, run_id)
        return found

    def override(self, dag_id: str, run_id: str, task_id: str) -> Assignment | None:
        """The re-planned placement of the task, None if no repair of its run moved or shifted it."""
        found = self.runs.get((dag_id, run_id))
        return None if found is None else found.overrides.get(task_id)

    # -- the drift rule ----------------------------------------------------------------------------

    def ended(self, book: RunBook, dag_id: str, run_id: str, task_id: str, end_s: float) -> None:
        """The task's process ended at plan clock ``end_s``: a drift if it ended too late."""
        task = book.order.by_task.get(task_id)
        drift = None if task is None or not self.on else late_end(task, end_s, self.slack, self.min_late_s)
        if drift is not None:
            self.run(dag_id, run_id).drift(drift)

    def failed(
        self, book: RunBook, dag_id: str, run_id: str, task_id: str, status: JobStatus, retry_bytes: int
    ) -> None:
        """The task's job failed, was OOM-killed or lost: a drift; its retry (reserving ``retry_bytes``
        after an OOM kill) is pending for the re-planner until it starts."""
        if not self.on or task_id not in book.order.by_task:
            return
        if status.interrupted:
            what = "was interrupted (its capacity was taken back)"
        elif status.oom_killed:
            what = "was killed for memory (OOM)"
        elif status.phase == "lost":
            what = "was lost"
        else:
            what = f"failed (exit code {status.exit_code})"
        run = self.run(dag_id, run_id)
        run.retries[task_id] = retry_bytes if status.oom_killed else 0
        run.failed_seen.add(_try_key(book, task_id))  # Airflow's failed state for this try says the same
        run.drift(Drift(task_id, f"task {task_id} {what}"))

    def settled(self, book: RunBook, dag_id: str, run_id: str, states: Mapping[str, str]) -> None:
        """Airflow's task states: a started task Airflow says failed (the task raised; its job exited 0) is a
        drift, once per try; ``up_for_retry`` makes its retry pending for the re-planner."""
        if not self.on:
            return
        for task_id, state in states.items():
            if state not in FAILED_STATES or task_id not in book.started:
                continue
            run = self.run(dag_id, run_id)
            try_key = _try_key(book, task_id)
            if try_key in run.failed_seen:
                continue
            run.failed_seen.add(try_key)
            if state == "up_for_retry":
                run.retries.setdefault(task_id, 0)
            retried = " (to be retried)" if state == "up_for_retry" else ""
            run.drift(Drift(task_id, f"task {task_id} failed{retried}"))


def clock_at(book: RunBook, now_s: float, now_wall: datetime, moment: datetime | None) -> float:
    """The plan clock of the wall-clock ``moment`` (a backend's timestamp), at most now; now when None."""
    clock_s = book.clock_s(now_s)
    if moment is None:
        return clock_s
    return min(clock_s, clock_s - (now_wall - moment).total_seconds())


def on_the_wall(repair: Repair, clock_s: float, wall: datetime) -> Repair:
    """``repair`` with its forecast's end on the wall clock too: ``wall`` is plan clock ``clock_s``."""
    if repair.forecast_end_s is None:
        return repair
    return replace(repair, forecast_end_at=wall + timedelta(seconds=repair.forecast_end_s - clock_s))


def _try_key(book: RunBook, task_id: str) -> str:
    """One try of a task in its run: the task and when it was released."""
    return f"{task_id}@{book.started_s.get(task_id, -1.0)}"

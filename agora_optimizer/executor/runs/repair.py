"""Repairing a run that drifts from its plan: when to re-plan, and what the re-plan changes (no Airflow).

A plan is a prediction. When a planned task of a run **ends later than planned by more than
``[agora] replan_slack`` times its planned duration**, or **fails**, or is **OOM-killed**, the rest
of the plan was made for a run that is no longer happening: its successors are planned to start on
machines and at times that no longer hold. The executor then asks the re-planner
(:func:`agora_optimizer.planning.replan.replan`) where the run's tasks that are not queued yet should
go now, around what has run (:func:`replan_state`), and applies the answer (:func:`repaired`):

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
(:class:`~agora_optimizer.runs.record.Repair`), through :class:`RunReports`, which also carries the
backends' released leases; both wait in memory while the run store is down and are written again
later. A repair never stops a run: any error leaves the run as planned, with one log line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.jobs.spec import JobStatus
from agora_optimizer.executor.runs.machine_order import MachineOrder, PlannedTask, RunBook
from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment, Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.replan import Done, Pending, Replan, Running, TaskState, replan
from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.runs.record import Repair

REPLAN_INTERVAL_S = 5.0  # at most one re-plan per run this often: drifts in between wait for the next
REPLAN_TIME_LIMIT_S = 0.5  # the re-planner's list schedule is abandoned past it (the scheduler's loop waits)
FAILED_STATES = frozenset({"failed", "up_for_retry"})  # Airflow's word for a try that failed in the task
SHIFT_TOLERANCE_S = 1e-6
MOVES_SHOWN = 20  # moves listed in a repair's detail; the rest are counted
RUNS_MAX = 1024  # runs whose repair state is kept
PLANS_MAX = 64  # (dag_id, plan_version) whose plan and workflow are kept for re-planning
REPORTS_MAX = 10_000  # leases and repairs kept while the run store is down
RETRY_INTERVAL_S = 5.0  # how often writing them is tried again


@dataclass(frozen=True)
class Drift:
    """Why a run no longer follows its plan: one task's late end or failure, in words for the record."""

    task_id: str
    reason: str


def late_end(task: PlannedTask, end_s: float, slack: float, min_late_s: float = 0.0) -> Drift | None:
    """A drift if ``task`` ended (plan clock ``end_s``) later than planned by more than ``slack`` times its
    planned duration and more than ``min_late_s`` (the platform's jitter: a 5 s task one second late has not
    drifted); None if it did not, or ``slack`` <= 0 (repair off)."""
    duration_s = task.duration_s
    late_s = end_s - task.end_s
    if slack <= 0 or duration_s <= 0 or late_s <= max(slack * duration_s, min_late_s):
        return None
    return Drift(
        task.task_id,
        f"task {task.task_id} ended {100 * late_s / duration_s:.0f} % later than planned "
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


def repaired(
    book: RunBook, answer: Replan, resources: Mapping[str, Resource], drifts: list[Drift], clock_s: float
) -> Repaired:
    """The run ``book`` after the re-plan ``answer`` (made at plan clock ``clock_s`` for ``drifts``)."""
    before = book.order.by_task
    order = MachineOrder.from_assignments(answer.schedule, resources)
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
    )
    reasons = list(dict.fromkeys(drift.reason for drift in drifts))
    repair = Repair(round(clock_s, 3), "; ".join(reasons), tuple(a.task for a in changed), detail)
    return Repaired(order, {a.task: a for a in answer.assignments}, moved, repair)


class _Log(Protocol):
    def warning(self, msg: Any, /, *args: Any) -> Any: ...


class _RunWriter(Protocol):
    def add_leases(self, records: list[LeaseRecord]) -> int: ...
    def add_repair(self, dag_id: str, run_id: str, repair: Repair) -> None: ...


class RunReports:
    """The leases backends released and the repairs made, on their way to the run store.

    Written at the next :meth:`flush`; while the store is down they wait (at most :data:`REPORTS_MAX`
    of each, the oldest dropped first) and writing is tried again every :data:`RETRY_INTERVAL_S`,
    with one warning per try. They wait in memory only: a scheduler restart loses what waited.
    """

    def __init__(self) -> None:
        self.leases: list[LeaseRecord] = []
        self.repairs: list[tuple[str, str, Repair]] = []
        self._failed_at = -math.inf

    def add_leases(self, records: list[LeaseRecord]) -> None:
        self.leases.extend(records)
        del self.leases[:-REPORTS_MAX]

    def add_repair(self, dag_id: str, run_id: str, repair: Repair) -> None:
        self.repairs.append((dag_id, run_id, repair))
        del self.repairs[:-REPORTS_MAX]

    def flush(self, store: Callable[[], _RunWriter], now_s: float, log: _Log) -> int:
        """Write what waits (not within :data:`RETRY_INTERVAL_S` of a failed try); how many were written."""
        if not (self.leases or self.repairs) or now_s - self._failed_at < RETRY_INTERVAL_S:
            return 0
        written = 0
        try:
            writer = store()
            if self.leases:
                writer.add_leases(self.leases)
                written += len(self.leases)
                self.leases = []
            while self.repairs:
                writer.add_repair(*self.repairs[0])
                self.repairs.pop(0)
                written += 1
        except Exception as exc:  # the run store is the trace store's database: down, the reports wait
            self._failed_at = now_s
            log.warning(
                "agora: run store unreachable (%s); %d leases and %d repairs wait to be written",
                exc, len(self.leases), len(self.repairs),
            )  # fmt: skip
        return written


class RepairError(AgoraError):
    """A run that cannot be re-planned (its plan kept no workflow, the catalog lost a type...)."""


def repair_catalog(catalog: Catalog, plan: Plan) -> Catalog:
    """The types a re-plan may move tasks to: every type the executor runs itself, and a Celery pool
    only where the plan already put tasks (those run on Celery workers, which the AgoraExecutor cannot
    send a task to: a task moved onto a pool it was not planned on would fail)."""
    planned = {a.resource for a in plan.assignments}
    kept = tuple(r for r in catalog.resources if r.backend != "celery" or r.name in planned)
    return catalog if len(kept) == len(catalog.resources) else replace(catalog, resources=kept)


class Repairer:
    """The executor's repairs: the drift rule per run, the re-planner's inputs, each run's overrides.

    ``slack`` is ``[agora] replan_slack`` (0 or less: no drift is ever noted, nothing is re-planned),
    ``min_late_s`` ``[agora] replan_min_late_s``;
    ``catalogs`` the ``[agora] catalog`` files, read (with the measured platform latency defaults,
    :data:`agora_optimizer.predict.latency.MEASURED_DEFAULTS`, as plans are made with a latency and
    learning it reads every trace) at the first re-plan; ``resources`` the executor's, by name.
    """

    def __init__(
        self,
        slack: float = 0.0,
        catalogs: str = "",
        resources: Mapping[str, Resource] | None = None,
        min_late_s: float = 0.0,
    ) -> None:
        self.slack = slack
        self.min_late_s = min_late_s
        self._catalogs = catalogs
        self._resources = dict(resources or {})
        self._catalog: Catalog | None = None
        self._inputs: BoundedDict[tuple[str, str], tuple[Plan, Workflow | None]] = BoundedDict(PLANS_MAX)
        self.runs: BoundedDict[tuple[str, str], RunRepair] = BoundedDict(RUNS_MAX)

    @property
    def on(self) -> bool:
        return self.slack > 0

    def run(self, dag_id: str, run_id: str) -> RunRepair:
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

    # -- re-planning -------------------------------------------------------------------------------

    def replan(self, book: RunBook, run: RunRepair, now_s: float, drifts: list[Drift]) -> Repaired:
        """Re-plan the run's tasks not yet queued at the executor's monotonic ``now_s``; raises on any trouble."""
        plan, workflow = self._plan_and_workflow(run.dag_id, book.plan_version)
        if workflow is None:
            raise RepairError(
                f"plan {book.plan_version} of DAG {run.dag_id} was saved without its workflow "
                "(agora optimize --apply keeps it); nothing to re-plan from"
            )
        if run.overrides:  # the run follows its last repair now
            plan = replace(plan, assignments=tuple(run.overrides.get(a.task, a) for a in plan.assignments))
        clock_s = book.clock_s(now_s)
        state = replan_state(book, clock_s, run.retries)
        catalog = repair_catalog(self._catalog_of(), plan)
        answer = replan(workflow, catalog, plan, state, clock_s, time_limit_s=REPLAN_TIME_LIMIT_S)
        return repaired(book, answer, self._resources, drifts, clock_s)

    def _plan_and_workflow(self, dag_id: str, version: str) -> tuple[Plan, Workflow | None]:
        if (dag_id, version) not in self._inputs:
            from agora_optimizer.plans.store import default_plan_store

            store = default_plan_store()
            stored = store.find(dag_id, version)
            if stored is None:
                raise RepairError(f"plan {version} of DAG {dag_id} is no longer in the plan store")
            self._inputs[(dag_id, version)] = (stored.plan, store.workflow(dag_id, version))
        return self._inputs[(dag_id, version)]

    def _catalog_of(self) -> Catalog:
        if self._catalog is None:
            from agora_optimizer.executor.resources import merged_catalog
            from agora_optimizer.predict.latency import PlatformLatency, with_platform_latency

            self._catalog = with_platform_latency(merged_catalog(self._catalogs), PlatformLatency({}), "median")
        return self._catalog


def clock_at(book: RunBook, now_s: float, now_wall: datetime, moment: datetime | None) -> float:
    """The plan clock of the wall-clock ``moment`` (a backend's timestamp), at most now; now when None."""
    clock_s = book.clock_s(now_s)
    if moment is None:
        return clock_s
    return min(clock_s, clock_s - (now_wall - moment).total_seconds())


def _try_key(book: RunBook, task_id: str) -> str:
    """One try of a task in its run: the task and when it was released."""
    return f"{task_id}@{book.started_s.get(task_id, -1.0)}"

"""Replay a plan with what really happened, repairing it as the executor would when tasks end late.

:func:`agora_optimizer.predict.replay.replay` keeps a plan's decisions whatever happens; a run under
the AgoraExecutor does not: when a task ends later than planned by more than ``[agora] replan_slack``
times its planned duration, the executor re-plans the tasks it has not queued yet around what has
run (:mod:`agora_optimizer.executor.runs.repair`). :func:`replay_with_repairs` plays that run
without Airflow, as a small event loop:

1. time the tasks of the plan in force with the true runtimes (:func:`~.replay.true_times`: what ran
   as it ran, the rest in the plan's order on its machines);
2. find the first task that ends late by the executor's rule (:func:`late`); none: the run is over;
3. at that instant (or at the end of ``interval_s`` since the last repair: the executor re-plans a
   run at most so often) the tasks ended are done, those started are running, the rest pending;
   ask the repair step where the pending ones go now, make its answer the plan in force; go to 1.

The repair step is one function (:data:`RepairStep`), by default :func:`plain_repair`: the executor's
re-planner over the workflow the plan was made from. A step that corrects the pending tasks' predictions
from what the done ones took plugs in there, and the run's forecast (:func:`forecast`) goes through it too.

**Memory, as the executor meets it.** A task whose true peak is above what its attempt reserves is
killed: when its memory reaches the reservation, its memory assumed to grow evenly over its runtime
(after ``reservation / peak`` of its true runtime; the replay cannot know when a real task's peak
comes). The kill is a drift (the executor's too): the killed attempt's time stays on its machine
(paid), and its retry is pending, reserving what :mod:`~agora_optimizer.predict.memory_in_run` says
(its limit grown, at least its category's raised reservation). As tasks end, each category's memory
is learned by that module's rule; a category whose reservations rose, with tasks to come, is a drift;
every re-plan is made from the workflow with the raised reservations (:attr:`RepairedRun.workflows`).
Without repairs (``slack`` <= 0), or when a re-plan fails, the retry stays on its machine, its
reservation grown to at most its type's memory, as Airflow's retry of the executor's job does. A task
whose peak no type holds (or killed :data:`MAX_KILLS` times) runs as if it fitted and stays in the
replay's ``oom_tasks``. Not modelled: other failed tries.

**Runtimes, as the executor learns them.** As tasks end, each category's runtime factor is learned by
:mod:`~agora_optimizer.predict.runtime_in_run`'s rule (a task's true duration over its model's on its
type); a factor that moved by more than ``slack`` from the one the plan carries, with tasks of the
category to start, is a drift; every re-plan is made from the workflow with the not-ended tasks'
runtimes corrected by it, and so is the run's forecast (:func:`forecast`: from the tasks ended by then).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace

from agora_optimizer.errors import AgoraError
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.limits import TIME_TOLERANCE_S
from agora_optimizer.model.plan import Assignment, Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.leases import cost_usd, makespan_s, planned_openings
from agora_optimizer.planning.replan import at_risk, replan
from agora_optimizer.planning.run_state import (
    REPLAN_SLACK,
    REPLAN_TIME_LIMIT_S,
    Done,
    Pending,
    Replan,
    Running,
    TaskState,
    late_by_s,
)
from agora_optimizer.predict.memory_in_run import (
    CategoryMemory,
    RunMemory,
    category_of_task,
    observed_ratio,
    raised_workflow,
    retry_bytes,
)
from agora_optimizer.predict.replay import Replay, check_matches, start_ordered, summarised, true_times
from agora_optimizer.predict.runtime_in_run import RunRuntimes, corrected_workflow, runtime_ratio

MAX_REPAIRS = 100  # past this many re-plans a run repairs only while its deadline is at risk (a guard: the
# executor has none), and then at most once per deadline / MAX_REPAIRS (the replay's time stays bounded)
_CAUSES = {"late": "late", "killed": "killed for memory", "memory": "taught its category's memory",
           "runtime": "taught its category's runtime"}  # fmt: skip
MAX_KILLS = 16  # a task killed this often runs as if it fitted (a guard: Airflow's retries would end sooner)

RepairStep = Callable[[Workflow, Catalog, Plan, Mapping[str, TaskState], float], Replan]
"""``(workflow the plan was made from, catalog, plan in force, each started task's state, now) -> Replan``."""


def plain_repair(time_limit_s: float = REPLAN_TIME_LIMIT_S) -> RepairStep:
    """The executor's repair: :func:`~agora_optimizer.planning.replan.replan` over the predicted workflow."""

    def step(workflow: Workflow, catalog: Catalog, plan: Plan, state: Mapping[str, TaskState], now_s: float) -> Replan:
        return replan(workflow, catalog, plan, state, now_s, time_limit_s=time_limit_s)

    return step


@dataclass(frozen=True)
class RepairEvent:
    """One re-plan of the run: when, which task set it off and how (``cause``: it ended ``late``, was ``killed``
    for memory, or moved its category's ``memory``), and what it predicted for the whole run."""

    at_s: float
    late_task: str
    method: str
    moved_tasks: int
    forecast_makespan_s: float
    forecast_cost_usd: float
    cause: str = "late"
    wall_s: float = 0.0  # how long the re-plan took: the executor's cuts its schedules at REPLAN_TIME_LIMIT_S

    def reached_limit(self, time_limit_s: float = REPLAN_TIME_LIMIT_S) -> bool:
        """Whether the re-plan used its whole time budget (schedules cut short: a loaded machine repairs worse)."""
        return self.wall_s >= time_limit_s


@dataclass(frozen=True)
class RepairedRun:
    """A plan's run with repairs: the replay of what ran (true times), the repairs, the plan in force after each."""

    replay: Replay  # its makespan and cost count the killed attempts too
    repairs: tuple[RepairEvent, ...]
    plans: tuple[Plan, ...]  # plans[0] the plan as made, plans[i] the plan in force after repair i
    failures: tuple[str, ...] = ()  # re-plans that raised: the run went on under the plan in force
    killed: tuple[Assignment, ...] = ()  # attempts killed for memory (each task's last attempt is in the replay)
    workflows: tuple[Workflow, ...] = ()  # what each plan was made from (reservations raised, runtimes corrected)
    runtime_factors: tuple[Mapping[str, float], ...] = ()  # the runtime factors each of those workflows carries
    runtime_seen: tuple[tuple[float, str, float], ...] = ()  # (end, task, runtime ratio) of each task learned from
    run_k: float | None = None  # the run's factor's k it learned with (RunRuntimes.run_k)

    def _made(self, now_s: float) -> int:
        made = [i + 1 for i, event in enumerate(self.repairs) if event.at_s <= now_s + TIME_TOLERANCE_S]
        return made[-1] if made else 0

    def plan_at(self, now_s: float) -> Plan:
        """The plan in force at ``now_s``: after the last repair made by then."""
        return self.plans[self._made(now_s)]

    def workflow_at(self, now_s: float, planned: Workflow) -> Workflow:
        """The workflow the plan in force at ``now_s`` was made from (``planned`` where none was kept)."""
        made = self._made(now_s)
        return self.workflows[made] if made < len(self.workflows) else planned

    def runtime_factors_at(self, now_s: float) -> Mapping[str, float]:
        """The runtime factors the workflow of the plan in force at ``now_s`` carries."""
        made = self._made(now_s)
        return self.runtime_factors[made] if made < len(self.runtime_factors) else {}

    def first_over_reservation(self) -> set[str]:
        """The tasks whose first attempt was over its reservation: killed, or run as if it fitted."""
        return {a.task for a in self.killed} | {t.task for t in self.replay.oom_tasks}


@dataclass
class _Memory:
    """The run's memory as the executor meets it: which attempts are killed, what each category learned."""

    planned: Workflow
    actual: Workflow
    catalog: Catalog
    learned: RunMemory = field(default_factory=RunMemory)
    kills: dict[str, int] = field(default_factory=dict)  # task -> its attempts killed so far
    runtimes: RunRuntimes = field(default_factory=RunRuntimes)
    min_late_s: float = 0.0

    def __post_init__(self) -> None:
        self.largest_bytes = max((r.memory_bytes for r in self.catalog.resources), default=0)
        self.category = {t.id: category_of_task(t) for t in self.planned.tasks}

    def killed_share(self, a: Assignment) -> float:
        """The share of its true runtime after which the attempt is killed (1: it is not)."""
        task = self.actual.by_id[a.task]
        if task.memory_source != "recorded" or task.memory_bytes <= a.memory_bytes:
            return 1.0
        if a.memory_bytes >= self.largest_bytes or self.kills.get(a.task, 0) >= MAX_KILLS:
            return 1.0  # no type holds it, or a guard: it runs as if it fitted (the replay's oom_tasks)
        return a.memory_bytes / task.memory_bytes

    def observe(self, a: Assignment, killed: bool) -> CategoryMemory | None:
        """The attempt ended (``killed`` at its reservation, or with its true peak): one observation."""
        task = self.actual.by_id[a.task]
        peak = task.memory_bytes if task.memory_source == "recorded" else None
        model = self.planned.by_id[a.task].memory_bytes
        ratio = observed_ratio(model, killed_at_bytes=a.memory_bytes) if killed else observed_ratio(model, peak)
        return None if ratio is None else self.learned.observe(self.category[a.task], a.task, ratio, killed)

    def runtime_ratio(self, a: Assignment) -> float | None:
        """The attempt's true duration over its model's on its type (the executor's observation)."""
        model_s = self.catalog.by_name[a.resource].runtime_s(self.planned.by_id[a.task])
        return runtime_ratio(a.end_s - a.start_s, model_s, self.min_late_s)

    def runtime_factors(self, tasks: Collection[str]) -> dict[str, float]:
        """The runtime factor of each of ``tasks`` where it is not 1 (its category's, else the run's)."""
        return self.runtimes.task_factors({t: self.category[t] for t in tasks})

    def first_runtime_change(
        self, timed: Mapping[str, Assignment], now_s: float, learned: Collection[str], slack: float
    ) -> tuple[float, str] | None:
        """When and which task ending after ``now_s`` (none of ``learned``) first moves its category's runtime
        factor by more than ``slack`` from the one the plan carries while tasks of it are still to start."""
        last_start = _last_starts(timed, self.category)
        ahead = RunRuntimes(k=self.runtimes.k, run_k=self.runtimes.run_k)
        for end_s, task_id in sorted((a.end_s, a.task) for a in timed.values() if a.end_s > now_s + TIME_TOLERANCE_S):
            category = self.category[task_id]
            if task_id in learned or self.killed_share(timed[task_id]) < 1.0 or last_start[category] <= end_s:
                continue
            ratio = self.runtime_ratio(timed[task_id])
            if ratio is None:
                continue
            if category not in ahead.categories:
                known = self.runtimes.categories.get(category)
                if known is not None:
                    ahead.categories[category] = replace(known)
            if ahead.observe(category, ratio).moved(slack, ahead.k):
                return end_s, task_id
        return None

    def retry_bytes(self, a: Assignment) -> int:
        """What the retry of the killed attempt ``a`` reserves."""
        model = self.planned.by_id[a.task].memory_bytes
        factor = self.learned.factor(self.category[a.task], a.task)
        return retry_bytes(a.memory_bytes, model, factor, self.largest_bytes)

    def factors(self, tasks: Collection[str]) -> dict[str, float]:
        """The memory factor of each of ``tasks`` whose category's is not 1."""
        by_category = self.learned.factors()
        return {t: by_category[self.category[t]] for t in tasks if self.category[t] in by_category}

    def first_change(
        self, timed: Mapping[str, Assignment], now_s: float, learned: Collection[str]
    ) -> tuple[float, str] | None:
        """When and which task ending after ``now_s`` (none of ``learned``) first moves its category's factor from
        the one the plan carries while tasks of it are still to start: the learning's own drift."""
        last_start = _last_starts(timed, self.category)
        ahead: dict[str, CategoryMemory] = {}  # the categories as they would be, copied when first touched
        ending = sorted((a.end_s, a.task) for a in timed.values() if a.end_s > now_s + TIME_TOLERANCE_S)
        for end_s, task_id in ending:
            if (
                task_id in learned
                or self.killed_share(timed[task_id]) < 1.0
                or last_start[self.category[task_id]] <= end_s
            ):
                continue
            task = self.actual.by_id[task_id]
            model = self.planned.by_id[task_id].memory_bytes
            ratio = observed_ratio(model, task.memory_bytes) if task.memory_source == "recorded" else None
            if ratio is None:
                continue
            category = self.category[task_id]
            if category not in ahead:
                ahead[category] = self.learned.categories.get(category, CategoryMemory()).copy()
            ahead[category].observe(task_id, ratio, killed=False)
            if ahead[category].changed:
                return end_s, task_id
        return None


def _last_starts(timed: Mapping[str, Assignment], category: Mapping[str, str]) -> dict[str, float]:
    """Each category's last start in ``timed``."""
    last_start: dict[str, float] = {}
    for a in timed.values():
        last_start[category[a.task]] = max(last_start.get(category[a.task], -math.inf), a.start_s)
    return last_start


def late(planned: Assignment, end_s: float, slack: float, min_late_s: float = 0.0) -> bool:
    """The executor's drift rule: the task ended later than planned by more than ``slack`` times its
    planned duration and more than ``min_late_s`` (``slack`` <= 0: repair off)."""
    return late_by_s(planned.start_s, planned.end_s, end_s, slack, min_late_s) is not None


def state_at(ran: Mapping[str, Assignment], now_s: float) -> dict[str, TaskState]:
    """Each task started before ``now_s`` as done (ended by then) or running; the rest are pending."""
    state: dict[str, TaskState] = {}
    for task_id, a in ran.items():
        if a.end_s <= now_s + TIME_TOLERANCE_S and a.start_s <= now_s:
            state[task_id] = Done(a.machine, min(a.end_s, now_s), a.start_s)
        elif a.start_s < now_s - TIME_TOLERANCE_S:
            state[task_id] = Running(a.machine, a.start_s, a.memory_bytes)
    return state


def replay_with_repairs(
    plan: Plan,
    planned: Workflow,
    actual: Workflow,
    catalog: Catalog,
    *,
    slack: float = REPLAN_SLACK,
    min_late_s: float = 0.0,
    interval_s: float = 0.0,
    max_repairs: int = MAX_REPAIRS,
    repair: RepairStep | None = None,
    run_k: float | None = None,
) -> RepairedRun:
    """Run ``plan`` (made from ``planned``) with ``actual``'s runtimes and peaks, re-planned by ``repair`` as tasks
    end late, are killed for memory, or teach their category's memory (the module's docstring).

    ``slack`` and ``min_late_s``: :func:`late`; ``interval_s``: the least time between two repairs; ``run_k``:
    ``[agora] run_shrink_k`` (None: its default); ``max_repairs``: past that many, a late task or a category's
    memory or runtime is repaired only while the plan's deadline is at risk (:func:`at_risk`), at most once per
    ``deadline / max_repairs`` (a kill is always repaired, as the executor does). Raises as
    :func:`~.replay.replay` does on a plan that does not fit ``actual`` or ``catalog``; a repair step that raises
    an :class:`AgoraError` leaves the run under the plan in force, as the executor does, and is listed in
    ``failures``.
    """
    check_matches(plan, actual, catalog)
    step = repair or plain_repair()
    memory = _Memory(planned, actual, catalog, runtimes=RunRuntimes(run_k=run_k), min_late_s=min_late_s)
    in_force, plans, workflows = plan, [plan], [planned]
    carried: list[Mapping[str, float]] = [{}]
    seen: list[tuple[float, str, float]] = []
    events, failures = list[RepairEvent](), list[str]()
    ran: dict[str, Assignment] = {}
    killed: list[Assignment] = []
    retries: dict[str, int] = {}  # killed tasks whose retry has not started: what it reserves
    learned: set[str] = set()  # tasks whose end was learned from
    fresh: dict[str, float] = {}  # machines the re-plans added, and when: they boot after it
    now_s, last_repair_s = 0.0, -float("inf")
    while True:
        pending = [a for a in in_force.assignments if a.task not in ran]
        openings = planned_openings(pending, catalog, plan.objective)
        timed = true_times(
            pending, actual, catalog, [*killed, *ran.values()], now_s, fresh, memory.killed_share, openings
        )
        event = _next_event(
            timed, in_force, memory, learned, now_s, last_repair_s, len(events) + len(failures),
            slack=slack, min_late_s=min_late_s, interval_s=interval_s, max_repairs=max_repairs,
        )  # fmt: skip
        if event is None:
            break
        at_s, cause_task, cause = event
        state = state_at(timed, at_s)
        newly_killed = [timed[t] for t, s in state.items() if isinstance(s, Done) and memory.killed_share(timed[t]) < 1]
        for a in sorted(newly_killed, key=lambda a: a.end_s):
            killed.append(a)
            memory.kills[a.task] = memory.kills.get(a.task, 0) + 1
            if slack > 0:  # the executor learns while it repairs
                memory.observe(a, killed=True)
            del state[a.task]
        for task_id, status in sorted(state.items(), key=lambda item: timed[item[0]].end_s):
            if isinstance(status, Done) and task_id not in learned and slack > 0:
                learned.add(task_id)
                memory.observe(timed[task_id], killed=False)
                ratio = memory.runtime_ratio(timed[task_id])
                if ratio is not None:
                    memory.runtimes.observe(memory.category[task_id], ratio)
                    seen.append((timed[task_id].end_s, task_id, ratio))
        retries = {t: b for t, b in retries.items() if t not in state}  # a retry that started is no longer pending
        retries.update({a.task: memory.retry_bytes(a) for a in newly_killed})
        ran = {task_id: timed[task_id] for task_id in state}
        now_s = at_s
        if slack <= 0:  # no repair: Airflow retries a killed task on its machine
            in_force = _retried_in_place(in_force, retries, catalog, set(retries) & {a.task for a in newly_killed})
            continue
        last_repair_s = at_s
        factors = memory.factors([t for t in planned.by_id if t not in ran])
        runtime_factors = memory.runtime_factors([t for t in planned.by_id if not isinstance(state.get(t), Done)])
        workflow = raised_workflow(corrected_workflow(planned, runtime_factors), factors, memory.largest_bytes)
        step_state = {**state, **{t: Pending(b) for t, b in retries.items()}}
        try:
            answer = step(workflow, catalog, in_force, step_state, at_s)
        except AgoraError as exc:  # as in the executor: the run goes on as planned, the failure said
            failures.append(f"at {at_s:.1f} s ({cause_task} {_CAUSES[cause]}): {exc}")
            in_force = _retried_in_place(in_force, retries, catalog, {a.task for a in newly_killed})
            continue
        known = {a.machine for a in in_force.assignments}
        fresh.update({a.machine: at_s for a in answer.assignments if a.machine not in known and a.machine not in fresh})
        in_force = replace(
            in_force,
            assignments=tuple(sorted(answer.schedule, key=lambda a: (a.start_s, a.task))),
            makespan_s=answer.makespan_s,
            cost_usd=answer.cost_usd,
        )
        memory.learned.applied_now()
        memory.runtimes.applied_now()
        plans.append(in_force)
        workflows.append(workflow)
        carried.append(runtime_factors)
        said = (answer.method, len(answer.moved_machine), answer.makespan_s, answer.cost_usd)
        events.append(RepairEvent(at_s, cause_task, *said, cause, answer.wall_s))
    items = [timed[a.task] for a in start_ordered(plan.assignments, actual)]
    made = summarised(plan, actual, catalog, items)
    if killed:  # the killed attempts ran and were paid for
        made = replace(made, makespan_s=makespan_s([*items, *killed]), cost_usd=cost_usd([*items, *killed], catalog))
    kept = (tuple(events), tuple(plans), tuple(failures), tuple(killed), tuple(workflows), tuple(carried))
    return RepairedRun(made, *kept, tuple(seen), run_k)


def _next_event(
    timed: Mapping[str, Assignment],
    in_force: Plan,
    memory: _Memory,
    learned: Collection[str],
    now_s: float,
    last_repair_s: float,
    repairs: int,
    *,
    slack: float,
    min_late_s: float,
    interval_s: float,
    max_repairs: int,
) -> tuple[float, str, str] | None:
    """The run's next repair: ``(when, the task that set it off, how: a RepairEvent's cause)``; None when the run
    is over.

    A kill is always one (the executor re-plans it; without repair it is retried where it was); a late task or
    a category's memory or runtime moving only while repairs are on, and past ``max_repairs`` only while the
    deadline is at risk (:func:`at_risk`) and ``deadline / max_repairs`` after the last; not when the interval
    would defer it past the run's end."""
    kills = sorted((a.end_s, a.task) for a in timed.values() if memory.killed_share(a) < 1.0)
    drifts: list[tuple[float, str, str]] = []
    capped = repairs >= max_repairs
    deadline_s = in_force.objective.deadline_s
    if slack > 0 and (not capped or deadline_s is not None):
        by_task = {a.task: a for a in in_force.assignments}
        drifts = [
            (a.end_s, a.task, "late")
            for a in timed.values()
            if a.end_s > now_s + TIME_TOLERANCE_S
            and memory.killed_share(a) >= 1.0
            and late(by_task[a.task], a.end_s, slack, min_late_s)
        ]
        rise = memory.first_change(timed, now_s, learned)
        if rise is not None:
            drifts.append((*rise, "memory"))
        moved = memory.first_runtime_change(timed, now_s, learned, slack)
        if moved is not None:
            drifts.append((*moved, "runtime"))
        if capped:
            drifts = [d for d in drifts if at_risk(in_force, d[0], timed[d[1]].end_s - by_task[d[1]].end_s)]
    gap_s = last_repair_s + interval_s if slack > 0 else -math.inf
    if capped and deadline_s is not None:
        gap_s = max(gap_s, last_repair_s + deadline_s / max(max_repairs, 1))
    if drifts:
        end_s, task_id, cause = min(drifts)
        at_s = max(end_s, gap_s)
        if at_s < max(a.end_s for a in timed.values()) - TIME_TOLERANCE_S and (not kills or at_s <= kills[0][0]):
            return at_s, task_id, cause
    if kills:
        end_s, task_id = kills[0]
        return max(end_s, now_s, gap_s), task_id, "killed"
    return None


def _retried_in_place(plan: Plan, retries: Mapping[str, int], catalog: Catalog, tasks: Collection[str]) -> Plan:
    """``plan`` with each of ``tasks`` (killed, not re-planned) retried on its machine, reserving its retry's
    memory (``retries``) up to its type's."""
    if not tasks:
        return plan
    assignments = tuple(
        replace(a, memory_bytes=max(a.memory_bytes, min(retries[a.task], catalog.by_name[a.resource].memory_bytes)))
        if a.task in tasks
        else a
        for a in plan.assignments
    )
    return replace(plan, assignments=assignments)


def forecast(
    run: RepairedRun, planned: Workflow, catalog: Catalog, now_s: float, repair: RepairStep | None = None
) -> Replan:
    """What the run predicted at ``now_s`` for its whole course: the repair step's answer there, from the
    plan then in force and the state of the run's tasks then (what ran before ``now_s`` does not depend
    on what the run did after)."""
    ran = {a.task: a for a in run.replay.assignments}
    state = state_at(ran, now_s)
    for a in sorted(run.killed, key=lambda a: a.start_s):  # an attempt running now, to be killed; or killed by now
        if a.start_s <= now_s < a.end_s - TIME_TOLERANCE_S:
            state[a.task] = Running(a.machine, a.start_s, a.memory_bytes)
        elif a.end_s <= now_s + TIME_TOLERANCE_S and not isinstance(state.get(a.task), Done | Running):
            state[a.task] = Pending(ran[a.task].memory_bytes)  # its retry, not started, reserves what it did
    step = repair or plain_repair()
    return step(_learned_workflow(run, planned, state, now_s), catalog, run.plan_at(now_s), state, now_s)


def _learned_workflow(run: RepairedRun, planned: Workflow, state: Mapping[str, TaskState], now_s: float) -> Workflow:
    """The workflow of the plan in force at ``now_s``, its not-ended tasks' runtimes corrected by what the tasks
    ended by then taught their categories (the executor's learning, as of ``now_s``)."""
    category = {t.id: category_of_task(t) for t in planned.tasks}
    learned = RunRuntimes(run_k=run.run_k)
    for end_s, task_id, ratio in run.runtime_seen:
        if end_s <= now_s + TIME_TOLERANCE_S:
            learned.observe(category[task_id], ratio)
    ending = [t for t in planned.by_id if not isinstance(state.get(t), Done)]
    by_task, carried = learned.task_factors({t: category[t] for t in ending}), run.runtime_factors_at(now_s)
    factors = {t: by_task.get(t, 1.0) / carried.get(t, 1.0) for t in ending}
    return corrected_workflow(run.workflow_at(now_s, planned), {t: f for t, f in factors.items() if f != 1.0})


def assumed_workflow(plan: Plan, actual: Workflow, catalog: Catalog) -> Workflow:
    """The workflow ``plan`` assumed, read from its assignments: each task's planned duration times its
    type's speed (its reference runtime, the platform latency aside) and its reservation, on ``actual``'s
    graph. What a repair re-plans from when the workflow the plan was made from is not at hand."""
    check_matches(plan, actual, catalog)
    by_task = {a.task: a for a in plan.assignments}
    tasks = []
    for task in actual.tasks:
        a = by_task[task.id]
        resource = catalog.by_name[a.resource]
        runtime_s = max(0.0, (a.end_s - a.start_s - resource.added_latency_s) * resource.speed)
        tasks.append(replace(task, runtime_s=runtime_s, memory_bytes=a.memory_bytes, memory_source="predicted"))
    return Workflow.create(actual.name, tasks, list(actual.edges), source=actual.source)

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

The repair step is one function (:data:`RepairStep`), by default :func:`plain_repair`: the
re-planner over the workflow the plan was made from, as the executor's re-planner does. A step that
corrects the predictions of the pending tasks from what the done ones took (learning during the
run) plugs in there, and the run's forecast (:func:`forecast`) goes through it too.

Not modelled: tasks killed for lack of memory (counted in the replay's ``oom_tasks``, timed as if
they ran, as :func:`~.replay.replay` does), and failed tries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from agora_optimizer.errors import AgoraError
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Assignment, Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.replan import (
    REPLAN_SLACK,
    REPLAN_TIME_LIMIT_S,
    Done,
    Replan,
    Running,
    TaskState,
    late_by_s,
    replan,
)
from agora_optimizer.predict.replay import Replay, check_matches, start_ordered, summarised, true_times

MAX_REPAIRS = 100  # a run re-planned this often stops repairing (a guard; the executor has none)
TIME_TOLERANCE_S = 1e-6

RepairStep = Callable[[Workflow, Catalog, Plan, Mapping[str, TaskState], float], Replan]
"""``(workflow the plan was made from, catalog, plan in force, each started task's state, now) -> Replan``."""


def plain_repair(time_limit_s: float = REPLAN_TIME_LIMIT_S) -> RepairStep:
    """The executor's repair: :func:`~agora_optimizer.planning.replan.replan` over the predicted workflow."""

    def step(workflow: Workflow, catalog: Catalog, plan: Plan, state: Mapping[str, TaskState], now_s: float) -> Replan:
        return replan(workflow, catalog, plan, state, now_s, time_limit_s=time_limit_s)

    return step


@dataclass(frozen=True)
class RepairEvent:
    """One re-plan of the run: when, which late task set it off, and what it predicted for the whole run."""

    at_s: float
    late_task: str
    method: str
    moved_tasks: int
    forecast_makespan_s: float
    forecast_cost_usd: float


@dataclass(frozen=True)
class RepairedRun:
    """A plan's run with repairs: the replay of what ran (true times), the repairs, the plan in force after each."""

    replay: Replay
    repairs: tuple[RepairEvent, ...]
    plans: tuple[Plan, ...]  # plans[0] the plan as made, plans[i] the plan in force after repair i
    failures: tuple[str, ...] = ()  # re-plans that raised: the run went on under the plan in force

    def plan_at(self, now_s: float) -> Plan:
        """The plan in force at ``now_s``: after the last repair made by then."""
        made = [i + 1 for i, event in enumerate(self.repairs) if event.at_s <= now_s + TIME_TOLERANCE_S]
        return self.plans[made[-1] if made else 0]


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
) -> RepairedRun:
    """Run ``plan`` (made from ``planned``) with ``actual``'s runtimes, re-planned by ``repair`` as tasks end late.

    ``slack`` and ``min_late_s``: :func:`late`; ``interval_s``: the least time between two repairs;
    ``max_repairs``: no repair tried after that many. Raises as :func:`~.replay.replay` does on a plan
    that does not fit ``actual`` or ``catalog``; a repair step that raises an :class:`AgoraError` leaves
    the run under the plan in force, as the executor does, and is listed in ``failures``.
    """
    check_matches(plan, actual, catalog)
    step = repair or plain_repair()
    in_force, plans, events, failures = plan, [plan], list[RepairEvent](), list[str]()
    ran: dict[str, Assignment] = {}
    fresh: dict[str, float] = {}  # machines the re-plans added, and when: they boot after it
    now_s, last_repair_s = 0.0, -float("inf")
    while True:
        pending = [a for a in in_force.assignments if a.task not in ran]
        timed = true_times(pending, actual, catalog, ran.values(), now_s, fresh)
        if len(events) + len(failures) >= max_repairs:
            break
        by_task = {a.task: a for a in in_force.assignments}
        drifts = [
            (a.end_s, a.task)
            for a in timed.values()
            if a.end_s > now_s + TIME_TOLERANCE_S and late(by_task[a.task], a.end_s, slack, min_late_s)
        ]
        if not drifts:
            break
        end_s, late_task = min(drifts)
        at_s = max(end_s, last_repair_s + interval_s)
        if at_s >= max(a.end_s for a in timed.values()) - TIME_TOLERANCE_S:
            break  # deferred past the run's end: nothing left to repair
        state = state_at(timed, at_s)
        ran = {task_id: timed[task_id] for task_id in state}
        now_s = last_repair_s = at_s
        try:
            answer = step(planned, catalog, in_force, state, at_s)
        except AgoraError as exc:  # as in the executor: the run goes on as planned, the failure said
            failures.append(f"at {at_s:.1f} s ({late_task} late): {exc}")
            continue
        known = {a.machine for a in in_force.assignments}
        fresh.update({a.machine: at_s for a in answer.assignments if a.machine not in known and a.machine not in fresh})
        in_force = replace(
            in_force,
            assignments=tuple(sorted(answer.schedule, key=lambda a: (a.start_s, a.task))),
            makespan_s=answer.makespan_s,
            cost_usd=answer.cost_usd,
        )
        plans.append(in_force)
        events.append(
            RepairEvent(at_s, late_task, answer.method, len(answer.moved_machine), answer.makespan_s, answer.cost_usd)
        )
    items = [timed[a.task] for a in start_ordered(plan.assignments, actual)]
    return RepairedRun(summarised(plan, actual, catalog, items), tuple(events), tuple(plans), tuple(failures))


def forecast(
    run: RepairedRun, planned: Workflow, catalog: Catalog, now_s: float, repair: RepairStep | None = None
) -> Replan:
    """What the run predicted at ``now_s`` for its whole course: the repair step's answer there, from the
    plan then in force and the state of the run's tasks then (what ran before ``now_s`` does not depend
    on what the run did after)."""
    ran = {a.task: a for a in run.replay.assignments}
    step = repair or plain_repair()
    return step(planned, catalog, run.plan_at(now_s), state_at(ran, now_s), now_s)


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

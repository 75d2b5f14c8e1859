"""Re-planning a run that drifted: new placements for the tasks not yet queued, around what has run.

When a run drifts from its plan (a task ends later than planned, fails, or is OOM-killed), the
executor asks :func:`replan` where the tasks it has not queued yet should go now. What has run
cannot move: a *done* task keeps its machine and its real times, a *running* one its machine, its
start and an expected end of ``max(now, start + planned duration)``. Every other task is
*pending*, free to move (a failed task to be retried is pending again; after an OOM kill it
reserves more memory, :class:`~agora_optimizer.planning.run_state.Pending`).

The machines of the plan that are leased already (those of done and running tasks, and those
whose planned lease has begun, where its type's ``count`` left room for it beside what ran: a
machine planned to follow one that ran late waited for it) stay available from when they are free
and from ``now`` on; a task on them waits for no boot but one under way, and one still held for
planned tasks is paid up to now (a failed attempt ran on it). Any other machine, a planned one not
leased yet or a new one the catalog allows, starts its lease no earlier than ``now`` (nor its
type's release) and boots first. Section 3 of the spec holds for what is planned beside what ran:
cores and memory per machine, parents' ends plus transfers, and at no instant more leases of a
type than its ``count`` (checked over time, so a machine whose lease has ended frees its place).
The count bounds the leases as the spec reads them from the tasks (first start minus boot to last
end; what is paid for a machine held idle or booting is cost, not a lease the checker sees), and
only what a lease gains is checked against the others: a run may have held more machines of a type
at once than its plan did (the executor holds a type to ``count x vcpus`` cores, whichever machine
ids run them), and that past forbids nothing to come. So a task always has a place: where every
candidate would break the count (on a type of count 1, a machine's lease would grow back over the
one before it, or on over the one after it), it goes on a leased machine after that machine's
first task, which the machine whose lease ends last can always take.

Two schedules are built and the better one for the plan's objective is kept (deadline and budget
first, then the objective's score):

- *kept*: every pending task on its planned machine, in the plan's order, as early as it can
  start now (the plan shifted; a task whose planned machine no longer fits it is searched for);
- *list*: the memory- and cost-aware list scheduler of
  :mod:`agora_optimizer.planning.list_schedule` over the pending tasks, in decreasing upward
  rank, each placed where it minimises ``alpha * makespan / T + (1 - alpha) * added cost / C``
  over the machines above, and left on its planned machine when that is not worse.

**A deadline at risk.** When the plan has a deadline and the better of the two still ends past its aim
(:data:`~agora_optimizer.planning.deadline_aim.DEADLINE_MARGIN` of the time left before the deadline,
early; the repair aims there too),
the run may buy time, and buys the least that keeps it. Each pending task gets a latest end, the
deadline less its tail (the longest path after it on the fastest types, as
:mod:`agora_optimizer.engines.deadline_list` distributes a whole plan's deadline), and the kept
schedule is built again with each task left on its planned machine where it ends by it there and
moved, where it would not, to the place that adds the least cost among those where it does (a
faster type, a further machine within the catalog's counts); then the list schedule the same way,
every task where it is cheapest in time. Tails on the fastest types are optimistic, so a schedule
may still end late: the due time then comes forward by the overrun, and once one is on time a
bisection between it and the last late one looks for the cheapest on time (:data:`BISECTIONS`
halvings). Where none keeps it (the tails leave out the wait for machines, which a workflow wider
than its machines is made of), the list schedule with time alone as its objective is built, and
where it keeps the deadline each task's latest end is where it ends there plus a share of the
slack it leaves: all of it, then none and bisected, as above. The best of them all for the plan's
objective wins as before (deadline and budget first: a schedule that keeps the deadline by breaking
the budget by more does not; for cost, the cheapest on time). A run at risk by a few seconds so
moves a task or two to a faster type, where re-weighting the whole list schedule toward time would
rebuild the rest of the run. The answer says so
(:attr:`~agora_optimizer.planning.run_state.Replan.deadline_note`: ``deadline at risk: ...``, what
moved and what it costs). Without a deadline nothing of this runs: the re-plan keeps cost down as the objective says.

The list schedules are abandoned when they would pass ``time_limit_s``, so an answer comes within
about that time even on a slow machine (the kept schedule is a single pass). No Airflow, no I/O.

The state and the answer are in :mod:`agora_optimizer.planning.run_state`, the fleet's machines in
:mod:`agora_optimizer.planning.replan_fleet`, one schedule in :mod:`agora_optimizer.planning.replan_schedule`
and the deadline's note in :mod:`agora_optimizer.planning.replan_notes`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from typing import Literal

from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.limits import TIME_TOLERANCE_S
from agora_optimizer.model.plan import Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.deadline_aim import DEADLINE_MARGIN, aim_s
from agora_optimizer.planning.list_schedule import upward_ranks
from agora_optimizer.planning.problem import Bounds, Problem
from agora_optimizer.planning.replan_notes import deadline_note
from agora_optimizer.planning.replan_schedule import (
    ReplanInputs,
    Schedule,
    parents_first_by,
    prepare,
    schedule,
    tails,
)
from agora_optimizer.planning.run_state import Pending, Replan, TaskState

BISECTIONS = 3  # a deadline at risk: halvings between the last late latest ends and the last timely ones


def replan(
    workflow: Workflow,
    catalog: Catalog,
    plan: Plan,
    state: Mapping[str, TaskState],
    now_s: float,
    *,
    leased: Collection[str] | None = None,
    scale: Bounds | None = None,
    time_limit_s: float = 0.8,
    deadline_margin: float = DEADLINE_MARGIN,
) -> Replan:
    """New placements for the pending tasks of a run of ``plan`` at plan time ``now_s``.

    ``state``: each task's :class:`Done`, :class:`Running` or :class:`Pending` (a task not in it is
    pending). ``leased``: the plan's machines leased already (default: those of done and running
    tasks, and those whose planned lease began by ``now_s`` where their type's count left room for
    them beside what ran). ``scale``: the objective's makespan
    and cost scales (:func:`agora_optimizer.planning.problem.lower_bounds`; they take a second or more on a
    thousand tasks, so the default is the plan's own makespan and cost). ``time_limit_s``: the list
    schedule is abandoned beyond it, and the kept one answers. ``deadline_margin``: a deadline at risk is
    aimed that share of the time left to it early (:data:`~agora_optimizer.planning.deadline_aim.DEADLINE_MARGIN`).
    """
    started = time.perf_counter()
    run = prepare(workflow, catalog, plan, state, now_s, leased)
    scale = scale or Bounds(max(plan.makespan_s, 1e-9), max(plan.cost_usd, 1e-12))
    problem = Problem(workflow, catalog, plan.objective, scale)
    alpha = {"time": 1.0, "cost": 0.0, "balanced": plan.objective.alpha}[plan.objective.kind]
    rank = upward_ranks(workflow, catalog)
    position = {task_id: i for i, task_id in enumerate(workflow.topological_order)}
    pending = [t for t in workflow.topological_order if isinstance(state.get(t, Pending()), Pending)]

    never = float("inf")
    kept_order = parents_first_by(
        workflow, pending, lambda t: (run.planned[t].start_s if t in run.planned else never, position[t])
    )
    best = schedule(run, kept_order, rank, alpha, scale, keep=True, deadline=None)
    assert best is not None  # no deadline: always completes
    method: Literal["kept", "list", "deadline"] = "kept"
    list_order = parents_first_by(workflow, pending, lambda t: (-rank[t], position[t]))
    list_started = time.perf_counter()
    listed = schedule(run, list_order, rank, alpha, scale, keep=False, deadline=started + time_limit_s)
    list_wall_s = None if listed is None else time.perf_counter() - list_started
    if listed is not None and problem.rank(listed[1], listed[2]) < problem.rank(best[1], best[2]):
        best, method = listed, "list"
    note = ""
    deadline_s = plan.objective.deadline_s
    aimed_s = None if deadline_s is None else aim_s(deadline_s, now_s, deadline_margin)
    if deadline_s is not None and aimed_s is not None and best[1] > aimed_s + TIME_TOLERANCE_S:  # (aimed_s: for mypy)
        kept_cost, limit = best, started + time_limit_s
        aimed = Problem(workflow, catalog, replace(plan.objective, deadline_s=aimed_s), scale)
        # a time plan: its list schedule was all on time already
        rushed = _rushed(run, (kept_order, list_order), rank, alpha, scale, limit, aimed_s) if alpha < 1 else []
        for candidate in rushed:  # the least late for the aim first (on time for it), then the objective
            if aimed.rank(candidate[1], candidate[2]) < aimed.rank(best[1], best[2]):
                best, method = candidate, "deadline"
        note = deadline_note(deadline_s, kept_cost, best, run.planned, catalog, len(rushed))

    assignments, makespan, cost = best
    moved = [a for a in assignments if a.task not in run.planned or run.planned[a.task].machine != a.machine]
    return Replan(
        assignments=tuple(assignments),
        fixed=tuple(run.fixed),
        moved_machine=tuple(a.task for a in moved),
        moved_resource=tuple(
            a.task for a in moved if a.task not in run.planned or run.planned[a.task].resource != a.resource
        ),
        makespan_s=makespan,
        cost_usd=cost,
        method=method,
        wall_s=time.perf_counter() - started,
        list_wall_s=list_wall_s,
        deadline_note=note,
    )


def at_risk(plan: Plan, now_s: float, late_s: float, margin: float = DEADLINE_MARGIN) -> bool:
    """The deadline of ``plan`` (the plan in force) is at risk at ``now_s``, a task having just ended ``late_s``
    after its plan: the deadline not passed yet, and the plan's makespan moved by that lateness past the aim a
    repair keeps (``margin`` of the time left early, :data:`~agora_optimizer.planning.deadline_aim.DEADLINE_MARGIN`)."""
    deadline_s = plan.objective.deadline_s
    if deadline_s is None or now_s >= deadline_s:
        return False  # no deadline, or lost: nothing left to keep
    return plan.makespan_s + max(late_s, 0.0) > aim_s(deadline_s, now_s, margin)


def _rushed(
    run: ReplanInputs,
    orders: tuple[list[str], list[str]],
    rank: dict[str, float],
    alpha: float,
    scale: Bounds,
    limit: float,
    deadline_s: float,
) -> list[Schedule]:
    """The schedules tried to keep a deadline at risk (the module's text): with latest ends from the tails,
    then, where none keeps it, time alone and latest ends relaxed from its ends."""

    def search(latest: Callable[[float], dict[str, float]], first: float, back: Callable[[Schedule], float]) -> None:
        """For each kind (kept, list): the schedule with ``latest(first)``; where it is late, with ``latest`` of
        ``back(it)``, then bisected between the last late value and the last timely one."""
        for order, keep in zip(orders, (True, False), strict=True):
            made = schedule(run, order, rank, alpha, scale, keep, limit, latest_end_s=latest(first))
            if made is None or _keeps(made, deadline_s):
                found.extend([made] if made is not None else [])
                continue
            found.append(made)
            late, timely, value = first, None, back(made)
            for _ in range(BISECTIONS + 1):
                made = schedule(run, order, rank, alpha, scale, keep, limit, latest_end_s=latest(value))
                if made is None:
                    break  # the time limit: the best so far answers
                found.append(made)
                if _keeps(made, deadline_s):
                    timely = value
                else:
                    late = value
                if timely is None:
                    break  # the step back is late too
                value = (timely + late) / 2

    found: list[Schedule] = []
    tail = tails(run, rank)
    search(lambda due: {t: due - x for t, x in tail.items()}, deadline_s, lambda made: 2 * deadline_s - made[1])
    if any(_keeps(made, deadline_s) for made in found):
        return found
    fastest = schedule(run, orders[1], rank, 1.0, scale, keep=False, deadline=limit)  # time alone
    if fastest is None or not _keeps(fastest, deadline_s):
        return found + ([fastest] if fastest is not None else [])
    # Each task due when the fastest schedule ends it, plus a share of its slack: tails on the fastest types
    # leave out the wait for machines, which that schedule holds. The whole slack first, then none.
    found.append(fastest)
    ends = {a.task: a.end_s for a in fastest[0]}
    slack_s = deadline_s - fastest[1]
    search(lambda share: {t: end + share * slack_s for t, end in ends.items()}, 1.0, lambda _: 0.0)
    return found


def _keeps(made: Schedule, deadline_s: float) -> bool:
    return made[1] <= deadline_s + TIME_TOLERANCE_S

"""Deadline-aware list scheduling: each task on the cheapest place that keeps it on time.

For an objective with a deadline D (cost, or balanced), every task gets a latest end,
``beta * D`` minus its tail: the longest path after it on the fastest types, transfers included
(its upward rank less its own fastest runtime). The list scheduler of
:mod:`agora_optimizer.planning.list_schedule` then places the tasks in decreasing upward rank,
each where it adds the least lease cost among the places where it ends by its latest end (where
it can end by it nowhere: where it ends least late). It is the deadline distribution of the
IC-PCP family (Abrishami, Naghibzadeh and Epema, FGCS 2013) with machine packing: a task with
slack goes onto the cheapest type and into the gaps of machines already leased, and only the
tasks on the critical path pay for speed.

Tails on the fastest types are optimistic (a cheaper type makes the tail longer), so a schedule
can still end after D. ``beta`` is searched: from 1, while the schedule ends late, it shrinks in
proportion to the overrun; once a schedule ends in time, bisection between the last late
``beta`` and the last timely one looks for more slack (the larger ``beta``, the cheaper, as a
rule). A late first schedule is followed by the second even past the time limit: a late plan is
no answer, and where the limit affords one schedule (30,000 tasks) the first is often late.
Each place's added cost is counted at the task's share of the machine (the rest of
the time is there for the tasks that follow), which opens large machines that are cheap per core;
where the tasks that follow do not fill them, counting it in full is cheaper, so the best ``beta``
is tried that way too. The cheapest timely schedule wins; without one, the least late.

The search runs first with each type's ``count`` bounding its machines over the whole schedule
(the list scheduler's own pools), then, while the time limit allows, again with the count held at
every instant, as the spec says (:meth:`~agora_optimizer.planning.shared_counts.RunPools.one_run`):
a lease that has ended leaves room for another of its type, so a dear type can be leased for each
burst of work instead of for the idle span between bursts (on hpc-36, cycles-1k at a deadline of
1.5 x: 1.39 x the cost bound against 1.64 with the whole-schedule count, at the same ``beta``).

With spot types (``docs/spot.md``) a schedule is on time when its worst case is (one spot task
interrupted at the last moment and re-run on demand); where the worst case is late, the re-run's
length (the worst case less the planned makespan) comes off the deadline in the next ``beta``.
"""

from __future__ import annotations

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.engines.list_scheduling import LARGE_MACHINES_PER_TYPE, machines_per_type
from agora_optimizer.model.plan import Assignment
from agora_optimizer.planning.bounds import fastest_runtime_s
from agora_optimizer.planning.leases import makespan_s
from agora_optimizer.planning.list_schedule import list_schedule, upward_ranks
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.shared_counts import RunPools
from agora_optimizer.planning.time_budget import OutOfTime, TimeBudget

BISECTIONS = 6  # steps between the last late beta and the last timely one
MIN_BETA = 0.05


class DeadlineListEngine(Engine):
    name = "deadline-list"

    def __init__(self, instant_counts: bool = True) -> None:
        self.instant_counts = instant_counts  # the second search, with counts held at every instant

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        deadline = problem.objective.deadline_s
        if deadline is None or not problem.workflow.tasks:
            return None
        workflow, catalog = problem.workflow, problem.catalog
        rank = upward_ranks(workflow, catalog)
        tails = {t.id: rank[t.id] - fastest_runtime_s(t, problem.options[t.id]) for t in workflow.tasks}
        budget = TimeBudget(time_limit_s)
        # With a plan on time in hand (the portfolio's best so far), this engine keeps its limit: it gives a
        # schedule up there. Without one it completes its schedules past it, for a plan beats an error
        # (at 30,000 tasks on memory-tight one schedule took 83 s of a 17 s share, after the fleets' plan).
        on_time = warm_start is not None and problem.rank(*problem.evaluate(warm_start.assignments))[0] == 0
        stop = budget if on_time else None
        best: tuple[tuple[float, float, float], list[Assignment]] | None = None
        per_type = machines_per_type(workflow)

        def schedule(beta: float, shared_cost: bool, instant: bool) -> tuple[float, float]:
            """Schedule for ``beta``; its makespan as the problem evaluates it (with spot types, the worst
            case) and as planned. Keeps the best schedule seen."""
            nonlocal best
            latest = {task_id: beta * deadline - tail for task_id, tail in tails.items()}
            # With instant counts a type may have many machines over time: each task tries the few that
            # fall idle first and its parents' (all of them made one schedule 10 to 25 times slower).
            pools = RunPools.one_run(workflow, catalog, LARGE_MACHINES_PER_TYPE) if instant else None
            with budget:
                assignments = list_schedule(
                    workflow,
                    catalog,
                    0.0,
                    problem.bounds.makespan_s,
                    problem.bounds.cost_usd,
                    machines_per_type=per_type,
                    latest_end_s=latest,
                    shared_cost=shared_cost,
                    pools=pools,
                    stop=stop,
                )
            makespan, cost = problem.evaluate(assignments)
            key = problem.rank(makespan, cost)
            if best is None or key < best[0]:
                best = (key, assignments)
            return makespan, makespan_s(assignments)

        def search(instant: bool) -> None:
            """The beta search of the module's text, on pools of one kind."""
            late_beta, timely_beta = None, None
            beta = 1.0
            # A late schedule is no answer: when the first is late, the first search makes the second, with
            # the overrun's beta, even past its time limit (at 30,000 tasks the limit's share affords one
            # schedule, and at beta 1 it often ends late; the overrun's beta is timely, as a rule).
            tries = 0  # the first search makes at least two tries, unless a plan on time is in hand
            while budget.affords() or (tries < 2 and not instant and not on_time):
                tries += 1
                makespan, planned = schedule(beta, True, instant)
                if makespan <= deadline + 1e-6:
                    timely_beta = beta
                    break
                late_beta = beta
                # The overrun of the plan itself shrinks beta in proportion; a re-run's (spot types: the
                # worst case less the planned makespan) is a length added to it, and is taken off the deadline.
                beta = beta * (deadline - (makespan - planned)) / planned * 0.99
                if beta < MIN_BETA:
                    break
            if timely_beta is not None and late_beta is not None:
                for _ in range(BISECTIONS):
                    if not budget.affords():
                        break
                    middle = (timely_beta + late_beta) / 2
                    if schedule(middle, True, instant)[0] <= deadline + 1e-6:
                        timely_beta = middle
                    else:
                        late_beta = middle
            if timely_beta is not None and budget.affords():  # the best beta, each lease counted in full
                schedule(timely_beta, False, instant)

        try:
            search(instant=False)
            if self.instant_counts and budget.affords():  # again with each count held at every instant: leases by burst
                search(instant=True)
        except OutOfTime:  # only with a plan on time in hand: the best schedule done so far, if any
            pass
        if best is None:
            return None
        return EngineResult(tuple(best[1]), self.name)

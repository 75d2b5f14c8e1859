"""The portfolio: which engines run, in what order, with how much of the time limit.

Engines run from the fastest to the slowest; each gets a share of the time that is
left and the best schedule so far as its warm start, and the best schedule by
:meth:`Problem.rank` wins (within the deadline and budget first, then by score). Under a
deadline, the cheapest-first fleets come first (they may find nothing on time); then the
first engine that applies (deadline-aware list scheduling under a deadline, else list scheduling)
always completes a schedule, so there is always a plan; a later
engine that fails, times out or does not apply only loses its own chance. While no plan meets
the deadline and budget, the fast list schedulers (deadline-aware list scheduling, which places
each task on the cheapest place that keeps it on time, HEFT and PEFT, the fastest makespans) run
to completion even past the time limit: an error that calls a deadline unreachable must not
come from a machine too busy to try. A plan proven
optimal (by CP-SAT or the MILP) ends the run: nothing can beat it. The exact engines' bounds
are pooled: when the best plan (from any engine) is within the tolerance of the best bound any
of them proved, it is optimal too, though no one engine closed the gap alone. So an optimum
proven for a value an earlier engine already reached (the tie keeps the earlier plan) makes
that plan optimal, with the bound and gap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from agora_optimizer.engines.annealing import AnnealingEngine
from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.engines.deadline_list import DeadlineListEngine
from agora_optimizer.engines.exact.cpsat.engine import CpSatEngine
from agora_optimizer.engines.exact.milp.engine import MilpEngine
from agora_optimizer.engines.exact.shared import meets_bound
from agora_optimizer.engines.fleet_prefix import FleetPrefixEngine
from agora_optimizer.engines.heft import HeftEngine
from agora_optimizer.engines.lease_fill import LeaseFillEngine
from agora_optimizer.engines.list_scheduling import ListSchedulingEngine
from agora_optimizer.engines.local_search import LocalSearchEngine
from agora_optimizer.engines.one_type_default import OneTypeDefaultEngine
from agora_optimizer.engines.partition.icpp24 import PartitionEngine
from agora_optimizer.engines.peft import PeftEngine
from agora_optimizer.engines.pool_search import PoolSearchEngine
from agora_optimizer.engines.spot_guard import SpotGuardEngine
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.validate import count_violations

log = logging.getLogger(__name__)
# CP-SAT's size limit, measured on the first n tasks of the bundled workflows (the catalog of
# bench/run_small_exact.py; cost and balanced; 15 s from the heuristics' best): up to 40 tasks it
# proved 6 to 8 of 10 optimal and improved on the heuristics by up to 2.8 %; at 43 to 60 tasks it
# still helped on most but found nothing in 14 s on one (1000genome, 52 tasks, balanced).
CPSAT_MAX_TASKS = 40


@dataclass(frozen=True)
class PortfolioProgress:
    """Where the portfolio is, for a display (the portfolio draws nothing): the engine about to run
    (``""`` once all are done), how many engines are done of those planned, and the best plan so far.

    ``best_score`` is the objective's value (:func:`~agora_optimizer.planning.problem.score`: 1 at the
    problem's bounds) and ``bound_score`` the best lower bound on it: 1, or higher where an exact engine
    proved so.
    """

    engine: str
    done: int
    planned: int
    best_makespan_s: float | None = None
    best_cost_usd: float | None = None
    best_score: float | None = None
    bound_score: float = 1.0
    within_limits: bool = True  # the best plan meets the deadline and budget

    @property
    def gap(self) -> float | None:
        """How far the best plan's value may be above the optimum, as solvers say it: (best - bound) / best."""
        if self.best_score is None or self.best_score <= 0:
            return None
        return max(0.0, (self.best_score - self.bound_score) / self.best_score)


Progress = Callable[[PortfolioProgress], None]
# The method of a plan that is the caller's fallback (the one-type default) because list scheduling's first
# schedule did not fit in the time limit (:func:`run_portfolio`).
TIME_LIMIT_FALLBACK = "one-type-default (time limit)"


@dataclass(frozen=True)
class Stage:
    """An engine and the share of the remaining time it may use."""

    engine: Engine
    share: float
    max_tasks: int | None = None
    objectives: tuple[str, ...] = ("time", "cost", "balanced")
    # A fast list scheduler (a few schedules, in seconds even for 30,000 tasks): while no plan meets
    # the deadline and budget, it runs even past the time limit.
    fast: bool = False
    # It completes its first schedule whatever its time limit (list scheduling, deadline-aware list
    # scheduling), so it needs no longer limit for one; an engine that gives up at its limit (HEFT,
    # PEFT) gets one long enough for a whole schedule.
    completes_one: bool = False


@dataclass
class Outcome:
    """Every engine's result, and the best one."""

    best: EngineResult
    results: dict[str, EngineResult] = field(default_factory=dict)
    evaluated: dict[str, tuple[float, float]] = field(default_factory=dict)  # engine -> (makespan, cost)


def default_stages() -> list[Stage]:
    return [
        # Under a deadline only: the shortest cheapest-first fleet that keeps it (a bisection of list schedules;
        # on few machines per type, the cheapest plan of all: engines/fleet_prefix.py).
        Stage(FleetPrefixEngine(), share=0.3, objectives=("cost", "balanced")),
        # Under a deadline it is the cheapest fast plan on many machines per type, and it always completes;
        # without one it returns at once.
        Stage(DeadlineListEngine(), share=0.3, objectives=("cost", "balanced"), fast=True, completes_one=True),
        Stage(ListSchedulingEngine(), share=0.25, fast=True, completes_one=True),
        Stage(HeftEngine(), share=0.3, fast=True),
        Stage(PeftEngine(), share=0.3, fast=True),
        # Spot types and a deadline only: the best plan so far with the spot machines whose re-runs would
        # break the deadline moved onto on-demand capacity.
        Stage(SpotGuardEngine(), share=0.3, fast=True, completes_one=True),
        # The best plan so far made cheaper: work moved into leases already paid for, onto cheaper machines,
        # leases left empty dropped (engines/lease_fill.py). Here, before the slower stages, so that it runs
        # at 30,000 tasks too, where they use what is left of the time limit; again after pool search.
        # What it gains at scale: docs/results.md, cost under a real deadline.
        Stage(LeaseFillEngine(), share=0.3),
        Stage(PartitionEngine(), share=0.3, objectives=("time",)),
        Stage(OneTypeDefaultEngine(), share=0.05),
        Stage(PoolSearchEngine(), share=0.5, max_tasks=20_000),
        Stage(LeaseFillEngine(), share=0.3, max_tasks=20_000),  # on pool search's plan, where it wins
        Stage(CpSatEngine(), share=0.6, max_tasks=CPSAT_MAX_TASKS),
        Stage(MilpEngine(), share=0.6, max_tasks=40),
        Stage(LocalSearchEngine(), share=0.5, max_tasks=3000),
        # The moves that need a worse step first (several tasks off a dear type at once), where a few re-timings fit
        # in the time left (a step takes seconds at 30,000 tasks: up to 20,000, as pool search); then lease filling
        # on its plan.
        Stage(AnnealingEngine(), share=0.8, max_tasks=20_000),
        Stage(LeaseFillEngine(), share=1.0, max_tasks=20_000),
    ]


def run_portfolio(
    problem: Problem,
    time_limit_s: float,
    stages: list[Stage] | None = None,
    progress: Progress | None = None,
    *,
    fallback: EngineResult | None = None,
) -> Outcome:
    """Run the stages within ``time_limit_s``.

    ``fallback``: a schedule already made (the one-type default, which the command line computes
    before the engines; its method :data:`TIME_LIMIT_FALLBACK`). When it meets the deadline and
    budget, list scheduling's first schedule, the first one run, keeps the time limit too: given up
    when the limit passes, the fallback is the plan (a 30,000-task schedule takes seconds, and the
    limit is the command's). Without one, or when it misses the limits, the first schedule is
    completed whatever it takes (a plan beats an error).
    """
    stages = [
        s
        for s in (stages or default_stages())
        if (s.max_tasks is None or len(problem.workflow.tasks) <= s.max_tasks)
        and problem.objective.kind in s.objectives
    ]
    if not problem.workflow.tasks:  # nothing to place: no plan is faster or cheaper, and every limit is met
        empty = EngineResult((), "empty-workflow", status="optimal", gap=0.0, bound=0.0)
        return Outcome(best=empty, results={empty.method: empty}, evaluated={empty.method: (0.0, 0.0)})
    deadline = time.perf_counter() + time_limit_s
    if fallback is not None and not _usable_fallback(problem, fallback):
        fallback = None
    best: EngineResult | None = None
    best_key: tuple[float, float, float] | None = None
    best_values: tuple[float, float] | None = None  # the best plan's (makespan, cost)
    outcome_results: dict[str, EngineResult] = {}
    evaluated: dict[str, tuple[float, float]] = {}
    one_schedule_s = 0.0  # how long the first engine's one schedule took, when it outran its share
    best_bound: float | None = None  # the best lower bound on the score that an exact engine proved

    def report(engine: str, done: int) -> None:  # the best plan so far, to the caller's display
        if progress is None:
            return
        makespan, cost = (None, None) if best_values is None else best_values
        score = None if best_key is None else best_key[1]
        within = best_key is None or best_key[0] == 0
        progress(
            PortfolioProgress(engine, done, len(stages), makespan, cost, score, max(1.0, best_bound or 1.0), within)
        )

    for done, stage in enumerate(stages):
        report(stage.engine.name, done)
        remaining = deadline - time.perf_counter()
        within_limits = best_key is not None and best_key[0] == 0  # rank() leads with the excess over the limits
        # A plan over the deadline or budget is no answer: until one meets them, the fast list
        # schedulers (the first stages) run even past the time limit, for a plan beats an error.
        if best is not None and remaining <= 0 and (within_limits or not stage.fast):
            break
        # Each engine gets its share; the first one always completes a schedule even past it. When
        # that one schedule outran the first share, a later engine (most build whole schedules too)
        # starts only if its share is at least as long, or, one that completes its first schedule
        # anyway (list scheduling), if the time left is.
        budget = max(remaining * stage.share, 0.01)
        rescue = best is not None and not within_limits and stage.fast  # it runs: a plan beats an error
        if rescue and not stage.completes_one:
            # One whole schedule of a fast engine that would give up at its limit; one that completes
            # its first schedule anyway keeps its share, lest it sweep on far past the time limit.
            budget = max(budget, 1.0 + 2 * one_schedule_s)
        elif best is not None and not rescue and (remaining if stage.completes_one else budget) < one_schedule_s:
            continue  # one schedule would not fit: in the time left (one that completes one anyway), in its share
        started = time.perf_counter()
        engine = stage.engine
        result: EngineResult | None
        try:
            if fallback is not None and best is None and isinstance(engine, ListSchedulingEngine):
                result = engine.solve(problem, budget, warm_start=best, stop_at_s=deadline) or fallback
            else:
                result = engine.solve(problem, budget, warm_start=best)
        except Exception:  # an engine's bug must not cost the user the plan found so far
            if best is None:
                raise
            log.exception("engine %s failed; keeping the best plan so far", stage.engine.name)
            continue
        if best is None and time.perf_counter() - started > budget:
            one_schedule_s = time.perf_counter() - started
        if result is None:
            continue
        early = problem.early_starts(result.assignments)
        if early:  # an engine's bug: the checker cannot see releases, so it would pass unnoticed
            log.error(
                "engine %s started task '%s' before its type's release; result dropped",
                stage.engine.name,
                early[0].task,
            )
            continue
        over = count_violations(result.assignments, problem.catalog)
        if over:  # an engine's bug, as above: no plan may lease more machines of a type at once than its count
            log.error("engine %s: %s; result dropped", stage.engine.name, over[0].message)
            continue
        name = result.method if result is fallback else stage.engine.name
        outcome_results[name] = result
        makespan, cost = problem.evaluate(result.assignments)
        evaluated[name] = (makespan, cost)
        key = problem.rank(makespan, cost)
        if best is None or best_key is None or key < best_key:
            best, best_key, best_values = result, key, (makespan, cost)
        proven = result.bound
        if proven is None and result.status == "optimal" and key[0] == 0:
            proven = key[1]  # an optimum that states no bound: its own value is one (rank() = excess, score)
        if proven is not None:
            best_bound = proven if best_bound is None else max(best_bound, proven)
        # The pooled bound before any stop: an optimum an engine proves for a value an earlier
        # engine already reached (a tie keeps the earlier plan) makes that plan optimal too.
        if best_key[0] == 0 and best_bound is not None and best.status != "optimal":
            value = best_key[1]
            if meets_bound(value, best_bound):
                gap = max(0.0, (value - best_bound) / value) if value > 0 else 0.0
                best = replace(best, status="optimal", gap=gap, bound=best_bound)
                log.info("the best plan (%s) meets the best proven bound: optimal", best.method)
        if best.status == "optimal":
            break  # a proven optimum: no later engine can do better
    report("", len(stages))
    assert best is not None  # list scheduling always returns a schedule
    return Outcome(best=best, results=outcome_results, evaluated=evaluated)


def _usable_fallback(problem: Problem, fallback: EngineResult) -> bool:
    """Whether ``fallback`` may stand for the plan: on the problem's types, within its deadline and budget."""
    if any(a.resource not in problem.catalog.by_name for a in fallback.assignments):
        return False  # e.g. on a GPU type the problem's catalog left out
    return problem.excess(*problem.evaluate(fallback.assignments)) == 0

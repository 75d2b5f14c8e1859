"""What both exact engines share: when they apply, type pruning, the caps on makespan and cost that some
optimal plan respects, heads and tails, each type's machine slots, warm starts, validity, proven
infeasibility, and the answer read off a solver's best schedule and bound. The MILP
(:mod:`agora_optimizer.engines.exact.milp`) works in seconds, CP-SAT
(:mod:`agora_optimizer.engines.exact.cpsat`) in ticks: what is shared here is written for both.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from agora_optimizer.engines.base import EngineResult
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.plan import Assignment, Plan, SolverInfo, SolverStatus
from agora_optimizer.model.workflow import Task
from agora_optimizer.planning.list_schedule import list_schedule
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.time_budget import TimeBudget
from agora_optimizer.planning.validate import validate_plan

OPTIMALITY_TOLERANCE = 1e-6  # relative: a schedule's value against a solver's proven bound
CLAIM_TOLERANCE = 1e-7  # relative room on the caps a warm start allows (its own value stays inside)
Number = TypeVar("Number", int, float)


@dataclass(frozen=True)
class Caps:
    """Upper bounds, in seconds and USD, that every plan at least as good as the warm start respects."""

    makespan_s: float
    cost_usd: float


def fits_count(resource: Resource, machines: int) -> bool:
    return resource.count is None or resource.count >= machines


def billing_no_worse(better: Resource, worse: Resource) -> bool:
    ratio = worse.billing.granularity_s / better.billing.granularity_s
    divides = round(ratio) >= 1 and abs(ratio - round(ratio)) <= 1e-9 * ratio
    return divides and better.billing.minimum_s <= worse.billing.minimum_s


def dominates(better: Resource, worse: Resource, fitting: int, price_matters: bool) -> bool:
    """Whether every machine of ``worse`` can become a new machine of ``better`` at no loss.

    ``fitting`` is the number of tasks that fit on ``better``: its count must allow as many
    machines. Equal types dominate each other; :func:`prune_types` breaks such ties.
    """
    weakly = (
        better.vcpus >= worse.vcpus
        and better.memory_bytes >= worse.memory_bytes
        and better.speed >= worse.speed
        and better.boot_s <= worse.boot_s
        and better.earliest_start_s <= worse.earliest_start_s
        and fits_count(better, fitting)
    )
    if not weakly or not price_matters:
        return weakly
    return better.price_per_hour_usd <= worse.price_per_hour_usd and billing_no_worse(better, worse)


def prune_types(problem: Problem) -> tuple[list[Resource], dict[str, Resource]]:
    """The types kept (used by some task, dominated by none), and a kept replacement for each other one."""
    tasks = problem.workflow.tasks
    price_matters = not cost_is_free(problem)
    used = [r for r in problem.catalog.resources if any(r.fits(t) for t in tasks)]
    fitting = {r.name: sum(r.fits(t) for t in tasks) for r in used}
    position = {r.name: n for n, r in enumerate(used)}

    def beats(a: Resource, b: Resource) -> bool:
        if a.name == b.name or not dominates(a, b, fitting[a.name], price_matters):
            return False
        return not dominates(b, a, fitting[b.name], price_matters) or position[a.name] < position[b.name]

    kept = [r for r in used if not any(beats(other, r) for other in used)]
    replacement = {r.name: next(k for k in kept if beats(k, r)) for r in used if r not in kept}
    return kept, replacement


def real_horizon_s(problem: Problem, kinds: Sequence[Resource]) -> float:
    """Some optimal plan ends by the last release plus sum_i (max boot + max duration + max outgoing transfer):
    idle instants after the last release cut out."""
    catalog = problem.catalog
    total = max([0.0, *(r.release_s for r in kinds), *(t.release_s for t in problem.workflow.tasks)])
    for task in problem.workflow.tasks:
        fits = [r for r in kinds if r.fits(task)]
        transfers = [catalog.transfer_s(e.bytes) for e in problem.workflow.children[task.id]]
        total += max(r.boot_s for r in fits) + max(r.runtime_s(task) for r in fits) + max(transfers, default=0.0)
    return total


def caps(problem: Problem, kinds: Sequence[Resource], warm: Sequence[Assignment] | None) -> Caps:
    objective, bounds = problem.objective, problem.bounds
    makespan = real_horizon_s(problem, kinds)
    if objective.deadline_s is not None:
        makespan = min(makespan, objective.deadline_s + 1e-6)  # the limit's own tolerance
    cost = math.inf if objective.budget_usd is None else objective.budget_usd * (1 + 1e-9)
    if not warm:
        return Caps(makespan, cost)
    warm_makespan, warm_cost = problem.evaluate(warm)
    value, alpha = problem.score(warm)[0], objective.alpha
    if objective.kind == "time":
        makespan = min(makespan, warm_makespan)
    elif objective.kind == "cost":
        cost = min(cost, warm_cost)
    else:  # value >= alpha T / T_lb + (1 - alpha) C / C_lb with T >= T_lb and C >= C_lb
        if alpha > 0:
            makespan = min(makespan, (value - (1 - alpha)) * max(bounds.makespan_s, 1e-9) / alpha)
        if alpha < 1:
            cost = min(cost, (value - alpha) * max(bounds.cost_usd, 1e-12) / (1 - alpha))
    return Caps(makespan * (1 + CLAIM_TOLERANCE) + 1e-6, cost * (1 + CLAIM_TOLERANCE) + 1e-12)


def indexed_tasks(
    problem: Problem, kinds: Sequence[Resource]
) -> tuple[tuple[Task, ...], dict[str, int], tuple[tuple[int, ...], ...], dict[tuple[int, int], int]]:
    """The tasks in topological order, their indexes by id, the kept types each fits (indexes into
    ``kinds``), and each (task, type)'s rank among the tasks that fit that type."""
    workflow = problem.workflow
    tasks = tuple(workflow.by_id[t] for t in workflow.topological_order)
    index = {t.id: n for n, t in enumerate(tasks)}
    options = tuple(tuple(k for k, r in enumerate(kinds) if r.fits(t)) for t in tasks)
    rank = {}
    for k in range(len(kinds)):
        for r, i in enumerate(i for i in range(len(tasks)) if k in options[i]):
            rank[i, k] = r
    return tasks, index, options, rank


def head_tail(
    earliest: Sequence[Number], shortest: Sequence[Number], parents: dict[int, list[int]]
) -> tuple[list[Number], list[Number]]:
    """Each task's head (earliest start: its own ``earliest``, after every parent's head plus shortest
    run) and tail (shortest time from its start to the workflow's end), tasks in topological order."""
    n = len(shortest)
    head = list(earliest)
    for i in range(n):
        for p in parents[i]:
            head[i] = max(head[i], head[p] + shortest[p])
    children: dict[int, list[int]] = defaultdict(list)
    for c in range(n):
        for p in parents[c]:
            children[p].append(c)
    tail = list(shortest)
    for i in reversed(range(n)):
        for c in children[i]:
            tail[i] = max(tail[i], shortest[i] + tail[c])
    return head, tail


def ancestor_sets(parents: Mapping[int, Sequence[int]], n: int) -> tuple[frozenset[int], ...]:
    """Each of the ``n`` tasks' ancestors, tasks in topological order (``parents``: each task's parents)."""
    ancestors: list[frozenset[int]] = []
    for i in range(n):
        ancestors.append(frozenset().union(*(ancestors[p] | {p} for p in parents.get(i, ()))))
    return tuple(ancestors)


def chain_cover(ancestors: Sequence[Collection[int]], weight: Sequence[float]) -> tuple[tuple[int, ...], ...]:
    """Chains of mutually dependent tasks (so never running at once) covering the tasks, heaviest first: the
    heaviest path by ``weight`` among the tasks left, taken greedily; only those of more than one task."""
    left, chains = set(range(len(weight))), []
    while left:
        best: dict[int, tuple[float, tuple[int, ...]]] = {}
        for i in sorted(left):  # topological order
            before = [best[j] for j in best if j in ancestors[i]]
            length, path = max(before, default=(0, ()))
            best[i] = (length + weight[i], (*path, i))
        chain = max(best.values())[1]
        chains.append(chain)
        left -= set(chain)
    return tuple(c for c in chains if len(c) > 1)


def colour_lanes(
    on_slot: Mapping[tuple[int, int], Sequence[int]],
    lanes: Sequence[int],
    cores: Sequence[int],
    rank: Mapping[tuple[int, int], int],
    start: Sequence[Number],
    end: Sequence[Number],
    eps: float = 0.0,
) -> dict[int, frozenset[int]] | None:
    """Each task's lanes on its slot ``(k, m)``: greedy in start order (exact for intervals: it finds
    free lanes whenever the cores in use never exceed ``lanes[k]``), then renumbered by each lane's
    lowest-ranked task (the models' symmetry breaking). None when a slot's tasks need more at once."""
    result: dict[int, frozenset[int]] = {}
    for (k, _), items in on_slot.items():
        free_at = [-math.inf] * lanes[k]
        taken: dict[int, list[int]] = {}
        for i in sorted(set(items), key=lambda i: (start[i], i)):
            free = [lane for lane, t in enumerate(free_at) if t <= start[i] + eps][: cores[i]]
            if len(free) < cores[i]:
                return None
            for lane in free:
                free_at[lane] = end[i]
            taken[i] = free
        lowest: dict[int, int] = {}
        for i, used in taken.items():
            for lane in used:
                lowest[lane] = min(lowest.get(lane, len(cores)), rank[i, k])
        renumber = {lane: n for n, lane in enumerate(sorted(lowest, key=lambda lane: (lowest[lane], lane)))}
        result.update({i: frozenset(renumber[lane] for lane in used) for i, used in taken.items()})
    return result


def cost_is_free(problem: Problem) -> bool:
    """Whether the objective is time with no budget: then what a plan costs matters nowhere."""
    return problem.objective.kind == "time" and problem.objective.budget_usd is None


def slot_count(problem: Problem, resource: Resource, tasks: Sequence[Task], cost_cap_usd: float) -> int:
    """S_k, the machine slots of ``resource`` a model holds: no more than the tasks that fit it, nor than
    the cost cap pays for at its cheapest lease (at least one); when cost is free, no more than its
    ``count`` either (machines whose leases never overlap merge into one id, which only lengthens leases,
    whose cost does not matter then)."""
    fitting = [t for t in tasks if resource.fits(t)]
    slots = len(fitting)
    cheapest = resource.lease_cost_usd(resource.boot_s + min(resource.runtime_s(t) for t in fitting))
    if math.isfinite(cost_cap_usd) and cheapest > 0:
        slots = max(1, min(slots, math.floor(cost_cap_usd / cheapest + 1e-9)))
    if resource.count is not None and cost_is_free(problem):
        slots = min(slots, resource.count)
    return slots


def is_valid(problem: Problem, assignments: Sequence[Assignment]) -> bool:
    """Whether a schedule covers every task once, passes the checker, respects the releases and meets the limits."""
    tasks = [a.task for a in assignments]
    if len(tasks) != len(problem.workflow.tasks) or set(tasks) != set(problem.workflow.by_id):
        return False
    makespan, cost = problem.evaluate(assignments)
    plan = Plan(
        workflow=problem.workflow.name,
        catalog=problem.catalog.source,
        objective=problem.objective,
        makespan_s=makespan,
        cost_usd=cost,
        assignments=tuple(assignments),
        solver=SolverInfo(method="exact", status="feasible", gap=None, wall_s=0.0),
        created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    if validate_plan(plan, problem.workflow, problem.catalog) or problem.early_starts(assignments):
        return False
    return problem.meets_limits(assignments)


def warm_candidates(problem: Problem, given: EngineResult | None) -> Iterable[Sequence[Assignment]]:
    if given is not None:
        yield given.assignments
    objective, bounds = problem.objective, problem.bounds
    own = {"time": 1.0, "cost": 0.0, "balanced": objective.alpha}[objective.kind]
    for alpha in dict.fromkeys((own, 1.0, 0.5, 0.0)):
        yield list_schedule(problem.workflow, problem.catalog, alpha, bounds.makespan_s, bounds.cost_usd)


def best_warm_start(
    problem: Problem, given: EngineResult | None, deadline: TimeBudget | None = None
) -> list[Assignment] | None:
    """The best valid schedule within the limits among ``given`` and a few list schedules.

    Past ``deadline`` no more list schedules are tried once there is a valid one.
    """
    best: tuple[tuple[float, float], list[Assignment]] | None = None
    for candidate in warm_candidates(problem, given):
        items = list(candidate)
        if is_valid(problem, items) and (best is None or problem.score(items) < best[0]):
            best = (problem.score(items), items)
        if best is not None and deadline is not None and deadline.expired():
            break
    return None if best is None else best[1]


def proven_infeasible(problem: Problem) -> bool:
    """Whether the lower bounds already show that no plan meets the deadline or the budget."""
    objective, bounds = problem.objective, problem.bounds
    if objective.deadline_s is not None and objective.deadline_s < bounds.makespan_s - 1e-6:
        return True
    return objective.budget_usd is not None and objective.budget_usd < bounds.cost_usd * (1 - 1e-9)


def applies(problem: Problem, max_tasks: int, time_limit_s: float) -> bool:
    """Whether an exact engine takes ``problem`` on: no task needs GPUs (the models pack cores and memory
    only, so a plan of them could over-subscribe a machine's GPUs), no spot type (the models know no
    interruptions: their optimum and bound would be of the wrong cost), at most ``max_tasks`` tasks, some
    time to spend, and no deadline or budget the lower bounds already prove out of reach."""
    return not (
        problem.workflow.uses_gpus
        or problem.catalog.has_spot
        or len(problem.workflow.tasks) > max_tasks
        or time_limit_s <= 0
        or proven_infeasible(problem)
    )


def meets_bound(value: float, bound: float) -> bool:
    """Whether a plan's score ``value`` is within :data:`OPTIMALITY_TOLERANCE` of a proven lower ``bound``."""
    return value <= bound + OPTIMALITY_TOLERANCE * max(1.0, abs(bound))


def exact_result(problem: Problem, best: Sequence[Assignment], bound: float | None, method: str) -> EngineResult:
    """An exact engine's answer: ``best`` in start order, "optimal" when its score meets the solver's proven
    lower ``bound`` (:func:`meets_bound`), else "feasible" with its relative gap to the bound."""
    value = problem.score(best)[0]
    status: SolverStatus = "optimal" if bound is not None and meets_bound(value, bound) else "feasible"
    gap = None if bound is None or value <= 0 else max(0.0, (value - bound) / value)
    return EngineResult(
        assignments=tuple(sorted(best, key=lambda a: (a.start_s, a.task))),
        method=method,
        status=status,
        gap=gap,
        bound=bound,
    )

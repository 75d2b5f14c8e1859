"""The elastic per-task lease, a benchmark peer: every task on a new machine of the type best for it alone.

What a serverless or per-job batch deployment does (one container or job per task, sized for it):
each task gets its own lease, of the type that is best for that task by itself under the objective
(time: the one that runs it soonest; cost: the one whose lease of it costs least, billing and boot
included; balanced: the mix of the two, each over the task's own best), and starts as soon as its
inputs have arrived (every parent is on another machine, so every edge pays its transfer) and a
machine of the type is free: a type with a ``count`` never has more than ``count`` machines leased
at once, a lease running from its task's start minus ``boot_s`` to its end. Tasks are placed in
topological order. No machine is shared, so there is no packing, no shared boot and no idle time.
"""

from __future__ import annotations

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Task
from agora_optimizer.planning.problem import Problem

_EPSILON_S = 1e-9


def own_best_type(problem: Problem, task: Task) -> Resource:
    """The type best for ``task`` alone under the problem's objective (the earlier in the catalog on a tie)."""
    options = problem.options[task.id]

    def time_s(r: Resource) -> float:
        return r.boot_s + r.runtime_s(task)

    def cost(r: Resource) -> float:
        return r.lease_cost_usd(time_s(r))

    kind = problem.objective.kind
    if kind == "time":
        return min(options, key=time_s)
    if kind == "cost":
        return min(options, key=lambda r: (cost(r), time_s(r)))
    fastest, cheapest = min(map(time_s, options)), min(map(cost, options))
    alpha = problem.objective.alpha
    return min(
        options,
        key=lambda r: alpha * time_s(r) / max(fastest, 1e-9) + (1 - alpha) * cost(r) / max(cheapest, 1e-12),
    )


def first_free_start(
    leased: list[tuple[float, float]], count: int | None, ready: float, boot: float, run: float
) -> float:
    """The earliest start from ``ready`` on at which a new lease ``[start - boot, start + run)`` keeps at most
    ``count`` leases of the type at once (``leased``: the type's leases so far)."""
    if count is None:
        return ready
    for start in sorted({ready, *(end + boot for _, end in leased if end + boot > ready)}):
        lo, hi = start - boot, start + run
        # a lease that ends as this one begins does not overlap it: (end + boot) - boot may fall an ulp short
        overlapping = [(s, e) for s, e in leased if s < hi - _EPSILON_S and e > lo + _EPSILON_S]
        # at most count - 1 at any instant of the new lease: check at each overlapping lease's start
        points = [lo, *(s for s, _ in overlapping if s > lo)]
        if all(sum(s <= p < e for s, e in overlapping) < count for p in points):
            return start
    raise AssertionError("unreachable: past every lease's end a machine is free")


def elastic_assignments(problem: Problem) -> list[Assignment]:
    workflow, catalog = problem.workflow, problem.catalog
    ends: dict[str, float] = {}
    leased: dict[str, list[tuple[float, float]]] = {r.name: [] for r in catalog.resources}
    assignments = []
    for task_id in workflow.topological_order:
        task = workflow.by_id[task_id]
        resource = own_best_type(problem, task)
        inputs = max((ends[e.parent] + catalog.transfer_s(e.bytes) for e in workflow.parents[task_id]), default=0.0)
        ready = max(inputs, resource.earliest_start_of(task))
        run = resource.runtime_s(task)
        start = first_free_start(leased[resource.name], resource.count, ready, resource.boot_s, run)
        number = len(leased[resource.name])
        leased[resource.name].append((start - resource.boot_s, start + run))
        ends[task_id] = start + run
        assignments.append(
            Assignment(
                task_id,
                resource.name,
                f"{resource.name}#{number}",
                start,
                start + run,
                task.cores,
                task.memory_bytes,
                task.gpus,
            )
        )
    return assignments


class ElasticLeaseEngine(Engine):
    """Every task on its own new machine of its own best type (a baseline; not in the portfolio)."""

    name = "elastic-lease"

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        return EngineResult(tuple(elastic_assignments(problem)), self.name)

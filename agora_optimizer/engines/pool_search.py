"""Pool search: choose which machines to lease (type and number), then list-schedule onto them.

This is the configuration half of AGORA's co-optimization (Lin et al., arXiv 2202.05711),
done over machine pools: a pool gives each resource type a number of machines (at most
its ``count``); the list scheduler places the tasks on the pool; the pool's plan is scored
by the objective and its limits. The search starts from every single-type pool that can
run every task, at a geometric series of sizes, then improves the best pool by adding or
removing one machine of any type (first improvement) until the time limit or a local
optimum. It is where the cost objective gains most over per-task greedy placement: a few
well-filled machines pay less boot time, fewer billing minimums and less idle time.
"""

from __future__ import annotations

from dataclasses import replace

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.planning.list_schedule import list_schedule
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.slots import widest_level
from agora_optimizer.planning.time_budget import TimeBudget

Pool = tuple[tuple[str, int], ...]  # (type name, machines), sorted by name, counts > 0


def pool_catalog(catalog: Catalog, pool: Pool) -> Catalog:
    sizes = dict(pool)
    return catalog.part(tuple(replace(r, count=sizes[r.name]) for r in catalog.resources if r.name in sizes))


def _sizes(limit: int) -> list[int]:
    sizes, size = [], 1
    while size < limit:
        sizes.append(size)
        size = max(size + 1, round(size * 1.6))
    return [*sizes, limit]


class PoolSearchEngine(Engine):
    name = "pool-search"

    def __init__(self, alphas: tuple[float, ...] = (1.0, 0.0)) -> None:
        self.alphas = alphas

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        search = _Search(problem, self.alphas, TimeBudget(time_limit_s))
        for pool in self._starting_pools(problem):
            if search.expired():
                break
            search.try_pool(pool)
        search.improve()
        if search.best is None:
            return None
        return EngineResult(tuple(search.best[2]), self.name)

    def _starting_pools(self, problem: Problem) -> list[Pool]:
        tasks = problem.workflow.tasks
        width = widest_level(problem.workflow, by_cores=True)  # most cores that can run at once
        pools: list[Pool] = []
        covering = [r for r in problem.catalog.resources if all(r.fits(t) for t in tasks)]
        # No single type runs every task: the cheapest type for the tasks that fit the fewest types
        # joins each pool with one machine.
        anchor: list[Resource] = []
        if not covering:
            hardest = min(tasks, key=lambda t: len(problem.options[t.id]))
            anchor = [min(problem.options[hardest.id], key=lambda r: r.price_per_hour_usd)]
            covering = [r for r in problem.catalog.resources if r.name != anchor[0].name]
        for resource in sorted(covering, key=lambda r: r.price_per_hour_usd / r.vcpus / r.speed):
            limit = min(resource.count or width, max(1, -(-width // max(1, resource.vcpus // 1))))
            for size in _sizes(max(1, limit)):
                entries = {resource.name: size, **{a.name: 1 for a in anchor}}
                pools.append(tuple(sorted(entries.items())))
        return pools


class _Search:
    """The pools tried so far and the best schedule among them."""

    def __init__(self, problem: Problem, alphas: tuple[float, ...], budget: TimeBudget) -> None:
        self.problem = problem
        self.alphas = alphas
        self.budget = budget
        self.seen: set[Pool] = set()
        self.best: tuple[tuple[float, float, float], Pool, list[Assignment]] | None = None

    def expired(self) -> bool:
        """Out of time for one more schedule (the first one is always built)."""
        return self.best is not None and not self.budget.affords()

    def try_pool(self, pool: Pool) -> bool:
        """Schedule onto ``pool``; True when it became the best."""
        if pool in self.seen or not pool:
            return False
        self.seen.add(pool)
        catalog = pool_catalog(self.problem.catalog, pool)
        if any(not catalog.feasible(t) for t in self.problem.workflow.tasks):
            return False
        improved = False
        for alpha in self.alphas:
            if self.expired():
                break
            with self.budget:
                assignments = list_schedule(
                    self.problem.workflow, catalog, alpha, self.problem.bounds.makespan_s, self.problem.bounds.cost_usd
                )
            key = self.problem.rank(*self.problem.evaluate(assignments))
            if self.best is None or key < self.best[0]:
                self.best = (key, pool, assignments)
                improved = True
        return improved

    def improve(self) -> None:
        """Add or remove one machine of any type while that improves the best pool."""
        improved = True
        while improved and self.best is not None and not self.expired():
            improved = False
            sizes = dict(self.best[1])
            for resource in self.problem.catalog.resources:
                if self.expired():
                    return
                current = sizes.get(resource.name, 0)
                for step in (-1, 1):
                    size = current + step
                    if size < 0 or (resource.count is not None and size > resource.count):
                        continue
                    candidate = {**sizes, resource.name: size}
                    pool = tuple(sorted((n, c) for n, c in candidate.items() if c > 0))
                    if self.try_pool(pool):
                        improved = True
                        break
                if improved:
                    break

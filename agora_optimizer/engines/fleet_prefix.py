"""Cheapest-first fleets: under a deadline, the fewest machines, cheapest work first, that keep it.

The catalog's machines are lined up by the price of a unit of work on them (price per hour over
speed, times the share of a machine the workflow's tasks hold there: cores or, on a memory-tight
type, memory), each type's ``count`` of machines in turn (a type without a count: as many
as the workflow's widest level could fill). A *fleet* is a prefix of that line. The list
scheduler, for time alone, places the workflow on a fleet; a longer fleet ends sooner (mostly)
and leases dearer work. So a search over the prefix's length (up from the shortest possible fleet, scaled
by how late each fleet ends, then bisecting) finds the shortest fleet that
keeps the deadline, and that fleet's plan spends the deadline's slack on cheap machines kept
busy, where the cost-weighted list schedulers spread work over every type and idle them.

Measured on a 10,000-task cycles workflow on ``catalogs/aws-small-quota.yaml`` (eight types, four
machines each) under 1.5 x the time plan's makespan: the time plan cost 3.25 USD on 32 machines;
the 20 cheapest machines kept the deadline at 2.99 USD, at the cost lower bound (2.98).

The search starts where the fleet could finish the work at all: the sum over tasks of cores x
runtime, over the fleet's vCPUs x speed, is a lower bound on any makespan on it (and so is the same
sum of memory x runtime over its memory x speed), so a fleet whose
bound is past the deadline is skipped unscheduled; so is one that cannot run some task (memory,
cores, GPUs). After the search, the fleets just longer than the one found are tried while the
time limit allows (for a balanced objective, which may prefer a faster plan). Without a deadline
the engine does not apply (pool search covers fleets for cost alone). The best plan by
:meth:`Problem.rank` wins.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.engines.list_scheduling import machines_per_type
from agora_optimizer.engines.pool_search import Pool, pool_catalog
from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Task
from agora_optimizer.planning.list_schedule import list_schedule
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.slots import widest_level
from agora_optimizer.planning.time_budget import OutOfTime, TimeBudget

LONGER_FLEETS = 2  # after the search: how many fleets one machine longer each are tried, time allowing


def unit_price(resource: Resource, demand: Mapping[tuple[int, int, int], float]) -> float:
    """What a second of reference work costs on ``resource``: its price over its speed, times the share of a
    machine the workflow's tasks hold there (the largest of their cores, memory and GPUs over the type's),
    averaged over the tasks that fit, weighted by runtime; infinite when none fits. ``demand``: runtime per
    (cores, memory bytes, GPUs)."""
    held = weight = 0.0
    for (cores, memory_bytes, gpus), runtime_s in demand.items():
        if cores <= resource.vcpus and memory_bytes <= resource.memory_bytes and gpus <= resource.gpus:
            share = max(cores / resource.vcpus, memory_bytes / resource.memory_bytes, gpus / max(resource.gpus, 1))
            held += runtime_s * share
            weight += runtime_s
    return math.inf if weight <= 0 else resource.price_per_hour_usd / resource.speed * held / weight


def machine_line(catalog: Catalog, tasks: Iterable[Task], unlimited: int) -> list[str]:
    """The catalog's machines, cheapest work first (:func:`unit_price`): one type name per machine
    (``unlimited`` machines of a type without a count)."""
    demand: dict[tuple[int, int, int], float] = defaultdict(float)
    for task in tasks:
        demand[task.cores, task.memory_bytes, task.gpus] += max(task.runtime_s, 1e-9)
    ordered = sorted(catalog.resources, key=lambda r: (unit_price(r, demand), r.name))
    return [r.name for r in ordered for _ in range(r.count if r.count is not None else unlimited)]


def fleet(line: list[str], length: int) -> Pool:
    return tuple(sorted(Counter(line[:length]).items()))


class FleetPrefixEngine(Engine):
    name = "fleet-prefix"

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        deadline_s = problem.objective.deadline_s
        if deadline_s is None or not problem.workflow.tasks:
            return None
        search = _Search(problem, TimeBudget(time_limit_s))
        found = search.shortest_on_time(deadline_s)
        if found is not None:
            for length in range(found + 1, min(found + LONGER_FLEETS, len(search.line)) + 1):
                if search.out_of_time or not search.budget.affords():
                    break
                search.schedule(length)
        if search.best is None:
            return None
        return EngineResult(tuple(search.best[1]), self.name)


class _Search:
    """The fleets scheduled so far, and the best plan among them."""

    def __init__(self, problem: Problem, budget: TimeBudget) -> None:
        self.problem = problem
        self.budget = budget
        workflow = problem.workflow
        width = widest_level(workflow, by_cores=True)
        self.line = machine_line(problem.catalog, workflow.tasks, width)
        self.core_work = sum(t.cores * t.runtime_s for t in workflow.tasks)  # core-seconds at speed 1
        self.memory_work = sum(t.memory_bytes * t.runtime_s for t in workflow.tasks)  # byte-seconds at speed 1
        self.best: tuple[tuple[float, float, float], list[Assignment]] | None = None
        self.makespans: dict[int, float] = {}
        self.out_of_time = False

    def shortest_possible(self, deadline_s: float) -> int | None:
        """The shortest fleet that can run every task and whose capacity could do the work by the deadline."""
        by_name = {r.name: r for r in self.problem.catalog.resources}
        first: dict[str, int] = {}  # type -> the length of the shortest fleet that has one of its machines
        for length, name in enumerate(self.line, start=1):
            first.setdefault(name, length)
        covering = max(
            min((first.get(r.name, len(self.line) + 1) for r in options), default=len(self.line) + 1)
            for options in self.problem.options.values()
        )
        cores = memory = 0.0  # the fleet's work per second, at speed 1: in cores, and in memory held
        for length, name in enumerate(self.line, start=1):
            cores += by_name[name].vcpus * by_name[name].speed
            memory += by_name[name].memory_bytes * by_name[name].speed
            if length >= covering and max(self.core_work / cores, self.memory_work / memory) <= deadline_s:
                return length
        return None

    def schedule(self, length: int) -> float:
        """The makespan of the list schedule (time alone) on the first ``length`` machines; infinite when the
        time limit passed before it was done (it is given up: the limit is kept even by the first one)."""
        if length in self.makespans:
            return self.makespans[length]
        catalog = pool_catalog(self.problem.catalog, fleet(self.line, length))
        try:
            with self.budget:
                assignments = list_schedule(
                    self.problem.workflow,
                    catalog,
                    1.0,
                    self.problem.bounds.makespan_s,
                    self.problem.bounds.cost_usd,
                    machines_per_type=machines_per_type(self.problem.workflow),
                    stop=self.budget,
                )
        except OutOfTime:
            self.out_of_time = True
            return math.inf
        makespan, cost = self.problem.evaluate(assignments)
        key = self.problem.rank(makespan, cost)
        if self.best is None or key < self.best[0]:
            self.best = (key, assignments)
        self.makespans[length] = makespan
        return makespan

    def shortest_on_time(self, deadline_s: float) -> int | None:
        """The shortest fleet whose schedule keeps ``deadline_s``, or None: up from the shortest possible fleet,
        each late fleet's length scaled by how late it ended (a fleet twice as long ends about twice as soon) and
        at least one machine longer, twice as many each time, then a bisection between the last late fleet and
        the first on time. The answer is usually a few machines past the shortest possible fleet, which this
        reaches in two or three schedules; a bisection over the whole line spent its first schedules on long,
        dear fleets and at 30,000 tasks ran out of time (soykb-30k on hpc-36: 1.35 x the bound)."""
        low = self.shortest_possible(deadline_s)
        if low is None:
            return None
        length, step, found = low, 1, None
        while found is None:
            if self.out_of_time or (self.best is not None and not self.budget.affords()):
                return None
            makespan = self.schedule(length)
            if makespan <= deadline_s + 1e-6:
                found = length
            elif length == len(self.line):
                return None  # the whole catalog is late: so is every fleet (mostly)
            else:
                scaled = math.ceil(length * makespan / deadline_s) if math.isfinite(makespan) else length
                low, length, step = length + 1, min(max(length + step, scaled), len(self.line)), step * 2
        high = found - 1
        while low <= high:
            if self.out_of_time or not self.budget.affords():
                break
            middle = (low + high) // 2
            if self.schedule(middle) <= deadline_s + 1e-6:
                found, high = middle, middle - 1
            else:
                low = middle + 1
        return found

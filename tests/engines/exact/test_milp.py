"""The exact MILP engine: optimal against an exhaustive search, valid, within limits, never worse.

The oracle (``brute_force``) is independent of the engine: on instances whose data are whole
seconds (durations, transfers, boots, billing steps), some optimal plan starts every task at a
whole second (fix the machines, which tasks overlap and the billed lengths of an optimal plan:
what is left is a system of difference constraints with integer data, whose vertices are
integral), and no optimal plan needs a makespan above sum_i (max boot + max duration + max
outgoing transfer) (an instant covered by no boot, task or transfer can be cut out). So it tries
every partition of the tasks into machines, every type for each machine, and every vector of
whole-second starts, and checks each rule of section 3 at every whole second.
"""

from __future__ import annotations

import functools
import itertools
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from agora_optimizer.engines.base import EngineResult
from agora_optimizer.engines.exact.milp import pulp_api
from agora_optimizer.engines.exact.milp.cbc import read_cbc_bound
from agora_optimizer.engines.exact.milp.engine import MilpEngine
from agora_optimizer.engines.exact.milp.pulp_api import cbc_binary
from agora_optimizer.engines.exact.shared import dominates, prune_types
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model import (
    GIB,
    Assignment,
    Billing,
    Catalog,
    Edge,
    Objective,
    Plan,
    Resource,
    SolverInfo,
    Task,
    Workflow,
)
from agora_optimizer.planning.list_schedule import list_schedule
from agora_optimizer.planning.problem import Problem, score
from agora_optimizer.planning.validate import validate_plan
from tests.conftest import BUNDLED, ENGINE_WORKFLOWS, REPO

pytestmark = pytest.mark.slow  # seconds of planning per test: make test runs it, make test-fast does not

BANDWIDTH = 1e9  # one second per GB


# ----------------------------------------------------------------------- instances


def tiny_problem(seed: int, objective: Objective | None = None) -> Problem:
    """3 to 5 tasks, 2 or 3 types, a random DAG; every duration and transfer a whole second."""
    rng = random.Random(seed)
    n = rng.choice([3, 3, 4, 4, 5])
    tasks = [
        Task(f"t{i}", float(rng.choice([2, 4])), rng.choice([1, 1, 2]), rng.choice([1, 2]) * GIB, "t") for i in range(n)
    ]
    edges = [
        Edge(f"t{i}", f"t{j}", rng.choice([0, int(BANDWIDTH)]))
        for i in range(n)
        for j in range(i + 1, n)
        if rng.random() < 0.35
    ]
    resources = [_random_resource(rng, f"r{k}") for k in range(rng.choice([2, 3]))]
    resources[-1] = Resource(**{**resources[-1].__dict__, "vcpus": 2, "memory_gib": 4})  # every task fits somewhere
    catalog = Catalog(tuple(resources), BANDWIDTH)
    kind = rng.choice(["time", "cost", "balanced"])
    objective = objective or Objective(kind=kind, alpha=rng.choice([0.3, 0.5, 0.8]))
    return Problem.create(Workflow.create(f"tiny{seed}", tasks, edges), catalog, objective)


def _random_resource(rng: random.Random, name: str) -> Resource:
    return Resource(
        name=name,
        backend="aws",
        vcpus=rng.choice([1, 2]),
        memory_gib=rng.choice([2, 4]),
        speed=rng.choice([1.0, 2.0]),
        price_per_hour_usd=rng.choice([0.36, 0.72, 1.08]),
        count=rng.choice([1, 2, None]),
        billing=Billing(granularity_s=rng.choice([1, 2, 3]), minimum_s=rng.choice([0, 2, 5])),
        boot_s=rng.choice([0, 1]),
    )


SMALL_CATALOG = Catalog(
    (
        Resource("c5.large", "aws", 2, 4, 1.0, 0.085, 2, Billing(1, 60), 30),
        Resource("c6i.xlarge", "aws", 4, 8, 1.15, 0.17, 2, Billing(1, 60), 30),
        Resource("r5.large", "aws", 2, 16, 0.9, 0.126, 2, Billing(1, 60), 30),
    ),
    1.25e9,
)


def first_tasks(path: Path, n: int) -> Workflow:
    """The first ``n`` tasks in topological order (closed under parents) and the edges among them."""
    workflow = load_workflow(path)
    keep = set(workflow.topological_order[:n])
    return Workflow.create(
        f"{workflow.name}-first{n}",
        [t for t in workflow.tasks if t.id in keep],
        [e for e in workflow.edges if e.parent in keep and e.child in keep],
    )


# -------------------------------------------------------------------------- oracle


def set_partitions(items: list[int]) -> Iterator[list[list[int]]]:
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for partition in set_partitions(rest):
        yield [[first], *partition]
        for n in range(len(partition)):
            yield [*partition[:n], [first, *partition[n]], *partition[n + 1 :]]


def brute_force(problem: Problem, incumbent: list[Assignment] | None = None) -> tuple[float, list[Assignment]] | None:
    """The optimal objective value and a plan reaching it, or None when no plan meets the limits.

    Branch and bound over machine assignments: each is skipped when an elementary lower bound
    (critical path with its transfers; each lease at least its boot plus its longest task and its
    work over capacity) cannot beat the best plan found; the others try every whole-second start.
    ``incumbent``, a plan the spec's checker passes, is the first best: the search only looks for
    better ones, and returns it when none is.
    """
    workflow, catalog = problem.workflow, problem.catalog
    tasks = [workflow.by_id[t] for t in workflow.topological_order]
    horizon = 0
    for task in tasks:
        fits = catalog.feasible(task)
        out = max((catalog.transfer_s(e.bytes) for e in workflow.children[task.id]), default=0.0)
        horizon += int(max(r.boot_s for r in fits) + max(r.runtime_s(task) for r in fits) + out)
    layouts = []
    for blocks in set_partitions(list(range(len(tasks)))):
        choices = [[r for r in catalog.resources if all(r.fits(tasks[i]) for i in block)] for block in blocks]
        for types in itertools.product(*choices):
            layout = _Layout(problem, tasks, blocks, list(types))
            layouts.append((layout.lower_bound(), len(layouts), layout))
    best: tuple[float, list[Assignment]] | None = None
    if incumbent is not None:
        assert not violations(problem, incumbent), "the incumbent is not a valid plan"
        assert problem.meets_limits(incumbent), "the incumbent misses the deadline or the budget"
        best = (problem.score(incumbent)[0], list(incumbent))
    for bound, _, layout in sorted(layouts, key=lambda item: item[:2]):
        if best is not None and bound >= best[0]:
            break  # every layout left is bounded no better
        found = layout.best_starts(horizon, best[0] if best else None)
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    return best


@functools.cache
def tiny_oracle(seed: int, objective: Objective | None = None) -> tuple[float, list[Assignment]] | None:
    """``brute_force(tiny_problem(seed, objective))``, once a session: the CP-SAT tests ask for the same ones."""
    return brute_force(tiny_problem(seed, objective))


def limited_cases(seed: int) -> Iterator[tuple[Problem, tuple[float, list[Assignment]] | None]]:
    """Seed ``seed``'s tiny problem under a deadline, a budget, and both (each between the fastest and the
    cheapest plan), with the oracle's answer under them (None: no plan meets them)."""
    free = tiny_problem(seed, Objective(kind="time"))
    fastest = tiny_oracle(seed, Objective(kind="time"))
    assert fastest is not None
    cheapest = tiny_oracle(seed, Objective(kind="cost"))
    assert cheapest is not None
    fast_makespan, fast_cost = free.evaluate(fastest[1])
    cheap_makespan, cheap_cost = free.evaluate(cheapest[1])
    for objective in (
        Objective(kind="cost", deadline_s=(fast_makespan + cheap_makespan) / 2),
        Objective(kind="time", budget_usd=(fast_cost + cheap_cost) / 2),
        Objective(kind="balanced", alpha=0.5, deadline_s=cheap_makespan, budget_usd=fast_cost),
    ):
        yield Problem.create(free.workflow, free.catalog, objective), tiny_oracle(seed, objective)


class _Layout:
    """Tasks partitioned into machines (``blocks``), each machine of a type."""

    def __init__(self, problem: Problem, tasks: list[Task], blocks: list[list[int]], types: list[Resource]) -> None:
        self.problem, self.tasks, self.blocks, self.types = problem, tasks, blocks, types
        n = len(tasks)
        self.machine = [next(b for b, block in enumerate(blocks) if i in block) for i in range(n)]
        self.duration = [int(types[self.machine[i]].runtime_s(tasks[i])) for i in range(n)]
        index = {t.id: i for i, t in enumerate(tasks)}
        edges = [(index[e.parent], index[e.child], problem.catalog.transfer_s(e.bytes)) for e in problem.workflow.edges]
        self.edges = [(p, c, tr if self.machine[p] != self.machine[c] else 0.0) for p, c, tr in edges]
        self.head = [int(types[self.machine[i]].boot_s) for i in range(n)]
        for p, c, tr in sorted(self.edges):  # parents come first in topological order
            self.head[c] = max(self.head[c], self.head[p] + self.duration[p] + int(tr))
        self.tail = list(self.duration)
        for p, c, tr in sorted(self.edges, reverse=True):
            self.tail[p] = max(self.tail[p], self.duration[p] + int(tr) + self.tail[c])

    def least_makespan_and_cost(self) -> tuple[float, float]:
        """Critical path with this layout's transfers; each lease at least boot + its busy time."""
        makespan = max(h + t for h, t in zip(self.head, self.tail, strict=True))
        cost = 0.0
        for block, resource in zip(self.blocks, self.types, strict=True):
            busy = max(
                max(self.duration[i] for i in block),
                sum(self.duration[i] * self.tasks[i].cores for i in block) / resource.vcpus,
                sum(self.duration[i] * self.tasks[i].memory_bytes for i in block) / resource.memory_bytes,
            )
            cost += resource.lease_cost_usd(resource.boot_s + busy)
        return makespan, cost

    def lower_bound(self) -> float:
        makespan, cost = self.least_makespan_and_cost()
        objective = self.problem.objective
        if objective.deadline_s is not None and makespan > objective.deadline_s + 1e-9:
            return np.inf
        if objective.budget_usd is not None and cost > objective.budget_usd * (1 + 1e-9):
            return np.inf
        return score(objective, makespan, cost, self.problem.bounds)[0]

    def latest_end(self, horizon: int, best: float | None) -> int:
        """No plan of this layout within the deadline and better than ``best`` ends later."""
        objective, bounds = self.problem.objective, self.problem.bounds
        if objective.deadline_s is not None:
            horizon = min(horizon, int(np.floor(objective.deadline_s + 1e-9)))
        weight = {"time": 1.0, "cost": 0.0, "balanced": objective.alpha}[objective.kind]
        if best is None or weight == 0:
            return horizon
        least_cost = self.least_makespan_and_cost()[1] / max(bounds.cost_usd, 1e-12)
        room = best - (1 - weight) * least_cost  # weight * T / T_lb <= best - (1 - weight) * C / C_lb
        return min(horizon, int(np.floor(room * max(bounds.makespan_s, 1e-9) / weight + 1e-9)))

    def best_starts(self, horizon: int, best: float | None) -> tuple[float, list[Assignment]] | None:
        n, latest = len(self.tasks), self.latest_end(horizon, best)
        ranges = [np.arange(self.head[i], latest - self.tail[i] + 1) for i in range(n)]
        if any(len(r) == 0 for r in ranges):
            return None
        starts = self._precedence_feasible_starts(ranges)
        if len(starts) == 0:
            return None
        ends = starts + np.array(self.duration, dtype=float)
        ok = np.ones(len(starts), dtype=bool)
        for block, resource in zip(self.blocks, self.types, strict=True):
            ok &= self._fits(block, resource, starts, ends)
        makespan, cost = ends.max(axis=1), np.zeros(len(starts))
        leases = []
        for block, resource in zip(self.blocks, self.types, strict=True):
            lease = (starts[:, block].min(axis=1) - resource.boot_s, ends[:, block].max(axis=1))
            billing = resource.billing
            steps = np.ceil((lease[1] - lease[0]) / billing.granularity_s - 1e-9)
            cost += resource.price_per_hour_usd / 3600 * np.maximum(billing.minimum_s, steps * billing.granularity_s)
            ok &= lease[0] >= 0
            leases.append(lease)
        ok &= self._within_counts(leases)
        objective = self.problem.objective
        if objective.deadline_s is not None:
            ok &= makespan <= objective.deadline_s + 1e-9
        if objective.budget_usd is not None:
            ok &= cost <= objective.budget_usd * (1 + 1e-9)
        if not ok.any():
            return None
        values = np.where(ok, score(objective, makespan, cost, self.problem.bounds)[0], np.inf)
        row = int(np.argmin(values))
        return float(values[row]), self._assignments(starts[row], ends[row])

    def _precedence_feasible_starts(self, ranges: list[np.ndarray]) -> np.ndarray:
        """Every vector of whole-second starts in ``ranges`` that keeps each edge and its transfer.

        The rows of the full product, in its lexicographic order, less those where a child starts
        before its parent's end plus the transfer: built one task at a time (parents come first in
        topological order), dropping such rows as soon as both ends of an edge are placed.
        """
        starts = np.zeros((1, 0))
        for i, values in enumerate(ranges):
            starts = np.hstack([np.repeat(starts, len(values), axis=0), np.tile(values, len(starts))[:, None]])
            for p, c, tr in self.edges:
                if max(p, c) == i:
                    starts = starts[starts[:, c] >= starts[:, p] + float(self.duration[p]) + tr]
        return starts

    def _fits(self, block: list[int], resource: Resource, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Cores and memory at every task's start: the load only grows when a task starts."""
        ok = np.ones(len(starts), dtype=bool)
        for j in block:
            at = starts[:, j]
            running = [(starts[:, i] <= at) & (at < ends[:, i]) for i in block]
            ok &= sum(r * self.tasks[i].cores for r, i in zip(running, block, strict=True)) <= resource.vcpus
            memory = sum(r * self.tasks[i].memory_bytes for r, i in zip(running, block, strict=True))
            ok &= memory <= resource.memory_bytes
        return ok

    def _within_counts(self, leases: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """At every lease start, no more leases of its type than ``count``."""
        ok = np.ones(len(leases[0][0]), dtype=bool)
        for b, resource in enumerate(self.types):
            if resource.count is None:
                continue
            same = [m for m, r in enumerate(self.types) if r.name == resource.name]
            at = leases[b][0]
            leased = sum((leases[m][0] <= at) & (at < leases[m][1]) for m in same)
            ok &= leased <= resource.count
        return ok

    def _assignments(self, start: np.ndarray, end: np.ndarray) -> list[Assignment]:
        numbers = _machine_numbers(self.types)
        result = []
        for i, task in enumerate(self.tasks):
            resource = self.types[self.machine[i]]
            machine = f"{resource.name}#{numbers[self.machine[i]]}"
            result.append(
                Assignment(
                    task.id, resource.name, machine, float(start[i]), float(end[i]), task.cores, task.memory_bytes
                )
            )
        return result


def _machine_numbers(types: list[Resource]) -> list[int]:
    seen: dict[str, int] = {}
    numbers = []
    for resource in types:
        numbers.append(seen.get(resource.name, 0))
        seen[resource.name] = numbers[-1] + 1
    return numbers


# ------------------------------------------------------------------------- helpers


def violations(problem: Problem, assignments: tuple[Assignment, ...] | list[Assignment]) -> list[str]:
    """What the project's checker finds wrong with a plan of these assignments."""
    makespan, cost = problem.evaluate(assignments)
    plan = Plan(
        workflow=problem.workflow.name,
        catalog="test",
        objective=problem.objective,
        makespan_s=makespan,
        cost_usd=cost,
        assignments=tuple(assignments),
        solver=SolverInfo(method="milp", status="feasible", gap=None, wall_s=0.0),
        created_at="2026-01-01T00:00:00Z",
    )
    return [str(v) for v in validate_plan(plan, problem.workflow, problem.catalog)]


def value(problem: Problem, assignments: tuple[Assignment, ...] | list[Assignment]) -> float:
    return problem.score(assignments)[0]


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))


# --------------------------------------------------------------------------- tests

# Both solvers the MILP can run on: HiGHS (the default where highspy is installed) and CBC (bundled with
# PuLP 3.3; with PuLP 4 from its cbc extra, cbcbox, or a cbc on PATH: without any, CBC cases are skipped).
_NO_CBC = pytest.mark.skipif(
    cbc_binary() is None,
    reason=f"no CBC binary: PuLP {pulp_api.PULP_MAJOR} has none here (PuLP 4 needs pulp[cbc], cbcbox, or cbc on PATH)",
)
SOLVERS = pytest.mark.parametrize("solver", ["highs", pytest.param("cbc", marks=_NO_CBC)])


@SOLVERS
@pytest.mark.parametrize("seed", [*range(24), 595])  # 595: a 5 s minimum billed in 3 s steps
def test_optimum_equals_the_brute_force_optimum_on_tiny_instances(seed: int, solver: str) -> None:
    problem = tiny_problem(seed)
    oracle = tiny_oracle(seed)
    assert oracle is not None
    assert violations(problem, oracle[1]) == []  # the oracle's own plan passes the checker
    assert close(value(problem, oracle[1]), oracle[0])
    result = MilpEngine(solver=solver).solve(problem, time_limit_s=20)
    assert result is not None
    assert result.method == "milp"
    assert result.status == "optimal"
    assert violations(problem, result.assignments) == []
    assert close(value(problem, result.assignments), oracle[0])
    assert result.bound is not None and result.bound <= oracle[0] + 1e-6
    assert result.gap is not None and result.gap <= 1e-6


@SOLVERS
@pytest.mark.parametrize("seed", range(24, 32))
def test_deadline_and_budget_are_honoured_and_optimal_under_them(seed: int, solver: str) -> None:
    for problem, oracle in limited_cases(seed):
        result = MilpEngine(solver=solver).solve(problem, time_limit_s=20)
        if oracle is None:
            assert result is None
            continue
        assert result is not None and result.status == "optimal"
        assert violations(problem, result.assignments) == []
        assert problem.meets_limits(result.assignments)
        assert close(value(problem, result.assignments), oracle[0])


@SOLVERS
def test_an_infeasible_deadline_returns_none(solver: str) -> None:
    """a fits only on tall machines, b only on wide ones: b waits 10 s for a's data, which no bound sees."""
    tasks = [Task("a", 2.0, 1, 3 * GIB, "a"), Task("b", 2.0, 2, GIB, "b")]
    edges = [Edge("a", "b", int(10 * BANDWIDTH))]
    tall = Resource("tall", "aws", 1, 4, 1.0, 0.36, None, Billing(1, 0), 0)
    wide = Resource("wide", "aws", 2, 2, 1.0, 0.36, None, Billing(1, 0), 0)
    workflow, catalog = Workflow.create("apart", tasks, edges), Catalog((tall, wide), BANDWIDTH)
    fastest = MilpEngine(solver=solver).solve(Problem.create(workflow, catalog, Objective(kind="time")), 20)
    assert fastest is not None and fastest.status == "optimal"
    assert Problem.create(workflow, catalog, Objective(kind="time")).evaluate(fastest.assignments)[0] == 14.0
    for deadline in (1.0, 13.0):  # below the lower bound of 4 s; above it, but the solver proves it infeasible
        problem = Problem.create(workflow, catalog, Objective(kind="cost", deadline_s=deadline))
        assert (problem.bounds.makespan_s > deadline) == (deadline == 1.0)
        assert MilpEngine(solver=solver).solve(problem, 20) is None


@SOLVERS
def test_an_unaffordable_budget_returns_none(solver: str) -> None:
    problem = tiny_problem(5, Objective(kind="cost"))
    result = MilpEngine(solver=solver).solve(problem, time_limit_s=20)
    assert result is not None and result.status == "optimal"
    _, cheapest = problem.evaluate(result.assignments)
    objective = Objective(kind="time", budget_usd=cheapest * 0.99)
    assert MilpEngine(solver=solver).solve(Problem.create(problem.workflow, problem.catalog, objective), 20) is None


@SOLVERS
def test_a_type_of_count_one_is_leased_again_after_a_gap_when_that_is_cheaper(solver: str) -> None:
    """a and b on the cheap type (count 1) around c, which only fits the expensive one."""
    tasks = [Task("a", 2.0, 1, GIB, "a"), Task("c", 8.0, 1, 3 * GIB, "c"), Task("b", 2.0, 1, GIB, "b")]
    cheap = Resource("cheap", "aws", 1, 2, 1.0, 0.36, 1, Billing(1, 0), 0)
    big = Resource("big", "aws", 1, 4, 1.0, 3.6, None, Billing(1, 0), 0)
    workflow = Workflow.create("gap", tasks, [Edge("a", "c"), Edge("c", "b")])
    problem = Problem.create(workflow, Catalog((cheap, big), BANDWIDTH), Objective(kind="cost"))
    result = MilpEngine(solver=solver).solve(problem, time_limit_s=20)
    assert result is not None and result.status == "optimal"
    assert violations(problem, result.assignments) == []
    on = {a.task: a.machine for a in result.assignments}
    assert on["a"] != on["b"] and {on["a"], on["b"]} <= {"cheap#0", "cheap#1"}
    assert problem.evaluate(result.assignments)[1] == pytest.approx((4 * 0.36 + 8 * 3.6) / 3600)
    oracle = brute_force(problem)
    assert oracle is not None and close(value(problem, result.assignments), oracle[0])


REAL = ENGINE_WORKFLOWS


@SOLVERS
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_twelve_real_tasks_are_proven_optimal_for_time(path: Path, solver: str) -> None:
    problem = Problem.create(first_tasks(path, 12), SMALL_CATALOG, Objective(kind="time"))
    started = time.perf_counter()
    result = MilpEngine(solver=solver).solve(problem, time_limit_s=30)
    elapsed = time.perf_counter() - started
    assert result is not None and result.status == "optimal", elapsed
    assert elapsed < 30
    assert violations(problem, result.assignments) == []


@pytest.mark.parametrize(
    ("name", "n", "kind"),
    [
        ("montage-chameleon-2mass-01d-001", 10, "cost"),
        ("montage-chameleon-2mass-01d-001", 12, "cost"),
        ("bacass-dirt02-001", 12, "cost"),
        ("bacass-dirt02-001", 12, "balanced"),
    ],
)
@SOLVERS
def test_real_tasks_are_proven_optimal_for_cost_and_balanced(name: str, n: int, kind: str, solver: str) -> None:
    problem = Problem.create(first_tasks(BUNDLED / f"{name}.json", n), SMALL_CATALOG, Objective(kind=kind))
    started = time.perf_counter()
    result = MilpEngine(solver=solver).solve(problem, time_limit_s=30)
    assert result is not None and result.status == "optimal", time.perf_counter() - started
    assert violations(problem, result.assignments) == []


@SOLVERS
@pytest.mark.parametrize("kind", ["time", "cost", "balanced"])
def test_never_worse_than_the_list_scheduling_warm_start(kind: str, solver: str) -> None:
    path = BUNDLED / "blast-chameleon-small-001.json"
    problem = Problem.create(first_tasks(path, 12), SMALL_CATALOG, Objective(kind=kind))
    bounds = problem.bounds
    alpha = {"time": 1.0, "cost": 0.0, "balanced": 0.5}[kind]
    warm = list_schedule(problem.workflow, problem.catalog, alpha, bounds.makespan_s, bounds.cost_usd)
    result = MilpEngine(solver=solver).solve(
        problem, time_limit_s=3, warm_start=EngineResult(tuple(warm), "list-scheduling")
    )
    assert result is not None
    assert violations(problem, result.assignments) == []
    assert value(problem, result.assignments) <= value(problem, warm) + 1e-9
    if result.status == "feasible" and result.bound is not None:  # a proven bound, and the gap it gives
        assert result.bound <= value(problem, result.assignments) + 1e-9
        assert result.gap == pytest.approx(
            (value(problem, result.assignments) - result.bound) / value(problem, result.assignments)
        )


def test_a_workflow_above_the_size_limit_returns_none_at_once() -> None:
    workflow = load_workflow(BUNDLED / "montage-chameleon-2mass-01d-001.json")
    problem = Problem.create(workflow, SMALL_CATALOG, Objective(kind="cost"))
    started = time.perf_counter()
    assert MilpEngine().solve(problem, time_limit_s=60) is None
    assert (
        MilpEngine(max_tasks=10).solve(
            tiny_problem(0).__class__.create(first_tasks(REAL[0], 11), SMALL_CATALOG, Objective()), 60
        )
        is None
    )
    assert time.perf_counter() - started < 1.0


def test_a_dominated_type_is_pruned_only_when_that_is_safe() -> None:
    slow = Resource("slow", "aws", 2, 4, 1.0, 0.2, None, Billing(2, 60), 30)
    fast = Resource("fast", "aws", 2, 4, 2.0, 0.1, None, Billing(1, 60), 10)
    assert dominates(fast, slow, fitting=3, price_matters=True)
    assert not dominates(slow, fast, fitting=3, price_matters=True)
    limited = Resource("fast", "aws", 2, 4, 2.0, 0.1, 2, Billing(1, 60), 10)
    assert not dominates(limited, slow, fitting=3, price_matters=True)  # too few machines to take over
    coarse = Resource("fast", "aws", 2, 4, 2.0, 0.1, None, Billing(3, 60), 10)
    assert not dominates(coarse, slow, fitting=3, price_matters=True)  # 3 s steps do not divide 2 s ones
    pricey = Resource("fast", "aws", 2, 4, 2.0, 0.5, None, Billing(1, 60), 10)
    assert dominates(pricey, slow, fitting=3, price_matters=False)  # time without a budget ignores prices
    assert not dominates(pricey, slow, fitting=3, price_matters=True)
    tasks = [Task(f"t{i}", 4.0, 1, GIB, "t") for i in range(3)]
    twin = Resource("twin", "aws", 2, 4, 2.0, 0.1, None, Billing(1, 60), 10)
    catalog = Catalog((slow, fast, twin), BANDWIDTH)
    problem = Problem.create(Workflow.create("w", tasks, []), catalog, Objective(kind="cost"))
    kept, replacement = prune_types(problem)
    assert [r.name for r in kept] == ["fast"]  # equal types: the first one in the catalog stays
    assert replacement == {"slow": fast, "twin": fast}


@SOLVERS
def test_a_run_cut_short_reports_a_feasible_plan_with_a_proven_bound(solver: str) -> None:
    path = BUNDLED / "blast-chameleon-small-001.json"
    problem = Problem.create(first_tasks(path, 12), SMALL_CATALOG, Objective(kind="balanced"))
    result = MilpEngine(solver=solver).solve(problem, time_limit_s=4)  # neither solver proves it in 10 s
    assert result is not None and result.status == "feasible"
    assert violations(problem, result.assignments) == []
    assert result.bound is not None and 0 < result.bound <= value(problem, result.assignments)
    assert result.gap is not None and 0 <= result.gap < 1


def test_cbc_bounds_are_read_from_the_log() -> None:
    log = (
        "Cbc0010I After 0 nodes, 1 on tree, 2 best solution, best possible 1.5 (0.2 seconds)\n"
        "Cbc0005I Partial search - best objective 2 (best possible 1.2), took 9 iterations and 0 nodes (0.1 seconds)\n"
        "Cbc0005I Partial search - best objective 2 (best possible 1.7500001), took 99 iterations (1 seconds)\n"
        "Result - Stopped on time limit\n\nObjective value:   2.00000000\nLower bound:   1.750\n"
    )
    assert read_cbc_bound(log) == 1.7500001  # the main search's last word, to 8 digits
    assert read_cbc_bound(log.split("Cbc0005I")[0] + "Lower bound:   1.750\n") == 1.75
    assert read_cbc_bound("Result - Stopped on time limit\n") is None
    # Stopped inside the root node's cut passes (CBC of cbcbox, PuLP 4's cbc extra): the "best possible" is an
    # unfinished LP's value above the incumbent, and "Lower bound" that clipped; the root LP before the cuts is one.
    cut_short = (
        "Continuous objective value is 1.05804 - 0.038996 seconds\n"
        "Cbc0013I At root node, 70 cuts changed objective from 1.1776721 to 7.4563955e+11 in 7 passes\n"
        "Cbc0005I Partial search - best objective 1.6938102 (best possible 7.4563955e+11), took 1917 iterations\n"
        "Result - Stopped on time limit\nObjective value:   1.69381017085\nLower bound:   1.69381\n"
    )
    assert read_cbc_bound(cut_short, 1.69381017085) == 1.1776721
    assert read_cbc_bound(cut_short.split("Cbc0013I")[0] + cut_short.split("\n", 2)[2], 1.69381017085) == 1.05804
    assert read_cbc_bound(log, 1.7500001) == 1.7500001  # proven optimal, to the digits printed


def test_the_solver_is_checked_and_highs_prints_nothing_on_stdout() -> None:
    with pytest.raises(ValueError, match="'auto', 'highs' or 'cbc'"):
        MilpEngine(solver="gurobi")
    assert MilpEngine().solver_name == "highs"  # highspy is installed with agora
    code = (
        "from agora_optimizer.engines.exact.milp.engine import MilpEngine\n"
        "from tests.engines.exact.test_milp import tiny_problem\n"
        "result = MilpEngine(solver='highs').solve(tiny_problem(3), 20)\n"
        "import sys; print(result.status, file=sys.stderr)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert run.stdout == ""  # HiGHS's banner would land here, before a plan printed as JSON
    assert run.stderr.strip().endswith("optimal")

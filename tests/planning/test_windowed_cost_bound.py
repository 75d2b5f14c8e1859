"""The cost bound over time buckets: hand-computed cases, tighter than the packed-work bound where it should be,
and never above the exact optimum."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from agora_optimizer.model import Billing, Catalog, Edge, Objective, Resource, Task, Workflow
from agora_optimizer.model.catalog import GIB
from agora_optimizer.model.plan import Assignment, Plan, SolverInfo
from agora_optimizer.planning.bounds import cost_lower_bound_usd, feasible_types
from agora_optimizer.planning.leases import cost_usd
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.time_budget import TimeBudget
from agora_optimizer.planning.validate import validate_plan
from agora_optimizer.planning.windowed_cost_bound import task_windows, windowed_cost_bound_usd

# The exhaustive optimum takes up to seconds per seed: make test-fast checks the first four, make test all 40.
SEEDS = [*range(4), *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(4, 40))]
PER_HOUR = 3600.0  # a price of 3,600 USD an hour is 1 USD a second


def _catalog(*resources: Resource) -> Catalog:
    return Catalog(resources=resources, bandwidth_bytes_per_s=1e9)


def _type(name: str, speed: float, price: float, count: int | None, vcpus: int = 1, memory_gib: float = 4) -> Resource:
    return Resource(
        name, "local", vcpus=vcpus, memory_gib=memory_gib, speed=speed, price_per_hour_usd=price, count=count
    )


def _bound(workflow: Workflow, catalog: Catalog, deadline_s: float) -> float:
    return windowed_cost_bound_usd(workflow, feasible_types(workflow, catalog), deadline_s)


def _optimum_usd(problem: Problem) -> float:
    from tests.engines.exact.test_milp import brute_force

    oracle = brute_force(problem)
    assert oracle is not None
    return cost_usd(oracle[1], problem.catalog)


def test_windows_are_heads_and_tails_on_the_fastest_types() -> None:
    tasks = [Task("a", 10.0, 1, 1, "t"), Task("b", 20.0, 1, 1, "t"), Task("c", 10.0, 1, 1, "t", release_s=30.0)]
    workflow = Workflow.create("w", tasks, [Edge("a", "b"), Edge("b", "c")])
    slow, fast = _type("slow", 1.0, PER_HOUR, 1), _type("fast", 2.0, 2 * PER_HOUR, 1)
    windows = task_windows(workflow, feasible_types(workflow, _catalog(slow, fast)), deadline_s=50.0)
    # a: ready 0, tail 10 + 5 (b, c on fast) -> due 35; b: ready 5, due 45; c: ready max(15, its release 30), due 50
    assert windows.ready_s.tolist() == [0.0, 5.0, 30.0]
    assert windows.due_s.tolist() == [35.0, 45.0, 50.0]
    # a on slow ends at 10, b at 25, c at 40: all within
    assert [[r.name for r in rs] for rs in windows.within] == [["slow", "fast"]] * 3
    tight = task_windows(workflow, feasible_types(workflow, _catalog(slow, fast)), deadline_s=36.0)
    # due 21, 31, 36: c on slow would end at 40
    assert [[r.name for r in rs] for rs in tight.within] == [["slow", "fast"], ["slow", "fast"], ["fast"]]


def test_a_chain_under_a_tight_deadline_only_fits_the_fast_type() -> None:
    # a -> b, 10 reference seconds each; by 12 s neither may run on the slow type (a would end at 10 and
    # leave 2 s for b, which takes 5 even on fast; b ready at 5 would end at 15 on slow)
    tasks = [Task("a", 10.0, 1, 1, "t"), Task("b", 10.0, 1, 1, "t")]
    workflow = Workflow.create("w", tasks, [Edge("a", "b")])
    catalog = _catalog(_type("slow", 1.0, PER_HOUR, 1), _type("fast", 2.0, 3 * PER_HOUR, 1))
    # slow holds 12 of the 20 reference seconds by the deadline, fast the other 8 in 4 s
    assert cost_lower_bound_usd(workflow, catalog, 12.0) == pytest.approx(12.0 + 3 * 4.0, rel=1e-6)
    assert _bound(workflow, catalog, 12.0) == pytest.approx(30.0, rel=1e-6)  # 10 s of fast, 3 USD a second
    problem = Problem.create(workflow, catalog, Objective(kind="cost", deadline_s=12.0))
    assert _optimum_usd(problem) == pytest.approx(30.0)


def test_a_burst_in_a_short_window_overflows_the_cheap_types_count() -> None:
    # root -> six 10 s tasks -> sink; root and sink need 2 GiB (dear type only), the burst fits both.
    # By 30 s the burst runs in [10, 20]: the one cheap machine takes one task there, not three.
    tasks = [Task("root", 10.0, 1, 2 * GIB, "t"), Task("sink", 10.0, 1, 2 * GIB, "t")]
    tasks += [Task(f"m{i}", 10.0, 1, GIB, "t") for i in range(6)]
    edges = [Edge("root", f"m{i}") for i in range(6)] + [Edge(f"m{i}", "sink") for i in range(6)]
    workflow = Workflow.create("w", tasks, edges)
    cheap = _type("cheap", 1.0, PER_HOUR, 1, memory_gib=1)
    dear = _type("dear", 1.0, 2 * PER_HOUR, 6, memory_gib=2)
    catalog = _catalog(cheap, dear)
    old = cost_lower_bound_usd(workflow, catalog, 30.0)
    assert old == pytest.approx(3 * 10 + 2 * (10 + 10 + 3 * 10), rel=1e-6)  # cheap busy 30 s: three burst tasks
    new = _bound(workflow, catalog, 30.0)
    assert new == pytest.approx(1 * 10 + 2 * (10 + 10 + 5 * 10), rel=1e-6)  # cheap busy 10 s in the burst
    assert new > old * 1.1


def test_a_burst_that_needs_many_machines_pays_a_boot_on_each() -> None:
    # Four 10 s tasks, then an 80 s one, by a deadline of 100 s, on one-core machines that boot 10 s: the four
    # run in [10, 20] (after a boot, before the tail), so on four machines, each paying its boot (the tail may
    # follow on one of them). Busy 120 s, four boots: 160 s of price, where the whole horizon held two machines.
    tasks = [Task(f"m{i}", 10.0, 1, GIB, "t") for i in range(4)] + [Task("tail", 80.0, 1, GIB, "t")]
    workflow = Workflow.create("w", tasks, [Edge(f"m{i}", "tail") for i in range(4)])
    catalog = _catalog(replace(_type("one", 1.0, PER_HOUR, None), boot_s=10.0))
    busy_s = 4 * 10 + 80
    assert cost_lower_bound_usd(workflow, catalog, 100.0) == pytest.approx(busy_s + 2 * 10, rel=1e-6)  # two boots
    assert _bound(workflow, catalog, 100.0) == pytest.approx(busy_s + 4 * 10, rel=1e-6)


def test_two_tasks_over_half_a_machines_memory_never_share_it() -> None:
    # 1 GiB tasks on a 1.5 GiB machine with 4 cores: by memory a share of 2/3, but a machine runs one at a time
    tasks = [Task(f"t{i}", 30.0, 1, GIB, "t") for i in range(4)]
    workflow = Workflow.create("w", tasks, [])
    catalog = _catalog(_type("mid", 1.0, PER_HOUR, 2, vcpus=4, memory_gib=1.5))
    assert cost_lower_bound_usd(workflow, catalog, 100.0) == pytest.approx(4 * 30 * 2 / 3, rel=1e-6)
    assert _bound(workflow, catalog, 100.0) == pytest.approx(4 * 30, rel=1e-6)


def test_the_bound_of_tasks_over_half_a_machines_memory_is_the_optimum() -> None:
    # Each task's 1 GiB is over half of a machine's 1.5: no two share one at a time, so every plan pays 30 s of a
    # lease for each task, 120 USD; two machines of two tasks each pay that and end at 60 s, within the deadline.
    tasks = [Task(f"t{i}", 30.0, 1, GIB, "t") for i in range(4)]
    workflow = Workflow.create("w", tasks, [])
    catalog = _catalog(_type("mid", 1.0, PER_HOUR, 2, vcpus=4, memory_gib=1.5))
    objective = Objective(kind="cost", deadline_s=100.0)
    rows = [(f"t{i}", f"mid#{i // 2}", 30.0 * (i % 2)) for i in range(4)]
    assignments = tuple(Assignment(t, "mid", m, start, start + 30.0, 1, GIB) for t, m, start in rows)
    plan = Plan("w", "test", objective, 60.0, cost_usd(assignments, catalog), assignments,
                SolverInfo("hand", "optimal", None, 0.0), "2026-12-06T00:00:00Z")  # fmt: skip
    assert validate_plan(plan, workflow, catalog) == []
    assert plan.cost_usd == pytest.approx(120.0) == _bound(workflow, catalog, 100.0)


def test_tasks_of_half_a_machine_still_share_it() -> None:
    tasks = [Task(f"t{i}", 30.0, 1, GIB, "t") for i in range(4)]
    workflow = Workflow.create("w", tasks, [])
    catalog = _catalog(_type("two", 1.0, PER_HOUR, 2, vcpus=2, memory_gib=2))
    assert _bound(workflow, catalog, 100.0) == pytest.approx(4 * 30 / 2, rel=1e-6)  # two at a time on a machine


def test_no_deadline_that_the_counts_can_meet_gives_no_bound() -> None:
    tasks = [Task("a", 10.0, 1, 1, "t"), Task("b", 10.0, 1, 1, "t")]
    workflow = Workflow.create("w", tasks, [Edge("a", "b")])
    catalog = _catalog(_type("slow", 1.0, PER_HOUR, 1), _type("fast", 2.0, 3 * PER_HOUR, 1))
    assert _bound(workflow, catalog, 9.0) == 0.0  # a and b take 10 s even on fast
    independent = Workflow.create("w", [Task(f"t{i}", 10.0, 1, 1, "t") for i in range(4)], [])
    assert _bound(independent, catalog, 10.0) == 0.0  # 40 reference seconds; by 10 s slow does 10, fast 20
    assert _bound(Workflow.create("w", [], []), catalog, 10.0) == 0.0


def test_out_of_time_it_gives_no_bound() -> None:
    tasks = [Task("a", 10.0, 1, 1, "t"), Task("b", 10.0, 1, 1, "t")]
    workflow = Workflow.create("w", tasks, [Edge("a", "b")])
    catalog = _catalog(_type("slow", 1.0, PER_HOUR, 1), _type("fast", 2.0, 3 * PER_HOUR, 1))
    spent = TimeBudget(0.0)
    assert windowed_cost_bound_usd(workflow, feasible_types(workflow, catalog), 12.0, spent) == 0.0


@pytest.mark.parametrize("seed", SEEDS)
def test_bound_never_exceeds_the_exact_optimum(seed: int) -> None:
    """The exhaustive optimum of tiny random instances under deadlines from tight to loose."""
    from tests.engines.exact.test_milp import brute_force, tiny_problem

    timed = brute_force(tiny_problem(seed, Objective(kind="time")))
    assert timed is not None
    fastest_s = max(a.end_s for a in timed[1])
    for slack in (1.0, 1.3, 2.0):
        problem = tiny_problem(seed, Objective(kind="cost", deadline_s=fastest_s * slack))
        bound = windowed_cost_bound_usd(problem.workflow, problem.options, fastest_s * slack)
        assert bound <= _optimum_usd(problem) * (1 + 1e-9)


def test_gpu_tasks_count_their_share_of_a_machines_gpus() -> None:
    # the plan of tests/planning/test_bounds.py: the four GPU tasks two by two on g#0 from 30 s to 50 s
    # (lease 0-50 s, billed 60 s), p on c#0 (40 s); by 50 s g is busy at most 20 s and pays 60: 3 x its price
    cpu = Resource("c", "aws", 4, 16, 1.0, 0.4, 4, Billing(1.0, 0.0), 0.0)
    gpu = Resource("g", "aws", 8, 32, 1.0, 3.6, 2, Billing(1.0, 60.0), 30.0, gpus=2)
    tasks = [Task(f"t{i}", 10.0, 1, 1, "t", gpus=1) for i in range(4)] + [Task("p", 40.0, 4, 1, "p")]
    workflow = Workflow.create("w", tasks, [])
    plan_usd = 60 * 3.6 / 3600 + 40 * 0.4 / 3600
    assert _bound(workflow, _catalog(cpu, gpu), 50.0) == pytest.approx(plan_usd, rel=1e-6)
    assert _bound(workflow, _catalog(cpu, gpu), 100.0) <= plan_usd


def _random_instance(seed: int) -> tuple[Workflow, Catalog]:
    """8 to 16 tasks and 2 to 4 types with counts, boots, billing minimums and releases."""
    rng = random.Random(seed)
    n = rng.randint(8, 16)
    tasks = [
        Task(
            f"t{i}",
            float(rng.randint(5, 60)),
            rng.choice([1, 1, 2, 4]),
            int(rng.choice([0.5, 1, 2, 3, 6]) * GIB),
            "t",
            release_s=rng.choice([0.0, 0.0, 0.0, 20.0]),
        )
        for i in range(n)
    ]
    edges = [
        Edge(f"t{i}", f"t{j}", rng.choice([0, 10**9])) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.2
    ]
    resources = [
        Resource(
            f"r{k}",
            "aws",
            vcpus=rng.choice([2, 4, 8]),
            memory_gib=rng.choice([4, 8, 16]),
            speed=rng.choice([0.5, 1.0, 1.5, 2.0]),
            price_per_hour_usd=rng.choice([0.1, 0.2, 0.4, 0.8]),
            count=rng.choice([1, 2, 3]),
            billing=Billing(1.0, rng.choice([0.0, 60.0])),
            boot_s=rng.choice([0.0, 20.0]),
            release_s=rng.choice([0.0, 0.0, 15.0]),
        )
        for k in range(rng.randint(2, 4))
    ]
    resources[-1] = replace(resources[-1], vcpus=8, memory_gib=16)  # every task fits somewhere
    return Workflow.create(f"random{seed}", tasks, edges), Catalog(tuple(resources), 1e9)


@pytest.mark.parametrize("seed", [*range(3), *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(3, 30))])
def test_bound_never_exceeds_a_valid_plan_of_a_larger_instance(seed: int) -> None:
    """Instances too large for the exhaustive search: agora's plans, checked by the validator, under deadlines
    of its time plan's makespan and more (the time plan itself meets them, when the cost plan cannot)."""
    from agora_optimizer.errors import InfeasibleObjectiveError
    from agora_optimizer.optimize.optimize import optimize
    from agora_optimizer.planning.validate import validate_plan

    workflow, catalog = _random_instance(seed)
    fastest = optimize(workflow, catalog, Objective(kind="time"), "random", 0.5)
    assert not validate_plan(fastest, workflow, catalog)
    for slack in (1.0, 1.5):
        deadline_s = fastest.makespan_s * slack
        cheapest_usd = fastest.cost_usd
        try:
            plan = optimize(workflow, catalog, Objective(kind="cost", deadline_s=deadline_s), "random", 0.5)
        except InfeasibleObjectiveError:
            pass  # not found in the time: the time plan stands
        else:
            assert not validate_plan(plan, workflow, catalog)
            assert plan.makespan_s <= deadline_s + 1e-6
            cheapest_usd = min(cheapest_usd, plan.cost_usd)
        assert _bound(workflow, catalog, deadline_s) <= cheapest_usd * (1 + 1e-9)

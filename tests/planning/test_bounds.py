"""Lower bounds: hand-computed cases, and no plan ever beats them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agora_optimizer.errors import TooManyGpusError, UnplaceableTaskError
from agora_optimizer.model import Billing, Catalog, Edge, Resource, Task, Workflow
from agora_optimizer.model.catalog import GIB
from agora_optimizer.planning.bounds import (
    cost_lower_bound_usd,
    feasible_types,
    makespan_lower_bound_s,
    whole_machines_cost_usd,
)

# The exhaustive optimum takes up to seconds per seed: make test-fast checks the first ten, make test all 40.
SEEDS = [*range(10), *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(10, 40))]


def _catalog(*resources: Resource) -> Catalog:
    return Catalog(resources=resources, bandwidth_bytes_per_s=1e9)


def _independent(n: int, runtime_s: float = 1.0, memory_bytes: int = 1) -> Workflow:
    return Workflow.create("w", [Task(f"t{i}", runtime_s, 1, memory_bytes, "t") for i in range(n)], [])


def test_balanced_work_bound_shares_work_by_speed_and_cores() -> None:
    # A: 2 cores at speed 1 do 2 reference core-seconds per second; B: 1 core at speed 2 also 2.
    catalog = _catalog(
        Resource("A", "local", vcpus=2, memory_gib=1, speed=1.0, price_per_hour_usd=0, count=1),
        Resource("B", "local", vcpus=1, memory_gib=1, speed=2.0, price_per_hour_usd=0, count=1),
    )
    assert makespan_lower_bound_s(_independent(32), catalog) == pytest.approx(32 / 4)


def test_memory_restricts_where_work_may_go() -> None:
    big = 2**30  # only A holds these tasks, so B's capacity cannot help
    catalog = _catalog(
        Resource("A", "local", vcpus=2, memory_gib=2, speed=1.0, price_per_hour_usd=0, count=1),
        Resource("B", "local", vcpus=1, memory_gib=0.5, speed=2.0, price_per_hour_usd=0, count=1),
    )
    assert makespan_lower_bound_s(_independent(30, memory_bytes=big), catalog) == pytest.approx(15.0)


def test_critical_path_with_boot_and_unlimited_machines() -> None:
    tasks = [Task("a", 10.0, 1, 1, "t"), Task("b", 10.0, 1, 1, "t")]
    workflow = Workflow.create("w", tasks, [Edge("a", "b")])
    catalog = _catalog(
        Resource("slow", "aws", vcpus=1, memory_gib=1, speed=1.0, price_per_hour_usd=1, count=None, boot_s=0),
        Resource("fast", "aws", vcpus=1, memory_gib=1, speed=2.0, price_per_hour_usd=1, count=None, boot_s=20),
    )
    # a: slow ends at 10, fast at 20 + 5 = 25 -> 10; b: slow 20, fast max(10, 20) + 5 = 25 -> 20
    assert makespan_lower_bound_s(workflow, catalog) == pytest.approx(20.0)


def test_cost_bound_pays_packed_work_boot_and_deadline_overheads() -> None:
    per_second = 3.6 / 3600
    resource = Resource(
        "m",
        "aws",
        vcpus=2,
        memory_gib=1,
        speed=1.0,
        price_per_hour_usd=3.6,
        count=None,
        billing=Billing(1, 60),
        boot_s=10,
    )
    catalog = _catalog(resource)
    workflow = _independent(4, runtime_s=30.0)  # 120 core-seconds = 60 machine-seconds on 2 cores
    assert cost_lower_bound_usd(workflow, catalog) == pytest.approx(per_second * (60 + 10))
    # Deadline 40 s: a machine is busy at most 30 s and billed at least max(60, 40) = 60 s for it.
    assert cost_lower_bound_usd(workflow, catalog, deadline_s=40.0) == pytest.approx(per_second * 60 * 60 / 30)
    # Five tasks: 75 machine-seconds need 2.5 machines of 30 busy seconds, so three whole machines of 60 s.
    five = _independent(5, runtime_s=30.0)
    assert cost_lower_bound_usd(five, catalog, deadline_s=40.0) == pytest.approx(per_second * 3 * 60, rel=1e-6)
    assert whole_machines_cost_usd(five, {t.id: [resource] for t in five.tasks}, 40.0) == pytest.approx(
        per_second * 3 * 60, rel=1e-6
    )
    # At most two machines of that type: the bound says so by being infeasible (0, no bound), never too high.
    two = _catalog(replace(resource, count=2))
    assert cost_lower_bound_usd(five, two, deadline_s=40.0) == pytest.approx(per_second * 75 * 60 / 30)


def test_cost_bound_fills_cheap_types_only_as_far_as_their_counts_reach_by_the_deadline() -> None:
    # Eight tasks of 30 s on one core: 240 machine-seconds. One cheap machine (1 USD/h) can be busy for
    # at most the deadline's 60 s, so 180 s go on the dear type (2 USD/h), whatever the plan.
    cheap = Resource("cheap", "local", vcpus=1, memory_gib=1, speed=1.0, price_per_hour_usd=1.0, count=1)
    dear = Resource("dear", "local", vcpus=1, memory_gib=1, speed=1.0, price_per_hour_usd=2.0, count=None)
    workflow = _independent(8, runtime_s=30.0)
    assert cost_lower_bound_usd(workflow, _catalog(cheap, dear), deadline_s=60.0) == pytest.approx(
        (60 * 1.0 + 180 * 2.0) / 3600, rel=1e-6
    )
    assert cost_lower_bound_usd(workflow, _catalog(cheap, dear)) == pytest.approx(240 / 3600, rel=1e-6)  # no deadline
    # A boot of 20 s leaves the cheap machine 40 busy seconds before the deadline.
    booted = replace(cheap, boot_s=20.0)
    assert cost_lower_bound_usd(workflow, _catalog(booted, dear), deadline_s=60.0) >= (40 * 1.0 + 200 * 2.0) / 3600


def test_cost_bound_of_alike_tasks_in_classes_equals_the_bound_task_by_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """Very large workflows are bounded over classes of alike tasks: the same value where the tasks are alike."""
    import agora_optimizer.planning.bounds as bounds

    catalog = _catalog(
        Resource("cheap", "local", vcpus=2, memory_gib=1, speed=1.0, price_per_hour_usd=1.0, count=1),
        Resource("fast", "local", vcpus=4, memory_gib=8, speed=2.0, price_per_hour_usd=5.0, count=2, boot_s=5.0),
        Resource("big", "local", vcpus=8, memory_gib=2, speed=1.5, price_per_hour_usd=3.0, count=None),
    )
    tasks = [Task(f"t{i}", 10.0 + i % 7, 1 + i % 2, 2**29 * (1 + i % 3), "t") for i in range(60)]
    workflow = Workflow.create("w", tasks, [])
    task_by_task = cost_lower_bound_usd(workflow, catalog, deadline_s=40.0)
    monkeypatch.setattr(bounds, "LP_MAX_VARIABLES", 20)  # 60 tasks x 2 or 3 types: classes instead
    assert cost_lower_bound_usd(workflow, catalog, deadline_s=40.0) == pytest.approx(task_by_task, rel=1e-6)


def test_window_bound_counts_whole_tasks_between_a_split_and_a_join() -> None:
    # split (2 s) -> 4 maps of 6 s -> join (3 s) on 3 identical one-core machines: one machine
    # must run two maps back to back, so no plan ends before 2 + 12 + 3 = 17 s. Perfect work
    # sharing would say 2 + 8 + 3 = 13 s (and the critical path 11 s).
    maps = [Task(f"m{i}", 6.0, 1, 1, "map") for i in range(4)]
    tasks = [Task("split", 2.0, 1, 1, "split"), *maps, Task("join", 3.0, 1, 1, "join")]
    edges = [Edge("split", m.id) for m in maps] + [Edge(m.id, "join") for m in maps]
    catalog = _catalog(Resource("A", "local", vcpus=1, memory_gib=1, speed=1.0, price_per_hour_usd=0, count=3))
    assert makespan_lower_bound_s(Workflow.create("w", tasks, edges), catalog) == pytest.approx(17.0)


def test_window_bound_counts_how_many_tasks_fit_in_a_machines_memory() -> None:
    # 6 tasks of 10 s and 1.5 GiB on one 8-core machine of 4 GiB: only two run at once (memory,
    # not cores, decides), so three rounds: 30 s. Sharing the memory perfectly says 22.5 s.
    tasks = [Task(f"t{i}", 10.0, 1, int(1.5 * 2**30), "t") for i in range(6)]
    catalog = _catalog(Resource("A", "local", vcpus=8, memory_gib=4, speed=1.0, price_per_hour_usd=0, count=1))
    assert makespan_lower_bound_s(Workflow.create("w", tasks, []), catalog) == pytest.approx(30.0)


def test_work_bound_leaves_out_each_types_boot() -> None:
    # One 1-core machine that boots in 100 s, two independent tasks of 50 s: the path says 150 s,
    # the work (100 core-seconds from 100 s on) says 200 s, which the only plan takes.
    catalog = _catalog(
        Resource("m", "aws", vcpus=1, memory_gib=1, speed=1.0, price_per_hour_usd=1, count=1, boot_s=100),
    )
    assert makespan_lower_bound_s(_independent(2, runtime_s=50.0), catalog) == pytest.approx(200.0)


def test_work_bound_counts_a_type_that_boots_after_the_path_from_the_path_on() -> None:
    # fast: 4 machines, ready at 0; late: 4 machines that boot in 1,000 s. 40 tasks of 10 s: the path
    # is 10 s, and by then late has no capacity, but a bound must not assume it never helps:
    # (T - 0) * 4 + (T - 10) * 4 >= 400 gives T >= 55, whereas fast alone would need 100 s.
    catalog = _catalog(
        Resource("fast", "aws", vcpus=1, memory_gib=1, speed=1.0, price_per_hour_usd=1, count=4, boot_s=0),
        Resource("late", "aws", vcpus=1, memory_gib=1, speed=1.0, price_per_hour_usd=1, count=4, boot_s=1000),
    )
    bound = makespan_lower_bound_s(_independent(40, runtime_s=10.0), catalog)
    assert bound == pytest.approx(55.0)
    assert bound <= 100.0  # the optimum: fast alone, ten tasks each, before late is up


@pytest.mark.parametrize("seed", SEEDS)
def test_makespan_bound_never_exceeds_the_exact_optimum(seed: int) -> None:
    from dataclasses import replace

    from agora_optimizer.engines.heft import HeftEngine
    from agora_optimizer.model import Objective
    from agora_optimizer.planning.problem import Problem
    from tests.engines.exact.test_milp import brute_force, tiny_problem

    problem = tiny_problem(seed, Objective(kind="time"))
    counted = Catalog(  # odd seeds: boots of their own per type, which the work bound leaves out
        tuple(
            replace(r, count=r.count or 1 + seed % 2, boot_s=r.boot_s + (3.0 * k if seed % 2 else 0.0))
            for k, r in enumerate(problem.catalog.resources)
        ),
        problem.catalog.bandwidth_bytes_per_s,
    )
    problem = Problem.create(problem.workflow, counted, Objective(kind="time"))
    heft = HeftEngine().solve(problem, time_limit_s=5.0)  # a first best, so the search only proves it or beats it
    assert heft is not None
    oracle = brute_force(problem, incumbent=list(heft.assignments))
    assert oracle is not None
    optimum_s = max(a.end_s for a in oracle[1])
    assert makespan_lower_bound_s(problem.workflow, counted) <= optimum_s + 1e-6


@pytest.mark.parametrize("seed", SEEDS)
def test_cost_bound_under_a_deadline_never_exceeds_the_exact_optimum(seed: int) -> None:
    """The exhaustive optimum of tiny instances under deadlines from tight to loose (whole machines matter)."""
    from agora_optimizer.model import Objective
    from tests.engines.exact.test_milp import brute_force, tiny_problem

    timed = brute_force(tiny_problem(seed, Objective(kind="time")))
    assert timed is not None
    fastest_s = timed[0] * tiny_problem(seed).bounds.makespan_s  # the score is makespan over its bound
    for slack in (1.0, 1.3, 2.0):
        problem = tiny_problem(seed, Objective(kind="cost", deadline_s=fastest_s * slack))
        oracle = brute_force(problem)
        assert oracle is not None
        optimum_usd = oracle[0] * problem.bounds.cost_usd  # the score is cost over the bound
        assert problem.bounds.cost_usd <= optimum_usd * (1 + 1e-9)


@pytest.mark.parametrize("deadline_s", [None, 1.0])
def test_a_workflow_with_no_tasks_has_bounds_of_zero(deadline_s: float | None) -> None:
    """No task, no lease: the cost bound was min() of no resource types, a ValueError."""
    catalog = _catalog(Resource("A", "local", vcpus=2, memory_gib=1, speed=1.0, price_per_hour_usd=1.0, boot_s=5))
    assert makespan_lower_bound_s(_independent(0), catalog) == 0.0
    assert cost_lower_bound_usd(_independent(0), catalog, deadline_s) == 0.0


def test_cost_bound_counts_gpu_seconds_over_a_types_gpus() -> None:
    # Four 10 s tasks of one core and one GPU on a 64-core type with one GPU at 1 $/s: by cores the
    # work is 0.625 s of a machine, by GPUs 40 s, which the one machine running them in turn takes.
    one_gpu = Resource("g", "aws", 64, 512, 1.0, 3600.0, None, Billing(1.0, 0.0), 0.0, gpus=1)
    tasks = [Task(f"t{i}", 10.0, 1, 1, "t", gpus=1) for i in range(4)]
    assert cost_lower_bound_usd(Workflow.create("w", tasks, []), _catalog(one_gpu)) == pytest.approx(40.0, rel=1e-6)


def test_a_task_needing_more_gpus_than_any_type_names_the_largest_offer() -> None:
    cpu = Resource("c", "aws", 96, 768, 1.0, 4.0)
    four = Resource("g5.12xlarge", "aws", 48, 192, 1.0, 5.672, gpus=4)
    eight = Resource("p4d.24xlarge", "aws", 96, 1152, 1.0, 21.96, gpus=8)
    greedy = Workflow.create("w", [Task("a", 1.0, 1, 1, "t"), Task("train", 1.0, 1, 1, "t", gpus=16)], [])
    with pytest.raises(TooManyGpusError, match=r"task 'train' needs 16 GPUs.*the most is p4d\.24xlarge with 8"):
        feasible_types(greedy, _catalog(cpu, four, eight))
    with pytest.raises(UnplaceableTaskError):  # still one of them, for whoever catches those
        feasible_types(greedy, _catalog(cpu))
    # GPUs enough, but not beside that many cores: the general error, GPUs named
    wide = Workflow.create("w", [Task("wide", 1.0, 64, 1, "t", gpus=2)], [])
    with pytest.raises(UnplaceableTaskError, match=r"task 'wide' \(cores=64, memory_bytes=1, gpus=2\)") as caught:
        feasible_types(wide, _catalog(four))
    assert not isinstance(caught.value, TooManyGpusError)


def test_makespan_bound_counts_gpu_seconds_over_a_types_gpus() -> None:
    # Three 10 s tasks of one GPU on the one 2-GPU machine there is: 30 GPU-seconds over 2 GPUs is
    # 15 s (cores alone give 30 core-seconds over 16 cores); the best plan takes 20 s.
    two = Resource("g", "aws", 16, 64, 1.0, 1.0, 1, Billing(1.0, 0.0), 0.0, gpus=2)
    tasks = [Task(f"t{i}", 10.0, 1, 1, "t", gpus=1) for i in range(3)]
    assert 15.0 * (1 - 1e-6) <= makespan_lower_bound_s(Workflow.create("w", tasks, []), _catalog(two)) <= 20.0


def test_cost_bounds_with_gpus_never_exceed_a_plan_of_them() -> None:
    # Under a deadline too, where the LP and the whole-machines MILP count GPU-seconds per type.
    cpu = Resource("c", "aws", 4, 16, 1.0, 0.4, 4, Billing(1.0, 0.0), 0.0)
    gpu = Resource("g", "aws", 8, 32, 1.0, 3.6, 2, Billing(1.0, 60.0), 30.0, gpus=2)
    tasks = [Task(f"t{i}", 10.0, 1, 1, "t", gpus=1) for i in range(4)] + [Task("p", 40.0, 4, 1, "p")]
    workflow = Workflow.create("w", tasks, [])
    # a plan: the four GPU tasks two by two on g#0 from 30 s to 50 s (lease 0-50 s, billed 60 s),
    # p on c#0 (40 s): 60 * 0.001 + 40 * 0.4 / 3600
    plan_cost = 60 * 3.6 / 3600 + 40 * 0.4 / 3600
    for deadline in (None, 50.0, 100.0):
        assert cost_lower_bound_usd(workflow, _catalog(cpu, gpu), deadline) <= plan_cost * (1 + 1e-9)
    # by GPUs alone: 40 GPU-seconds over 2 GPUs is 20 s of g at 0.001 USD/s, beyond its 30 s of boot
    assert cost_lower_bound_usd(workflow, _catalog(cpu, gpu), 50.0) >= (20 + 30) * 3.6 / 3600 * (1 - 1e-6)


def test_cost_bound_pays_the_boot_of_a_gpu_machine_when_a_task_needs_one() -> None:
    cpu = Resource("cpu", "aws", vcpus=4, memory_gib=8, speed=1.0, price_per_hour_usd=0.36, count=4, boot_s=30)
    gpu = Resource("gpu", "aws", vcpus=4, memory_gib=16, speed=1.0, price_per_hour_usd=3.6, count=1, boot_s=100, gpus=1)
    tasks = [Task("prep", 100.0, 4, GIB, "t"), Task("train", 100.0, 4, GIB, "t", gpus=1)]
    workflow = Workflow.create("w", tasks, [Edge("prep", "train")])
    # The work: prep on cpu (100 s x 0.0001 USD/s), train on gpu (100 s x 0.001 USD/s); the gpu
    # machine that train needs boots for 100 s whatever else is leased.
    assert cost_lower_bound_usd(workflow, _catalog(cpu, gpu)) == pytest.approx(0.01 + 0.1 + 0.1)

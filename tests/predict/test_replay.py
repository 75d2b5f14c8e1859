"""Replaying a plan with the actual runtimes and memory."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from agora_optimizer.errors import PlanMismatchError
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Objective, Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.optimize.optimize import optimize
from agora_optimizer.planning.validate import validate_plan
from agora_optimizer.predict.errors import UnknownResourceError
from agora_optimizer.predict.replay import replay
from tests.predict.conftest import BLAST_1, SRA_1


@pytest.fixture(scope="module", params=[BLAST_1, SRA_1], ids=lambda p: p.stem)
def planned(request: pytest.FixtureRequest, catalog: Catalog) -> tuple[Workflow, Plan]:
    workflow = load_workflow(request.param)
    return workflow, optimize(workflow, catalog, Objective(kind="time"), "aws", time_limit_s=0.5)  # any plan


def _scaled(workflow: Workflow, runtime: float = 1.0, memory: float = 1.0) -> Workflow:
    tasks = [
        replace(t, runtime_s=t.runtime_s * runtime, memory_bytes=int(t.memory_bytes * memory)) for t in workflow.tasks
    ]
    return Workflow.create(workflow.name, tasks, list(workflow.edges), source=workflow.source)


def test_replaying_a_plan_with_its_own_workflow_gives_its_makespan(planned, catalog: Catalog) -> None:
    workflow, plan = planned
    result = replay(plan, workflow, catalog)
    assert result.makespan_s == pytest.approx(plan.makespan_s, rel=1e-9, abs=1e-6)
    assert result.cost_usd == pytest.approx(plan.cost_usd, rel=1e-9)
    assert result.oom_tasks == ()
    replayed = replace(plan, assignments=result.assignments, makespan_s=result.makespan_s, cost_usd=result.cost_usd)
    assert validate_plan(replayed, workflow, catalog) == []


def test_a_slower_truth_gives_a_longer_valid_schedule(planned, catalog: Catalog) -> None:
    workflow, plan = planned
    slower = _scaled(workflow, runtime=2.0)
    result = replay(plan, slower, catalog)
    boot = min(r.boot_s for r in catalog.resources)  # the wait before any task, unchanged by runtimes
    assert result.makespan_s - boot > 1.5 * (plan.makespan_s - boot)
    assert result.cost_usd >= plan.cost_usd  # (equal while every lease stays under its 60 s minimum)
    replayed = replace(plan, assignments=result.assignments, makespan_s=result.makespan_s, cost_usd=result.cost_usd)
    assert validate_plan(replayed, slower, catalog) == []  # precedence, capacity, durations of the truth
    on_machine: dict[str, list[str]] = {}
    for a in sorted(plan.assignments, key=lambda a: a.start_s):
        on_machine.setdefault(a.machine, []).append(a.task)
    starts = {a.task: a.start_s for a in result.assignments}
    for tasks in on_machine.values():  # each machine keeps the plan's order
        assert [starts[t] for t in tasks] == sorted(starts[t] for t in tasks)


def test_tasks_over_their_reservation_are_counted(planned, catalog: Catalog) -> None:
    workflow, plan = planned
    hungrier = _scaled(workflow, memory=1.5)
    result = replay(plan, hungrier, catalog)
    over = [a.task for a in plan.assignments if hungrier.by_id[a.task].memory_bytes > a.memory_bytes]
    assert over and sorted(t.task for t in result.oom_tasks) == sorted(over)
    assert result.summary()["oom_count"] == len(over)


def test_a_plan_for_another_workflow_or_catalog_is_refused(planned, catalog: Catalog) -> None:
    workflow, plan = planned
    with pytest.raises(PlanMismatchError):
        replay(replace(plan, workflow="other"), workflow, catalog)
    with pytest.raises(PlanMismatchError, match="exactly once"):
        replay(replace(plan, assignments=plan.assignments[1:]), workflow, catalog)
    strange = (replace(plan.assignments[0], resource="x9.mega", machine="x9.mega#0"), *plan.assignments[1:])
    with pytest.raises(UnknownResourceError, match=re.escape("x9.mega")):
        replay(replace(plan, assignments=strange), workflow, catalog)


def test_a_type_runs_no_more_machines_at_once_than_its_count_even_when_the_truth_would_allow() -> None:
    """Two independent tasks planned one after the other on two machines of a type of count 1 (leases that
    never overlap, as the spec's count asks): the replay does not start the second at 0 on its idle machine,
    as the executor's pool of one machine would not."""
    from agora_optimizer.model.catalog import Resource
    from agora_optimizer.model.plan import Assignment, SolverInfo
    from agora_optimizer.model.workflow import Task

    one = Resource("one", "local", vcpus=1, memory_gib=1, speed=1.0, price_per_hour_usd=3.6, count=1)
    catalog = Catalog(resources=(one,), bandwidth_bytes_per_s=1e9, source="<test>")
    workflow = Workflow.create("two", [Task("a", 10.0, 1, 2**20, "c"), Task("b", 10.0, 1, 2**20, "c")], [])
    items = (
        Assignment("a", "one", "one#0", 0.0, 10.0, 1, 2**20),
        Assignment("b", "one", "one#1", 10.0, 20.0, 1, 2**20),
    )
    plan = Plan(
        "two", "<test>", Objective("time"), 20.0, 0.02, items, SolverInfo("hand", "heuristic", None, 0.0), "now"
    )
    assert validate_plan(plan, workflow, catalog) == []
    result = replay(plan, workflow, catalog)
    assert [(a.start_s, a.end_s) for a in result.assignments] == [(0.0, 10.0), (10.0, 20.0)]
    unlimited = Catalog(resources=(replace(one, count=None),), bandwidth_bytes_per_s=1e9, source="<test>")
    assert replay(plan, workflow, unlimited).makespan_s == 10.0  # without a count, both machines at once


def _opening_plan(kind: str, price: float, backend: str, tail_waits_for_slow: bool) -> tuple[Plan, Workflow, Catalog]:
    """``first`` (0-10 s) then ``slow`` (10-30 s) on one#0; ``late`` (child of ``first``) then ``tail`` on one#1,
    whose lease is planned to open at 30 s; ``tail`` is a child of ``late`` and, if ``tail_waits_for_slow``,
    of ``slow``."""
    from agora_optimizer.model.catalog import Resource
    from agora_optimizer.model.plan import Assignment, SolverInfo
    from agora_optimizer.model.workflow import Edge, Task
    from agora_optimizer.planning.leases import cost_usd

    one = Resource("one", backend, vcpus=1, memory_gib=1, speed=1.0, price_per_hour_usd=price)  # type: ignore[arg-type]
    catalog = Catalog(resources=(one,), bandwidth_bytes_per_s=1e9, source="<test>")
    runtimes = {"first": 10.0, "slow": 20.0, "late": 10.0, "tail": 10.0}
    tasks = [Task(name, runtime_s, 1, 2**20, "c") for name, runtime_s in runtimes.items()]
    edges = [Edge("first", "slow", 0), Edge("first", "late", 0), Edge("late", "tail", 0)]
    workflow = Workflow.create("four", tasks, [*edges, *([Edge("slow", "tail", 0)] if tail_waits_for_slow else [])])
    items = (
        Assignment("first", "one", "one#0", 0.0, 10.0, 1, 2**20),
        Assignment("slow", "one", "one#0", 10.0, 30.0, 1, 2**20),
        Assignment("late", "one", "one#1", 30.0, 40.0, 1, 2**20),
        Assignment("tail", "one", "one#1", 40.0, 50.0, 1, 2**20),
    )
    solver = SolverInfo("hand", "heuristic", None, 0.0)
    plan = Plan("four", "<test>", Objective(kind), 50.0, cost_usd(items, catalog), items, solver, "now")  # type: ignore[arg-type]
    assert validate_plan(plan, workflow, catalog) == []
    return plan, workflow, catalog


@pytest.mark.parametrize(("kind", "price", "backend", "opens_s"), [
    ("cost", 3.6, "local", 30.0),  # a cost plan's priced machine opens when planned, as the executor opens it
    ("balanced", 3.6, "aws", 30.0),
    ("time", 3.6, "local", 10.0),  # a time plan's opens as soon as its first task may start
    ("cost", 0.0, "local", 10.0),  # nothing to save on a free type
    ("cost", 3.6, "slurm", 10.0),  # an allocation is held from its first job's arrival either way
])  # fmt: skip
def test_a_machine_opens_where_the_executor_opens_it(kind: str, price: float, backend: str, opens_s: float) -> None:
    """``late`` waits for nothing but its parent (10 s); opened then, its machine would wait for ``slow`` (30 s)."""
    plan, workflow, catalog = _opening_plan(kind, price, backend, tail_waits_for_slow=True)
    result = {a.task: a for a in replay(plan, workflow, catalog).assignments}
    assert result["late"].start_s == opens_s


def test_a_machine_that_waits_for_nothing_outside_it_opens_early_and_keeps_its_lease_length() -> None:
    """A cost plan's machine whose tasks depend on nothing still running elsewhere opens as soon as its first task
    may start (``first`` ended at 10 s): the run keeps its lead, and the lease is as long as planned."""
    plan, workflow, catalog = _opening_plan("cost", 3.6, "local", tail_waits_for_slow=False)
    result = {a.task: a for a in replay(plan, workflow, catalog).assignments}
    assert (result["late"].start_s, result["tail"].end_s) == (10.0, 30.0)
    assert replay(plan, workflow, catalog).cost_usd == pytest.approx(plan.cost_usd)
    count_1 = Catalog(resources=(replace(catalog.resources[0], count=1),), bandwidth_bytes_per_s=1e9, source="<test>")
    one_at_a_time = {a.task: a for a in replay(plan, workflow, count_1).assignments}
    assert one_at_a_time["late"].start_s == 30.0  # one machine of the type at a time: one#0 runs slow until 30 s

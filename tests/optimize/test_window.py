"""Many DAG runs on one platform: shared counts, each run's plan, joint against alone (issue 20, part 2)."""

from __future__ import annotations

import itertools

import pytest

from agora_optimizer.model.catalog import GIB, Billing, Catalog, Resource
from agora_optimizer.model.plan import Objective
from agora_optimizer.model.workflow import Edge, Task, Workflow
from agora_optimizer.optimize.optimize import build_plan
from agora_optimizer.optimize.window import (
    UnplannableWindowError,
    WindowProgress,
    WindowRun,
    WindowSchedule,
    aimed_runs,
    count_peaks,
    over_counts,
    plan_each_alone,
    plan_first_come,
    plan_jointly,
    with_runs,
)
from agora_optimizer.planning.leases import leases
from agora_optimizer.planning.shared_counts import CountLedger
from agora_optimizer.planning.validate import validate_plan


def _resource(name: str, speed: float, price: float, count: int | None, boot_s: float = 0.0) -> Resource:
    return Resource(name, "aws", 2, 4.0, speed, price, count=count, billing=Billing(1.0, 0.0), boot_s=boot_s)


def _chain(name: str, runtimes: list[float], memory_gib: float = 1.0) -> Workflow:
    tasks = [Task(f"t{i}", r, 1, int(memory_gib * GIB), "work") for i, r in enumerate(runtimes)]
    edges = [Edge(f"t{i}", f"t{i + 1}") for i in range(len(runtimes) - 1)]
    return Workflow.create(name, tasks, edges)


def _fan(name: str, width: int, runtime_s: float) -> Workflow:
    tasks = [Task(f"w{i}", runtime_s, 2, GIB, "work") for i in range(width)]
    return Workflow.create(name, tasks, [])


def _checked(schedule: WindowSchedule, catalog: Catalog) -> None:
    """Every run's plan passes the spec's checker on its own (within its deadline unless the schedule says it
    is late); together they stay within the counts."""
    for plan in schedule.plans:
        objective = Objective(kind="cost", deadline_s=plan.run.deadline_s if plan.on_time else None)
        document = build_plan(plan.run.workflow, catalog, objective, "catalog", plan.assignments, "test", 0.0)
        assert validate_plan(document, plan.run.workflow, catalog) == [], plan.run.name
        assert {a.task for a in plan.assignments} == {t.id for t in plan.run.workflow.tasks}
    assert over_counts(schedule.plans, catalog) == {}


def test_the_ledger_counts_leases_at_each_instant_and_finds_where_a_new_one_fits() -> None:
    catalog = Catalog((_resource("a", 1.0, 1.0, count=2),), 1e9)
    ledger = CountLedger(catalog)
    ledger.place("a", "r1/a#0", 0.0, 10.0)
    ledger.place("a", "r2/a#0", 5.0, 20.0)
    assert not ledger.fits("a", 6.0, 8.0)  # two at once already
    assert ledger.fits("a", 10.0, 12.0)  # the first has ended
    assert ledger.earliest_start("a", 2.0, 5.0) == 10.0
    assert ledger.earliest_start("a", 0.0, 4.0) == 0.0  # before the second begins
    # A machine grown within its lease counts once; grown into a stretch where the count is reached, not at all.
    assert ledger.fits("a", 0.0, 10.0, machine="r1/a#0")
    assert ledger.fits("a", 0.0, 12.0, machine="r1/a#0")  # [10, 12): only r2's besides
    ledger.place("a", "r3/a#0", 10.0, 15.0)
    assert not ledger.fits("a", 0.0, 12.0, machine="r1/a#0")  # [10, 12): r2's and r3's
    ledger.place("a", "r1/a#0", 0.0, 4.0)  # replaced, not added
    assert ledger.earliest_start("a", 2.0, 5.0) == 2.0  # one at a time over [2, 7)
    assert ledger.earliest_start("a", 2.0, 10.0) == 15.0  # [10, 15) is full
    twin = ledger.copy()
    twin.place("a", "r4/a#0", 4.0, 30.0)
    assert ledger.fits("a", 21.0, 25.0)
    assert twin.fits("a", 21.0, 25.0)  # r4's alone there
    assert not twin.fits("a", 12.0, 14.0)  # r2's, r3's and r4's: the copy has its own leases
    assert ledger.fits("a", 4.0, 5.0)


@pytest.mark.slow  # plans for seconds
def test_runs_that_start_together_share_a_count_of_one_and_both_meet_their_deadlines() -> None:
    catalog = Catalog((_resource("only", 1.0, 3.6, count=1),), 1e9)
    runs = [WindowRun(f"run{i}", _chain(f"wf{i}", [10.0, 10.0]), offset_s=0.0, deadline_s=60.0) for i in range(2)]
    joint = plan_jointly(runs, catalog, time_limit_s=5.0)
    _checked(joint, catalog)
    assert joint.late_runs == []
    # One machine at a time: the second run's lease waits for the first one's to end.
    spans = sorted((lease.start_s + p.run.offset_s, lease.end_s + p.run.offset_s) for p in joint.plans
                   for lease in leases(p.assignments, catalog))  # fmt: skip
    assert len(spans) == 2 and spans[0][1] <= spans[1][0] + 1e-6
    assert count_peaks(joint.plans, catalog) == {"only": (1, pytest.approx(spans[0][0]))}


@pytest.mark.slow  # plans for seconds
def test_planned_each_alone_the_runs_exceed_the_count_that_joint_planning_keeps() -> None:
    catalog = Catalog((_resource("fast", 2.0, 7.2, count=1), _resource("slow", 1.0, 3.0, count=None)), 1e9)
    runs = [WindowRun(f"run{i}", _chain(f"wf{i}", [20.0, 20.0]), offset_s=5.0 * i, deadline_s=25.0) for i in range(2)]
    alone = plan_each_alone(runs, catalog, time_limit_s=4.0)
    assert over_counts(alone.plans, catalog) == {"fast": (2, pytest.approx(5.0))}  # both need it at once
    joint = plan_jointly(runs, catalog, time_limit_s=5.0)
    _checked(joint, catalog)
    # Only one run can have the fast type in time: the other cannot make its deadline on the slow one.
    assert len(joint.late_runs) == 1
    first_come = plan_first_come(runs, catalog, time_limit_s=5.0)
    assert first_come.late_runs == ["run1"]  # the later one finds the fast machine taken


@pytest.mark.slow  # plans for seconds
def test_joint_planning_costs_no_more_than_first_come_and_gives_each_run_its_own_machines() -> None:
    catalog = Catalog(
        (_resource("cheap", 1.0, 1.0, count=2), _resource("dear", 1.0, 4.0, count=None)),
        1e9,
    )
    runs = [
        WindowRun("loose", _fan("a", 2, 30.0), offset_s=0.0, deadline_s=200.0),
        WindowRun("tight", _fan("b", 2, 30.0), offset_s=10.0, deadline_s=31.0),
    ]
    first_come = plan_first_come(runs, catalog, time_limit_s=5.0)
    told: list[WindowProgress] = []
    joint = plan_jointly(runs, catalog, time_limit_s=5.0, progress=told.append)
    _checked(joint, catalog)
    assert joint.late_runs == [] and first_come.late_runs == []
    assert joint.cost_usd <= first_come.cost_usd + 1e-9
    # The display is told each step, with the best window so far: its cost never rises (no run is late)
    assert [t.stage for t in told[:3]] == ["each run alone", "first come", "joint search, step 1"]
    assert told[0].cost_usd is None and told[-1] == WindowProgress("joint search done", joint.cost_usd, 0)
    costs = [t.cost_usd for t in told[2:] if t.cost_usd is not None]
    assert len(costs) == len(told) - 2
    assert all(later <= earlier + 1e-12 for earlier, later in itertools.pairwise(costs))
    for plan in joint.plans:  # machines TYPE#N of its own, numbered from 0; times from the run's start
        kinds: dict[str, set[str]] = {}
        for a in plan.assignments:
            kinds.setdefault(a.resource, set()).add(a.machine)
            assert a.start_s >= 0.0
        for kind, machines in kinds.items():
            assert machines == {f"{kind}#{i}" for i in range(len(machines))}


def test_no_lease_of_a_run_begins_before_its_run_nor_before_its_boot() -> None:
    catalog = Catalog((_resource("booting", 1.0, 3.6, count=None, boot_s=30.0),), 1e9)
    runs = [WindowRun("late-start", _chain("wf", [5.0]), offset_s=100.0, deadline_s=None)]
    (plan,) = plan_jointly(runs, catalog, time_limit_s=2.0).plans
    (lease,) = leases(plan.assignments, catalog)
    assert lease.start_s == pytest.approx(0.0) and plan.assignments[0].start_s == pytest.approx(30.0)


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        ([], "no DAG run"),
        ([WindowRun("x", _chain("wf", [1.0]), 0.0), WindowRun("x", _chain("wf", [1.0]), 5.0)], "'x' is twice"),
        ([WindowRun("neg", _chain("wf", [1.0]), -1.0)], "'neg': offset_s must be >= 0"),
        ([WindowRun("huge", _chain("wf", [1.0], memory_gib=64.0), 0.0)], "DAG run 'huge'"),
    ],
)
def test_a_window_that_cannot_be_planned_is_refused_naming_the_run(runs: list[WindowRun], message: str) -> None:
    catalog = Catalog((_resource("a", 1.0, 1.0, count=None),), 1e9)
    with pytest.raises(UnplannableWindowError, match=message):
        plan_jointly(runs, catalog, time_limit_s=1.0)


def test_a_margin_aims_each_run_early_but_not_before_its_bound_and_the_plans_keep_the_deadlines() -> None:
    # One 100 s task: the slow type ends it at 100 s for the least cost, the fast one at 50 s for more.
    catalog = Catalog((_resource("slow", 1.0, 1.0, count=2), _resource("fast", 2.0, 3.0, count=2)), 1e9)
    runs = [
        WindowRun("loose", _chain("loose", [100.0]), 0.0, deadline_s=100.0),
        WindowRun("tight", _chain("tight", [100.0]), 10.0, deadline_s=52.0),  # its aim would be below the bound
        WindowRun("free", _chain("free", [100.0]), 20.0),
    ]
    aimed = aimed_runs(runs, catalog, 0.1)
    assert [r.deadline_s for r in aimed] == [pytest.approx(90.0), pytest.approx(50.0), None]
    assert aimed_runs(runs, catalog, 0.0) == runs
    # bounds the caller has are the ones it aims by: here, a bound of 80 s puts "tight" at its deadline
    handed = aimed_runs(runs, catalog, 0.1, {"loose": 50.0, "tight": 80.0, "free": 50.0})
    assert [r.deadline_s for r in handed] == [pytest.approx(90.0), pytest.approx(52.0), None]
    with pytest.raises(ValueError, match="deadline margin"):
        aimed_runs(runs, catalog, 1.0)
    for plan_window in (plan_jointly, plan_first_come):
        at_deadline = {p.run.name: p for p in plan_window(runs, catalog, 2.0).plans}
        early = with_runs(plan_window(aimed, catalog, 2.0), runs)
        _checked(early, catalog)
        plans = {p.run.name: p for p in early.plans}
        assert at_deadline["loose"].makespan_s == pytest.approx(100.0)  # at its deadline: the slow type
        assert plans["loose"].makespan_s == pytest.approx(50.0)  # aimed at 90 s: the fast type
        assert plans["loose"].cost_usd > at_deadline["loose"].cost_usd
        assert [p.run for p in early.plans] == runs  # late and on time against the runs' own deadlines
        assert early.late_runs == [] and early.lateness_s() == 0.0

"""Re-planning a drifted run: what ran stays, what is pending moves, and the whole run stays valid.

Every re-plan here is checked whole (done and running tasks as they ran, pending ones as placed)
by the plan validator and by the independent spec checker, against the workflow *as it ran*: a
done or running task's runtime is what it really took (or is expected to), so the spec's
"duration = runtime / speed" holds for it too. Where the run itself held more machines of a type at
once than its count (as an executor that holds a type to ``count x vcpus`` cores may), what is
planned keeps the count from the instant that ended.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.engines.list_scheduling import ListSchedulingEngine
from agora_optimizer.errors import UnplaceableTaskError
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.plan_file import plan_to_dict
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.catalog import GIB, Billing, Catalog, Resource
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.model.workflow import Edge, Task, Workflow
from agora_optimizer.optimize.optimize import optimize
from agora_optimizer.optimize.portfolio import Stage
from agora_optimizer.planning.leases import cost_usd, leases, makespan_s
from agora_optimizer.planning.replan import replan
from agora_optimizer.planning.retime import retime, start_order
from agora_optimizer.planning.run_state import Done, Pending, Replan, ReplanError, Running, TaskState
from agora_optimizer.planning.validate import count_violations, validate_plan
from agora_optimizer.predict.repair_replay import replay_with_repairs
from tests import spec_checker
from tests.conftest import BUNDLED, wfformat_15, write_json, write_yaml

BANDWIDTH = 100e6  # bytes/s: 1 GB takes 10 s between machines


def resource(name: str, **fields: Any) -> Resource:
    base: dict[str, Any] = {
        "backend": "aws",
        "vcpus": 1,
        "memory_gib": 4.0,
        "speed": 1.0,
        "price_per_hour_usd": 3.6,
        "count": 2,
        "billing": Billing(1.0, 0.0),
        "boot_s": 0.0,
    }
    base.update(fields)
    return Resource(name=name, **base)


def catalog(*resources: Resource) -> Catalog:
    return Catalog(resources=resources, bandwidth_bytes_per_s=BANDWIDTH)


def workflow(
    tasks: dict[str, float], edges: list[tuple[str, str, int]], memory: dict[str, int] | None = None
) -> Workflow:
    memory = memory or {}
    return Workflow.create(
        "wf",
        [Task(t, runtime, 1, memory.get(t, GIB), "cat") for t, runtime in tasks.items()],
        [Edge(p, c, b) for p, c, b in edges],
    )


def plan_of(wf: Workflow, cat: Catalog, rows: list[tuple[str, str, float]], objective: Objective) -> Plan:
    """A plan placing each (task, machine, start) for its runtime on that machine's type."""
    assignments = []
    for task_id, machine, start in rows:
        res = cat.by_name[machine.split("#")[0]]
        task = wf.by_id[task_id]
        end = start + res.runtime_s(task)
        assignments.append(Assignment(task_id, res.name, machine, start, end, task.cores, task.memory_bytes))
    plan = whole_plan(assignments, cat, objective)
    assert validate_plan(plan, wf, cat) == []
    return plan


def whole_plan(assignments: list[Assignment] | tuple[Assignment, ...], cat: Catalog, objective: Objective) -> Plan:
    items = tuple(sorted(assignments, key=lambda a: (a.start_s, a.task)))
    return Plan(
        "wf",
        "test",
        objective,
        makespan_s(items),
        cost_usd(items, cat),
        items,
        SolverInfo("replan", "heuristic", None, 0.0),
        "2026-12-01T00:00:00Z",
    )


def as_run(wf: Workflow, cat: Catalog, result: Replan) -> Workflow:
    """The workflow with each done or running task's runtime set to what it took (or is expected to)."""
    took = {a.task: (a.end_s - a.start_s) * cat.by_name[a.resource].speed for a in result.fixed}
    tasks = [replace(t, runtime_s=took.get(t.id, t.runtime_s)) for t in wf.tasks]
    return Workflow.create(wf.name, tasks, wf.edges)


def check(wf: Workflow, cat: Catalog, result: Replan, objective: Objective, tmp_path: Path) -> Plan:
    """The whole re-planned run passes the validator and the independent spec checker."""
    ran = as_run(wf, cat, result)
    plan = whole_plan(result.schedule, cat, objective)
    assert sorted(a.task for a in plan.assignments) == sorted(t.id for t in wf.tasks)
    assert [str(v) for v in validate_plan(plan, ran, cat)] == []
    assert spec_checker.check_plan(plan_to_dict(plan), *spec_files(ran, cat, tmp_path)) == []
    assert result.makespan_s == pytest.approx(plan.makespan_s)
    return plan


def spec_files(wf: Workflow, cat: Catalog, tmp_path: Path) -> tuple[Path, Path]:
    """The workflow as WfFormat 1.5 (one file per edge, sized as the edge) and the catalog as YAML."""
    tasks: list[dict[str, Any]] = []
    for t in wf.tasks:
        tasks.append(
            {
                "id": t.id,
                "runtime": t.runtime_s,
                "memory": t.memory_bytes,
                "cores": t.cores,
                "parents": [e.parent for e in wf.parents[t.id]],
                "inputs": [f"{e.parent}-{e.child}" for e in wf.parents[t.id]],
                "outputs": [f"{e.parent}-{e.child}" for e in wf.children[t.id]],
            }
        )
    files = {f"{e.parent}-{e.child}": e.bytes for e in wf.edges}
    resources = [
        {
            "name": r.name,
            "backend": r.backend,
            "vcpus": r.vcpus,
            "memory_gib": r.memory_gib,
            "speed": r.speed,
            "price_per_hour_usd": r.price_per_hour_usd,
            "count": r.count,
            "billing": {"granularity_s": r.billing.granularity_s, "minimum_s": r.billing.minimum_s},
            "boot_s": r.boot_s,
        }
        for r in cat.resources
    ]
    document = {"network": {"bandwidth_bytes_per_s": cat.bandwidth_bytes_per_s}, "resources": resources}
    return (
        write_json(tmp_path / "as-run.json", wfformat_15(tasks, files, name=wf.name)),
        write_yaml(tmp_path / "catalog.yaml", document),
    )


def by_task(result: Replan) -> dict[str, Assignment]:
    return {a.task: a for a in result.schedule}


# a -> b -> d, a -> c -> d: a chain with a fork, 1 GB between a and c (10 s across machines)
CHAIN = workflow(
    {"a": 10.0, "b": 20.0, "c": 20.0, "d": 5.0}, [("a", "b", 0), ("a", "c", 10**9), ("b", "d", 0), ("c", "d", 0)]
)
FAST = catalog(resource("m", boot_s=5.0))
CHAIN_ROWS = [("a", "m#0", 5.0), ("b", "m#0", 15.0), ("c", "m#1", 25.0), ("d", "m#0", 45.0)]


def test_without_drift_every_pending_task_keeps_its_machine_and_its_time(tmp_path: Path) -> None:
    objective = Objective(kind="time")
    plan = plan_of(CHAIN, FAST, CHAIN_ROWS, objective)
    state: dict[str, TaskState] = {"a": Done("m#0", 15.0, 5.0), "b": Running("m#0", 15.0)}
    result = replan(CHAIN, FAST, plan, state, now_s=20.0)
    check(CHAIN, FAST, result, objective, tmp_path)
    assert result.moved_machine == () and result.moved_resource == ()
    planned = {a.task: a for a in plan.assignments}
    for a in result.assignments:
        assert (a.machine, a.start_s, a.end_s) == (
            planned[a.task].machine,
            planned[a.task].start_s,
            planned[a.task].end_s,
        )
    assert result.makespan_s == pytest.approx(plan.makespan_s)
    assert result.cost_usd == pytest.approx(plan.cost_usd)
    assert {a.task for a in result.fixed} == {"a", "b"}


def test_a_slowed_task_moves_its_successors_starts(tmp_path: Path) -> None:
    objective = Objective(kind="time")
    plan = plan_of(CHAIN, FAST, CHAIN_ROWS, objective)
    # a ended 30 s late; b started after it and is still running at now = 60 (planned to end at 35)
    state: dict[str, TaskState] = {"a": Done("m#0", 45.0, 5.0), "b": Running("m#0", 45.0)}
    result = replan(CHAIN, FAST, plan, state, now_s=60.0)
    placed = by_task(result)
    check(CHAIN, FAST, result, objective, tmp_path)
    assert placed["b"].end_s == pytest.approx(65.0)  # expected end: start + planned duration, past now
    assert placed["c"].start_s >= 60.0  # after now, and after a's end plus its transfer if elsewhere
    assert placed["c"].start_s > {a.task: a for a in plan.assignments}["c"].start_s
    assert placed["d"].start_s >= max(placed["b"].end_s, placed["c"].end_s) - 1e-9
    assert result.makespan_s > plan.makespan_s


def test_a_running_task_past_its_planned_end_is_expected_to_end_now(tmp_path: Path) -> None:
    objective = Objective(kind="time")
    plan = plan_of(CHAIN, FAST, CHAIN_ROWS, objective)
    state: dict[str, TaskState] = {"a": Done("m#0", 15.0, 5.0), "b": Running("m#0", 15.0)}
    result = replan(CHAIN, FAST, plan, state, now_s=50.0)  # b was planned to end at 35
    placed = by_task(result)
    check(CHAIN, FAST, result, objective, tmp_path)
    assert placed["b"].end_s == pytest.approx(50.0)
    assert placed["d"].start_s >= 50.0


def test_nothing_pending_starts_before_now_and_a_new_machine_boots_first(tmp_path: Path) -> None:
    wf = workflow({"a": 10.0, "b": 10.0, "c": 10.0}, [])
    cat = catalog(resource("m", boot_s=5.0, count=3))
    objective = Objective(kind="time")
    plan = plan_of(wf, cat, [("a", "m#0", 5.0), ("b", "m#0", 15.0), ("c", "m#1", 5.0)], objective)
    # a runs late on m#0; c failed on m#1 and is to be retried; b waits
    state: dict[str, TaskState] = {"a": Running("m#0", 12.0), "c": Pending()}
    result = replan(wf, cat, plan, state, now_s=18.0)
    placed = by_task(result)
    check(wf, cat, result, objective, tmp_path)
    for a in result.assignments:
        assert a.start_s >= 18.0
        if a.machine not in {"m#0", "m#1"}:  # not leased before now: it boots after now
            assert a.start_s >= 18.0 + 5.0
    assert placed["c"].start_s == pytest.approx(18.0)  # the retry, on m#1, leased and booted already
    assert placed["c"].machine == "m#1"


def test_a_leased_machine_with_nothing_started_on_it_is_used_once_booted(tmp_path: Path) -> None:
    wf = workflow({"a": 10.0}, [])
    cat = catalog(resource("m", boot_s=30.0, count=1))
    objective = Objective(kind="time")
    plan = plan_of(wf, cat, [("a", "m#0", 30.0)], objective)
    result = replan(wf, cat, plan, {}, now_s=10.0)  # the lease began at 0: m#0 is booting
    check(wf, cat, result, objective, tmp_path)
    assert (result.assignments[0].machine, result.assignments[0].start_s) == ("m#0", 30.0)
    late = replan(wf, cat, plan, {}, now_s=10.0, leased=())  # told nothing is leased: it boots from now
    assert late.assignments[0].start_s == pytest.approx(40.0)


def test_a_failed_task_is_placed_again_after_now_and_its_children_after_it(tmp_path: Path) -> None:
    objective = Objective(kind="time")
    plan = plan_of(CHAIN, FAST, CHAIN_ROWS, objective)
    state: dict[str, TaskState] = {"a": Pending()}  # a failed at 14 s and will be retried
    result = replan(CHAIN, FAST, plan, state, now_s=14.0)
    placed = by_task(result)
    check(CHAIN, FAST, result, objective, tmp_path)
    assert {a.task for a in result.assignments} == {"a", "b", "c", "d"}
    assert placed["a"].start_s >= 14.0
    assert placed["b"].start_s >= placed["a"].end_s - 1e-9


def test_an_oom_killed_task_retries_on_a_type_with_the_memory_it_now_reserves(tmp_path: Path) -> None:
    wf = workflow({"a": 10.0, "b": 10.0}, [("a", "b", 0)], memory={"a": 3 * GIB})
    cat = catalog(resource("small", memory_gib=4.0), resource("big", memory_gib=16.0, price_per_hour_usd=7.2))
    objective = Objective(kind="cost")
    plan = plan_of(wf, cat, [("a", "small#0", 0.0), ("b", "small#0", 10.0)], objective)
    retry = int(1.5 * 3 * GIB)  # more than small's 4 GiB
    result = replan(wf, cat, plan, {"a": Pending(memory_bytes=retry)}, now_s=8.0)
    placed = by_task(result)
    check(wf, cat, result, objective, tmp_path)
    assert placed["a"].resource == "big" and placed["a"].memory_bytes == retry
    assert "a" in result.moved_machine and "a" in result.moved_resource
    assert placed["a"].start_s >= 8.0
    with pytest.raises(UnplaceableTaskError, match="'a'"):
        replan(wf, cat, plan, {"a": Pending(memory_bytes=32 * GIB)}, now_s=8.0)


def test_a_task_moves_when_that_is_better_for_the_objective(tmp_path: Path) -> None:
    wf = workflow({"p": 10.0, "q": 10.0}, [])
    cat = catalog(resource("m", count=2))
    objective = Objective(kind="time")
    plan = plan_of(wf, cat, [("p", "m#0", 0.0), ("q", "m#0", 10.0)], objective)  # one after the other
    result = replan(wf, cat, plan, {}, now_s=0.0)
    check(wf, cat, result, objective, tmp_path)
    assert result.method == "list" and result.makespan_s == pytest.approx(10.0)
    assert len(result.moved_machine) == 1 and result.moved_resource == ()


def test_a_task_stays_on_its_planned_machine_when_moving_is_not_better(tmp_path: Path) -> None:
    wf = workflow({"p": 10.0, "q": 10.0}, [])
    cat = catalog(resource("m", count=2))
    objective = Objective(kind="cost")  # one machine for 20 s costs what two for 10 s do
    plan = plan_of(wf, cat, [("p", "m#0", 0.0), ("q", "m#0", 10.0)], objective)
    result = replan(wf, cat, plan, {}, now_s=0.0)
    check(wf, cat, result, objective, tmp_path)
    assert result.moved_machine == ()
    assert [a.machine for a in result.assignments] == ["m#0", "m#0"]


def test_count_is_kept_at_every_instant_and_a_lease_that_ended_frees_its_place(tmp_path: Path) -> None:
    wf = workflow({"a": 10.0, "b": 10.0, "c": 10.0, "d": 10.0}, [("a", "b", 0)])
    cat = catalog(resource("m", boot_s=5.0, count=1), resource("slow", speed=0.5, count=1))
    objective = Objective(kind="cost")
    rows = [("a", "m#0", 5.0), ("b", "slow#0", 15.0), ("c", "slow#0", 35.0), ("d", "slow#0", 55.0)]
    plan = plan_of(wf, cat, rows, objective)
    # a ended long ago on m#0, which was let go; the others wait. Reusing m#0 would pay 100 s idle, slow#0
    # takes 60 s: a new m#1 booting for 5 s and running 30 s is the cheapest, and m#0's lease ended.
    result = replan(wf, cat, plan, {"a": Done("m#0", 15.0, 5.0)}, now_s=115.0)
    plan_after = check(wf, cat, result, objective, tmp_path)
    used = {a.machine for a in result.assignments}
    assert "m#0" not in used and "m#1" in used  # m#0's lease ended at 15: a second id, one at a time
    per_type: dict[str, list[tuple[float, float]]] = {}
    for lease in leases(plan_after.assignments, cat):
        per_type.setdefault(lease.resource.name, []).append((lease.start_s, lease.end_s))
    for spans in per_type.values():  # never two leases of a count-1 type at once
        spans.sort()
        assert all(later[0] >= earlier[1] - 1e-6 for earlier, later in itertools.pairwise(spans))


def test_a_wide_workflow_keeps_within_count(tmp_path: Path) -> None:
    wf = workflow({f"t{i}": 10.0 + i for i in range(12)}, [])
    cat = catalog(resource("m", count=2, vcpus=2), resource("n", count=1, speed=2.0, price_per_hour_usd=20.0))
    objective = Objective(kind="time")
    plan = plan_of(wf, cat, [(f"t{i}", "m#0", 30.0 * i) for i in range(12)], objective)
    state: dict[str, TaskState] = {"t0": Done("m#0", 10.0, 0.0), "t1": Running("m#0", 30.0)}
    result = replan(wf, cat, plan, state, now_s=35.0)
    check(wf, cat, result, objective, tmp_path)  # the checkers count leases of each type at every instant
    assert result.makespan_s < plan.makespan_s  # spread over the machines the catalog allows


def test_a_state_that_cannot_be_re_planned_names_the_task() -> None:
    plan = plan_of(CHAIN, FAST, CHAIN_ROWS, Objective(kind="time"))
    with pytest.raises(ReplanError, match="'zz'"):
        replan(CHAIN, FAST, plan, {"zz": Pending()}, now_s=0.0)
    with pytest.raises(ReplanError, match="'a' is done at 30"):
        replan(CHAIN, FAST, plan, {"a": Done("m#0", 30.0)}, now_s=20.0)
    with pytest.raises(ReplanError, match="'b' runs since 25"):
        replan(CHAIN, FAST, plan, {"b": Running("m#0", 25.0)}, now_s=20.0)
    with pytest.raises(ReplanError, match=r"'a'.*'gone#0'"):
        replan(CHAIN, FAST, plan, {"a": Done("gone#0", 10.0)}, now_s=20.0)


@pytest.mark.parametrize("kind", ["time", "cost", "balanced"])
def test_a_real_workflow_replanned_after_a_drift_is_valid(kind: str, tmp_path: Path) -> None:
    wf = load_workflow(BUNDLED / "blast-chameleon-small-001.json")
    cat = load_catalog(BUNDLED.parent / "catalogs" / "aws-us-east-1.yaml")
    objective = Objective(kind=kind)  # type: ignore[arg-type]
    plan = optimize(wf, cat, objective, "aws", time_limit_s=5.0, stages=[Stage(ListSchedulingEngine(), 1.0)])
    # the run so far: every third task runs 1.5x long, each task as early as its planned machine allows
    slow = {t.id for i, t in enumerate(wf.tasks) if i % 3 == 0}
    slowed = Workflow.create(
        wf.name, [replace(t, runtime_s=t.runtime_s * (1.5 if t.id in slow else 1.0)) for t in wf.tasks], wf.edges
    )
    ran = retime(slowed, cat, {a.task: a.machine for a in plan.assignments}, start_order(plan.assignments, wf))
    now = sorted(a.end_s for a in ran)[len(ran) // 3]  # a third of the tasks done
    state: dict[str, TaskState] = {}
    for a in ran:
        if a.end_s <= now:
            state[a.task] = Done(a.machine, a.end_s, a.start_s)
        elif a.start_s <= now:
            state[a.task] = Running(a.machine, a.start_s)
    assert any(isinstance(s, Done) for s in state.values()) and len(state) < len(wf.tasks)
    result = replan(wf, cat, plan, state, now_s=now)
    check(wf, cat, result, objective, tmp_path)
    assert all(a.start_s >= now - 1e-9 for a in result.assignments)


def test_past_the_time_limit_the_list_schedule_is_abandoned_and_the_plan_shifted_answers(tmp_path: Path) -> None:
    wf = workflow({"p": 10.0, "q": 10.0}, [])
    cat = catalog(resource("m", count=2))
    objective = Objective(kind="time")
    plan = plan_of(wf, cat, [("p", "m#0", 0.0), ("q", "m#0", 10.0)], objective)
    searched = replan(wf, cat, plan, {}, now_s=0.0)
    assert searched.method == "list" and searched.list_wall_s is not None
    hurried = replan(wf, cat, plan, {}, now_s=0.0, time_limit_s=0.0)
    check(wf, cat, hurried, objective, tmp_path)
    assert hurried.method == "kept" and hurried.list_wall_s is None
    assert hurried.moved_machine == () and hurried.makespan_s == pytest.approx(20.0)


def test_a_machine_held_for_its_planned_tasks_is_paid_up_to_now_so_a_retry_stays_on_it(tmp_path: Path) -> None:
    wf = workflow({"a": 10.0, "b": 10.0}, [])
    cat = catalog(resource("m", boot_s=5.0, count=2))
    objective = Objective(kind="cost")
    plan = plan_of(wf, cat, [("a", "m#0", 5.0), ("b", "m#0", 15.0)], objective)
    # b ran on m#0 from 15 s and failed at 50 s: m#0 was held (and paid) all along
    result = replan(wf, cat, plan, {"a": Done("m#0", 15.0, 5.0), "b": Pending()}, now_s=50.0)
    check(wf, cat, result, objective, tmp_path)
    assert [(a.task, a.machine, a.start_s) for a in result.assignments] == [("b", "m#0", 50.0)]
    assert result.cost_usd == pytest.approx(3.6 / 3600 * 60.0)  # m#0 from 0 to 60 s


def test_a_re_plan_packs_gpus_beside_the_tasks_that_run() -> None:
    # One 2-GPU machine: two 1-GPU tasks run past their planned end; the third, planned after them,
    # must wait for a GPU though the machine has cores and memory for it now.
    gpu = resource("g", vcpus=8, memory_gib=32.0, gpus=2, count=1)
    cat = catalog(gpu)
    tasks = [Task(f"t{k}", 10.0, 1, GIB, "train", gpus=1) for k in range(3)]
    wf = Workflow.create("wf", tasks, [])
    rows = [Assignment(t.id, "g", "g#0", s, s + 10.0, 1, GIB, 1) for t, s in zip(tasks, (0.0, 0.0, 10.0), strict=True)]
    objective = Objective(kind="time")
    plan = whole_plan(rows, cat, objective)
    assert validate_plan(plan, wf, cat) == []
    state: dict[str, TaskState] = {"t0": Running("g#0", 0.0), "t1": Running("g#0", 0.0)}
    result = replan(wf, cat, plan, state, now_s=15.0)
    placed = by_task(result)
    assert placed["t2"].gpus == 1 and placed["t2"].start_s == pytest.approx(15.0)  # when t0 and t1 are expected to end
    assert [
        str(v) for v in validate_plan(whole_plan(result.schedule, cat, objective), as_run(wf, cat, result), cat)
    ] == []
    with pytest.raises(UnplaceableTaskError, match=r"task 'big' needs 4 GPUs.*the most is g with 2"):
        replan(Workflow.create("wf", [Task("big", 1.0, 1, GIB, "t", gpus=4)], []), cat, plan, {}, now_s=0.0)


# a -> b -> c on the cheap type, 10 s each; a ran twice as long. The fast type is twice as fast at four times the
# price: dearer for the same work.
LATE_CHAIN = workflow({"a": 10.0, "b": 10.0, "c": 10.0}, [("a", "b", 0), ("b", "c", 0)])
TWO_SPEEDS = catalog(resource("cheap", count=1), resource("fast", speed=2.0, price_per_hour_usd=14.4, count=2))
CHAIN_ON_CHEAP = [("a", "cheap#0", 0.0), ("b", "cheap#0", 10.0), ("c", "cheap#0", 20.0)]


def test_a_deadline_at_risk_moves_tasks_to_a_faster_type_and_the_answer_says_so(tmp_path: Path) -> None:
    objective = Objective(kind="cost", deadline_s=35.0)
    plan = plan_of(LATE_CHAIN, TWO_SPEEDS, CHAIN_ON_CHEAP, objective)
    result = replan(LATE_CHAIN, TWO_SPEEDS, plan, {"a": Done("cheap#0", 20.0, 0.0)}, now_s=20.0, deadline_margin=0.0)
    check(LATE_CHAIN, TWO_SPEEDS, result, objective, tmp_path)
    assert result.makespan_s <= 35.0 and result.method == "deadline"
    # The cheapest fix: b stays on cheap#0 (20 to 30 s), c alone goes to the fast type (30 to 35 s), +0.01 USD;
    # moving b too, as time alone does, ends at 30 s for +0.02 USD.
    assert {a.task: a.resource for a in result.assignments} == {"b": "cheap", "c": "fast"}
    note = result.deadline_note
    assert note.startswith("deadline at risk: the run ends at 40.0 s, past its deadline 35.0 s; ")
    assert "1 task moved to a faster type (c cheap -> fast), 1 more machine (fast#0)" in note and "(keeps it)" in note
    assert note.endswith(f"for {result.cost_usd:.4f} USD, +0.0100 USD")  # what keeping it costs


def test_without_a_deadline_a_late_run_keeps_its_cost_down_on_the_cheaper_type(tmp_path: Path) -> None:
    objective = Objective(kind="cost")
    plan = plan_of(LATE_CHAIN, TWO_SPEEDS, CHAIN_ON_CHEAP, objective)
    result = replan(LATE_CHAIN, TWO_SPEEDS, plan, {"a": Done("cheap#0", 20.0, 0.0)}, now_s=20.0)
    check(LATE_CHAIN, TWO_SPEEDS, result, objective, tmp_path)
    assert {a.resource for a in result.assignments} == {"cheap"} and result.makespan_s == pytest.approx(40.0)
    assert result.deadline_note == "" and result.method != "deadline"


def test_a_deadline_no_type_can_keep_says_so_and_breaks_no_budget(tmp_path: Path) -> None:
    # keeping it costs 0.05 USD at the least (c on fast): 19 % over the budget, beyond the deadline's 14 %
    objective = Objective(kind="cost", deadline_s=35.0, budget_usd=0.042)
    plan = plan_of(LATE_CHAIN, TWO_SPEEDS, CHAIN_ON_CHEAP, objective)
    result = replan(LATE_CHAIN, TWO_SPEEDS, plan, {"a": Done("cheap#0", 20.0, 0.0)}, now_s=20.0)
    check(LATE_CHAIN, TWO_SPEEDS, result, replace(objective, deadline_s=None), tmp_path)  # within the budget
    assert {a.resource for a in result.assignments} == {"cheap"} and result.makespan_s == pytest.approx(40.0)
    assert result.deadline_note.startswith("deadline at risk: the run ends at 40.0 s, past its deadline 35.0 s")


def most_leased_at_once_from(schedule: tuple[Assignment, ...], cat: Catalog, now_s: float) -> dict[str, int]:
    """Per type, the most machines leased at one instant from ``now_s`` on (what ran before it aside)."""
    events: dict[str, list[tuple[float, int]]] = {}
    for lease in leases(schedule, cat):
        if lease.end_s > now_s + 1e-6:
            events.setdefault(lease.resource.name, []).extend([(max(lease.start_s, now_s), 1), (lease.end_s, -1)])
    most: dict[str, int] = {}
    for name, steps in events.items():
        at_once = 0
        for _, step in sorted(steps):  # an end sorts before a start at the same instant
            at_once += step
            most[name] = max(most.get(name, 0), at_once)
    return most


def counts_checked(found: list[str], run: str) -> Callable[..., Replan]:
    """A repair step of the simulated loop: the re-plan, whose counts (after what ran) and, where the run kept
    the counts, whole schedule are checked (a deadline missed aside), what is wrong added to ``found``."""

    def step(wf: Workflow, cat: Catalog, plan: Plan, state: Mapping[str, TaskState], now_s: float) -> Replan:
        result = replan(wf, cat, plan, state, now_s, time_limit_s=0.5)
        ran_by_s = max([now_s, *(a.end_s for a in result.fixed)])
        counts = most_leased_at_once_from(result.schedule, cat, ran_by_s)
        found.extend(f"{run} at {now_s} s: {n} of {k}" for k, n in counts.items() if n > cat.by_name[k].count)
        if not count_violations(result.fixed, cat):
            whole = whole_plan(result.schedule, cat, replace(plan.objective, deadline_s=None))
            found.extend(f"{run} at {now_s} s: {v}" for v in validate_plan(whole, as_run(wf, cat, result), cat))
        return result

    return step


# p -> x, and y, on one type of count 1: p on m#0, then x and y on m#1 once m#0's lease has ended
SEQUENTIAL = workflow({"p": 20.0, "x": 10.0, "y": 10.0}, [("p", "x", 0)])
ONE_AT_A_TIME = catalog(resource("m", count=1))
SEQUENTIAL_ROWS = [("p", "m#0", 0.0), ("x", "m#1", 20.0), ("y", "m#1", 30.0)]


@pytest.mark.parametrize(
    ("state", "now_s"), [({}, 0.0), ({"p": Running("m#0", 0.0)}, 5.0), ({"p": Running("m#0", 0.0)}, 25.0)]
)
def test_a_count_1_type_whose_next_machine_would_grow_back_over_the_one_before_still_places_every_task(
    state: dict[str, TaskState], now_s: float, tmp_path: Path
) -> None:
    # y is free from now, but on m#1 it would start before x (m#1's lease growing back over m#0's), on m#0 after p
    # (m#0's growing over m#1's), and a new m#2 would be a second machine at once: the re-plan still places it on a
    # machine the run leases, after that machine's first task.
    objective = Objective(kind="cost")
    plan = plan_of(SEQUENTIAL, ONE_AT_A_TIME, SEQUENTIAL_ROWS, objective)
    result = replan(SEQUENTIAL, ONE_AT_A_TIME, plan, state, now_s=now_s)
    check(SEQUENTIAL, ONE_AT_A_TIME, result, objective, tmp_path)  # one machine of m at a time, as the spec says
    late_by_s = max(0.0, now_s - 20.0)  # p, planned to end at 20 s, is expected to end at now
    assert result.makespan_s == pytest.approx(plan.makespan_s + late_by_s)
    assert result.cost_usd == pytest.approx(plan.cost_usd + 3.6 / 3600 * late_by_s)  # no second machine at once


def test_a_run_whose_leases_of_a_count_1_type_overlapped_still_grows_one_of_them(tmp_path: Path) -> None:
    # m has 2 cores, count 1: the plan runs a on m#0, then b and c on m#1; the run (whose executor holds the type to
    # count x vcpus cores, whatever the machine ids) started b beside a, so m#0 and m#1 were leased at once.
    wf = workflow({"a": 10.0, "b": 10.0, "c": 10.0}, [])
    cat = catalog(resource("m", count=1, vcpus=2))
    objective = Objective(kind="cost")
    plan = plan_of(wf, cat, [("a", "m#0", 0.0), ("b", "m#1", 10.0), ("c", "m#1", 20.0)], objective)
    state: dict[str, TaskState] = {"a": Running("m#0", 0.0), "b": Running("m#1", 0.0)}
    result = replan(wf, cat, plan, state, now_s=5.0)
    assert {a.task for a in result.assignments} == {"c"}
    assert validate_plan(whole_plan(result.fixed, cat, objective), as_run(wf, cat, result), cat) != []  # what ran
    assert most_leased_at_once_from(result.schedule, cat, 10.0) == {"m": 1}  # from when a and b end: one at a time
    assert most_leased_at_once_from(result.schedule, cat, 5.0) == {"m": 2}  # the overlap that ran, no other


def test_every_re_plan_of_a_drifting_run_on_count_1_types_places_every_task_and_is_valid() -> None:
    # As the simulated learning loop drives re-plans (predict/repair_replay.py): a plan for cost under a deadline of
    # 1.5x the fastest plan's makespan, run on a truth where every third task takes 1.3x as long, re-planned at each
    # late end. The local pools have count 1: a plan follows a machine with the next one of its type.
    wf = load_workflow(BUNDLED / "montage-chameleon-2mass-01d-001.json")
    cat = load_catalog(BUNDLED.parent / "catalogs" / "local-priced.yaml")
    assert {r.count for r in cat.resources} == {1}
    stages = [Stage(ListSchedulingEngine(), 1.0)]
    fastest = optimize(wf, cat, Objective(kind="time"), "local", time_limit_s=5.0, stages=stages)
    objective = Objective(kind="cost", deadline_s=1.5 * fastest.makespan_s)
    plan = optimize(wf, cat, objective, "local", time_limit_s=5.0, stages=stages)
    slower = [replace(t, runtime_s=t.runtime_s * (1.3 if i % 3 == 0 else 1.0)) for i, t in enumerate(wf.tasks)]
    found: list[str] = []
    run = replay_with_repairs(
        plan, wf, Workflow.create(wf.name, slower, wf.edges), cat, repair=counts_checked(found, "")
    )
    assert run.failures == ()  # before: 11 of 41 re-plans found no machine within the counts for some task
    assert not count_violations(run.replay.assignments, cat)  # the run kept the counts: every re-plan is checked whole
    # many re-plans, each checked (7 since the replay's runtime factors are the ratios' log-normal mean, 9 with their
    # geometric mean, 34 before the replay learned runtimes: its tasks no longer end late)
    assert len(run.repairs) >= 5 and found == []


def test_a_machine_held_for_a_retry_while_the_next_one_ran_takes_it_only_within_the_count(tmp_path: Path) -> None:
    # The plan: a then b on m#0, c on m#1 after them (count 1). b failed at 10 s and c ran in its place, on m#1:
    # m#0 is held (paid) for b up to now, but b back on m#0 would make m#0's lease, first task to last, cover c's.
    wf = workflow({"a": 10.0, "b": 10.0, "c": 5.0}, [])
    cat = catalog(resource("m", count=1))
    objective = Objective(kind="cost")
    plan = plan_of(wf, cat, [("a", "m#0", 0.0), ("b", "m#0", 10.0), ("c", "m#1", 20.0)], objective)
    state: dict[str, TaskState] = {"a": Done("m#0", 10.0, 0.0), "b": Pending(), "c": Done("m#1", 15.0, 10.0)}
    result = replan(wf, cat, plan, state, now_s=15.0)
    check(wf, cat, result, objective, tmp_path)
    (retry,) = result.assignments
    assert retry.machine != "m#0" and retry.start_s == pytest.approx(15.0)


@pytest.mark.slow
def test_random_runs_re_planned_on_counted_types_always_place_every_task_and_keep_the_counts() -> None:
    # Small random DAGs on two types of count 1 or 2 (1 or 2 cores, booting or not), planned, run on a truth off by
    # 0.5x to 2x a task, re-planned at each late end. A run may itself hold more machines of a type at once than
    # its count (it holds the type to count x vcpus cores); from when what ran has ended, the count holds.
    rng = random.Random(34)
    stages = [Stage(ListSchedulingEngine(), 1.0)]
    found: list[str] = []
    re_plans = 0
    for trial in range(100):
        vcpus, boot_s = rng.choice([1, 1, 2]), rng.choice([0.0, 5.0])
        cat = catalog(
            resource("s", vcpus=vcpus, boot_s=boot_s, count=1, price_per_hour_usd=0.1),
            resource("l", vcpus=vcpus, boot_s=boot_s, count=rng.choice([1, 2]), memory_gib=16.0, speed=2.0),
        )
        n = rng.randint(4, 14)
        tasks = {f"t{i}": rng.uniform(1.0, 30.0) for i in range(n)}
        edges = [(f"t{i}", f"t{j}", rng.choice([0, 10**8])) for j in range(n) for i in range(j) if rng.random() < 0.25]
        wf = workflow(tasks, edges, {t: rng.choice([GIB, GIB, 8 * GIB]) for t in tasks})
        objective = Objective(kind=rng.choice(["cost", "time", "balanced"]))
        plan = optimize(wf, cat, objective, "test", time_limit_s=1.0, stages=stages)
        off = [replace(t, runtime_s=t.runtime_s * rng.choice([0.5, 1.3, 2.0])) for t in wf.tasks]
        run = replay_with_repairs(
            plan, wf, Workflow.create(wf.name, off, wf.edges), cat, repair=counts_checked(found, f"run {trial}")
        )
        found.extend(f"run {trial}: {failure}" for failure in run.failures)
        re_plans += len(run.repairs)
    assert found == [] and re_plans > 100

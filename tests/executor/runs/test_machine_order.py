"""The planned machines' order rule (executor/runs/machine_order.py): pure, no executor, no Airflow."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agora_optimizer.executor.runs.machine_order import MachineOrder, RunBook, may_start
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo

GIB = 2**30
HOLD_S = 600.0
SMALL = Resource("small", "local", vcpus=2, memory_gib=4, speed=1.0, price_per_hour_usd=0.0)
RESOURCES = {"small": SMALL}


def plan(*assignments: Assignment) -> Plan:
    makespan = max(a.end_s for a in assignments)
    return Plan("etl", "local", Objective(), makespan, 0.0, assignments, SolverInfo("test", "heuristic", None, 0), "x")


def on(task: str, machine: str, start: float, end: float, cores: int = 1, memory_gib: float = 1) -> Assignment:
    return Assignment(task, "small", machine, start, end, cores, int(memory_gib * GIB))


def book(*assignments: Assignment, origin_s: float = 100.0) -> RunBook:
    return RunBook(MachineOrder.from_plan(plan(*assignments), RESOURCES), origin_s=origin_s)


def test_order_is_by_planned_start_then_end_per_machine_with_the_types_capacity() -> None:
    order = MachineOrder.from_plan(
        plan(
            on("c", "small#0", 10, 20),
            on("a", "small#0", 0, 10),
            on("b", "small#0", 0, 5),
            on("x", "small#1", 3, 4),
            on("gpu", "huge#0", 0, 1),  # its type is not in the catalog: left unplanned
        ),
        RESOURCES,
    )
    assert [t.task_id for t in order.machines["small#0"].tasks] == ["b", "a", "c"]
    machine = order.machines["small#0"]
    assert (machine.cores, machine.memory_bytes, machine.resource) == (2, 4 * GIB, "small")
    assert (machine.planned_start_s, machine.planned_end_s) == (0, 20)
    assert set(order.machines) == {"small#0", "small#1"}
    assert "gpu" not in order.by_task


def test_a_task_waits_for_the_one_planned_before_it_when_both_would_not_fit() -> None:
    run = book(on("first", "small#0", 0, 10, cores=2), on("second", "small#0", 10, 20, cores=2))
    held = may_start(run, "second", now_s=100.0, held_s=0.0, hold_max_s=HOLD_S)
    assert not held.start and "first" in held.reason
    assert may_start(run, "first", 100.0, 0.0, HOLD_S).start
    run.start("first")
    full = may_start(run, "second", 101.0, 1.0, HOLD_S)
    assert not full.start and "full" in full.reason  # its turn, but the machine is full
    run.end("first")
    assert may_start(run, "second", 109.0, 9.0, HOLD_S).start


def test_an_early_task_starts_when_the_next_planned_task_still_fits_beside_it() -> None:
    run = book(on("first", "small#0", 0, 10), on("second", "small#0", 10, 20))
    decision = may_start(run, "second", 100.0, 0.0, HOLD_S)
    assert decision.start and "still fits" in decision.reason


def test_an_early_task_starts_when_it_is_planned_to_end_before_the_next_planned_start() -> None:
    run = book(
        on("long_wait", "small#0", 50, 60, cores=2),  # its upstream runs elsewhere until 50 s
        on("quick", "small#0", 60, 70, cores=2),
    )
    early = may_start(run, "quick", now_s=100.0 + 5, held_s=0.0, hold_max_s=HOLD_S)  # plan clock 5 s: ends at 15
    assert early.start and "before long_wait" in early.reason
    late = may_start(run, "quick", now_s=100.0 + 45, held_s=0.0, hold_max_s=HOLD_S)  # would end at 55 > 50
    assert not late.start and "long_wait" in late.reason


def test_an_early_task_that_does_not_fit_now_is_held() -> None:
    run = book(on("a", "small#0", 0, 10, cores=2), on("b", "small#0", 10, 20), on("c", "small#0", 20, 30))
    run.start("a")
    assert not may_start(run, "c", 100.0, 0.0, HOLD_S).start


def test_only_the_machine_of_the_task_matters() -> None:
    run = book(on("a", "small#0", 0, 10, cores=2), on("b", "small#1", 10, 20, cores=2))
    run.start("a")
    assert may_start(run, "b", 100.0, 0.0, HOLD_S).start


def test_a_skipped_predecessor_never_holds_the_tasks_behind_it() -> None:
    """Never deadlocks: the task planned first was skipped by Airflow and will never come."""
    run = book(on("skipped", "small#0", 0, 10, cores=2), on("next", "small#0", 10, 20, cores=2))
    assert not may_start(run, "next", 150.0, 50.0, HOLD_S).start
    run.settle({"skipped": "skipped", "next": "queued", "unplanned": "skipped"})
    assert may_start(run, "next", 150.0, 50.0, HOLD_S).start
    assert run.gone == {"skipped"}


def test_a_planned_task_the_run_does_not_have_never_holds_nor_keeps_the_machine() -> None:
    run = book(on("dropped_from_dag", "small#0", 0, 10, cores=2), on("kept", "small#0", 10, 20, cores=2))
    run.settle({})  # no answer: nothing learnt
    assert not may_start(run, "kept", 100.0, 0.0, HOLD_S).start
    run.settle({"kept": "queued"})
    assert may_start(run, "kept", 100.0, 0.0, HOLD_S).start
    run.start("kept")
    run.end("kept")
    assert not run.machine_ended("small#0")  # whether a retry comes is Airflow's to say
    run.settle({"kept": "success"})
    assert run.machine_ended("small#0")


def test_a_mapped_tasks_planned_instances_wait_for_its_expansion_then_those_beyond_its_width_are_gone() -> None:
    run = book(
        on("add[0]", "small#0", 0, 10, cores=2),
        on("add[2]", "small#0", 10, 20, cores=2),
        on("sum", "small#0", 20, 30, cores=2),
    )
    run.settle({"add": "none", "sum": "none"})  # not expanded yet: its one task instance of map index -1
    assert run.gone == set()
    assert not may_start(run, "sum", 100.0, 0.0, HOLD_S).start  # add[0] and add[2] are still to come
    run.settle({"add[0]": "queued", "add[1]": "queued", "sum": "none"})  # expanded to two instances
    assert run.gone == {"add[2]"}
    run.start("add[0]")
    run.end("add[0]")
    run.settle({"add[0]": "success", "add[1]": "success", "sum": "queued"})
    assert may_start(run, "sum", 100.0, 0.0, HOLD_S).start


@pytest.mark.parametrize("state", ["skipped", "upstream_failed", "removed"])
def test_a_mapped_task_that_never_expands_frees_its_planned_instances(state: str) -> None:
    run = book(on("add[0]", "small#0", 0, 10, cores=2), on("sum", "small#0", 10, 20, cores=2))
    run.settle({"add": state, "sum": "none"})
    assert run.gone == {"add[0]"}
    assert may_start(run, "sum", 100.0, 0.0, HOLD_S).start


@pytest.mark.parametrize("state", ["upstream_failed", "failed", "removed", "success"])
def test_every_final_state_releases_the_order(state: str) -> None:
    run = book(on("before", "small#0", 0, 10, cores=2), on("after", "small#0", 10, 20, cores=2))
    run.settle({"before": state})
    assert may_start(run, "after", 100.0, 0.0, HOLD_S).start


def test_running_and_retry_states_do_not_release_the_order() -> None:
    run = book(on("before", "small#0", 0, 10, cores=2), on("after", "small#0", 10, 20, cores=2))
    run.settle({"before": "up_for_retry"})
    run.settle({"before": "scheduled"})
    assert not may_start(run, "after", 100.0, 0.0, HOLD_S).start


def test_a_predecessor_airflow_keeps_back_does_not_hold_the_task_that_fills_its_slot() -> None:
    """An Airflow pool of one slot handed over the later task first: the earlier one stays scheduled."""
    run = book(on("first", "small#0", 0, 10, cores=2), on("second", "small#0", 10, 20, cores=2))
    run.settle({"first": "scheduled", "second": "queued"})
    assert not may_start(run, "second", 100.0, 5.0, HOLD_S).start  # once may be the scheduler's next loop
    run.settle({"first": "scheduled", "second": "queued"})
    assert may_start(run, "second", 105.0, 10.0, HOLD_S).start
    run.start("second")
    run.settle({"first": "queued", "second": "running"})
    assert run.kept_back == set() and not run.machine_ended("small#0")


def test_the_hold_is_bounded() -> None:
    run = book(on("never", "small#0", 0, 10, cores=2), on("held", "small#0", 10, 20, cores=2))
    assert not may_start(run, "held", 100.0 + HOLD_S - 1, HOLD_S - 1, HOLD_S).start
    released = may_start(run, "held", 100.0 + HOLD_S, HOLD_S, HOLD_S)
    assert released.start and "machine_hold_s" in released.reason


def test_an_unplanned_task_is_never_held() -> None:
    run = book(on("a", "small#0", 0, 10, cores=2))
    run.start("a")
    assert may_start(run, "not_in_plan", 100.0, 0.0, HOLD_S).start


def test_a_machine_ends_when_each_task_is_done_or_gone_and_a_retry_runs_again() -> None:
    run = book(on("a", "small#0", 0, 10), on("b", "small#0", 10, 20), on("c", "small#1", 0, 5))
    run.start("a")
    run.end("a")  # its try failed: Airflow says whether a retry will come
    assert not run.machine_ended("small#0")
    run.settle({"a": "up_for_retry", "b": "upstream_failed", "c": "queued"})
    assert run.ended_machines() == []  # the retry will run on the machine: its lease stays
    run.start("a")  # its retry
    assert run.running("small#0")[0].task_id == "a" and not run.machine_ended("small#0")
    run.settle({"a": "failed"})  # a started task is running until its end is seen, whatever Airflow says
    assert not run.machine_ended("small#0")
    run.end("a")
    assert run.machine_ended("small#0")  # Airflow said failed: no try will come again
    run.start("c")
    run.end("c")
    assert run.awaits_word() and run.ended_machines() == ["small#0"]
    run.settle({"a": "failed", "c": "success"})
    assert not run.awaits_word() and run.ended_machines() == ["small#0", "small#1"]


def test_a_run_whose_states_were_never_read_ends_its_machines_as_their_tasks_end() -> None:
    """No answer from Airflow's database (none at all): a lease is not kept for a retry nobody can see."""
    run = book(on("a", "small#0", 0, 10))
    run.settle({})
    run.start("a")
    run.end("a")
    assert run.machine_ended("small#0")


def test_a_valid_plan_runs_to_its_end_in_any_upstream_order() -> None:
    """Simulated: tasks arrive as their upstream finish; each held task is asked again at every step.
    Whatever the actual runtimes, every task starts, and each machine's tasks start in the planned order
    unless the rule let one go early."""
    # a -> b (other machine) -> c ; d independent; machine 0: a, c ; machine 1: b, d
    run = book(
        on("a", "small#0", 0, 10, cores=2),
        on("b", "small#1", 10, 20, cores=2),
        on("c", "small#0", 20, 30, cores=2),
        on("d", "small#1", 20, 35, cores=2),  # 15 s: it would not end before b's planned start
        origin_s=0.0,
    )
    parents = {"a": set(), "b": {"a"}, "c": {"b"}, "d": set()}
    done: set[str] = set()
    started: list[str] = []
    now = 0.0
    for _ in range(100):
        ready = [t for t in parents if t not in run.started and parents[t] <= done]
        for task in ready:
            if may_start(run, task, now, 0.0, HOLD_S).start:
                run.start(task)
                started.append(task)
        for task in list(run.started - run.ended):
            run.end(task)  # every task runs one step
            done.add(task)
        now += 1.0
        if len(done) == 4:
            break
    assert done == {"a", "b", "c", "d"}
    assert started.index("b") < started.index("d")  # d (ready at once) waited for b, planned first on small#1


def test_two_tasks_that_need_the_one_gpu_of_a_machine_do_not_run_at_once() -> None:
    gpu = Resource("gpu", "local", vcpus=8, memory_gib=16, speed=1.0, price_per_hour_usd=0.0, gpus=1)
    first = Assignment("first", "gpu", "gpu#0", 0, 10, 1, GIB, gpus=1)
    second = Assignment("second", "gpu", "gpu#0", 10, 20, 1, GIB, gpus=1)
    run = RunBook(MachineOrder.from_plan(plan(first, second), {"gpu": gpu}), origin_s=100.0)
    assert run.order.machines["gpu#0"].gpus == 1 and run.order.by_task["second"].gpus == 1
    run.start("first")  # cores and memory would hold both; the GPU holds one
    full = may_start(run, "second", 101.0, 1.0, HOLD_S)
    assert not full.start and "full" in full.reason
    run.end("first")
    assert may_start(run, "second", 102.0, 2.0, HOLD_S).start


PRICED = Resource("priced", "local", vcpus=1, memory_gib=4, speed=1.0, price_per_hour_usd=0.4, count=1)


def priced_plan(kind: str, *assignments: Assignment) -> Plan:
    return replace(plan(*assignments), objective=Objective(kind=kind))  # type: ignore[arg-type]


def on_priced(task: str, machine: str, start: float, end: float) -> Assignment:
    return Assignment(task, "priced", machine, start, end, 1, GIB)


def test_a_cost_plans_priced_machine_opens_no_earlier_than_its_planned_start() -> None:
    """Started as soon as its upstream was done, the machine would be held (and priced) from then on."""
    late = on_priced("late", "priced#0", 20, 25)
    cost = RunBook(MachineOrder.from_plan(priced_plan("cost", late), {"priced": PRICED}), origin_s=100.0)
    held = may_start(cost, "late", now_s=105.0, held_s=0.0, hold_max_s=HOLD_S)
    assert not held.start and "planned to open at 20.0 s" in held.reason
    assert may_start(cost, "late", now_s=120.0, held_s=15.0, hold_max_s=HOLD_S).start
    time = RunBook(MachineOrder.from_plan(priced_plan("time", late), {"priced": PRICED}), origin_s=100.0)
    assert may_start(time, "late", now_s=105.0, held_s=0.0, hold_max_s=HOLD_S).start  # a time plan goes early
    free = replace(PRICED, price_per_hour_usd=0.0)
    gratis = RunBook(MachineOrder.from_plan(priced_plan("cost", late), {"priced": free}), origin_s=100.0)
    assert may_start(gratis, "late", now_s=105.0, held_s=0.0, hold_max_s=HOLD_S).start  # nothing to save
    slurm = replace(PRICED, backend="slurm")
    allocated = RunBook(MachineOrder.from_plan(priced_plan("cost", late), {"priced": slurm}), origin_s=100.0)
    assert may_start(allocated, "late", now_s=105.0, held_s=0.0, hold_max_s=HOLD_S).start  # its allocation is open


def test_a_cost_plans_machine_opens_early_once_nothing_outside_it_can_hold_it_open() -> None:
    """priced#1 (``late``, then ``tail``) is planned to open at 30 s; ``late`` is a child of ``first`` (priced#0) and
    ``tail`` of ``slow`` (unpriced#0). It opens early once both have ended with no retry to come, and only if its
    parents are known and priced#0, of its type and planned to open before it, has opened."""
    unpriced = replace(PRICED, name="unpriced", price_per_hour_usd=0.0, count=None)
    resources = {"priced": replace(PRICED, count=None), "unpriced": unpriced}
    assignments = (
        on_priced("first", "priced#0", 0, 10),
        Assignment("slow", "unpriced", "unpriced#0", 0, 30, 1, GIB),
        on_priced("late", "priced#1", 30, 40),
        on_priced("tail", "priced#1", 40, 50),
    )
    parents = {
        "late": frozenset({"first"}),
        "tail": frozenset({"late", "slow"}),
        "first": frozenset(),
        "slow": frozenset(),
    }
    order = MachineOrder.from_plan(priced_plan("cost", *assignments), resources)

    def run(known: bool) -> RunBook:
        book = RunBook(replace(order, parents=parents if known else {}), origin_s=100.0)
        book.start("first", 0.0)
        book.end("first", 5.0)
        book.start("slow", 0.0)
        return book

    ahead = run(known=True)
    held = may_start(ahead, "late", now_s=106.0, held_s=0.0, hold_max_s=HOLD_S)
    assert not held.start and "planned to open at 30.0 s" in held.reason  # tail would wait for slow
    ahead.end("slow", 12.0)
    assert may_start(ahead, "late", now_s=112.0, held_s=6.0, hold_max_s=HOLD_S).start  # 18 s ahead of plan
    retried = run(known=True)  # slow's try failed and its retry is to come: it may hold tail, so it is not over
    retried.end("slow", 12.0)
    retried.settle({"first": "success", "slow": "up_for_retry", "late": "queued", "tail": "none"})
    assert not may_start(retried, "late", now_s=112.0, held_s=6.0, hold_max_s=HOLD_S).start
    retried.settle({"first": "success", "slow": "success", "late": "queued", "tail": "none"})
    assert may_start(retried, "late", now_s=113.0, held_s=7.0, hold_max_s=HOLD_S).start
    unknown = run(known=False)
    unknown.end("slow", 12.0)
    assert not may_start(unknown, "late", now_s=112.0, held_s=6.0, hold_max_s=HOLD_S).start  # no parents: as planned
    unrelated = {**parents, "late": frozenset()}  # late waits for nothing, but priced#0 has not opened: not its turn
    turn = RunBook(replace(order, parents=unrelated), origin_s=100.0)
    turn.start("slow", 0.0)
    turn.end("slow", 12.0)
    assert not may_start(turn, "late", now_s=112.0, held_s=0.0, hold_max_s=HOLD_S).start


def test_once_open_a_machine_runs_its_next_tasks_early() -> None:
    first, second = on_priced("first", "priced#0", 20, 25), on_priced("second", "priced#0", 40, 45)
    run = RunBook(MachineOrder.from_plan(priced_plan("cost", first, second), {"priced": PRICED}), origin_s=100.0)
    run.start("first", 20.0)
    run.end("first", 22.0)
    assert may_start(run, "second", now_s=123.0, held_s=0.0, hold_max_s=HOLD_S).start  # the lease is open


def test_a_count_1_type_never_has_two_machines_open_at_once() -> None:
    """A plan may release priced#0 and lease priced#1 later; run ahead of plan, #1 waits for #0 to close."""
    before = [on_priced("a", "priced#0", 0, 5), on_priced("b", "priced#0", 5, 10)]
    after = on_priced("c", "priced#1", 12, 15)
    run = RunBook(MachineOrder.from_plan(priced_plan("time", *before, after), {"priced": PRICED}), origin_s=100.0)
    run.start("a", 0.0)
    held = may_start(run, "c", now_s=101.0, held_s=0.0, hold_max_s=HOLD_S)
    assert not held.start and "count 1" in held.reason and "priced#0" in held.reason
    assert may_start(run, "c", now_s=100.0 + HOLD_S, held_s=HOLD_S, hold_max_s=HOLD_S).start  # bounded all the same
    run.end("a", 2.0)
    assert not may_start(run, "c", now_s=102.0, held_s=1.0, hold_max_s=HOLD_S).start  # b is still to come on #0
    run.start("b", 2.0)
    run.end("b", 4.0)
    assert may_start(run, "c", now_s=104.0, held_s=3.0, hold_max_s=HOLD_S).start
    unlimited = replace(PRICED, count=None)
    free = RunBook(MachineOrder.from_plan(priced_plan("time", *before, after), {"priced": unlimited}), origin_s=100.0)
    free.start("a", 0.0)
    assert may_start(free, "c", now_s=101.0, held_s=0.0, hold_max_s=HOLD_S).start


def test_a_repair_re_weights_from_the_weights_the_policy_gave_the_whole_plan() -> None:
    """The cluster policy weighs every planned task, those on a type this executor does not run too; the first
    repair's weights now are those, and a task the repair does not place keeps its planned start."""
    from agora_optimizer.executor.runs.machine_order import priority_weights
    from agora_optimizer.integration.policy import planned_priorities

    elsewhere = Assignment("remote", "celery-pool", "celery-pool#0", 25, 26, 1, GIB)
    planned = plan(on("a", "small#0", 0, 10), elsewhere, on("b", "small#0", 10, 20), on("c", "small#0", 20, 30))
    run = RunBook(MachineOrder.from_plan(planned, RESOURCES), origin_s=100.0)
    assert "remote" not in run.order.by_task  # its machine is not this executor's
    run.start("a", 0.0)
    swapped = MachineOrder.from_assignments(
        [on("a", "small#0", 0, 10), on("c", "small#0", 10, 20), on("b", "small#0", 20, 30)], RESOURCES
    )
    policy = planned_priorities({a.task: a for a in planned.assignments})
    assert policy == {"a": 4, "b": 3, "c": 2, "remote": 1}
    assert run.reordered(swapped) == {"c": (2, 3), "b": (3, 2)}  # remote, not re-placed, keeps its 25 s
    assert run.order is swapped and run.weights == priority_weights(run.starts)

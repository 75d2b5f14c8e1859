"""Replaying a plan with repairs: the executor's drift rule and re-plan, played on the true runtimes."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from itertools import pairwise

import pytest

from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Objective, Plan
from agora_optimizer.model.workflow import Edge, Task, Workflow
from agora_optimizer.optimize.optimize import optimize
from agora_optimizer.planning.leases import cost_usd
from agora_optimizer.planning.replan import replan
from agora_optimizer.planning.run_state import Done, Pending, Replan, Running, TaskState
from agora_optimizer.planning.validate import validate_plan
from agora_optimizer.predict.repair_replay import (
    RepairedRun,
    assumed_workflow,
    forecast,
    late,
    replay_with_repairs,
)
from agora_optimizer.predict.replay import replay
from tests.predict.conftest import BLAST_1


def _scaled(workflow: Workflow, factor: float) -> Workflow:
    tasks = [replace(t, runtime_s=t.runtime_s * factor) for t in workflow.tasks]
    return Workflow.create(workflow.name, tasks, list(workflow.edges), source=workflow.source)


@pytest.fixture(scope="module")
def planned(catalog: Catalog) -> tuple[Workflow, Plan]:
    workflow = load_workflow(BLAST_1)
    plan = optimize(workflow, catalog, Objective("cost", deadline_s=None), "aws", time_limit_s=0.5)
    return workflow, plan


def _whole(plan: Plan, run: RepairedRun) -> Plan:
    """The plan as it ran: the run's assignments, makespan and cost."""
    done = run.replay
    return replace(plan, assignments=done.assignments, makespan_s=done.makespan_s, cost_usd=done.cost_usd)


def test_a_run_that_follows_its_plan_is_never_repaired_and_replays_as_without_repair(planned, catalog) -> None:
    workflow, plan = planned
    run = replay_with_repairs(plan, workflow, workflow, catalog)
    assert run.repairs == () and run.plans == (plan,)
    assert run.replay == replay(plan, workflow, catalog)


def test_a_truth_twice_the_prediction_is_repaired_and_what_ran_is_a_valid_schedule_of_the_truth(
    planned, catalog
) -> None:
    workflow, plan = planned
    truth = _scaled(workflow, 2.0)
    run = replay_with_repairs(plan, workflow, truth, catalog)
    assert len(run.repairs) >= 1 and len(run.plans) == len(run.repairs) + 1
    times = [event.at_s for event in run.repairs]
    assert times == sorted(times) and times[0] > 0
    ran = _whole(plan, run)
    assert validate_plan(ran, truth, catalog) == []  # precedence, capacity and the truth's durations
    without = replay_with_repairs(plan, workflow, truth, catalog, slack=0)  # repair off
    assert without.repairs == () and without.replay == replay(plan, truth, catalog)


def test_repairs_wait_for_the_interval_and_stop_at_the_limit(planned, catalog) -> None:
    workflow, plan = planned
    truth = _scaled(workflow, 2.0)
    assert len(replay_with_repairs(plan, workflow, truth, catalog, max_repairs=1).repairs) == 1
    spaced = replay_with_repairs(plan, workflow, truth, catalog, interval_s=50.0)
    gaps = [b.at_s - a.at_s for a, b in zip(spaced.repairs, spaced.repairs[1:], strict=False)]
    assert all(gap >= 50.0 - 1e-9 for gap in gaps)


def test_past_the_limit_a_run_whose_deadline_is_at_risk_keeps_repairing_spaced_until_the_deadline(
    planned, catalog
) -> None:
    workflow, plan = planned
    truth = _scaled(workflow, 2.0)  # twice as long: past a deadline 10 % after the plan's end, all run long
    deadline_s = 1.1 * plan.makespan_s
    tight = replace(plan, objective=replace(plan.objective, deadline_s=deadline_s))
    run = replay_with_repairs(tight, workflow, truth, catalog, max_repairs=2)
    assert len(run.repairs) > 2  # a capped run drifted unrepaired to its end
    times = [event.at_s for event in run.repairs]
    assert all(b - a >= deadline_s / 2 - 1e-9 for a, b in pairwise(times[1:]))
    assert all(at_s < deadline_s for at_s in times[2:])  # once the deadline is lost, nothing is left to keep
    assert len(replay_with_repairs(plan, workflow, truth, catalog, max_repairs=2).repairs) == 2  # no deadline


def test_the_repair_step_is_the_one_given_and_sees_what_ran(planned, catalog) -> None:
    workflow, plan = planned
    truth = _scaled(workflow, 2.0)
    seen: list[tuple[float, dict[str, TaskState]]] = []

    def step(w: Workflow, c: Catalog, p: Plan, state: Mapping[str, TaskState], now_s: float) -> Replan:
        seen.append((now_s, dict(state)))
        return replan(w, c, p, state, now_s, time_limit_s=0.2)

    run = replay_with_repairs(plan, workflow, truth, catalog, repair=step)
    assert [now for now, _ in seen] == [event.at_s for event in run.repairs]
    now_s, state = seen[0]
    ran = {a.task: a for a in run.replay.assignments}
    for task_id, status in state.items():  # the state handed over is what the truth did by then
        assert ran[task_id].start_s < now_s or isinstance(status, Done)
        if isinstance(status, Done):
            assert status.end_s == pytest.approx(ran[task_id].end_s)
        else:
            assert isinstance(status, Running) and ran[task_id].end_s > now_s
    quarter = 0.25 * run.replay.makespan_s
    assert forecast(run, workflow, catalog, quarter, step).makespan_s > 0
    assert seen[-1][0] == quarter


def test_each_repair_keeps_its_wall_time_and_says_when_it_used_its_whole_budget(planned, catalog) -> None:
    workflow, plan = planned
    truth = _scaled(workflow, 2.0)
    walls = iter([0.1, 0.6, 0.49, 2.0] * 50)

    def step(w: Workflow, c: Catalog, p: Plan, state: Mapping[str, TaskState], now_s: float) -> Replan:
        return replace(replan(w, c, p, state, now_s, time_limit_s=0.2), wall_s=next(walls))

    run = replay_with_repairs(plan, workflow, truth, catalog, repair=step)
    assert len(run.repairs) >= 2
    assert [event.wall_s for event in run.repairs] == [[0.1, 0.6, 0.49, 2.0][i % 4] for i in range(len(run.repairs))]
    assert [event.reached_limit(0.5) for event in run.repairs[:2]] == [False, True]
    assert not run.repairs[1].reached_limit(1.0)


def test_late_is_the_executors_rule() -> None:
    from agora_optimizer.model.plan import Assignment

    planned = Assignment("t", "r", "r#0", 10.0, 20.0, 1, 1)
    assert not late(planned, 22.0, 0.2)  # 2 s late on 10 s: within the slack
    assert late(planned, 22.5, 0.2)
    assert not late(planned, 22.5, 0.2, min_late_s=5.0)
    assert not late(planned, 100.0, 0.0)  # repair off


def test_the_assumed_workflow_of_a_plan_gives_back_what_it_was_made_from(planned, catalog) -> None:
    workflow, plan = planned
    assumed = assumed_workflow(plan, workflow, catalog)
    for task in workflow.tasks:
        assert assumed.by_id[task.id].runtime_s == pytest.approx(task.runtime_s, rel=1e-9, abs=1e-9)
    assert replay_with_repairs(plan, assumed, _scaled(workflow, 2.0), catalog).repairs


def test_a_repair_that_fails_leaves_the_run_under_its_plan_as_the_executor_does(planned, catalog) -> None:
    from agora_optimizer.planning.run_state import ReplanError

    workflow, plan = planned
    truth = _scaled(workflow, 2.0)

    def failing(w: Workflow, c: Catalog, p: Plan, state: Mapping[str, TaskState], now_s: float) -> Replan:
        raise ReplanError("task 'x' fits on no machine within the catalog's counts")

    run = replay_with_repairs(plan, workflow, truth, catalog, repair=failing)
    assert run.repairs == () and run.plans == (plan,) and run.failures
    assert all("fits on no machine" in failure and " late): " in failure for failure in run.failures)
    unrepaired = {a.task: a for a in replay(plan, truth, catalog).assignments}
    for a in run.replay.assignments:  # every task where the plan had it, when a run without repair starts it
        assert a.machine == unrepaired[a.task].machine and a.start_s == pytest.approx(unrepaired[a.task].start_s)


# -- memory: a task over its reservation is killed and retried, its category learned ------------------------------

GIB = 2**30
ONE_AT_A_TIME = Catalog(
    (Resource("m", "local", vcpus=1, memory_gib=16, speed=1.0, price_per_hour_usd=3.6, count=1),), 1e9
)  # one machine, one task at a time: each task's end is known before the next starts


def _aligns(predicted_bytes: int, peak_bytes: int, n: int = 8) -> tuple[Workflow, Workflow, Plan]:
    """``n`` tasks of one category, 10 s each, predicted at ``predicted_bytes`` and peaking at ``peak_bytes``; the
    plan made from the prediction (one after the other on m#0), and the truth."""
    predicted = Workflow.create("aligns", [Task(f"align_{i}", 10.0, 1, predicted_bytes, "align") for i in range(n)], [])
    truth = Workflow.create("aligns", [replace(t, memory_bytes=peak_bytes) for t in predicted.tasks], [])
    plan = optimize(predicted, ONE_AT_A_TIME, Objective("cost"), "one", time_limit_s=0.5)
    return predicted, truth, plan


def test_a_category_whose_first_tasks_peak_at_3x_their_prediction_is_raised_for_the_rest_and_the_kills_are_paid():
    predicted, truth, plan = _aligns(GIB, 3 * GIB)
    assert replay(plan, truth, ONE_AT_A_TIME).makespan_s == pytest.approx(80.0)  # the old replay: as if they fit
    run = replay_with_repairs(plan, predicted, truth, ONE_AT_A_TIME)
    # the first task killed at 1 GiB (its limit doubled, x 1.2: 2.4 GiB for its retry and the rest), its retry at
    # 2.4 GiB (5.76 GiB); that one measures the peak, 3 GiB, and the rest reserve 3.6 GiB: each fits the first time
    assert [(a.task, a.memory_bytes / GIB) for a in run.killed] == [
        ("align_0", 1.0), ("align_0", pytest.approx(2.4))
    ]  # fmt: skip
    assert run.first_over_reservation() == {"align_0"}
    assert all(a.memory_bytes >= 3 * GIB for a in run.replay.assignments) and run.replay.oom_tasks == ()
    # each killed attempt ran until its memory reached its reservation (evenly: 1/3 and 0.8 of its 10 s), and is paid
    assert run.replay.makespan_s == pytest.approx(80.0 + 10.0 / 3 + 8.0)
    assert run.replay.cost_usd == pytest.approx(math.ceil(run.replay.makespan_s) / 1000)  # billed by the second
    # the first task to fit measured its peak, 3 GiB: the floor gives way to 3 GiB x 1.2 for the tasks to come
    assert [w.by_id["align_7"].memory_bytes / GIB for w in run.workflows] == pytest.approx([1.0, 2.4, 5.76, 3.6])
    last = replace(_whole(plan, run), cost_usd=cost_usd(run.replay.assignments, ONE_AT_A_TIME))  # the kills aside
    assert validate_plan(last, truth, ONE_AT_A_TIME) == []  # each task's last attempt, on the truth


def test_without_repairs_every_task_over_its_reservation_is_killed_and_retried_in_place_grown():
    predicted, truth, plan = _aligns(GIB, 3 * GIB)
    run = replay_with_repairs(plan, predicted, truth, ONE_AT_A_TIME, slack=0)
    assert run.repairs == () and run.first_over_reservation() == set(predicted.by_id)  # nothing learned: all 8
    assert len(run.killed) == 8 * 3  # 1, 1.5 and 2.25 GiB killed; 3.375 GiB fits
    assert {a.memory_bytes for a in run.replay.assignments} == {math.ceil(math.ceil(math.ceil(GIB * 1.5) * 1.5) * 1.5)}
    assert {a.machine for a in run.replay.assignments} == {"m#0"}


def test_a_category_under_its_prediction_is_never_lowered_and_a_peak_no_type_holds_runs_as_before():
    predicted, truth, plan = _aligns(2 * GIB, GIB)
    run = replay_with_repairs(plan, predicted, truth, ONE_AT_A_TIME)
    assert run.killed == () and run.repairs == () and run.replay == replay(plan, truth, ONE_AT_A_TIME)
    assert {a.memory_bytes for a in run.replay.assignments} == {2 * GIB}
    huge, too_big, huge_plan = _aligns(16 * GIB, 20 * GIB, n=2)  # above the largest type: no retry can help
    beyond = replay_with_repairs(huge_plan, huge, too_big, ONE_AT_A_TIME)
    assert beyond.killed == () and len(beyond.replay.oom_tasks) == 2


def test_the_repairs_and_the_forecast_see_a_killed_task_pending_with_its_retrys_memory_or_running_again():
    predicted, truth, plan = _aligns(GIB, 3 * GIB)
    seen: list[tuple[float, Workflow, dict[str, TaskState]]] = []

    def step(w: Workflow, c: Catalog, p: Plan, state: Mapping[str, TaskState], now_s: float) -> Replan:
        seen.append((now_s, w, dict(state)))
        return replan(w, c, p, state, now_s, time_limit_s=0.2)

    run = replay_with_repairs(plan, predicted, truth, ONE_AT_A_TIME, repair=step)
    now_s, workflow, state = seen[0]  # the first kill, at a third of align_0's 10 s
    assert now_s == pytest.approx(10.0 / 3) and state == {"align_0": Pending(math.ceil(2.4 * GIB))}
    assert workflow.by_id["align_1"].memory_bytes == math.ceil(2.4 * GIB)  # the rest re-planned at that
    forecast(run, predicted, ONE_AT_A_TIME, 5.0, step)  # the retry runs then, at 2.4 GiB (to be killed at 11.3 s)
    assert seen[-1][2] == {"align_0": Running("m#0", pytest.approx(10.0 / 3), math.ceil(2.4 * GIB))}
    assert seen[-1][1] == run.workflows[1]  # the workflow of the plan in force then


@pytest.mark.parametrize("run_k", [1.0, 9.0])
def test_a_category_not_seen_yet_follows_the_run_as_far_as_run_k_says_in_the_repairs_and_the_forecast(
    run_k: float,
) -> None:
    """``[agora] run_shrink_k``, as the executor reads it: ``align`` ran 2x, so the ``sort`` tasks to come, of a
    category no task of has ended, take the run's factor 2^(1 / (1 + k)), in the re-plan and in the forecast."""
    tasks = [Task("align_0", 10.0, 1, GIB, "align"), *(Task(f"sort_{i}", 10.0, 1, GIB, "sort") for i in range(3))]
    predicted = Workflow.create("two", tasks, [Edge("align_0", f"sort_{i}") for i in range(3)])
    truth = _scaled(predicted, 2.0)
    plan = optimize(predicted, ONE_AT_A_TIME, Objective("cost"), "one", time_limit_s=0.5)
    seen: list[Workflow] = []

    def step(workflow: Workflow, catalog: Catalog, plan: Plan, state: Mapping[str, TaskState], now_s: float) -> Replan:
        seen.append(workflow)
        return replan(workflow, catalog, plan, state, now_s, time_limit_s=0.5)

    run = replay_with_repairs(plan, predicted, truth, ONE_AT_A_TIME, repair=step, run_k=run_k)
    factor = 2 ** (1 / (1 + run_k))
    assert run.repairs[0].at_s == pytest.approx(20.0) and run.run_k == run_k
    assert [t.runtime_s for t in seen[0].tasks if t.category == "sort"] == pytest.approx([10.0 * factor] * 3)
    assert forecast(run, predicted, ONE_AT_A_TIME, 20.0, step).makespan_s == pytest.approx(20.0 + 30.0 * factor)


def test_a_category_whose_first_tasks_take_2x_is_re_predicted_for_the_rest_and_the_forecast_follows() -> None:
    predicted = Workflow.create("aligns", [Task(f"align_{i}", 10.0, 1, GIB, "align") for i in range(8)], [])
    truth = _scaled(predicted, 2.0)  # every task takes 20 s, not 10: the run takes 160 s
    plan = optimize(predicted, ONE_AT_A_TIME, Objective("cost"), "one", time_limit_s=0.5)
    seen: list[Workflow] = []

    def step(workflow: Workflow, catalog: Catalog, plan: Plan, state: Mapping[str, TaskState], now_s: float) -> Replan:
        seen.append(workflow)
        return replan(workflow, catalog, plan, state, now_s, time_limit_s=0.5)

    run = replay_with_repairs(plan, predicted, truth, ONE_AT_A_TIME, repair=step)
    assert run.replay.makespan_s == pytest.approx(160.0)
    # the first task's 2x moves its category to 2^(1/1.25) = 1.74x: the re-plan then sees the 7 tasks to come at that
    one = 2 ** (1 / 1.25)
    assert run.repairs[0].at_s == pytest.approx(20.0)
    assert [t.runtime_s for t in seen[0].tasks] == pytest.approx([10.0] + [10.0 * one] * 7)
    assert run.workflows[1] == seen[0] and run.runtime_factors[1] == pytest.approx(
        {f"align_{i}": one for i in range(1, 8)}
    )
    # the re-plans carry it: tasks of 20 s planned at 17.4 s are no longer late, so no re-plan after each of them
    assert len(run.repairs) < 4
    # after three tasks the run forecasts its 160 s within a few %: 60 s run, five tasks to come at 2^(3/3.25)x
    foreseen = forecast(run, predicted, ONE_AT_A_TIME, 60.0, step)
    assert foreseen.makespan_s == pytest.approx(60.0 + 5 * 10.0 * 2 ** (3 / 3.25))
    assert abs(foreseen.makespan_s / 160.0 - 1) < 0.05
    # repair off, nothing is learned: the plan and its runtimes as made
    without = replay_with_repairs(plan, predicted, truth, ONE_AT_A_TIME, slack=0)
    assert without.repairs == () and without.runtime_seen == ()

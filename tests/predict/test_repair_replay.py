"""Replaying a plan with repairs: the executor's drift rule and re-plan, played on the true runtimes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Objective, Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.optimize.optimize import optimize
from agora_optimizer.planning.replan import Done, Replan, Running, TaskState, replan
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
    from agora_optimizer.planning.replan import ReplanError

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

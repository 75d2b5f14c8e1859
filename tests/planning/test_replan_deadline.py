"""A re-plan whose deadline is at risk buys the least time that keeps it: only the tasks that would end late move.

Each case is small enough to price by hand; every re-plan is checked whole by the validator and the spec
checker (:func:`tests.planning.test_replan.check`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agora_optimizer.model.plan import Objective
from agora_optimizer.planning.replan import at_risk, replan
from agora_optimizer.planning.run_state import Done
from tests.planning.test_replan import catalog, check, plan_of, resource, workflow

# a -> b -> c -> d -> e, 10 s each on the cheap type (1 USD per 1,000 s); the fast type is twice as fast at four
# times the price, so the same work costs twice as much there.
CHAIN = workflow({t: 10.0 for t in "abcde"}, [(p, c, 0) for p, c in zip("abcd", "bcde", strict=False)])
TWO_SPEEDS = catalog(resource("cheap", count=1), resource("fast", speed=2.0, price_per_hour_usd=14.4, count=2))
ON_CHEAP = [(t, "cheap#0", 10.0 * i) for i, t in enumerate("abcde")]


def test_a_deadline_at_risk_by_two_seconds_moves_the_last_task_alone_to_the_faster_type(tmp_path: Path) -> None:
    # a ended 2 s late: kept as planned the run ends at 52 s for 0.052 USD, past its deadline of 50 s. The cheapest
    # fix moves e alone to the fast type (42 to 47 s): cheap#0 is paid 0 to 42 s, fast#0 5 s, +0.010 USD. Moving d
    # instead leaves cheap#0 idle, paid, while d runs (+0.015); moving more, as a schedule for time alone does
    # (b to e on fast, 12 to 32 s), costs +0.040 USD.
    objective = Objective(kind="cost", deadline_s=50.0)
    plan = plan_of(CHAIN, TWO_SPEEDS, ON_CHEAP, objective)
    result = replan(CHAIN, TWO_SPEEDS, plan, {"a": Done("cheap#0", 12.0, 0.0)}, now_s=12.0, deadline_margin=0.0)
    check(CHAIN, TWO_SPEEDS, result, objective, tmp_path)
    assert {a.task: a.machine for a in result.assignments} == {
        "b": "cheap#0",
        "c": "cheap#0",
        "d": "cheap#0",
        "e": "fast#0",
    }
    assert result.makespan_s == pytest.approx(47.0) and result.cost_usd == pytest.approx(0.062)
    assert result.method == "deadline" and result.moved_resource == ("e",)
    assert result.deadline_note == (
        "deadline at risk: the run ends at 52.0 s, past its deadline 50.0 s; 1 task moved to a faster type "
        "(e cheap -> fast), 1 more machine (fast#0); it now ends at 47.0 s (keeps it) for 0.0620 USD, +0.0100 USD"
    )


def test_a_deadline_a_faster_last_task_cannot_keep_moves_more_but_no_more_than_it_needs(tmp_path: Path) -> None:
    # a ended 8 s late: the run would end at 58 s. e alone on fast saves 5 s, not 8. The least: d and e on fast (38
    # to 48 s), cheap#0 paid 0 to 38 s and fast 10 s, 0.038 + 0.040 USD; c and e would leave cheap#0 idle, paid.
    objective = Objective(kind="cost", deadline_s=50.0)
    plan = plan_of(CHAIN, TWO_SPEEDS, ON_CHEAP, objective)
    result = replan(CHAIN, TWO_SPEEDS, plan, {"a": Done("cheap#0", 18.0, 0.0)}, now_s=18.0, deadline_margin=0.0)
    check(CHAIN, TWO_SPEEDS, result, objective, tmp_path)
    assert result.makespan_s <= 50.0 + 1e-6
    assert sorted(result.moved_resource) == ["d", "e"] and result.cost_usd == pytest.approx(0.038 + 0.040)


# t0 then t1 to t6 on the cheap type (count 1), 50 s of work after t0; t4 needs t2 and t3, t5 and t6 need t3. The
# other type is as fast, four times the price, count 1 too.
WIDE = workflow(
    {"t0": 20.0, "t1": 10.0, "t2": 20.0, "t3": 5.0, "t4": 5.0, "t5": 5.0, "t6": 5.0},
    [("t2", "t4", 0), ("t3", "t4", 0), ("t3", "t5", 0), ("t3", "t6", 0)],
)
CHEAP_AND_DEAR = catalog(resource("cheap", count=1), resource("dear", price_per_hour_usd=14.4, count=1))
STARTS = {"t0": 0.0, "t1": 20.0, "t2": 30.0, "t3": 50.0, "t4": 55.0, "t5": 60.0, "t6": 65.0}
WIDE_ON_CHEAP = [(t, "cheap#0", start) for t, start in STARTS.items()]


def test_a_wide_run_whose_tails_miss_the_wait_for_machines_still_gets_the_cheapest_fix(tmp_path: Path) -> None:
    # t0 ended 6 s late, at 26 s: 50 s of work is left and the deadline is 70 s, so at least 6 s of it, 10 s as the
    # tasks come, goes to the dear machine. The least it can cost: cheap#0 busy to 66 s (0.066 USD) and dear#0 10 s
    # (0.040 USD). Each task's tail (the path after it) leaves the wait for cheap#0 out: placed by their latest
    # ends the tasks move too late and the run ends at 71 s; time alone keeps it for 0.151 USD.
    objective = Objective(kind="cost", deadline_s=70.0)
    plan = plan_of(WIDE, CHEAP_AND_DEAR, WIDE_ON_CHEAP, objective)
    result = replan(WIDE, CHEAP_AND_DEAR, plan, {"t0": Done("cheap#0", 26.0, 0.0)}, now_s=26.0, deadline_margin=0.0)
    check(WIDE, CHEAP_AND_DEAR, result, objective, tmp_path)
    assert result.makespan_s <= 70.0 + 1e-6 and result.cost_usd == pytest.approx(0.106)
    assert sum(a.end_s - a.start_s for a in result.assignments if a.resource == "dear") == pytest.approx(10.0)


def test_by_default_a_repair_aims_a_margin_before_the_deadline(tmp_path: Path) -> None:
    # The first case again: e alone on the fast type ends at 47 s, 3 s before the deadline of 50 s. With a margin of a
    # fifth of the 38 s left (aim: 42.4 s), that is not enough: d and e both move (d 32 to 37 s, e 37 to 42 s).
    objective = Objective(kind="cost", deadline_s=50.0)
    plan = plan_of(CHAIN, TWO_SPEEDS, ON_CHEAP, objective)
    result = replan(CHAIN, TWO_SPEEDS, plan, {"a": Done("cheap#0", 12.0, 0.0)}, now_s=12.0, deadline_margin=0.2)
    check(CHAIN, TWO_SPEEDS, result, objective, tmp_path)
    assert result.makespan_s <= 50.0 - 0.2 * (50.0 - 12.0) + 1e-6
    assert {a.task for a in result.assignments if a.machine.startswith("fast")} == {"d", "e"}
    unaimed = replan(CHAIN, TWO_SPEEDS, plan, {"a": Done("cheap#0", 12.0, 0.0)}, now_s=12.0, deadline_margin=0.0)
    assert unaimed.makespan_s > 50.0 - 0.2 * (50.0 - 12.0)  # without it, the least time that keeps the deadline


def test_a_run_forecast_to_end_inside_the_margin_is_repaired_before_it_is_late(tmp_path: Path) -> None:
    # a ended at 9 s: kept, the run ends at 49 s, on time for its deadline of 50 s but past the aim of a margin of a
    # fifth of the 41 s left (41.8 s). Waiting until it is late leaves the next drift nothing to absorb.
    objective = Objective(kind="cost", deadline_s=50.0)
    plan = plan_of(CHAIN, TWO_SPEEDS, ON_CHEAP, objective)
    state = {"a": Done("cheap#0", 9.0, 0.0)}
    result = replan(CHAIN, TWO_SPEEDS, plan, state, now_s=9.0, deadline_margin=0.2)
    check(CHAIN, TWO_SPEEDS, result, objective, tmp_path)
    assert result.method == "deadline" and result.makespan_s <= 50.0 - 0.2 * (50.0 - 9.0) + 1e-6
    unaimed = replan(CHAIN, TWO_SPEEDS, plan, state, now_s=9.0, deadline_margin=0.0)
    assert unaimed.method != "deadline" and unaimed.makespan_s == pytest.approx(49.0)


def test_a_deadline_is_at_risk_while_the_plan_moved_by_the_late_task_passes_the_aim_and_until_it_is_lost() -> None:
    # the chain planned to end at 50 s against a deadline of 60 s: at 10 s the aim is 60 - 5 % of 50 = 57.5 s
    plan = plan_of(CHAIN, TWO_SPEEDS, ON_CHEAP, Objective(kind="cost", deadline_s=60.0))
    assert not at_risk(plan, 10.0, late_s=7.0)  # 57 s: inside the aim
    assert at_risk(plan, 10.0, late_s=8.0)  # 58 s: past it
    assert at_risk(plan, 10.0, late_s=0.0, margin=0.25)  # a wider margin aims at 47.5 s
    assert not at_risk(plan, 60.0, late_s=30.0)  # the deadline has passed: nothing left to keep
    no_deadline = plan_of(CHAIN, TWO_SPEEDS, ON_CHEAP, Objective(kind="cost"))
    assert not at_risk(no_deadline, 10.0, late_s=1e6)

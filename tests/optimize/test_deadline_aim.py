"""A plan under a deadline aims a margin of it early (``--deadline-margin``), as repairs during a run do.

The chain below is small enough to price by hand; each plan is checked whole by the validator.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agora_optimizer.cli import main
from agora_optimizer.model.plan import Objective
from agora_optimizer.optimize.optimize import aimed_problem, optimize
from agora_optimizer.planning.deadline_aim import DEADLINE_MARGIN, aim_s, aimed_deadline_s
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.validate import validate_plan
from tests.conftest import AWS_CATALOG, BUNDLED
from tests.planning.test_replan import catalog, resource, workflow

# a -> b -> c -> d -> e, 10 s each on the cheap type (1 USD per 1,000 s, per-second billing, no boot); the fast
# type runs a task in 5 s for 4 USD per 1,000 s, so each task moved there saves 5 s and costs 0.010 USD more.
CHAIN = workflow({t: 10.0 for t in "abcde"}, [(p, c, 0) for p, c in zip("abcd", "bcde", strict=False)])
TWO_SPEEDS = catalog(resource("cheap", count=1), resource("fast", speed=2.0, price_per_hour_usd=14.4, count=1))


def test_a_cost_plan_aimed_five_percent_early_buys_the_time_for_it_and_keeps_the_deadline_itself() -> None:
    # Deadline 50 s: all five on the cheap type end at 50 s for 0.050 USD. Aimed 5 % early (47.5 s), one task
    # moves to the fast type: 45 s for 0.060 USD (the cheap machine paid 40 s, the fast one 5 s).
    objective = Objective(kind="cost", deadline_s=50.0)
    exact = optimize(CHAIN, TWO_SPEEDS, objective, "chain", time_limit_s=5)
    aimed = optimize(CHAIN, TWO_SPEEDS, objective, "chain", time_limit_s=5, deadline_margin=0.05)
    assert (exact.makespan_s, exact.cost_usd) == pytest.approx((50.0, 0.050))
    assert (aimed.makespan_s, aimed.cost_usd) == pytest.approx((45.0, 0.060))
    assert [a.resource for a in aimed.assignments].count("fast") == 1
    assert aimed.objective == objective  # the plan is held to, and checked against, the deadline asked for
    assert validate_plan(aimed, CHAIN, TWO_SPEEDS) == []
    assert exact.solver.status == "optimal" and aimed.solver.status == "feasible"  # optimal for the aim only
    assert aimed.solver.gap is None


def test_the_aim_is_never_before_the_makespan_bound_and_no_deadline_has_none() -> None:
    # All five on the fast type end at 25 s, the bound: under a deadline of 26 s the aim (24.7 s) is the bound.
    tight = Problem.create(CHAIN, TWO_SPEEDS, Objective(kind="cost", deadline_s=26.0))
    assert tight.bounds.makespan_s == pytest.approx(25.0)
    assert aimed_problem(tight, 0.05).objective.deadline_s == pytest.approx(25.0)
    plan = optimize(CHAIN, TWO_SPEEDS, tight.objective, "chain", time_limit_s=5, deadline_margin=0.05)
    assert plan.makespan_s == pytest.approx(25.0) and plan.objective.deadline_s == 26.0
    loose = Problem.create(CHAIN, TWO_SPEEDS, Objective(kind="cost", deadline_s=100.0))
    assert aimed_problem(loose, DEADLINE_MARGIN).objective.deadline_s == pytest.approx(aim_s(100.0, 0.0))
    assert aimed_problem(loose, 0.0) is loose
    free = Problem.create(CHAIN, TWO_SPEEDS, Objective(kind="cost"))
    assert aimed_problem(free, DEADLINE_MARGIN) is free
    with pytest.raises(ValueError, match="deadline margin"):
        aimed_problem(loose, 1.0)


def test_the_aim_is_where_a_repair_at_the_start_of_the_run_aims() -> None:
    assert aim_s(200.0, 0.0) == pytest.approx(200.0 * (1 - DEADLINE_MARGIN))
    assert aim_s(200.0, 100.0, 0.1) == pytest.approx(190.0)  # a share of the time left
    assert aim_s(200.0, 250.0) == 200.0  # past the deadline: nothing left to keep


@pytest.mark.slow  # two plans of 3 s
def test_optimize_says_where_it_aimed_and_the_json_has_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blast = BUNDLED / "blast-chameleon-small-001.json"
    argv = ["optimize", str(blast), "-c", str(AWS_CATALOG), "--objective", "cost", "--deadline-s", "60",
            "--time-limit-s", "3"]  # fmt: skip
    assert main([*argv, "-o", str(tmp_path / "aimed.json")]) == 0
    said = capsys.readouterr().out
    assert "deadline 60.0 s: aimed 5% early, at 57.0 s, for the platform's delays; the plan ends at" in said
    assert main([*argv, "-o", str(tmp_path / "exact.json"), "--deadline-margin", "0", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["deadline_aim"] == {"margin": 0.0, "aim_s": 60.0, "met": True}
    aimed = json.loads((tmp_path / "aimed.json").read_text())
    assert aimed["objective"]["deadline_s"] == 60.0 and aimed["makespan_s"] <= 57.0 + 1e-6


def test_a_plan_made_before_its_run_aims_early_but_between_the_bound_and_the_deadline() -> None:
    assert aimed_deadline_s(100.0, 50.0, 0.1) == pytest.approx(90.0)
    assert aimed_deadline_s(100.0, 95.0, 0.1) == pytest.approx(95.0)  # not before the bound
    assert aimed_deadline_s(100.0, 120.0, 0.1) == pytest.approx(100.0)  # no plan keeps it: the deadline, not later
    assert aimed_deadline_s(100.0, 50.0, 0.0) == 100.0
    with pytest.raises(ValueError, match="deadline margin"):
        aimed_deadline_s(100.0, 50.0, 1.0)

"""The learning loop's figures: each over the runs that have it, against the issue's targets."""

from __future__ import annotations

from typing import Any

import pytest

from agora_optimizer.predict.learning_loop_report import markdown, summary


def _run(workflow: str, planned_s: float, actual_s: float, truth_meets: bool, met: bool, **more: Any) -> dict[str, Any]:
    return {
        "workflow": workflow, "family": workflow.split("-")[0], "tasks": 3, "deadline_s": 1.5 * planned_s,
        "planned_makespan_s": planned_s, "actual_makespan_s": actual_s, "deadline_met": met,
        "planned_cost_usd": 1.0, "actual_cost_usd": 1.2, "truth_plan_cost_usd": 1.0 if truth_meets else None,
        "truth_meets_deadline": truth_meets, "repairs": 1, "forecast_makespan_s": actual_s * 1.1,
        "default_planned_makespan_s": 2 * planned_s, "default_planned_cost_usd": 2.0,
        "default_actual_makespan_s": 2 * actual_s, "default_actual_cost_usd": 1.0,
        "memory_tasks": 3, "tasks_over_reservation": 1, "median_reservation_over_peak": 2.0, "runtime_mdape": 0.5,
        **more,
    }  # fmt: skip


def test_the_deadline_share_counts_only_runs_whose_truth_plan_meets_the_deadline() -> None:
    runs = [
        _run("a-1", 100.0, 110.0, truth_meets=True, met=True),
        _run("a-2", 100.0, 200.0, truth_meets=False, met=False),  # no plan could: not held against the loop
        _run("b-1", 100.0, 160.0, truth_meets=True, met=False),
        {"workflow": "b-2", "family": "b", "simulated": True, "error": "no plan"},
    ]
    s = summary(runs)
    assert (s["runs"], s["failed"], s["truth_meets_deadline"]) == (4, 1, 2)
    assert s["deadline_met_share"] == 0.5 and s["deadline_met_share_all"] == pytest.approx(1 / 3)
    assert s["makespan_median_error"] == pytest.approx(0.6) and s["makespan_worst_error"] == pytest.approx(1.0)
    assert s["forecast_median_error"] == pytest.approx(0.1)
    assert s["cost_over_truth_median"] == pytest.approx(1.2)  # the runs with a truth plan only
    assert s["realised_cost_saving_min"] == pytest.approx(-0.2)  # dearer than the default's 1.0
    assert s["saving_gap_cost_median_points"] == pytest.approx(70.0)  # planned 50 % cheaper, realised -20 %
    assert s["saving_gap_makespan_median_points"] == pytest.approx(0.0)
    assert s["share_over_reservation"] == pytest.approx(1 / 3)
    table = markdown({"command": "python bench/run_learning_loop.py --simulate", "catalog": "c.yaml", "runs": runs,
                      "summary": s})  # fmt: skip
    assert "| b-2 | no run: no plan |" in table
    assert "| deadline met, of the 2 runs whose truth plan meets it | 50.0 % | >= 90% ✗ |" in table


def test_a_real_run_that_did_not_succeed_says_so_in_its_row() -> None:
    runs = [
        _run("a-1", 100.0, 110.0, True, True, state="failed", default_state="success"),
        _run("a-2", 1.0, 1.0, True, True),
    ]
    table = markdown({"command": "c", "catalog": "c.yaml", "runs": runs, "summary": summary(runs)})
    assert "| a-1 (agora run failed) | 3 |" in table and "| a-2 | 3 |" in table  # a simulated run has no state


def test_runs_the_default_beat_on_both_and_the_saving_where_it_kept_the_deadline_are_counted_apart() -> None:
    runs = [
        # default late (2x the actual, past 1.5x the plan): its cheaper run does not count as kept
        _run("a-1", 100.0, 100.0, True, True),
        # default on time, dearer and slower: saving 50 %
        _run("a-2", 100.0, 100.0, True, True, default_actual_makespan_s=120.0, default_actual_cost_usd=2.4),
        # default on time, cheaper and sooner: beaten on both
        _run("a-3", 100.0, 100.0, True, True, default_actual_makespan_s=90.0, default_actual_cost_usd=1.0),
    ]
    s = summary(runs)
    assert s["runs_default_cheaper_and_sooner"] == 1
    assert s["default_on_time_runs"] == 2
    assert s["default_on_time_cost_saving_min"] == pytest.approx(-0.2)  # 1.2 against 1.0
    assert s["default_on_time_cost_saving_median"] == pytest.approx(0.15)  # (-20 % + 50 %) / 2
    table = markdown({"command": "c", "catalog": "c.yaml", "runs": runs, "summary": s})
    assert "| runs the default ran both cheaper and sooner than | 1 of 3 |" in table
    assert "in the 2 runs where the default kept the deadline too: lowest / median | -20.0 % / 15.0 % |" in table


def test_re_plans_that_used_their_whole_budget_are_counted_where_runs_count_them() -> None:
    simulated = [_run("a-1", 100.0, 100.0, True, True, repairs_at_time_limit=2), _run("a-2", 1.0, 1.0, True, True)]
    s = summary(simulated)
    assert s["repairs_at_time_limit"] == 2
    assert "2 re-plans used their whole time budget" in markdown({"command": "c", "catalog": "c", "runs": simulated,
                                                                 "summary": s})  # fmt: skip
    real = [_run("a-1", 100.0, 100.0, True, True)]  # a real run does not count them
    s = summary(real)
    assert s["repairs_at_time_limit"] is None
    assert "whole time budget" not in markdown({"command": "c", "catalog": "c", "runs": real, "summary": s})

"""The Pareto sweep: its progress (``agora pareto``'s) and its time limit."""

from __future__ import annotations

import pytest

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.optimize.pareto import SweepProgress, front_plans, pareto_front
from agora_optimizer.optimize.portfolio import TIME_LIMIT_FALLBACK
from agora_optimizer.planning.validate import validate_plan
from tests.conftest import AWS_CATALOG, BUNDLED


@pytest.mark.slow  # plans for seconds
def test_the_sweep_tells_each_run_its_best_plan_and_the_points_on_the_front_so_far() -> None:
    told: list[SweepProgress] = []
    front = pareto_front(
        load_workflow(BUNDLED / "blast-chameleon-small-001.json"), load_catalog(AWS_CATALOG), "aws",
        deadlines=2, time_limit_s=4.0, progress=told.append,
    )  # fmt: skip
    assert [t.done for t in told] == list(range(1, len(told) + 1)) and len(told) >= 2  # the fastest, the cheapest
    assert {t.planned for t in told} == {5}  # the fastest, the cheapest and 3 under a deadline
    assert told[-1].front == len(front.points)
    for t in told:
        assert t.makespan_s is not None and t.cost_usd is not None
        assert t.makespan_s >= front.bounds.makespan_s - 1e-6 and t.cost_usd >= front.bounds.cost_usd - 1e-9
    fastest = min(p.makespan_s for p in front.candidates if p.objective.kind == "time")
    assert told[0].makespan_s == pytest.approx(fastest)  # the first run's best: the fastest plan it found


def test_a_front_with_no_time_left_is_the_one_type_default_and_no_deadline_run_starts() -> None:
    """The limit went before the sweep (a 30,000-task workflow's loading and bounds): the fastest and the
    cheapest runs give up their first schedule and keep the default, and no run under a deadline starts."""
    workflow, catalog = load_workflow(BUNDLED / "blast-chameleon-small-001.json"), load_catalog(AWS_CATALOG)
    front = pareto_front(workflow, catalog, "aws", deadlines=3, time_limit_s=0.0)
    assert {p.method for p in front.candidates} == {TIME_LIMIT_FALLBACK}
    assert {p.objective.deadline_s for p in front.candidates} == {None}  # the fastest and cheapest runs only
    assert front.default is not None and [(p.makespan_s, p.cost_usd) for p in front.points] == [
        (front.default.makespan_s, front.default.cost_usd)
    ]
    assert all(validate_plan(plan, workflow, catalog) == [] for plan in front_plans(front, workflow, catalog))

"""The Pareto sweep tells its caller each run's best plan and the front so far (``agora pareto``'s progress)."""

from __future__ import annotations

import pytest

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.optimize.pareto import SweepProgress, pareto_front
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

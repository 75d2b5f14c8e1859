"""The MILP's warm start: a valid schedule read into the model's variables."""

from __future__ import annotations

import pytest

from agora_optimizer.engines.exact.milp.data import build_data
from agora_optimizer.engines.exact.milp.model import build_model
from agora_optimizer.engines.exact.milp.warm import set_warm_start
from agora_optimizer.engines.exact.shared import best_warm_start
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model import Objective
from agora_optimizer.planning.problem import Problem
from tests.conftest import BUNDLED, REPO


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "kind"), [("srasearch-chameleon-10a-001", "time"), ("srasearch-chameleon-10a-002", "balanced")]
)
def test_a_warm_schedule_an_ulp_below_the_makespans_bound_is_taken_on_the_bound(name: str, kind: str) -> None:
    """The list schedule's makespan and the model's lower bound are the same sum taken in another order:
    803.7369230769231 against 803.7369230769232. PuLP refused the value (a ValueError the portfolio logged
    as 'engine milp failed'), so the MILP never ran on these workflows; now it starts from the schedule."""
    problem = Problem.create(
        load_workflow(BUNDLED / f"{name}.json"),
        load_catalog(REPO / "catalogs" / "aws-us-east-1.yaml"),
        Objective(kind=kind),
    )
    warm = best_warm_start(problem, None)
    assert warm is not None
    data = build_data(problem, warm)
    model = build_model(data)
    assert set_warm_start(model, data, warm)
    makespan = max(a.end_s for a in warm)
    assert model.makespan.lowBound is not None and model.makespan.varValue >= model.makespan.lowBound
    assert model.makespan.varValue == pytest.approx(makespan, rel=1e-12)


def test_a_warm_value_out_of_bounds_by_more_than_rounding_is_no_warm_start() -> None:
    """A schedule that does not fit the model's bounds is no warm start (False), never an exception."""
    problem = Problem.create(
        load_workflow(BUNDLED / "srasearch-chameleon-10a-001.json"),
        load_catalog(REPO / "catalogs" / "aws-us-east-1.yaml"),
        Objective(kind="time"),
    )
    warm = best_warm_start(problem, None)
    assert warm is not None
    data = build_data(problem, warm)
    model = build_model(data)
    model.makespan.lowBound = max(a.end_s for a in warm) + 1.0
    assert set_warm_start(model, data, warm) is False

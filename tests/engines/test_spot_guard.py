"""The spot guard stage (agora_optimizer/engines/spot_guard.py)."""

from __future__ import annotations

from agora_optimizer.engines.base import EngineResult
from agora_optimizer.engines.spot_guard import SpotGuardEngine
from agora_optimizer.model import Objective
from agora_optimizer.planning.problem import Problem
from tests.planning.spot_fixtures import (
    assignment,
    calm_catalog,
    slack_workflow,
)


def test_the_spot_guard_moves_the_spot_machine_whose_rerun_breaks_the_deadline() -> None:
    workflow, catalog = slack_workflow(), calm_catalog(0.1)
    spot = catalog.by_name["od-spot"]
    late = (
        assignment("t1", spot, 0, 0.0, 100.0),
        assignment("t2", spot, 0, 100.0, 200.0),
        assignment("loose", spot, 1, 0.0, 50.0),
    )
    problem = Problem.create(workflow, catalog, Objective(kind="cost", deadline_s=260.0))
    assert problem.excess(*problem.evaluate(late)) > 0  # a re-run of t1 ends t2 at 300 s
    result = SpotGuardEngine().solve(problem, 2.0, EngineResult(late, "hand-made"))
    assert result is not None and result.method == "hand-made+spot-guard"
    assert {a.task: a.machine for a in result.assignments} == {"t1": "od#0", "t2": "od#0", "loose": "od-spot#1"}
    assert problem.excess(*problem.evaluate(result.assignments)) == 0
    assert SpotGuardEngine().solve(problem, 2.0, result) is None  # on time in the worst case: nothing to do

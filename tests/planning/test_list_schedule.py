"""The list scheduler's own behaviour (its plans are checked with every engine's in tests/engines)."""

from __future__ import annotations

import pytest

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model import Objective
from agora_optimizer.planning.list_schedule import list_schedule
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.time_budget import OutOfTime, TimeBudget
from tests.conftest import AWS_CATALOG, BUNDLED


def test_a_schedule_with_a_stop_budget_gives_up_once_it_has_expired_and_not_before() -> None:
    workflow = load_workflow(BUNDLED / "blast-chameleon-small-001.json")
    problem = Problem.create(workflow, load_catalog(AWS_CATALOG), Objective())
    args = (workflow, problem.catalog, 0.5, problem.bounds.makespan_s, problem.bounds.cost_usd)
    with pytest.raises(OutOfTime):
        list_schedule(*args, stop=TimeBudget(0.0))
    assert list_schedule(*args, stop=TimeBudget(None)) == list_schedule(*args)

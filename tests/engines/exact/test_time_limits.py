"""The exact engines keep to their time limit even when building their model alone would not.

A 22-task workflow on the 36-processor HPC catalog, for cost under a deadline, gives a MILP of
about 47,000 rows and a CP-SAT model of similar size: seconds to build in Python. Before the
builders checked a deadline, a 0.8 s limit ran for 2.6 s (MILP) and 1.9 s (CP-SAT).
"""

from __future__ import annotations

import time

import pytest

from agora_optimizer.engines.exact.cpsat import model as cpsat_model
from agora_optimizer.engines.exact.cpsat.data import build_data, choose_ticks
from agora_optimizer.engines.exact.cpsat.engine import CpSatEngine
from agora_optimizer.engines.exact.milp import data as milp_data
from agora_optimizer.engines.exact.milp import model as milp_model
from agora_optimizer.engines.exact.milp.engine import MilpEngine
from agora_optimizer.engines.exact.shared import prune_types
from agora_optimizer.engines.list_scheduling import ListSchedulingEngine
from agora_optimizer.engines.one_type_default import OneTypeDefaultEngine
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model import Objective
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.time_budget import OutOfTime, TimeBudget
from tests.conftest import BUNDLED, CATALOGS


@pytest.fixture(scope="module")
def big_model_problem() -> Problem:
    workflow = load_workflow(BUNDLED / "srasearch-chameleon-10a-001.json")
    catalog = load_catalog(CATALOGS / "hpc-36.yaml")
    timed = Problem.create(workflow, catalog, Objective(kind="time"))
    default = OneTypeDefaultEngine().solve(timed, 5)
    assert default is not None
    deadline_s = timed.evaluate(default.assignments)[0]
    return Problem.create(workflow, catalog, Objective(kind="cost", deadline_s=deadline_s))


def test_a_passed_deadline_stops_both_model_builders(big_model_problem: Problem) -> None:
    problem = big_model_problem
    warm = list(ListSchedulingEngine().solve(problem, 1).assignments)  # type: ignore[union-attr]
    with pytest.raises(OutOfTime):
        milp_model.build_model(milp_data.build_data(problem, warm), TimeBudget.until(time.perf_counter()))
    ticks = choose_ticks(problem, prune_types(problem)[0])
    with pytest.raises(OutOfTime):
        cpsat_model.build_model(build_data(problem, "down", ticks, warm), TimeBudget.until(time.perf_counter()))
    assert cpsat_model.build_model(build_data(problem, "down", ticks, warm), TimeBudget()).x  # no deadline


@pytest.mark.slow  # the model takes seconds to build, by design
@pytest.mark.parametrize("engine", [MilpEngine(), CpSatEngine()], ids=["milp", "cpsat"])
def test_a_short_limit_is_kept_though_the_model_takes_longer_to_build(
    big_model_problem: Problem, engine: MilpEngine | CpSatEngine
) -> None:
    problem = big_model_problem
    warm = ListSchedulingEngine().solve(problem, 1)
    started = time.perf_counter()
    milp_model.build_model(milp_data.build_data(problem, list(warm.assignments)))  # type: ignore[union-attr]
    build_s = time.perf_counter() - started
    limit_s = 0.3
    assert build_s > 2 * limit_s, "the model builds fast here: this test no longer tests the cut"
    started = time.perf_counter()
    result = engine.solve(problem, limit_s, warm_start=warm)
    elapsed = time.perf_counter() - started
    assert elapsed < limit_s + 0.5, f"{engine.name} ran {elapsed:.2f} s on a {limit_s} s limit"
    assert result is None or problem.meets_limits(result.assignments)

"""A type's release time (a SLURM queue wait): no lease of it begins sooner, and the wait is not billed.

One small problem where the release binds: task ``b`` needs more memory than the cloud type has,
so it can only run on the released HPC type. Each engine, alone, under each objective, must start
every task on HPC at or after the release plus the boot, and its schedule must pass the validator
against the same catalog (the validator knows nothing of releases: the lease is from the first
start minus ``boot_s``, as the spec says).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.engines.exact.cpsat.engine import CpSatEngine
from agora_optimizer.engines.exact.milp.engine import MilpEngine
from agora_optimizer.engines.heft import HeftEngine
from agora_optimizer.engines.list_scheduling import ListSchedulingEngine
from agora_optimizer.engines.local_search import LocalSearchEngine
from agora_optimizer.engines.one_type_default import OneTypeDefaultEngine
from agora_optimizer.engines.partition.homogeneous import HomogeneousPartitionEngine
from agora_optimizer.engines.partition.icpp24 import PartitionEngine
from agora_optimizer.engines.peft import PeftEngine
from agora_optimizer.engines.pool_search import PoolSearchEngine
from agora_optimizer.model import GIB, Billing, Catalog, Edge, Objective, Resource, Task, Workflow
from agora_optimizer.planning.bounds import cost_lower_bound_usd, feasible_types, makespan_lower_bound_s
from agora_optimizer.planning.leases import leases
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.retime import retime
from agora_optimizer.planning.window_bound import window_bound_s
from tests.engines.plan_checks import violations

RELEASE_S = 60.0
HPC = Resource("hpc", "slurm", 2, 8, 2.0, 0.5, 1, Billing(1.0, 0.0), boot_s=5.0, release_s=RELEASE_S)
CLOUD = Resource("cloud", "aws", 1, 1, 1.0, 1.0, 2, Billing(1.0, 0.0), boot_s=3.0)
WORKFLOW = Workflow.create(
    "released",
    [Task("a", 10.0, 1, GIB // 2, "a"), Task("b", 20.0, 1, 4 * GIB, "b"), Task("c", 15.0, 1, GIB // 2, "c")],
    [Edge("a", "b", 0)],
)
CATALOG = Catalog((HPC, CLOUD), 1e9)
ENGINES: list[Engine] = [
    ListSchedulingEngine(),
    HeftEngine(),
    PeftEngine(),
    PartitionEngine(),
    HomogeneousPartitionEngine(),
    OneTypeDefaultEngine(),
    PoolSearchEngine(),
    CpSatEngine(),
    MilpEngine(),
    LocalSearchEngine(),
]


def _problem(kind: str, catalog: Catalog = CATALOG, deadline_s: float | None = None) -> Problem:
    return Problem.create(WORKFLOW, catalog, Objective(kind=kind, deadline_s=deadline_s))  # type: ignore[arg-type]


def _all_on_hpc_late(problem: Problem) -> EngineResult:
    """A poor warm start for local search: every task on one HPC machine."""
    order = list(WORKFLOW.topological_order)
    return EngineResult(tuple(retime(WORKFLOW, problem.catalog, dict.fromkeys(order, "hpc#0"), order)), "given")


@pytest.mark.parametrize("kind", ["time", "cost"])
@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_every_engine_starts_released_types_after_the_release(engine: Engine, kind: str) -> None:
    problem = _problem(kind)
    warm = _all_on_hpc_late(problem) if isinstance(engine, LocalSearchEngine) else None
    result = engine.solve(problem, 10.0, warm_start=warm)
    if result is None and warm is not None:
        result = warm  # no improving move: the warm start is the schedule (retimed, so still checked)
    assert result is not None
    if isinstance(engine, CpSatEngine | MilpEngine):  # the model itself knows the release: the optimum is real
        assert result.status == "optimal"
    on_hpc = [a for a in result.assignments if a.resource == "hpc"]
    assert any(a.task == "b" for a in on_hpc)  # b fits only there: the release binds
    for a in on_hpc:
        assert a.start_s >= RELEASE_S + HPC.boot_s - 1e-6, (a.task, a.start_s)
    for a in result.assignments:
        assert a.start_s >= problem.catalog.by_name[a.resource].boot_s - 1e-6
    assert violations(problem, result.assignments) == []
    assert problem.early_starts(result.assignments) == []
    for lease in leases(result.assignments, problem.catalog):
        if lease.resource.name == "hpc":  # leased from the release on at the earliest; the wait is not paid
            assert lease.start_s >= RELEASE_S - 1e-6


def test_retime_starts_nothing_before_the_release() -> None:
    order = list(WORKFLOW.topological_order)
    schedule = retime(WORKFLOW, CATALOG, {"a": "cloud#0", "b": "hpc#0", "c": "hpc#0"}, order)
    starts = {a.task: a.start_s for a in schedule}
    assert starts["a"] == CLOUD.boot_s
    assert starts["b"] == starts["c"] == RELEASE_S + HPC.boot_s


def test_the_makespan_bounds_count_the_release() -> None:
    unreleased = Catalog((replace(HPC, release_s=0.0), CLOUD), CATALOG.bandwidth_bytes_per_s)
    # b runs on HPC only: nothing ends before the release, the boot and b's run there
    least = RELEASE_S + HPC.boot_s + HPC.runtime_s(WORKFLOW.by_id["b"])
    assert makespan_lower_bound_s(WORKFLOW, CATALOG) >= least - 1e-6
    assert makespan_lower_bound_s(WORKFLOW, unreleased) < least
    assert window_bound_s(WORKFLOW, feasible_types(WORKFLOW, CATALOG)) >= least * (1 - 1e-6)
    optimum = MilpEngine().solve(_problem("time"), 10.0)
    assert optimum is not None and optimum.status == "optimal"
    assert makespan_lower_bound_s(WORKFLOW, CATALOG) <= _problem("time").evaluate(optimum.assignments)[0] + 1e-6


def test_the_cost_bound_under_a_deadline_counts_the_release_and_stays_a_bound() -> None:
    deadline_s = 76.0  # HPC has 11 s left after its release and boot: not enough for all three tasks
    unreleased = Catalog((replace(HPC, release_s=0.0), CLOUD), CATALOG.bandwidth_bytes_per_s)
    released_bound = cost_lower_bound_usd(WORKFLOW, CATALOG, deadline_s)
    assert released_bound > cost_lower_bound_usd(WORKFLOW, unreleased, deadline_s)  # HPC has less time to work
    problem = _problem("cost", deadline_s=deadline_s)
    optimum = MilpEngine().solve(problem, 10.0)
    assert optimum is not None and optimum.status == "optimal"
    assert released_bound <= problem.evaluate(optimum.assignments)[1] * (1 + 1e-9)


@pytest.mark.parametrize("engine", [CpSatEngine(), MilpEngine()], ids=lambda e: e.name)
def test_the_exact_models_know_the_release(engine: Engine) -> None:
    # One long task: on HPC it would end first if HPC were free at 0, but after the release it ends
    # last; the proven optimum runs it on the cloud, and the bound proves that.
    long = Task("long", 100.0, 1, GIB // 2, "long")
    problem = Problem.create(Workflow.create("one", [long], []), CATALOG, Objective(kind="time"))
    assert RELEASE_S + HPC.boot_s + HPC.runtime_s(long) > CLOUD.boot_s + CLOUD.runtime_s(long) > HPC.runtime_s(long)
    result = engine.solve(problem, 10.0)
    assert result is not None and result.status == "optimal"
    assert [a.resource for a in result.assignments] == ["cloud"]
    assert result.bound is not None and result.bound >= problem.score(result.assignments)[0] * (1 - 1e-6)

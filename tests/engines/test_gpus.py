"""GPUs (section 5 of the spec) in every engine: a valid plan for a mixed GPU/CPU workflow, or none.

Engines that pack GPUs (the list schedulers and the searches built on them) return plans the
validator passes, with each assignment reserving its task's GPUs; those that cannot (the exact
models, the partition heuristics) decline the workflow.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.engines.deadline_list import DeadlineListEngine
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
from agora_optimizer.io.plan_file import plan_to_dict
from agora_optimizer.model import Objective
from agora_optimizer.model.catalog import GIB, Billing, Catalog, Resource
from agora_optimizer.model.workflow import Edge, Task, Workflow
from agora_optimizer.optimize.optimize import build_plan
from agora_optimizer.optimize.portfolio import run_portfolio
from agora_optimizer.planning.problem import Problem
from tests import spec_checker
from tests.conftest import wfformat_15, write_json, write_yaml
from tests.engines.plan_checks import violations

TIME_LIMIT_S = 2.0


def _gpu_type(name: str, gpus: int, price: float, count: int | None, vcpus: int = 8) -> Resource:
    return Resource(name, "aws", vcpus, 64, 1.0, price, count, Billing(1.0, 0.0), 0.0, gpus=gpus, gpu_model="L4")


CATALOG = Catalog(
    (
        Resource("cpu", "aws", 4, 16, 1.0, 0.2, 4, Billing(1.0, 0.0), 0.0),
        _gpu_type("gpu1", 1, 1.0, 2),
        _gpu_type("gpu2", 2, 1.6, 1),
    ),
    1e8,
)


def mixed_workflow() -> Workflow:
    """prep -> three 1-GPU trainings and a CPU feature job -> a 2-GPU evaluation -> a CPU report."""
    tasks = [
        Task("prep", 20.0, 2, 2 * GIB, "prep"),
        *(Task(f"train_{k}", 60.0, 2, 4 * GIB, "train", gpus=1) for k in "abc"),
        Task("features", 40.0, 4, 8 * GIB, "features"),
        Task("evaluate", 30.0, 4, 8 * GIB, "evaluate", gpus=2),
        Task("report", 5.0, 1, GIB, "report"),
    ]
    edges = [Edge("prep", child, 10**8) for child in ("train_a", "train_b", "train_c", "features")]
    edges += [Edge(parent, "evaluate", 10**7) for parent in ("train_a", "train_b", "train_c", "features")]
    edges.append(Edge("evaluate", "report", 0))
    return Workflow.create("mixed", tasks, edges)


def spec_files(workflow: Workflow, catalog: Catalog, folder: Path) -> tuple[Path, Path]:
    """The workflow as WfFormat 1.5 (a file per edge, sized as the edge; each task's gpus in its
    record) and the catalog as YAML, for the independent checker."""
    tasks: list[dict[str, Any]] = [
        {
            "id": t.id,
            "runtime": t.runtime_s,
            "memory": t.memory_bytes,
            "cores": t.cores,
            "parents": [e.parent for e in workflow.parents[t.id]],
            "inputs": [f"{e.parent}-{e.child}" for e in workflow.parents[t.id]],
            "outputs": [f"{e.parent}-{e.child}" for e in workflow.children[t.id]],
        }
        for t in workflow.tasks
    ]
    document = wfformat_15(tasks, {f"{e.parent}-{e.child}": e.bytes for e in workflow.edges}, name=workflow.name)
    for record, task in zip(document["workflow"]["execution"]["tasks"], workflow.tasks, strict=True):
        record["gpus"] = task.gpus
    resources = [
        {
            "name": r.name,
            "backend": r.backend,
            "vcpus": r.vcpus,
            "memory_gib": r.memory_gib,
            "speed": r.speed,
            "price_per_hour_usd": r.price_per_hour_usd,
            "count": r.count,
            "billing": {"granularity_s": r.billing.granularity_s, "minimum_s": r.billing.minimum_s},
            "boot_s": r.boot_s,
            "gpus": r.gpus,
        }
        for r in catalog.resources
    ]
    return (
        write_json(folder / f"{workflow.name}.json", document),
        write_yaml(
            folder / "catalog.yaml",
            {"network": {"bandwidth_bytes_per_s": catalog.bandwidth_bytes_per_s}, "resources": resources},
        ),
    )


def _with_warm_start(engine: Engine) -> Callable[[Problem], EngineResult | None]:
    def solve(problem: Problem) -> EngineResult | None:
        warm = ListSchedulingEngine().solve(problem, TIME_LIMIT_S)
        return engine.solve(problem, TIME_LIMIT_S, warm_start=warm)

    return solve


def _alone(engine: Engine) -> Callable[[Problem], EngineResult | None]:
    return lambda problem: engine.solve(problem, TIME_LIMIT_S)


def _portfolio(problem: Problem) -> EngineResult | None:
    return run_portfolio(problem, TIME_LIMIT_S).best


PACKING = {
    "list-scheduling": _alone(ListSchedulingEngine()),
    "deadline-list": _alone(DeadlineListEngine()),
    "heft": _alone(HeftEngine()),
    "peft": _alone(PeftEngine()),
    "pool-search": _alone(PoolSearchEngine()),
    "local-search": _with_warm_start(LocalSearchEngine()),
    "one-type-default": _alone(OneTypeDefaultEngine()),
    "portfolio": _portfolio,
}
DECLINING = {
    "milp": MilpEngine(),
    "cpsat": CpSatEngine(),
    "partition": PartitionEngine(),
    "homogeneous-partition": HomogeneousPartitionEngine(),
}
OBJECTIVES = [Objective(kind="time"), Objective(kind="cost", deadline_s=400.0), Objective(kind="balanced")]


@pytest.mark.parametrize("objective", OBJECTIVES, ids=lambda o: o.kind)
@pytest.mark.parametrize("name", list(PACKING))
def test_each_packing_engine_plans_a_mixed_workflow_validly(name: str, objective: Objective, tmp_path: Path) -> None:
    problem = Problem.create(mixed_workflow(), CATALOG, objective)
    result = PACKING[name](problem)
    if result is None:  # an engine may find nothing to add (local search) or not apply (deadline-list)
        assert name in {"local-search", "deadline-list"}
        return
    assert violations(problem, result.assignments) == []
    workflow = problem.workflow
    assert {a.task for a in result.assignments} == {t.id for t in workflow.tasks}
    for a in result.assignments:
        assert a.gpus == workflow.by_id[a.task].gpus  # the plan reserves what the task needs
        assert CATALOG.by_name[a.resource].gpus >= a.gpus
    plan = build_plan(workflow, CATALOG, objective, "catalog.yaml", result.assignments, result.method, 0.0)
    assert spec_checker.check_plan(plan_to_dict(plan), *spec_files(workflow, CATALOG, tmp_path)) == []
    makespan, cost = problem.evaluate(result.assignments)  # no plan beats the lower bounds, GPUs counted
    assert makespan >= problem.bounds.makespan_s * (1 - 1e-9) and cost >= problem.bounds.cost_usd * (1 - 1e-9)


@pytest.mark.parametrize("name", list(DECLINING))
def test_engines_that_cannot_pack_gpus_decline(name: str) -> None:
    problem = Problem.create(mixed_workflow(), CATALOG, Objective(kind="time"))
    assert DECLINING[name].solve(problem, TIME_LIMIT_S) is None


@pytest.mark.parametrize("name", ["list-scheduling", "heft", "peft", "pool-search"])
def test_two_one_gpu_tasks_share_a_two_gpu_machine_and_a_third_waits(name: str, tmp_path: Path) -> None:
    # One 2-GPU machine, cores and memory for all three at once: only the GPUs hold the third back.
    only = Catalog((_gpu_type("gpu2", 2, 1.0, 1, vcpus=16),), 1e8)
    tasks = [Task(f"t{k}", 10.0, 1, GIB, "t", gpus=1) for k in range(3)]
    problem = Problem.create(Workflow.create("three", tasks, []), only, Objective(kind="time"))
    result = PACKING[name](problem)
    assert result is not None
    assert violations(problem, result.assignments) == []
    starts = sorted(a.start_s for a in result.assignments)
    assert starts == pytest.approx([0.0, 0.0, 10.0])  # two at once, the third after them
    assert max(a.end_s for a in result.assignments) == pytest.approx(20.0)
    plan = build_plan(problem.workflow, only, problem.objective, "c", result.assignments, result.method, 0.0)
    assert spec_checker.check_plan(plan_to_dict(plan), *spec_files(problem.workflow, only, tmp_path)) == []


def test_a_cpu_workflow_keeps_planning_as_before_beside_gpu_types() -> None:
    cpu_only = Workflow.create("cpu", [Task(f"t{k}", 10.0, 1, GIB, "t") for k in range(3)], [])
    problem = Problem.create(cpu_only, CATALOG, Objective(kind="cost"))
    result = ListSchedulingEngine().solve(problem, TIME_LIMIT_S)
    assert result is not None and violations(problem, result.assignments) == []
    assert {a.resource for a in result.assignments} == {"cpu"}  # the cheapest type that fits, no GPU paid for
    assert all(a.gpus == 0 for a in result.assignments)


def _cpu_only(*tasks: Task) -> Workflow:
    return Workflow.create("cpu", list(tasks), [Edge(a.id, b.id, 0) for a, b in pairwise(tasks)])


FAST_GPU = Catalog(
    (
        Resource("cpu", "aws", 4, 16, 1.0, 0.2, 1, Billing(1.0, 0.0), 0.0),
        Resource("gpu", "aws", 8, 64, 2.0, 3.0, 4, Billing(1.0, 0.0), 0.0, gpus=1, gpu_model="L4"),
    ),
    1e8,
)


def test_a_workflow_without_gpu_tasks_is_planned_without_the_gpu_types_even_when_they_are_faster() -> None:
    workflow = Workflow.create("cpu", [Task(f"t{k}", 60.0, 4, GIB, "t") for k in range(4)], [])
    problem = Problem.create(workflow, FAST_GPU, Objective(kind="time"))
    assert [r.name for r in problem.catalog.resources] == ["cpu"]
    plan = run_portfolio(problem, TIME_LIMIT_S).best
    assert {a.resource for a in plan.assignments} == {"cpu"}  # four in a row, not in parallel on the GPU types


def test_a_cpu_task_that_fits_only_a_gpu_type_keeps_every_type() -> None:
    workflow = _cpu_only(Task("small", 10.0, 1, GIB, "t"), Task("big", 10.0, 8, 32 * GIB, "t"))
    problem = Problem.create(workflow, FAST_GPU, Objective(kind="time"))
    assert [r.name for r in problem.catalog.resources] == ["cpu", "gpu"]


def test_a_workflow_with_gpu_tasks_keeps_every_type_for_its_cpu_tasks() -> None:
    assert [r.name for r in Problem.create(mixed_workflow(), CATALOG, Objective()).catalog.resources] == [
        "cpu",
        "gpu1",
        "gpu2",
    ]

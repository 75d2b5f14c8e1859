"""The planner with spot types: spot where a re-run keeps the deadline and pays in expectation, on demand
else; plans that carry their spot figures and pass both checkers (docs/spot.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.engines.pool_search import PoolSearchEngine
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.plan_file import plan_from_document, plan_to_dict
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model import Objective
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.optimize.optimize import build_plan, optimize
from agora_optimizer.planning.leases import cost_usd, makespan_s
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.spot import (
    expected_cost_usd,
)
from agora_optimizer.planning.spot_replay import (
    worst_case_makespan_s,
)
from agora_optimizer.planning.validate import validate_plan
from tests import spec_checker
from tests.conftest import BUNDLED, CATALOGS, wfformat_15, write_json, write_yaml
from tests.planning.spot_fixtures import (
    calm_catalog,
    slack_workflow,
)


def test_a_task_without_slack_stays_on_demand_and_one_with_slack_goes_on_spot(tmp_path: Path) -> None:
    workflow, catalog = slack_workflow(), calm_catalog(0.1)
    plan = optimize(workflow, catalog, Objective(kind="cost", deadline_s=260.0), "catalog.yaml", time_limit_s=2.0)
    on = {a.task: a.resource for a in plan.assignments}
    assert on == {"t1": "od", "t2": "od", "loose": "od-spot"}
    assert validate_plan(plan, workflow, catalog) == []
    assert plan.spot is not None and plan.spot.spot_tasks == 1
    assert plan.spot.worst_case_makespan_s == worst_case_makespan_s(plan.assignments, workflow, catalog) <= 260.0
    problem = Problem.create(workflow, catalog, plan.objective)
    assert plan.spot.expected_cost_usd >= problem.bounds.cost_usd  # the bound holds for the expected cost
    assert plan.spot.expected_cost_usd == pytest.approx(expected_cost_usd(plan.assignments, workflow, catalog))
    assert spec_checker.check_plan(plan_to_dict(plan), *_spec_files(workflow, catalog, tmp_path)) == []


def test_spot_dearer_in_expectation_is_not_chosen() -> None:
    # 3,600 interruptions an hour: nearly every task re-runs, and spot then costs more than on demand.
    workflow, catalog = slack_workflow(), calm_catalog(3600.0)
    plan = optimize(workflow, catalog, Objective(kind="cost", deadline_s=1000.0), "c", time_limit_s=2.0)
    assert {a.resource for a in plan.assignments} == {"od"} and plan.spot is None


def test_with_slack_everywhere_every_task_goes_on_spot() -> None:
    workflow, catalog = slack_workflow(), calm_catalog(0.1)
    plan = optimize(workflow, catalog, Objective(kind="cost", deadline_s=1000.0), "c", time_limit_s=2.0)
    assert {a.resource for a in plan.assignments} == {"od-spot"}
    assert plan.spot is not None and plan.spot.worst_case_makespan_s <= 1000.0


def test_plan_files_keep_the_spot_figures_and_old_plans_read_without_them() -> None:
    workflow, catalog = slack_workflow(), calm_catalog(0.1)
    plan = optimize(workflow, catalog, Objective(kind="cost", deadline_s=260.0), "c", time_limit_s=2.0)
    document = plan_to_dict(plan)
    assert set(document["spot"]) == {"spot_tasks", "expected_reruns", "expected_cost_usd", "worst_case_makespan_s"}
    assert plan_from_document(document, "p.json") == plan
    del document["spot"]
    assert plan_from_document(document, "p.json").spot is None


def test_a_catalog_without_spot_types_plans_as_before() -> None:
    workflow = slack_workflow()
    on_demand = Catalog((calm_catalog(0.1).resources[0],), 1e8)
    plan = optimize(workflow, on_demand, Objective(kind="cost", deadline_s=260.0), "c", time_limit_s=1.0)
    assert plan.spot is None and "spot" not in plan_to_dict(plan)
    problem = Problem.create(workflow, on_demand, plan.objective)
    assert problem.evaluate(plan.assignments) == (makespan_s(plan.assignments), cost_usd(plan.assignments, on_demand))


def _spec_files(workflow: Workflow, catalog: Catalog, folder: Path) -> tuple[Path, Path]:
    tasks = [
        {"id": t.id, "runtime": t.runtime_s, "parents": [e.parent for e in workflow.parents[t.id]], "cores": t.cores,
         "memory": t.memory_bytes}
        for t in workflow.tasks
    ]  # fmt: skip
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
            **({"spot": True, "interruption_rate_per_hour": r.interruption_rate_per_hour, "fallback": r.fallback}
               if r.spot else {}),
        }
        for r in catalog.resources
    ]  # fmt: skip
    return (
        write_json(folder / f"{workflow.name}.json", wfformat_15(tasks, name=workflow.name)),
        write_yaml(
            folder / "catalog.yaml",
            {"network": {"bandwidth_bytes_per_s": catalog.bandwidth_bytes_per_s}, "resources": resources},
        ),
    )


def test_a_plan_of_a_real_workflow_on_the_spot_catalog_passes_both_checkers() -> None:
    workflow_path, catalog_path = BUNDLED / "montage-chameleon-2mass-01d-001.json", CATALOGS / "aws-us-east-1-spot.yaml"
    workflow, catalog = load_workflow(workflow_path), load_catalog(catalog_path)
    deadline = 2 * Problem.create(workflow, catalog, Objective(kind="cost")).bounds.makespan_s
    plan = optimize(workflow, catalog, Objective(kind="cost", deadline_s=deadline), "spot", time_limit_s=3.0)
    assert plan.spot is not None and plan.spot.spot_tasks > 0
    assert plan.spot.worst_case_makespan_s <= deadline + 1e-6
    assert validate_plan(plan, workflow, catalog) == []
    assert spec_checker.check_plan(plan_to_dict(plan), workflow_path, catalog_path) == []


def test_the_checker_recomputes_a_plans_spot_figures_and_holds_its_deadline_to_the_worst_case() -> None:
    workflow, catalog = slack_workflow(), calm_catalog(rate_per_hour=0.5)
    plan = optimize(workflow, catalog, Objective(kind="cost", deadline_s=400.0), "spot", time_limit_s=1.0)
    assert plan.spot is not None and plan.spot.spot_tasks > 0 and validate_plan(plan, workflow, catalog) == []
    figures = plan.spot

    def problems(**claims: Any) -> list[str]:
        return [str(v) for v in validate_plan(replace(plan, spot=replace(figures, **claims)), workflow, catalog)]

    [dearer] = problems(expected_cost_usd=figures.expected_cost_usd * 1.01)  # 1 % off: beyond the 0.5 % allowed
    assert dearer.startswith("spot: plan claims expected cost") and "its assignments give" in dearer
    assert problems(expected_cost_usd=figures.expected_cost_usd * 1.001) == []  # rounding, within 0.5 %
    assert problems(spot_tasks=figures.spot_tasks + 1) == [
        f"spot: plan claims {figures.spot_tasks + 1} spot tasks, its assignments have {figures.spot_tasks}"
    ]
    [late] = problems(worst_case_makespan_s=figures.worst_case_makespan_s / 2)
    assert "worst-case makespan" in late
    # A deadline that the plan meets as planned, but not with one interruption at the worst moment.
    between = (plan.makespan_s + figures.worst_case_makespan_s) / 2
    assert figures.worst_case_makespan_s > plan.makespan_s + 1.0
    [tight] = [
        str(v)
        for v in validate_plan(replace(plan, objective=replace(plan.objective, deadline_s=between)), workflow, catalog)
    ]
    assert tight.startswith(f"spot-deadline: worst-case makespan {figures.worst_case_makespan_s} s")
    on_demand = [replace(a, resource="od", machine=a.machine.replace("od-spot", "od")) for a in plan.assignments]
    moved = replace(plan, assignments=tuple(on_demand), cost_usd=cost_usd(on_demand, catalog))
    stray = validate_plan(moved, workflow, catalog)  # valid but for the figures it kept
    assert [str(v) for v in stray] == ["spot: plan carries spot figures, but none of its tasks is on a spot type"]


def test_a_part_of_a_catalog_keeps_its_spot_types_fallbacks() -> None:
    catalog = calm_catalog(0.1)
    spot_only = catalog.restricted_to(["od-spot"])
    assert [r.name for r in spot_only.resources] == ["od-spot"]
    assert spot_only.fallback_of(spot_only.by_name["od-spot"]) is catalog.by_name["od"]
    problem = Problem.create(slack_workflow(), catalog, Objective(kind="cost", deadline_s=1000.0))
    result = PoolSearchEngine().solve(problem, 1.0)  # it plans on pools of a few types: spot ones alone too
    assert (
        result is not None
        and validate_plan(
            build_plan(problem.workflow, catalog, problem.objective, "c", result.assignments, result.method, 0.0),
            problem.workflow,
            catalog,
        )
        == []
    )

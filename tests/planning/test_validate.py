"""The plan checker rejects each kind of violation, and agrees with an independent checker."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from agora_optimizer.errors import PlanMismatchError
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.plan_file import plan_from_document
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.planning.leases import cost_usd, makespan_s
from agora_optimizer.planning.validate import ensure_plan_matches, validate_plan
from tests import spec_checker
from tests.conftest import resource, wfformat_15, write_json, write_yaml

GIB = 2**30


@pytest.fixture
def case(tmp_path: Path) -> tuple[Path, Path]:
    """a -> (b, c) -> d plus an independent e; b needs 3 GiB, so only 'big' holds it."""
    workflow = wfformat_15(
        [
            {"id": "a", "runtime": 10.0, "outputs": ["ab", "ac"], "memory": GIB},
            {"id": "b", "runtime": 20.0, "parents": ["a"], "inputs": ["ab"], "outputs": ["bd"], "memory": 3 * GIB},
            {"id": "c", "runtime": 20.0, "parents": ["a"], "inputs": ["ac"], "outputs": ["cd"], "memory": GIB},
            {"id": "d", "runtime": 5.0, "parents": ["b", "c"], "inputs": ["bd", "cd"], "memory": GIB},
            {"id": "e", "runtime": 4.0, "memory": GIB},
        ],
        files={"ab": 1_000_000_000, "ac": 500_000_000, "bd": 0, "cd": 2_000_000_000},
        name="case",
    )
    catalog = {
        "network": {"bandwidth_bytes_per_s": 100_000_000},
        "resources": [
            resource("small", vcpus=1, memory_gib=2, speed=1.0, price_per_hour_usd=0.36, count=2),
            resource(
                "big",
                vcpus=2,
                memory_gib=4,
                speed=2.0,
                price_per_hour_usd=1.44,
                count=1,
                billing={"granularity_s": 10, "minimum_s": 60},
                boot_s=5,
            ),
        ],
    }
    return write_json(tmp_path / "case.json", workflow), write_yaml(tmp_path / "catalog.yaml", catalog)


def _row(task: str, machine: str, start: float, end: float, memory: int = GIB, cores: int = 1) -> dict[str, Any]:
    return {
        "task": task,
        "resource": machine.split("#")[0],
        "machine": machine,
        "start_s": start,
        "end_s": end,
        "cores": cores,
        "memory_bytes": memory,
    }


# A valid plan, computed by hand: a and c share small#0 (no transfer), b waits 10 s for a's
# 1 GB on big#0 (speed 2), d waits for b's 0 bytes and runs after c on small#0.
# Leases: small#0 [0, 35) = 35 s x 0.0001 $/s; small#1 [0, 4) = 4 s x 0.0001 $/s;
# big#0 [15, 30) = 15 s -> 20 s in 10 s steps -> 60 s minimum x 0.0004 $/s.
VALID_COST_USD = 0.0035 + 0.0004 + 0.024
VALID = {
    "format": "agora-plan/1",
    "workflow": "case",
    "catalog": "catalog.yaml",
    "objective": {"kind": "balanced", "alpha": 0.5, "deadline_s": None, "budget_usd": None},
    "makespan_s": 35.0,
    "cost_usd": VALID_COST_USD,
    "assignments": [
        _row("a", "small#0", 0.0, 10.0),
        _row("b", "big#0", 20.0, 30.0, memory=3 * GIB),
        _row("c", "small#0", 10.0, 30.0),
        _row("d", "small#0", 30.0, 35.0),
        _row("e", "small#1", 0.0, 4.0),
    ],
    "solver": {"method": "by-hand", "status": "heuristic", "gap": None, "wall_s": 0.0},
    "created_at": "2026-11-29T12:00:00Z",
}


def _with(
    change: dict[str, Any] | None = None,
    rows: dict[str, dict[str, Any] | None] | None = None,
    catalog: Path | None = None,
    fix_claims: bool = True,
) -> dict[str, Any]:
    """A copy of VALID with rows replaced (None drops a row) and claims recomputed."""
    plan = copy.deepcopy(VALID)
    plan.update(change or {})
    for task, row in (rows or {}).items():
        plan["assignments"] = [r for r in plan["assignments"] if r["task"] != task]
        if row is not None:
            plan["assignments"].append(row)
    if fix_claims and catalog is not None:
        parsed = plan_from_document(plan, "mutated")
        plan["makespan_s"] = makespan_s(parsed.assignments)
        plan["cost_usd"] = cost_usd(parsed.assignments, load_catalog(catalog))
    return plan


def _rules(plan: dict[str, Any], case: tuple[Path, Path]) -> set[str]:
    workflow, catalog = load_workflow(case[0]), load_catalog(case[1])
    return {v.rule for v in validate_plan(plan_from_document(plan, "plan.json"), workflow, catalog)}


def test_hand_computed_plan_is_valid_for_both_checkers(case: tuple[Path, Path]) -> None:
    assert _rules(VALID, case) == set()
    assert spec_checker.check_plan(VALID, case[0], case[1]) == []
    workflow_makespan, cost = spec_checker.recompute(VALID, case[0], case[1])
    assert workflow_makespan == pytest.approx(35.0)
    assert cost == pytest.approx(0.0279)
    parsed = plan_from_document(VALID, "plan.json")
    assert cost_usd(parsed.assignments, load_catalog(case[1])) == pytest.approx(0.0279)


def test_celery_pools_are_resources_like_any_other_for_both_checkers(case: tuple[Path, Path], tmp_path: Path) -> None:
    document = yaml.safe_load(case[1].read_text())
    for entry in document["resources"]:
        entry["backend"] = "celery"
    celery = write_yaml(tmp_path / "celery.yaml", document)
    assert {r.backend for r in load_catalog(celery).resources} == {"celery"}
    assert _rules(VALID, (case[0], celery)) == set()
    assert spec_checker.check_plan(VALID, case[0], celery) == []
    crowded = _with(catalog=celery, rows={"c": _row("c", "big#0", 20.0, 30.0, memory=2 * GIB)})
    assert "capacity" in _rules(crowded, (case[0], celery)) and spec_checker.check_plan(crowded, case[0], celery)


MUTATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "cores over the machine": ("capacity", {"rows": {"e": _row("e", "small#0", 0.0, 4.0)}}),
    "memory over the machine at once": ("capacity", {"rows": {"c": _row("c", "big#0", 20.0, 30.0, memory=2 * GIB)}}),
    "child before parent's data arrives": ("precedence", {"rows": {"c": _row("c", "small#1", 10.0, 30.0)}}),
    "task larger than its resource": ("memory", {"rows": {"b": _row("b", "small#1", 20.0, 40.0, memory=3 * GIB)}}),
    "reservation below recorded peak": ("memory", {"rows": {"b": _row("b", "big#0", 20.0, 30.0, memory=GIB)}}),
    "too many machines of a type": ("count", {"rows": {"e": _row("e", "big#1", 20.0, 22.0)}}),
    "wrong duration": ("duration", {"rows": {"a": _row("a", "small#0", 0.0, 9.0)}}),
    "missing task": ("missing-task", {"rows": {"e": None}}),
    "unknown resource": ("unknown-resource", {"rows": {"e": _row("e", "huge#0", 0.0, 4.0)}}),
    "malformed machine id": ("machine-id", {"rows": {"e": _row("e", "small", 0.0, 4.0) | {"resource": "small"}}}),
    "wrong core count": ("cores", {"rows": {"e": _row("e", "big#0", 20.0, 22.0, cores=2)}}),
    "lease before time zero": ("lease", {"rows": {"e": _row("e", "big#0", 0.0, 2.0)}}),
    "missed deadline": ("deadline", {"change": {"objective": {**VALID["objective"], "deadline_s": 30.0}}}),
    "over budget": ("budget", {"change": {"objective": {**VALID["objective"], "budget_usd": 0.02}}}),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_violation_is_caught_by_both_checkers(name: str, case: tuple[Path, Path]) -> None:
    rule, how = MUTATIONS[name]
    plan = _with(catalog=case[1], **how)
    assert rule in _rules(plan, case)
    assert spec_checker.check_plan(plan, case[0], case[1]), f"the independent checker missed: {name}"


def test_same_machine_needs_no_transfer_but_another_does(case: tuple[Path, Path]) -> None:
    # c right after a on a's machine is valid (VALID); on another machine it must wait 5 s.
    waited = _with(
        rows={
            "c": _row("c", "small#1", 15.0, 35.0),
            "e": _row("e", "small#1", 0.0, 4.0),
            "d": _row("d", "small#0", 55.0, 60.0),
        },
        catalog=case[1],
    )
    assert _rules(waited, case) == set()
    assert spec_checker.check_plan(waited, case[0], case[1]) == []


@pytest.mark.parametrize(("field", "value", "rule"), [("makespan_s", 40.0, "makespan"), ("cost_usd", 0.03, "cost")])
def test_wrong_claims_are_rejected(field: str, value: float, rule: str, case: tuple[Path, Path]) -> None:
    plan = _with({field: value})
    assert _rules(plan, case) == {rule}
    assert spec_checker.check_plan(plan, case[0], case[1])


def test_claims_within_half_a_percent_pass(case: tuple[Path, Path]) -> None:
    plan = _with({"makespan_s": 35.0 * 1.004, "cost_usd": VALID_COST_USD * 0.996})
    assert _rules(plan, case) == set()
    assert spec_checker.check_plan(plan, case[0], case[1]) == []


def test_plan_for_another_workflow_is_refused(case: tuple[Path, Path]) -> None:
    plan = plan_from_document(_with({"workflow": "montage"}), "plan.json")
    with pytest.raises(PlanMismatchError, match="montage"):
        ensure_plan_matches(plan, load_workflow(case[0]))


def _gpu_case(gpus: tuple[int, ...], starts: tuple[float, ...], given: tuple[int, ...] | None = None) -> list[str]:
    """Tasks needing ``gpus`` on one machine of a 2-GPU type, each started at its start for 10 s."""
    from agora_optimizer.model import Billing, Catalog, Objective, Resource, Task, Workflow
    from agora_optimizer.model.plan import Assignment, Plan, SolverInfo

    tasks = [Task(f"t{i}", 10.0, 1, GIB, "t", gpus=n) for i, n in enumerate(gpus)]
    workflow = Workflow.create("gpu", tasks, [])
    catalog = Catalog((Resource("g", "aws", 8, 32, 1.0, 3.6, None, Billing(), 0.0, gpus=2),), 1e9)
    rows = tuple(
        Assignment(t.id, "g", "g#0", start, start + 10.0, 1, GIB, t.gpus if given is None else given[i])
        for i, (t, start) in enumerate(zip(tasks, starts, strict=True))
    )
    plan = Plan(
        "gpu",
        "c",
        Objective(),
        makespan_s(rows),
        cost_usd(rows, catalog),
        rows,
        SolverInfo("m", "heuristic", None, 0),
        "2026-01-01T00:00:00Z",
    )
    return [str(v) for v in validate_plan(plan, workflow, catalog)]


def test_two_one_gpu_tasks_share_a_two_gpu_machine_three_do_not() -> None:
    assert _gpu_case((1, 1), (0.0, 0.0)) == []
    assert _gpu_case((1, 1, 1), (0.0, 0.0, 10.0)) == []  # the third after them
    found = _gpu_case((1, 1, 1), (0.0, 0.0, 5.0))
    assert found == ["capacity: machine 'g#0' runs more than 2 GPUs at t=5.000000 s (tasks t0, t1, t2)"]
    assert _gpu_case((2, 0), (0.0, 0.0)) == []  # a task without GPUs shares the machine all the same


def test_an_assignment_must_reserve_the_tasks_gpus_and_no_more_than_the_types() -> None:
    assert _gpu_case((1,), (0.0,), given=(0,)) == ["gpus: task 't0' needs 1 GPUs, plan gives 0"]
    assert _gpu_case((1,), (0.0,), given=(3,)) == [
        "gpus: task 't0' takes 3 GPUs, g has 2",
        "capacity: machine 'g#0' runs more than 2 GPUs at t=0.000000 s (tasks t0)",
    ]
    assert _gpu_case((0,), (0.0,), given=(1,)) == []  # more than it needs, within the type: allowed

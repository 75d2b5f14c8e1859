from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from agora_optimizer.errors import FieldError
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.plan_file import load_plan, plan_json, write_plan
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model import Objective
from agora_optimizer.optimize.optimize import optimize
from tests.conftest import AWS_CATALOG, BUNDLED

SPEC_KEYS = [
    "format",
    "workflow",
    "catalog",
    "objective",
    "makespan_s",
    "cost_usd",
    "assignments",
    "solver",
    "created_at",
]


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workflow = load_workflow(BUNDLED / "srasearch-chameleon-10a-001.json")
    plan = optimize(workflow, load_catalog(AWS_CATALOG), Objective(kind="cost", deadline_s=5000.0), "aws", 2.0)
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    write_plan(plan, path)
    return path


def test_written_plan_has_the_spec_keys_and_reads_back_equal(plan_path: Path) -> None:
    document = json.loads(plan_path.read_text())
    assert list(document) == SPEC_KEYS
    assert set(document["objective"]) == {"kind", "alpha", "deadline_s", "budget_usd"}
    assert set(document["solver"]) == {"method", "status", "gap", "wall_s"}
    assert set(document["assignments"][0]) == {
        "task",
        "resource",
        "machine",
        "start_s",
        "end_s",
        "cores",
        "memory_bytes",
    }
    assert document["created_at"].endswith("Z")
    plan = load_plan(plan_path)
    write_plan(plan, plan_path.with_name("again.json"))
    assert json.loads(plan_path.with_name("again.json").read_text()) == document


@pytest.mark.parametrize(
    ("mangle", "field"),
    [
        (lambda d: d.pop("makespan_s"), "'makespan_s': is required"),
        (lambda d: d.update(format="agora-plan/2"), "'format'"),
        (lambda d: d["assignments"][0].update(end_s=-1), r"assignments\[0\]\.end_s"),
        (lambda d: d["assignments"][0].update(cores=0), r"assignments\[0\]\.cores"),
        (lambda d: d["objective"].update(kind="fastest"), r"objective\.kind"),
        (lambda d: d["solver"].pop("gap"), r"solver\.gap"),
        (lambda d: d.update(created_at="yesterday"), "created_at"),
    ],
)
def test_malformed_plan_names_the_field(mangle, field: str, plan_path: Path, tmp_path: Path) -> None:
    document = json.loads(plan_path.read_text())
    mangle(document)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    with pytest.raises(FieldError, match=field):
        load_plan(bad)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda d, long: d.update(format=long),
        lambda d, long: d.update(created_at=long),
        lambda d, long: d["objective"].update(kind=long),
        lambda d, long: d["solver"].update(status=long),
    ],
    ids=["format", "created_at", "kind", "status"],
)
def test_a_bad_value_is_quoted_short_on_one_line(mangle, plan_path: Path, tmp_path: Path) -> None:
    document = json.loads(plan_path.read_text())
    mangle(document, "x" * 50_000 + "\nsecond line")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    with pytest.raises(FieldError) as caught:
        load_plan(bad)
    assert "\n" not in str(caught.value)
    assert len(str(caught.value)) < 300


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda p: replace(p, objective=replace(p.objective, budget_usd=math.inf)), "objective.budget_usd"),
        (lambda p: replace(p, objective=replace(p.objective, deadline_s=1e13)), "objective.deadline_s"),
        (lambda p: replace(p, cost_usd=math.nan), "cost_usd"),
        (lambda p: replace(p, makespan_s=math.inf), "makespan_s"),
        (lambda p: replace(p, assignments=(replace(p.assignments[0], end_s=2e12), *p.assignments[1:])), "end_s"),
    ],
)
def test_a_plan_the_reader_would_refuse_is_never_written(change, field: str, plan_path: Path, tmp_path: Path) -> None:
    """``--budget-usd inf`` once wrote ``Infinity`` into a plan that validate, gantt and plans apply could not read."""
    bad = change(load_plan(plan_path))
    out = tmp_path / "bad.json"
    with pytest.raises(FieldError) as caught:
        write_plan(bad, out)
    assert str(caught.value).startswith(f"{out}: field '") and field in str(caught.value)
    assert not out.exists() and list(tmp_path.iterdir()) == []
    with pytest.raises(FieldError):
        plan_json(bad, "plans/x/current.json")  # the plan store writes through the same check


def test_gpus_are_written_only_where_reserved_and_read_back(plan_path: Path, tmp_path: Path) -> None:
    plan = load_plan(plan_path)
    assert all(a.gpus == 0 for a in plan.assignments)  # absent: 0
    first = replace(plan.assignments[0], gpus=2)
    with_gpus = replace(plan, assignments=(first, *plan.assignments[1:]))
    write_plan(with_gpus, tmp_path / "gpu.json")
    document = json.loads((tmp_path / "gpu.json").read_text())
    assert document["assignments"][0]["gpus"] == 2
    assert all("gpus" not in a for a in document["assignments"][1:])
    assert load_plan(tmp_path / "gpu.json") == with_gpus
    document["assignments"][0]["gpus"] = 1.5
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(FieldError, match=r"bad\.json: field 'assignments\[0\]\.gpus': expected a whole number"):
        load_plan(tmp_path / "bad.json")


def test_the_runtime_quantile_a_plan_was_made_from_is_written_only_where_known(plan_path: Path, tmp_path: Path) -> None:
    plan = load_plan(plan_path)
    assert plan.runtime_quantile is None  # absent: the workflow's own runtimes
    from_p90 = replace(plan, runtime_quantile="p90")
    write_plan(from_p90, tmp_path / "p90.json")
    document = json.loads((tmp_path / "p90.json").read_text())
    assert document["runtime_quantile"] == "p90" and list(document)[: len(SPEC_KEYS)] == SPEC_KEYS
    assert load_plan(tmp_path / "p90.json") == from_p90
    document["runtime_quantile"] = "ninety"
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(FieldError, match=r"field 'runtime_quantile': expected a quantile such as p50 or p90"):
        load_plan(tmp_path / "bad.json")

"""``agora plans apply|show|history`` on a plan store in a temporary directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agora_optimizer.cli import main
from agora_optimizer.io.plan_file import write_plan
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from tests.conftest import AWS_CATALOG, CATALOGS

GIB = 2**30


def _plan(path: Path, makespan_s: float) -> Path:
    plan = Plan(
        "etl", "local.yaml", Objective(), makespan_s, 0.0,
        (Assignment("extract", "local-small", "local-small#0", 0.0, makespan_s, 1, GIB),),
        SolverInfo("test", "heuristic", None, 0.0), "2026-03-01T00:00:00Z",
    )  # fmt: skip
    write_plan(plan, path)
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_apply_show_and_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ("--plan-dir", tmp_path / "plans")
    first, second = _plan(tmp_path / "a.json", 10.0), _plan(tmp_path / "b.json", 20.0)
    code, out, err = _run(capsys, "plans", "apply", "etl", first, "--catalog", CATALOGS / "local.yaml", *store)
    assert code == 0, err
    assert out.startswith("plan of etl in force: 1 tasks (history: ")
    assert _run(capsys, "plans", "apply", "etl", second, *store)[0] == 0
    code, out, _ = _run(capsys, "plans", "apply", "etl", second, *store)  # again: the plan in force already
    assert code == 0 and out == "plan of etl already in force: 1 tasks, no history entry added\n"
    code, out, _ = _run(capsys, "plans", "show", "etl", *store)
    assert code == 0 and json.loads(out)["makespan_s"] == 20.0
    code, out, _ = _run(capsys, "plans", "history", "etl", *store)
    assert code == 0 and len(out.strip().splitlines()) == 2


def test_errors_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ("--plan-dir", tmp_path / "plans")
    code, out, err = _run(capsys, "plans", "show", "etl", *store)
    assert (code, out) == (2, "")
    assert err == "agora: error: DAG etl has no plan; make one with agora optimize airflow:etl --apply\n"
    plan = _plan(tmp_path / "a.json", 10.0)
    code, out, err = _run(capsys, "plans", "apply", "etl", plan, "--catalog", AWS_CATALOG, *store)
    assert (code, out) == (2, "") and "'local-small'" in err and err.count("\n") == 1
    assert not (tmp_path / "plans").exists()

"""What the planning commands share (agora_optimizer/cli/plan_input.py): the one line of what was assumed, the
workflow a plan names, and the quiet kept while Airflow loads."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agora_optimizer.cli.plan_input import (
    assumed_line,
    latency_lines,
    plan_workflow,
    quiet_logs,
    required_plan_workflow,
)
from agora_optimizer.errors import FieldError
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.plan import Objective, Plan, SolverInfo
from agora_optimizer.predict.latency import Measured, PlatformLatency
from tests.conftest import AWS_CATALOG


def _plan(source: str | None) -> Plan:
    return Plan(
        workflow="w",
        catalog="aws.yaml",
        objective=Objective(),
        makespan_s=0.0,
        cost_usd=0.0,
        assignments=(),
        solver=SolverInfo("list-scheduling", "heuristic", None, 0.1),
        created_at="2026-12-05T10:00:00Z",
        workflow_source=source,
    )


def test_the_assumed_latency_is_one_line_whatever_the_number_of_types() -> None:
    catalog = load_catalog(AWS_CATALOG)
    assert len(catalog.resources) > 20
    nothing = PlatformLatency({})
    assert assumed_line(nothing, catalog, "none", "--platform-latency none") == (
        "no platform latency (--platform-latency none)"
    )
    assert latency_lines(nothing, catalog, "none") == []  # the one line says all there is
    defaults = assumed_line(nothing, catalog, "median", "")
    assert defaults.startswith("platform latency +")
    assert f"median; types: {len(catalog.resources)} from the measured defaults; -v for each" in defaults
    assert len(latency_lines(nothing, catalog, "median")) == len(catalog.resources)  # the -v lines
    first = catalog.resources[0]
    learned = PlatformLatency({(first.backend, first.name): (Measured(5.0, 9.0, 40), Measured(1.0, 2.0, 40))})
    line = assumed_line(learned, catalog, "median", "")
    assert "types: 1 learned from the trace store, " in line and f"{len(catalog.resources) - 1} from the" in line
    assert " to 6.00 s per task" in line  # the learned type adds 5 + 1 s, the others the defaults
    assert "\n" not in line


def test_a_plan_names_the_workflow_file_it_was_made_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plans").mkdir()
    (tmp_path / "w.json").write_text("{}")
    (tmp_path / "plans" / "beside.json").write_text("{}")
    plan_path = tmp_path / "plans" / "p.json"
    given = Path("other.json")
    assert plan_workflow(plan_path, _plan("w.json"), given) == given  # what the user gives wins
    assert plan_workflow(plan_path, _plan("w.json"), None) == Path("w.json")  # from the working directory
    assert plan_workflow(plan_path, _plan("beside.json"), None) == plan_path.parent / "beside.json"
    assert plan_workflow(plan_path, _plan(None), None) is None  # a plan written before it was recorded
    with pytest.raises(FieldError, match=r"p\.json: field 'workflow_source': the plan does not name .*: pass -w"):
        required_plan_workflow(plan_path, _plan(None), None, "-w")
    with pytest.raises(FieldError, match=r"'gone\.json' is not a file here or beside the plan: pass --workflow"):
        plan_workflow(plan_path, _plan("gone.json"), None)
    dag = _plan("airflow:etl")
    with pytest.raises(FieldError, match=r"made from airflow:etl's predicted runtimes, not a file: pass --workflow"):
        plan_workflow(plan_path, dag, None)
    assert plan_workflow(plan_path, dag, None, none_for_a_dag=True) is None
    assert plan_workflow(plan_path, dag, given, none_for_a_dag=True) == given


def test_quiet_logs_drop_what_is_below_an_error_unless_verbose(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("agora_optimizer.tests.quiet")
    caplog.set_level(logging.INFO)
    with quiet_logs(verbose=False):
        log.info("parsing")
        log.warning("not applied")
        log.error("broken")
    with quiet_logs(verbose=False, warnings=True):  # --apply: the warnings are the user's business
        log.info("parsing again")
        log.warning("not applied, applying")
    with quiet_logs(verbose=True):
        log.info("verbose")
    log.info("after")  # nothing stays disabled
    assert [r.getMessage() for r in caplog.records] == ["broken", "not applied, applying", "verbose", "after"]

"""``agora train``, ``agora predict`` and ``agora simulate``, run through Typer's test runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from agora_optimizer import cli
from agora_optimizer.cli.predict import register
from agora_optimizer.io.plan_file import load_plan
from agora_optimizer.model.plan import Objective
from agora_optimizer.optimize.optimize import optimize
from agora_optimizer.predict.model_store import MODEL_FILE
from tests.conftest import AWS_CATALOG, wfformat_15, write_json
from tests.predict.conftest import BLAST_1, SRA_1, SRA_2, stripped

runner = CliRunner()


def _app() -> typer.Typer:
    """The commands as the ``agora`` app registers them."""
    app = typer.Typer()
    register(app)
    return app


def invoke(*args: object) -> tuple[int, str, str]:
    result = runner.invoke(_app(), [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model trained through the CLI: seconds, so its tests are ``slow``."""
    directory = tmp_path_factory.mktemp("cli") / "model"
    code, out, err = invoke("train", "--wfinstances", BLAST_1, "--wfinstances", SRA_1, "--out", directory)
    assert code == 0, err
    assert "trained on" in out
    assert "runtime quantiles: p50 " in out and "errors on held-out runs" in out
    return directory


@pytest.mark.slow  # the model_dir fixture trains a model
def test_train_writes_a_model_with_held_out_metrics(model_dir: Path) -> None:
    metadata = json.loads((model_dir / "metadata.json").read_text())
    assert metadata["training_data"]["sources"] == [BLAST_1.name, SRA_1.name]
    held_out = metadata["metrics"]["held_out_runs"]
    assert held_out["runs"] == 2 and held_out["runtime"]["tasks"] > 0


@pytest.mark.slow  # the model_dir fixture trains a model
def test_predict_json_shape_on_a_stripped_workflow(model_dir: Path, tmp_path: Path) -> None:
    bare = stripped(SRA_2, tmp_path / SRA_2.name)
    code, out, err = invoke("predict", bare, "--catalog", AWS_CATALOG, "--model", model_dir, "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["workflow"] == SRA_2.stem and document["model"] == str(model_dir)
    catalog_types = set(document["resources"])
    assert len(document["tasks"]) == 22
    for task in document["tasks"]:
        assert {"id", "category", "runtime_s", "memory_bytes", "runtime_source", "memory_source"} <= set(task)
        assert set(task["runtime_s"]) == catalog_types and all(v > 0 for v in task["runtime_s"].values())
        assert isinstance(task["memory_bytes"], int) and task["memory_bytes"] > 0
        assert task["runtime_source"] == "category"
        assert task["runtime_model"] == "scaling"  # each category was seen in one run: the power law answers
        for name, runtime_s in task["runtime_s"].items():  # the quantiles of the same runtime, p90 above p50
            assert task["runtime_s_p90"][name] >= task["runtime_s_p50"][name] > 0 and runtime_s > 0
    assert document["runtime_quantiles"] is True
    assert any(t["runtime_s_p90"] != t["runtime_s_p50"] for t in document["tasks"])


@pytest.mark.slow  # the model_dir fixture trains a model
def test_predict_table_and_type_filter(model_dir: Path) -> None:
    code, out, _ = invoke("predict", SRA_2, "-c", AWS_CATALOG, "-m", model_dir, "-t", "c5.large", "--json")
    assert code == 0
    assert {tuple(t["runtime_s"]) for t in json.loads(out)["tasks"]} == {("c5.large",)}
    code, out, _ = invoke("predict", SRA_2, "-c", AWS_CATALOG, "-m", model_dir)
    assert code == 0 and "bowtie2" in out
    header = out.split("┡")[0]  # the columns' names, wrapped as the terminal's width wants
    assert "p50" in header and "p90" in header


@pytest.mark.slow  # the model_dir fixture trains a model
def test_predict_errors_are_one_line_and_exit_2(model_dir: Path, tmp_path: Path) -> None:
    code, _, err = invoke("predict", SRA_2, "-c", AWS_CATALOG, "-m", model_dir, "-t", "x9.mega")
    assert code == 2 and "unknown resource type 'x9.mega'" in err and "Traceback" not in err
    broken = tmp_path / "broken"
    broken.mkdir()
    for item in model_dir.iterdir():
        (broken / item.name).write_bytes(item.read_bytes())
    (broken / MODEL_FILE).write_bytes(b"PK\x03\x04 not really a zip")
    code, _, err = invoke("predict", SRA_2, "-c", AWS_CATALOG, "-m", broken)
    assert code == 2 and MODEL_FILE in err and "Traceback" not in err
    code, _, err = invoke("predict", tmp_path / "none.json", "-c", AWS_CATALOG, "-m", model_dir)
    assert code == 2 and "none.json" in err


def test_train_errors(tmp_path: Path) -> None:
    code, _, err = invoke("train", "--out", tmp_path / "m")
    assert code == 2 and "--wfinstances" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = invoke("train", "--wfinstances", empty, "--out", tmp_path / "m")
    assert code == 2 and "no WfFormat instance" in err
    code, _, err = invoke("train", "--store", f"sqlite:///{tmp_path / 'empty.db'}", "--out", tmp_path / "m")
    assert code == 2 and "no usable task attempt to learn from: 0 given" in err  # an empty history
    assert not (tmp_path / "m").exists()


@pytest.mark.slow  # plans for seconds
def test_simulate_a_plan_made_from_predictions(model_dir: Path, tmp_path: Path) -> None:
    from agora_optimizer.io.catalog_file import load_catalog
    from agora_optimizer.io.plan_file import write_plan
    from agora_optimizer.predict.model_store import load_predictor
    from agora_optimizer.traces.wfformat_import import read_workflow_shape

    catalog = load_catalog(AWS_CATALOG)
    predicted = load_predictor(model_dir).predicted_workflow(read_workflow_shape(SRA_2), catalog)
    plan_path = tmp_path / "plan.json"
    write_plan(optimize(predicted, catalog, Objective(kind="time"), str(AWS_CATALOG), time_limit_s=2.0), plan_path)
    code, out, err = invoke("simulate", plan_path, "--actual", SRA_2, "--catalog", AWS_CATALOG, "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["planned"]["makespan_s"] == pytest.approx(load_plan(plan_path).makespan_s)
    assert summary["actual"]["makespan_s"] > 0 and summary["oom_count"] == len(summary["oom_tasks"])
    code, out, _ = invoke("simulate", plan_path, "--actual", SRA_2, "--catalog", AWS_CATALOG)
    assert code == 0 and "actual (replayed)" in out
    code, _, err = invoke("simulate", plan_path, "--actual", BLAST_1, "--catalog", AWS_CATALOG)
    assert code == 2 and "plan is for workflow" in err


def test_simulate_and_validate_find_the_plans_own_catalog(tmp_path: Path) -> None:
    """As the issue writes it: ``agora simulate PLAN --actual WORKFLOW``, the catalog read from the plan."""
    from agora_optimizer.io.catalog_file import load_catalog
    from agora_optimizer.io.plan_file import write_plan
    from agora_optimizer.io.wfformat import load_workflow

    workflow = load_workflow(SRA_2)
    plan = optimize(workflow, load_catalog(AWS_CATALOG), Objective(kind="time"), "aws.yaml", time_limit_s=1.0)
    plan_path = tmp_path / "plans" / "plan.json"
    write_plan(plan, plan_path)
    code, _, err = invoke("simulate", plan_path, "--actual", SRA_2)
    assert code == 2 and "plan.json: field 'catalog': 'aws.yaml' is not a file here or beside the plan" in err
    (tmp_path / "plans" / "aws.yaml").write_bytes(AWS_CATALOG.read_bytes())  # beside the plan
    code, out, err = invoke("simulate", plan_path, "--actual", SRA_2, "--json")
    assert code == 0, err
    assert json.loads(out)["actual"]["makespan_s"] == pytest.approx(plan.makespan_s)  # the truth it was planned with
    assert cli.main(["validate", str(plan_path), "--workflow", str(SRA_2)]) == 0  # agora validate likewise


def test_predict_uses_the_packaged_model_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from agora_optimizer.predict.model_store import default_model_dir

    monkeypatch.delenv("AGORA_MODEL_DIR", raising=False)
    if not (default_model_dir() / "metadata.json").is_file():
        pytest.skip("no packaged model in models/predictor (train one with `agora train`)")
    code, out, err = invoke("predict", SRA_2, "--catalog", AWS_CATALOG, "--json", "-t", "c5.large")
    assert code == 0, err
    document = json.loads(out)
    assert document["model"] == str(default_model_dir())
    assert len(document["tasks"]) == 22


def test_predict_shows_task_and_category_names_as_they_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A category ``bwa[a100]`` once showed as ``bwa`` (rich read ``[a100]`` as a style) and a task ``align[/x]``
    ended the table in a MarkupError traceback."""
    from agora_optimizer.cli.common import out_console
    from agora_optimizer.predict.model_store import default_model_dir

    monkeypatch.delenv("AGORA_MODEL_DIR", raising=False)
    if not (default_model_dir() / "metadata.json").is_file():
        pytest.skip("no packaged model in models/predictor (train one with `agora train`)")
    monkeypatch.setattr(out_console, "width", 250)
    document = wfformat_15([{"id": "align[/x]", "runtime": 5.0}, {"id": "index", "runtime": 3.0}])
    document["workflow"]["specification"]["tasks"][0]["category"] = "bwa[a100]"
    path = write_json(tmp_path / "genome[a100].json", document)  # the file names the workflow
    code, out, err = invoke("predict", path, "--catalog", AWS_CATALOG, "-t", "c5.large")
    assert code == 0, err
    assert out.lstrip().startswith("genome[a100]: 2 tasks, model ")
    row = next(line for line in out.splitlines() if "align[/x]" in line)
    assert "bwa[a100]" in row


def test_simulate_with_repair_re_plans_a_run_whose_tasks_take_twice_the_plan(tmp_path: Path) -> None:
    """``--repair``: the plan's own durations are what it assumed; a truth twice as slow drifts and is repaired."""
    from agora_optimizer.io.catalog_file import load_catalog
    from agora_optimizer.io.plan_file import write_plan
    from agora_optimizer.io.wfformat import load_workflow

    document = json.loads(SRA_2.read_text())
    for record in document["workflow"]["execution"]["tasks"]:
        record["runtimeInSeconds"] = 2 * record["runtimeInSeconds"]
    slower = write_json(tmp_path / SRA_2.name, document)
    plan = optimize(load_workflow(SRA_2), load_catalog(AWS_CATALOG), Objective(kind="time"), "aws", time_limit_s=1.0)
    plan_path = tmp_path / "plan.json"
    write_plan(plan, plan_path)
    code, out, err = invoke("simulate", plan_path, "--actual", slower, "--catalog", AWS_CATALOG, "--repair", "--json")
    assert code == 0, err
    repaired = json.loads(out)
    assert repaired["repairs"] and repaired["actual"]["makespan_s"] > plan.makespan_s
    assert all(r["at_s"] > 0 and r["late_task"] for r in repaired["repairs"])
    code, out, err = invoke("simulate", plan_path, "--actual", SRA_2, "--catalog", AWS_CATALOG, "--repair")
    assert code == 0, err
    assert "0 repair(s)" in out and "replayed, repaired" in out  # the truth it was planned with: nothing late

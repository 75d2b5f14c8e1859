"""``bench/run_learning_loop.py --simulate``: two tiny instances of one family, each left out in turn.

The second instance's tasks take twice what the first's did: trained on the first alone, the
predictor answers each task with its category's runtime there, half the truth, so the run of the
second drifts from its plan and is repaired; the first, predicted from the second, ends early and
is not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.bench import bench_script
from tests.conftest import REPO, wfformat_15, write_json

pytestmark = pytest.mark.slow  # two instances trained, planned four times each and replayed: seconds

FIELDS = (
    "workflow", "planned_makespan_s", "actual_makespan_s", "deadline_s", "deadline_met", "planned_cost_usd",
    "actual_cost_usd", "truth_plan_cost_usd", "repairs", "default_actual_makespan_s", "default_actual_cost_usd",
)  # fmt: skip


run_learning_loop = bench_script("run_learning_loop")


def _instance(name: str, scale: float) -> dict[str, Any]:
    """prep -> four parallel work tasks -> merge; runtimes times ``scale``, 1 GiB peaks."""
    tasks: list[dict[str, Any]] = [{"id": "prep_00000001", "runtime": 20 * scale, "memory": 2**30}]
    tasks += [
        {"id": f"work_0000000{i}", "runtime": 60 * scale, "parents": ["prep_00000001"], "memory": 2**30}
        for i in range(2, 6)
    ]
    tasks.append(
        {"id": "merge_00000006", "runtime": 10 * scale, "parents": [t["id"] for t in tasks[1:]], "memory": 2**30}
    )
    return wfformat_15(tasks, name=name)


def _simulate(tmp_path: Path, *options: str) -> Path:
    """``--simulate`` over a family of two, tiny-fast-001 and tiny-slow-001 (twice as long), with ``options``:
    the results file."""
    train = tmp_path / "instances"
    train.mkdir()
    write_json(train / "tiny-fast-001.json", _instance("tiny-fast-001", 1.0))
    write_json(train / "tiny-slow-001.json", _instance("tiny-slow-001", 2.0))
    out = tmp_path / "loop.json"
    argv = ["--simulate", "--train-dir", str(train), "--catalog", str(REPO / "catalogs" / "aws-us-east-1.yaml"),
            "--time-limit-s", "0.5", *options, "--out", str(out)]  # fmt: skip
    assert run_learning_loop.main(argv) == 0
    return out


def test_each_instance_is_planned_from_predictions_run_on_the_truth_and_repaired_when_late(tmp_path: Path) -> None:
    out = _simulate(tmp_path)

    document = json.loads(out.read_text())
    runs = {r["workflow"]: r for r in document["runs"]}
    assert sorted(runs) == ["tiny-fast-001", "tiny-slow-001"]  # each left out in turn: a family of two
    for run in runs.values():
        assert run["simulated"] is True
        assert all(run[field] is not None for field in FIELDS if field != "truth_plan_cost_usd"), run
        assert (run["truth_plan_cost_usd"] is None) == (not run["truth_meets_deadline"])
        assert run["planned_makespan_s"] <= run["deadline_s"]  # the plan meets the deadline it was made for
        assert run["deadline_met"] == (run["actual_makespan_s"] <= run["deadline_s"])
    slow, fast = runs["tiny-slow-001"], runs["tiny-fast-001"]
    # the truth took twice the prediction; the repairs win some of it back (a deadline at risk buys time)
    assert slow["actual_makespan_s"] > 1.2 * slow["planned_makespan_s"]
    assert slow["repairs"] >= 1
    assert fast["actual_makespan_s"] < fast["planned_makespan_s"] and fast["repairs"] == 0
    assert slow["truth_meets_deadline"] is False  # twice the work cannot fit 1.5x the predicted makespan
    assert fast["truth_plan_cost_usd"] <= fast["planned_cost_usd"]  # the truth is cheaper to plan for
    assert document["summary"]["runs"] == 2 and document["summary"]["failed"] == 0
    table = out.with_suffix(".md").read_text()
    assert "tiny-slow-001" in table and "deadline met" in table


def test_the_real_modes_training_peaks_are_what_the_replay_measures_not_the_reservations_allowance() -> None:
    """A replayed task peaks at its block (the recorded peak times --memory-scale) plus what Airflow's task
    process itself holds (measured: dags/agora_wfinstance.py). Traces scaled with the hint's allowance instead
    (41 MiB more) taught the model to reserve 1.47x the peak of each small task of a real srasearch run."""
    dag = run_learning_loop._dag_module()
    args = run_learning_loop._parser().parse_args(["--backend", "local", "--memory-scale", "0.25"])
    scale = run_learning_loop._scale(args)
    assert scale.memory_bytes(8 * 2**20) == 2 * 2**20 + dag.TASK_PROCESS_PEAK_BYTES
    assert dag.TASK_PROCESS_PEAK_BYTES < dag.TASK_PROCESS_BYTES  # a hint still reserves room over it
    simulated = run_learning_loop._parser().parse_args(["--simulate"])
    assert run_learning_loop._scale(simulated).memory_bytes(8 * 2**20) == 8 * 2**20  # recorded peaks as they are


@pytest.mark.airflow
def test_the_real_mode_runs_a_plan_made_from_predictions_and_the_default_in_airflow(tmp_path: Path) -> None:
    """``--backend local``, CI size: bacass (11 tasks) held out from the bundled instances, tasks of 0.5-1.5 s
    that declare no runtime or memory; each run's numbers are its record's (Airflow's task times)."""
    out = tmp_path / "loop-real.json"
    argv = ["--backend", "local", "--train-dir", str(REPO / "workflows"), "--workflows", "bacass-dirt02-001",
            "--time-scale", "0.01", "--min-runtime-s", "0.5", "--max-runtime-s", "1.5", "--time-limit-s", "2",
            "--out", str(out)]  # fmt: skip
    assert run_learning_loop.main(argv) == 0
    (run,) = json.loads(out.read_text())["runs"]
    assert run["simulated"] is False and run["workflow"] == "bacass-dirt02-001" and run["tasks"] == 11
    assert run["state"] == run["default_state"] == "success"
    assert all(run[field] is not None for field in FIELDS if field != "truth_plan_cost_usd"), run
    assert run["actual_makespan_s"] > 1.0 and run["actual_cost_usd"] > 0  # 11 tasks of >= 0.5 s, priced pools
    assert run["deadline_met"] == (run["actual_makespan_s"] <= run["deadline_s"])
    assert run["simulated_actual_makespan_s"] > 0 and run["tries"] >= 11
    assert run["forecast_at_s"] == pytest.approx(run["actual_makespan_s"] / 4) and run["forecast_makespan_s"] > 0


def test_a_real_runs_forecast_at_a_quarter_is_its_last_re_plans_by_then_else_its_plan() -> None:
    record = {
        "actual_makespan_s": 100.0,
        "planned_makespan_s": 80.0,
        "repairs": [
            {"at_s": 10.0, "forecast_end_s": 90.0},
            {"at_s": 20.0, "forecast_end_s": None},  # a repair that re-planned nothing forecasts nothing
            {"at_s": 30.0, "forecast_end_s": 99.0},  # after the quarter: not yet known then
        ],
    }
    assert run_learning_loop._forecast(record, 0.25) == {"forecast_at_s": 25.0, "forecast_makespan_s": 90.0}
    assert run_learning_loop._forecast({**record, "repairs": []}, 0.25)["forecast_makespan_s"] == 80.0
    assert run_learning_loop._forecast({"actual_makespan_s": None}, 0.25)["forecast_makespan_s"] is None


def test_the_run_factor_s_k_can_be_set_for_one_run_and_is_recorded(tmp_path: Path) -> None:
    """--run-shrink-k reaches the simulated runs through LoopSettings (tests/predict/test_repair_replay.py: what it
    changes there); the rule's own k is recorded when none is given."""
    from agora_optimizer.predict import runtime_in_run

    out = _simulate(tmp_path, "--run-shrink-k", "1")
    assert json.loads(out.read_text())["run_shrink_k"] == 1.0
    assert runtime_in_run.RUN_SHRINK_K != 1.0  # the module's own is left alone
    (tmp_path / "default").mkdir()
    assert json.loads(_simulate(tmp_path / "default").read_text())["run_shrink_k"] == runtime_in_run.RUN_SHRINK_K

"""``bench/run_adversarial.py``: instances stay valid as they mutate, a short search writes its tables and cases."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bench.adversarial.instances import (
    MAX_TASKS,
    MAX_TYPES,
    case_to_dict,
    load_case,
    mutate,
    random_instance,
    write_case,
)
from bench.adversarial.targets import Settings, evaluate
from tests.bench import bench_script

run_adversarial = bench_script("run_adversarial")


@pytest.mark.slow  # each Problem.create solves small LPs for its bounds: seconds for 60
def test_mutations_keep_a_small_dag_that_every_task_fits() -> None:
    rng = random.Random(3)
    instance = random_instance(rng)
    for _ in range(60):
        instance = mutate(instance, rng)
        assert len(instance.workflow.tasks) <= MAX_TASKS and len(instance.catalog.resources) <= MAX_TYPES
        assert instance.fits()
        instance.problem()  # Problem.create refuses a task that fits no type; Workflow.create a cycle
        if instance.deadline_factor is not None:
            assert 1.0 <= instance.deadline_factor <= 4.0


def test_a_case_file_reads_back_as_the_same_instance(tmp_path: Path) -> None:
    instance = random_instance(random.Random(5))
    path = tmp_path / "case.json"
    write_case(path, case_to_dict(instance), {"target": "vs-heft", "ratio": 1.0})
    again, document = load_case(path)
    assert document["target"] == "vs-heft"
    assert again.workflow.tasks == instance.workflow.tasks and set(again.workflow.edges) == set(instance.workflow.edges)
    assert again.catalog.resources == instance.catalog.resources
    assert again.objective() == instance.objective()


@pytest.mark.slow  # the portfolio on eight instances
def test_a_short_search_writes_its_tables_and_its_worst_cases(tmp_path: Path) -> None:
    out, cases = tmp_path / "adversarial", tmp_path / "cases"
    argv = ["--instances", "4", "--targets", "vs-heft,vs-elastic-lease", "--time-limit-s", "1"]
    assert run_adversarial.main([*argv, "--out", str(out), "--cases", str(cases)]) == 0
    document = json.loads(out.with_suffix(".json").read_text())
    assert document["command"].startswith("python bench/run_adversarial.py --instances 4")
    rows = {row["target"]: row for row in document["targets"]}
    assert set(rows) == {"vs-heft", "vs-elastic-lease"}
    for target, row in rows.items():
        assert row["instances_searched"] == 4 and row["bound"] == 1.01
        assert row["instances_counted"] >= 1 and row["invalid_plans"] == []
        instance, case = load_case(Path(row["worst_case"]))
        assert case["target"] == target and case["ratio"] == row["worst_ratio"]
        again = evaluate(target, instance.problem(), Settings(time_limit_s=1.0))
        assert again.ratio is not None and abs(again.ratio - row["worst_ratio"]) < 1e-6
    markdown = out.with_suffix(".md").read_text()
    assert markdown.startswith("Command: `python bench/run_adversarial.py --instances 4")
    assert "| vs-heft | 1.01 | 4 |" in markdown


def test_a_search_out_of_time_says_how_many_instances_it_searched_of_those_asked(tmp_path: Path) -> None:
    out, cases = tmp_path / "adversarial", tmp_path / "cases"
    argv = ["--instances", "4", "--targets", "vs-heft", "--max-seconds", "0"]
    assert run_adversarial.main([*argv, "--out", str(out), "--cases", str(cases)]) == 0
    (row,) = json.loads(out.with_suffix(".json").read_text())["targets"]
    assert (row["instances_asked"], row["instances_searched"], row["worst_ratio"]) == (4, 0, None)
    assert "| vs-heft | 1.01 | 0 of 4 (time limit) | 0 |" in out.with_suffix(".md").read_text()
    assert not cases.exists()  # nothing found, nothing kept


def test_merged_results_keep_each_targets_last_row_with_the_command_of_its_search(tmp_path: Path) -> None:
    def result(command: str, date: str, targets: list[str]) -> Path:
        row = {"target": "", "bound": 1.01, "instances_searched": 2, "instances_counted": 2, "over_bound": 0}
        row |= {"missed_deadlines": 0, "invalid_plans": [], "worst_ratio": 1.0, "worst_missed_deadline": False}
        row |= {"worst_case": None, "lowest_ratio": 0.5, "seconds_per_instance": 0.1}
        path = tmp_path / f"{date}.json"
        document = {"command": command, "date": date, "targets": [{**row, "target": t} for t in targets]}
        path.write_text(json.dumps(document))
        return path

    first = result("python bench/run_adversarial.py --seed 0", "d1", ["vs-heft", "vs-peft"])
    second = result("python bench/run_adversarial.py --seed 1", "d2", ["vs-peft", "scale-vs-optimum"])
    out = tmp_path / "adversarial"
    assert run_adversarial.main(["--merge", str(first), str(second), "--out", str(out)]) == 0
    rows = json.loads(out.with_suffix(".json").read_text())["targets"]
    assert [(r["target"], r["date"]) for r in rows] == [
        ("scale-vs-optimum", "d2"),
        ("vs-heft", "d1"),
        ("vs-peft", "d2"),
    ]
    markdown = out.with_suffix(".md").read_text()
    assert "- vs-heft: `python bench/run_adversarial.py --seed 0` (d1)" in markdown
    assert "- vs-peft: `python bench/run_adversarial.py --seed 1` (d2)" in markdown

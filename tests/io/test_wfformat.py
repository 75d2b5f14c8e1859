from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agora_optimizer.errors import FieldError, InputFileError
from agora_optimizer.io.wfformat import DEFAULT_MEMORY_BYTES, load_workflow
from tests.conftest import BUNDLED, CATALOGS, shared_instances, wfformat_15, write_json

LOCAL_CATALOG = CATALOGS / "local.yaml"

MONTAGE = BUNDLED / "montage-chameleon-2mass-01d-001.json"


def test_real_instance_loads_with_its_recorded_numbers() -> None:
    raw = json.loads(MONTAGE.read_text())["workflow"]
    workflow = load_workflow(MONTAGE)
    assert workflow.name == "montage-chameleon-2mass-01d-001"
    assert len(workflow.tasks) == len(raw["specification"]["tasks"])
    record = raw["execution"]["tasks"][0]
    task = workflow.by_id[record["id"]]
    assert task.runtime_s == record["runtimeInSeconds"]
    assert task.memory_bytes == record["memoryInBytes"]
    assert task.memory_source == "recorded"
    assert task.category == "mProject"


def test_edge_bytes_are_the_files_a_parent_writes_and_its_child_reads() -> None:
    spec = json.loads(MONTAGE.read_text())["workflow"]["specification"]
    sizes = {f["id"]: f["sizeInBytes"] for f in spec["files"]}
    by_id = {t["id"]: t for t in spec["tasks"]}
    workflow = load_workflow(MONTAGE)
    checked = 0
    for edge in workflow.edges:
        shared = set(by_id[edge.parent]["outputFiles"]) & set(by_id[edge.child]["inputFiles"])
        assert edge.bytes == sum(sizes[f] for f in shared)
        checked += edge.bytes > 0
    assert checked > 0
    declared = {(p, t["id"]) for t in spec["tasks"] for p in t["parents"]}
    assert {(e.parent, e.child) for e in workflow.edges} == declared


def test_missing_memory_uses_category_median_then_default(tmp_path: Path) -> None:
    doc = wfformat_15(
        [
            {"id": "align_1", "name": "align", "runtime": 1.0, "memory": 100},
            {"id": "align_2", "name": "align", "runtime": 1.0, "memory": 300},
            {"id": "align_3", "name": "align", "runtime": 1.0, "memory": 0},  # 0 means not recorded
            {"id": "merge_1", "name": "merge", "runtime": 1.0, "parents": ["align_1"]},
        ]
    )
    workflow = load_workflow(write_json(tmp_path / "w.json", doc), default_memory_bytes=777)
    assert (workflow.by_id["align_3"].memory_bytes, workflow.by_id["align_3"].memory_source) == (200, "category-median")
    assert (workflow.by_id["merge_1"].memory_bytes, workflow.by_id["merge_1"].memory_source) == (777, "default")


def test_family_without_memory_gets_the_default() -> None:
    workflow = load_workflow(BUNDLED / "1000genome-chameleon-2ch-100k-001.json")
    assert {t.memory_source for t in workflow.tasks} == {"default"}
    assert {t.memory_bytes for t in workflow.tasks} == {DEFAULT_MEMORY_BYTES}


def test_wfformat_14_with_inline_files(tmp_path: Path) -> None:
    doc = {
        "name": "old",
        "schemaVersion": "1.4",
        "workflow": {
            "makespanInSeconds": 3,
            "executedAt": "2021-01-01T00:00:00Z",
            "tasks": [
                {
                    "name": "gen_1",
                    "type": "compute",
                    "parents": [],
                    "runtimeInSeconds": 2.0,
                    "cores": 2,
                    "memoryInBytes": 5000,
                    "files": [{"name": "x.dat", "sizeInBytes": 42, "link": "output"}],
                },
                {
                    "name": "use_1",
                    "type": "compute",
                    "parents": ["gen_1"],
                    "runtimeInSeconds": 1.0,
                    "category": "user",
                    "files": [{"name": "x.dat", "sizeInBytes": 42, "link": "input"}],
                },
            ],
        },
    }
    workflow = load_workflow(write_json(tmp_path / "old.json", doc))
    assert workflow.by_id["gen_1"].cores == 2
    assert workflow.by_id["use_1"].category == "user"
    assert [(e.parent, e.child, e.bytes) for e in workflow.edges] == [("gen_1", "use_1", 42)]


def test_unknown_parent_is_named(tmp_path: Path) -> None:
    doc = wfformat_15([{"id": "a", "runtime": 1.0}])
    doc["workflow"]["specification"]["tasks"][0]["parents"] = ["ghost"]
    with pytest.raises(FieldError, match="unknown parent task 'ghost'"):
        load_workflow(write_json(tmp_path / "w.json", doc))


def test_missing_runtime_names_the_task(tmp_path: Path) -> None:
    doc = wfformat_15([{"id": "a", "runtime": 1.0}])
    del doc["workflow"]["execution"]["tasks"][0]["runtimeInSeconds"]
    with pytest.raises(FieldError, match="task 'a' has no runtimeInSeconds"):
        load_workflow(write_json(tmp_path / "w.json", doc))


def test_a_task_id_in_a_message_is_quoted_short_on_one_line(tmp_path: Path) -> None:
    long = "t" * 50_000 + "\nsecond line"
    doc = wfformat_15([{"id": long, "runtime": 1.0}])
    del doc["workflow"]["execution"]["tasks"][0]["runtimeInSeconds"]
    with pytest.raises(FieldError, match=r"task 'tttt.*' has no runtimeInSeconds") as caught:
        load_workflow(write_json(tmp_path / "w.json", doc))
    assert "\n" not in str(caught.value)
    assert len(str(caught.value)) < 300


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=r"nope\.json: no such file"):
        load_workflow(tmp_path / "nope.json")


@pytest.mark.parametrize("path", shared_instances(), ids=lambda p: p.stem)
def test_every_shared_instance_loads_as_a_dag(path: Path) -> None:
    workflow = load_workflow(path)
    assert len(workflow.topological_order) == len(workflow.tasks) > 0
    assert all(t.memory_bytes > 0 for t in workflow.tasks)


def test_a_task_gpus_key_is_read_from_its_record_then_its_entry(tmp_path: Path) -> None:
    doc = wfformat_15([{"id": "a", "runtime": 1.0}, {"id": "b", "runtime": 1.0}, {"id": "c", "runtime": 1.0}])
    doc["workflow"]["execution"]["tasks"][0]["gpus"] = 2
    doc["workflow"]["specification"]["tasks"][1]["gpus"] = 1
    workflow = load_workflow(write_json(tmp_path / "w.json", doc))
    assert [workflow.by_id[t].gpus for t in "abc"] == [2, 1, 0]  # c: none stated, the rule's 0


@pytest.mark.parametrize("bad", [-1, 0.5, "one", True])
def test_a_bad_gpus_key_names_the_task(bad: object, tmp_path: Path) -> None:
    doc = wfformat_15([{"id": "a", "runtime": 1.0}, {"id": "b", "runtime": 1.0}])
    doc["workflow"]["execution"]["tasks"][1]["gpus"] = bad
    with pytest.raises(FieldError, match=r"w\.json: field 'workflow\.execution\.tasks\[1\]\.gpus': task 'b': "):
        load_workflow(write_json(tmp_path / "w.json", doc))


def test_wfformat_14_reads_a_task_gpus_key(tmp_path: Path) -> None:
    task = {"name": "train_1", "type": "compute", "parents": [], "runtimeInSeconds": 2.0, "gpus": 4, "files": []}
    doc = {"name": "old", "schemaVersion": "1.4", "workflow": {"tasks": [task]}}
    assert load_workflow(write_json(tmp_path / "old.json", doc)).by_id["train_1"].gpus == 4


@pytest.mark.parametrize("bad", [["mProject", "mDiff"], 7, {"name": "x"}, True], ids=lambda v: type(v).__name__)
def test_a_category_that_is_not_a_string_is_refused_naming_the_field(bad: object, tmp_path: Path) -> None:
    doc = wfformat_15([{"id": "a_1", "runtime": 1.0}, {"id": "b_1", "runtime": 1.0}])
    doc["workflow"]["specification"]["tasks"][1]["category"] = bad
    with pytest.raises(
        FieldError, match=r"w\.json: field 'workflow\.specification\.tasks\[1\]\.category': expected a string, got"
    ):
        load_workflow(write_json(tmp_path / "w.json", doc))
    doc["workflow"]["specification"]["tasks"][1]["category"] = "b"
    assert load_workflow(write_json(tmp_path / "w.json", doc)).by_id["b_1"].category == "b"


# 528 bytes: nine nested lists of nine aliases in one task's category, 9**9 strings to whatever prints it
BILLION_LAUGHS = """\
name: laughs
schemaVersion: "1.5"
workflow:
  specification:
    tasks:
    - id: t1
      name: t1
      parents: []
      children: []
      category: &i [&h [&g [&f [&e [&d [&c [&b [&a [lol,lol,lol,lol,lol,lol,lol,lol,lol],*a,*a,*a,*a,*a,*a,*a,*a],\
*b,*b,*b,*b,*b,*b,*b,*b],*c,*c,*c,*c,*c,*c,*c,*c],*d,*d,*d,*d,*d,*d,*d,*d],*e,*e,*e,*e,*e,*e,*e,*e],*f,*f,*f,*f,*f,*f,\
*f,*f],*g,*g,*g,*g,*g,*g,*g,*g],*h,*h,*h,*h,*h,*h,*h,*h]
    files: []
  execution:
    makespanInSeconds: 1
    tasks:
    - id: t1
      runtimeInSeconds: 1
"""


@pytest.mark.slow  # a CLI in a subprocess: a second or two
def test_agora_optimize_refuses_a_billion_laughs_workflow_at_once(tmp_path: Path) -> None:
    """It ran for ever (``str()`` of the category); now one line, exit 2, no plan, within seconds."""
    workflow = tmp_path / "laughs.yaml"
    workflow.write_text(BILLION_LAUGHS)
    assert len(BILLION_LAUGHS) < 567
    plan = tmp_path / "plan.json"
    command = [sys.executable, "-m", "agora_optimizer", "optimize", str(workflow), "--catalog", str(LOCAL_CATALOG)]
    try:
        done = subprocess.run([*command, "-o", str(plan)], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("agora optimize still ran after 30 s on a 528-byte workflow")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"agora: error: {workflow}: YAML aliases expand its ")
    assert not plan.exists()

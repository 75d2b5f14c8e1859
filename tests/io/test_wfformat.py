from __future__ import annotations

import json
from pathlib import Path

import pytest

from agora_optimizer.errors import FieldError, InputFileError
from agora_optimizer.io.wfformat import DEFAULT_MEMORY_BYTES, load_workflow
from tests.conftest import BUNDLED, shared_instances, wfformat_15, write_json

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

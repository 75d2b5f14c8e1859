"""WfFormat instances as task attempts and as task shapes (the lenient reader)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from agora_optimizer.errors import AgoraError
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.traces.wfformat_import import (
    RUN_ID,
    attempts_from_wfformat,
    import_wfformat,
    read_workflow_shape,
)
from tests.conftest import wfformat_15, write_json
from tests.predict.conftest import BLAST_1, GENOME, stripped


def test_attempts_carry_the_records_values() -> None:
    document = json.loads(BLAST_1.read_text())
    records = {r["id"]: r for r in document["workflow"]["execution"]["tasks"]}
    sizes = {f["id"]: f["sizeInBytes"] for f in document["workflow"]["specification"]["files"]}
    specs = {t["id"]: t for t in document["workflow"]["specification"]["tasks"]}
    attempts = attempts_from_wfformat(BLAST_1)
    assert len(attempts) == len(records)
    for attempt in attempts:
        record, spec = records[attempt.task_id], specs[attempt.task_id]
        assert (attempt.dag_id, attempt.run_id) == (BLAST_1.stem, RUN_ID)
        assert attempt.runtime_s == pytest.approx(record["runtimeInSeconds"])
        assert attempt.peak_rss_bytes == record["memoryInBytes"]
        assert attempt.cpu_time_s == pytest.approx(record["avgCPU"] / 100 * record["runtimeInSeconds"])
        assert attempt.input_bytes == sum(sizes[f] for f in spec["inputFiles"])
        assert attempt.output_bytes == sum(sizes[f] for f in spec["outputFiles"])
        assert attempt.input_files == (len(spec["inputFiles"]) or None)
        assert attempt.output_files == (len(spec["outputFiles"]) or None)
        assert attempt.host == record["machines"][0]
        assert attempt.requested_cores == record["coreCount"]
        assert attempt.category == record["command"]["program"]


def test_shapes_and_their_feature_rows_carry_file_counts() -> None:
    from agora_optimizer.predict.features import feature_frame, shape_of_attempt

    document = json.loads(BLAST_1.read_text())
    specs = {t["id"]: t for t in document["workflow"]["specification"]["tasks"]}
    shapes = read_workflow_shape(BLAST_1).tasks
    assert any(len(specs[s.task_id]["inputFiles"]) > 1 for s in shapes)  # the check below can tell counts apart
    for shape in shapes:
        assert (shape.input_files, shape.output_files) == (
            len(specs[shape.task_id]["inputFiles"]),
            len(specs[shape.task_id]["outputFiles"]),
        )
    by_attempt = {a.task_id: shape_of_attempt(a) for a in attempts_from_wfformat(BLAST_1)}
    assert all(by_attempt[s.task_id].input_files == s.input_files for s in shapes)  # training rows = prediction rows
    frame = feature_frame(shapes)
    assert frame["log_input_files"].tolist() == pytest.approx([math.log1p(s.input_files) for s in shapes])
    assert frame["log_output_files"].tolist() == pytest.approx([math.log1p(s.output_files) for s in shapes])


def test_bad_task_records_are_skipped_and_counted_not_fatal(tmp_path: Path) -> None:
    document = wfformat_15(
        [
            {"id": "a_1", "runtime": 3.0, "memory": 1000},
            {"id": "b_1", "runtime": -1.0, "parents": ["a_1"]},
            {"id": "c_1", "runtime": 2.0, "memory": "lots", "parents": ["a_1"]},
            {"id": "d_1", "runtime": 4.0, "cores": 0, "parents": ["a_1"]},
        ]
    )
    result = import_wfformat(write_json(tmp_path / "w.json", document))
    assert [a.task_id for a in result.attempts] == ["a_1"]
    assert len(result.skipped) == 3
    joined = "\n".join(result.skipped)
    assert "b_1" in joined and "runtimeInSeconds" in joined
    assert "c_1" in joined and "memoryInBytes" in joined
    assert "d_1" in joined and "coreCount" in joined


def test_wfformat_14_is_read(tmp_path: Path) -> None:
    document = {
        "name": "old",
        "schemaVersion": "1.4",
        "workflow": {
            "makespanInSeconds": 5,
            "executedAt": "2020-01-01T00:00:00Z",
            "tasks": [
                {"name": "split_ID1", "type": "compute", "runtimeInSeconds": 2.0, "cores": 2, "memoryInBytes": 10,
                 "files": [{"name": "in", "sizeInBytes": 100, "link": "input"},
                           {"name": "mid", "sizeInBytes": 40, "link": "output"}]},
                {"name": "merge_ID2", "type": "compute", "runtimeInSeconds": 1.0, "parents": ["split_ID1"],
                 "files": [{"name": "mid", "sizeInBytes": 40, "link": "input"}]},
            ],
        },
    }  # fmt: skip
    path = write_json(tmp_path / "old.json", document)
    attempts = {a.task_id: a for a in attempts_from_wfformat(path)}
    assert attempts["split_ID1"].requested_cores == 2 and attempts["split_ID1"].input_bytes == 100
    assert attempts["merge_ID2"].input_bytes == 40 and attempts["merge_ID2"].peak_rss_bytes is None
    shape = read_workflow_shape(path)
    assert [(e.parent, e.child, e.bytes) for e in shape.edges] == [("split_ID1", "merge_ID2", 40)]


def test_a_file_without_runtimes_or_memory_still_gives_shapes(tmp_path: Path) -> None:
    bare = stripped(BLAST_1, tmp_path / BLAST_1.name)  # same stem: same dag_id
    with pytest.raises(AgoraError):
        load_workflow(bare)  # the planner's loader needs runtimes: this reader does not
    shape, full = read_workflow_shape(bare), read_workflow_shape(BLAST_1)
    assert shape.tasks == full.tasks
    assert {(e.parent, e.child, e.bytes) for e in shape.edges} == {
        (e.parent, e.child, e.bytes) for e in load_workflow(BLAST_1).edges
    }
    assert all(t.hint_runtime_s is None and t.hint_memory_bytes is None for t in full.tasks)
    hinted = read_workflow_shape(BLAST_1, hints=True)
    assert all(t.hint_runtime_s is not None and t.hint_memory_bytes for t in hinted.tasks)
    assert all(t.hint_runtime_s is None for t in read_workflow_shape(bare, hints=True).tasks)


def test_no_execution_section_at_all(tmp_path: Path) -> None:
    document = json.loads(GENOME.read_text())
    del document["workflow"]["execution"]
    path = write_json(tmp_path / "spec-only.json", document)
    shape = read_workflow_shape(path)
    assert len(shape.tasks) == len(document["workflow"]["specification"]["tasks"])
    result = import_wfformat(path)
    assert result.attempts == () and len(result.skipped) == len(shape.tasks)


@pytest.mark.parametrize(
    "document",
    [[1, 2], {"workflow": {"jobs": []}}, {"workflow": {"specification": {"tasks": []}}}, {"nothing": 1}],
)
def test_not_a_workflow_is_a_clear_error(tmp_path: Path, document: object) -> None:
    path = write_json(tmp_path / "x.json", document)
    with pytest.raises(AgoraError, match=re.escape("x.json")):
        read_workflow_shape(path)
    with pytest.raises(AgoraError, match=re.escape("x.json")):
        import_wfformat(path)


def test_a_task_gpus_key_reaches_its_shape(tmp_path: Path) -> None:
    doc = wfformat_15([{"id": "a", "runtime": 1.0}, {"id": "b", "runtime": 2.0}])
    doc["workflow"]["execution"]["tasks"][1]["gpus"] = 2
    shape = read_workflow_shape(write_json(tmp_path / "w.json", doc))
    assert [t.gpus for t in shape.tasks] == [0, 2]

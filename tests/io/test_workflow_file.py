"""The workflow file the plan store keeps beside a plan: lossless, and errors that name the field."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from agora_optimizer.errors import CyclicWorkflowError, FieldError
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.io.workflow_file import load_workflow_file, workflow_to_dict, write_workflow
from tests.conftest import ENGINE_WORKFLOWS


@pytest.mark.parametrize("instance", ENGINE_WORKFLOWS, ids=lambda p: p.stem)
def test_a_workflow_reads_back_as_it_was_written(instance: Path, tmp_path: Path) -> None:
    workflow = load_workflow(instance)
    write_workflow(workflow, tmp_path / "w.json")
    again = load_workflow_file(tmp_path / "w.json")
    assert again == workflow  # name, every task's fields (memory source too) and every edge's bytes
    assert again.source == str(tmp_path / "w.json")


def test_a_bad_field_is_named(tmp_path: Path) -> None:
    document = workflow_to_dict(load_workflow(ENGINE_WORKFLOWS[0]))
    document["tasks"][1]["memory_source"] = "guessed"
    path = tmp_path / "w.json"
    path.write_text(json.dumps(document))
    with pytest.raises(FieldError, match=r"w\.json: field 'tasks\[1\]\.memory_source': expected one of recorded"):
        load_workflow_file(path)
    document["tasks"][1]["memory_source"] = "recorded"
    document["format"] = "agora-plan/1"
    path.write_text(json.dumps(document))
    with pytest.raises(FieldError, match="field 'format': expected 'agora-workflow/1'"):
        load_workflow_file(path)


def test_a_cycle_is_refused(tmp_path: Path) -> None:
    document = {
        "format": "agora-workflow/1",
        "name": "loop",
        "tasks": [{"id": t, "runtime_s": 1.0, "cores": 1, "memory_bytes": 1, "category": ""} for t in "ab"],
        "edges": [{"parent": "a", "child": "b"}, {"parent": "b", "child": "a", "bytes": 5}],
    }
    path = tmp_path / "loop.json"
    path.write_text(json.dumps(document))
    with pytest.raises(CyclicWorkflowError, match="'loop'"):
        load_workflow_file(path)


def test_gpus_are_written_where_a_task_needs_some_and_read_back(tmp_path: Path) -> None:
    workflow = load_workflow(ENGINE_WORKFLOWS[0])
    first = workflow.tasks[0]
    gpu_workflow = replace(workflow, tasks=(replace(first, gpus=2), *workflow.tasks[1:]))
    document = workflow_to_dict(gpu_workflow)
    assert document["tasks"][0]["gpus"] == 2
    assert all("gpus" not in task for task in document["tasks"][1:])
    write_workflow(gpu_workflow, tmp_path / "w.json")
    again = load_workflow_file(tmp_path / "w.json")
    assert again.by_id[first.id].gpus == 2 and again == gpu_workflow
    document["tasks"][0]["gpus"] = -1
    (tmp_path / "bad.json").write_text(json.dumps(document))
    with pytest.raises(FieldError, match=r"bad\.json: field 'tasks\[0\]\.gpus': must be >= 0"):
        load_workflow_file(tmp_path / "bad.json")

"""Reading JSON and YAML documents: a key said twice is refused in both, naming the key and where it is."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agora_optimizer.errors import FieldError
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.documents import read_document
from agora_optimizer.io.plan_file import load_plan
from agora_optimizer.io.wfformat import load_workflow
from tests.conftest import AWS_CATALOG, BUNDLED

BLAST = BUNDLED / "blast-chameleon-small-001.json"
PLAN = {
    "format": "agora-plan/1",
    "workflow": "tiny",
    "catalog": "aws",
    "objective": {"kind": "cost", "alpha": 0.5, "deadline_s": 100.0, "budget_usd": None},
    "makespan_s": 10.0,
    "cost_usd": 0.01,
    "assignments": [
        {
            "task": "a",
            "resource": "c5.large",
            "machine": "c5.large#0",
            "start_s": 0.0,
            "end_s": 10.0,
            "cores": 1,
            "memory_bytes": 2**30,
        }
    ],
    "solver": {"method": "heuristic", "status": "heuristic", "gap": None, "wall_s": 0.1},
    "created_at": "2026-12-01T00:00:00+00:00",
}


def with_key_twice(text: str, key: str, value: str, suffix: str) -> str:
    """``text`` (JSON or YAML, by ``suffix``) with the first mapping that has ``key`` saying it again: ``value``."""
    if suffix == ".json":
        pattern = re.compile(rf'("{key}": [^,}}\]]+)')
        return pattern.sub(lambda m: f'{m.group(1)}, "{key}": {value}', text, count=1)
    pattern = re.compile(rf"^( *)(- )?{key}: .*$", re.MULTILINE)
    return pattern.sub(lambda m: f"{m.group(0)}\n{m.group(1)}{'  ' if m.group(2) else ''}{key}: {value}", text, count=1)


def dumped(document: Any, suffix: str) -> str:
    return json.dumps(document) if suffix == ".json" else yaml.safe_dump(document, sort_keys=False)


WORKFLOW = json.loads(BLAST.read_text())
CASES = [
    # (name, loader, document, key, second value, field path of the mapping that says it twice)
    ("workflow", load_workflow, WORKFLOW, "runtimeInSeconds", "99999", "workflow.execution.tasks[0]"),
    ("catalog", load_catalog, yaml.safe_load(AWS_CATALOG.read_text()), "price_per_hour_usd", "0.001", "resources[0]"),
    ("plan", load_plan, PLAN, "end_s", "99999.0", "assignments[0]"),
    ("plan", load_plan, PLAN, "cost_usd", "0.0", "<document>"),
]


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
@pytest.mark.parametrize(
    ("kind", "load", "document", "key", "value", "where"),
    [pytest.param(*case, id=f"{case[0]}-{case[3]}") for case in CASES],
)
def test_a_key_said_twice_is_refused_naming_the_key_and_where(
    tmp_path: Path,
    suffix: str,
    kind: str,
    load: Callable[[Path], object],
    document: Any,
    key: str,
    value: str,
    where: str,
) -> None:
    text = dumped(document, suffix)
    path = tmp_path / f"{kind}{suffix}"
    path.write_text(text)
    load(path)  # as written, it reads
    twice = with_key_twice(text, key, value, suffix)
    assert twice.count(key) == text.count(key) + 1
    path.write_text(twice)
    expected = rf"^{re.escape(str(path))}: field '{re.escape(where)}': duplicate key '{key}'"
    with pytest.raises(FieldError, match=expected):
        load(path)


def test_in_json_the_field_path_leads_to_the_mapping_wherever_it_is(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text('{"a": [{"b": 1}, {"c": {"d": 1, "e": 2, "d": 3}}], "f": 4}')
    with pytest.raises(FieldError, match=r"field 'a\[1\]\.c': duplicate key 'd': say it once$"):
        read_document(path)
    path.write_text('{"a": 1, "a": 1}')  # the same value twice is still said twice
    with pytest.raises(FieldError, match=r"field '<document>': duplicate key 'a'"):
        read_document(path)


def test_in_yaml_the_line_of_each_is_named_too(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("a:\n- b: 1\n- c:\n    d: 1\n    e: 2\n    d: 3\n")
    with pytest.raises(FieldError, match=r"field 'a\[1\]\.c': duplicate key 'd' at line 6 \(first at line 4\)"):
        read_document(path)


def test_a_file_of_another_suffix_is_refused_the_same_in_either_language(tmp_path: Path) -> None:
    path = tmp_path / "d.txt"
    path.write_text('{"a": 1, "a": 2}')
    with pytest.raises(FieldError, match="duplicate key 'a'"):
        read_document(path)
    path.write_text("a: 1\na: 2\n")
    with pytest.raises(FieldError, match="duplicate key 'a' at line 2"):
        read_document(path)

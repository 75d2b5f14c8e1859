"""The YAML reader: duplicate keys and alias bombs refused before any value is built, naming file, field and line."""

from __future__ import annotations

import time

import pytest
import yaml

from agora_optimizer.errors import FieldError, InputFileError
from agora_optimizer.io import yaml_loader
from agora_optimizer.io.yaml_loader import MAX_ALIAS_GROWTH, MIN_ALIAS_LIMIT, load_yaml


def laughs(levels: int, width: int = 9) -> str:
    """``levels`` nested lists of ``width`` aliases each (the "billion laughs"): ``width ** levels`` strings."""
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def expanded_size(value: object) -> int:
    """The values a walk that does not know about sharing meets (what ``str()`` prints)."""
    if isinstance(value, list):
        return 1 + sum(expanded_size(item) for item in value)
    if isinstance(value, dict):
        return 1 + sum(1 + expanded_size(item) for item in value.values())
    return 1


def test_the_billion_laughs_is_refused_at_once_naming_the_file() -> None:
    text = laughs(9)
    assert len(text) < 600
    started = time.perf_counter()
    with pytest.raises(InputFileError, match=r"^w\.yaml: YAML aliases expand its \d+ values to \d+, more than") as info:
        load_yaml(text, "w.yaml")
    assert time.perf_counter() - started < 1.0
    assert "\n" not in str(info.value)
    assert "billion laughs" in str(info.value)


@pytest.mark.parametrize("levels", [4, 5, 6])
def test_a_document_is_refused_exactly_when_aliases_expand_it_past_the_limit(levels: int) -> None:
    text = laughs(levels, width=10)
    document = yaml.safe_load(text)  # PyYAML reads it: sharing is cheap, walking it is not
    if expanded_size(document) <= MIN_ALIAS_LIMIT:
        assert load_yaml(text, "w.yaml") == document
    else:
        with pytest.raises(InputFileError, match=f"more than the {MIN_ALIAS_LIMIT} allowed"):
            load_yaml(text, "w.yaml")


@pytest.mark.parametrize("files", [20, 50])
def test_beyond_the_floor_aliases_may_grow_a_document_by_a_factor(files: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """PyYAML's own dumper writes a shared value once and aliases it. Beyond the floor (set to 0 here, to
    reach the rule with a small document) the limit is MAX_ALIAS_GROWTH times the values written."""
    monkeypatch.setattr(yaml_loader, "MIN_ALIAS_LIMIT", 0)
    shared = {"files": [f"f{i}" for i in range(files)]}
    tasks = 1000
    document = {"tasks": [{"id": f"t{i}", "spec": shared} for i in range(tasks)]}
    text = yaml.safe_dump(document)
    assert text.count("*id001") == tasks - 1  # the dumper aliased it
    written = expanded_size(document) - (tasks - 1) * expanded_size(shared)
    if expanded_size(document) <= MAX_ALIAS_GROWTH * written:
        assert files == 20
        assert load_yaml(text, "w.yaml") == document
    else:
        assert files == 50
        with pytest.raises(InputFileError, match=f"its {written} values to {expanded_size(document)}, more than"):
            load_yaml(text, "w.yaml")


def test_an_alias_inside_its_own_anchor_is_refused_naming_the_field() -> None:
    with pytest.raises(FieldError, match=r"w\.yaml: field 'loop\[1\]': is an alias of a value that contains it"):
        load_yaml("ok: 1\nloop: &x [1, *x]\n", "w.yaml")


def test_a_duplicate_key_is_refused_naming_key_field_and_lines() -> None:
    text = "workflow:\n  tasks:\n  - name: t\n    runtimeInSeconds: 10\n    runtimeInSeconds: 99999\n"
    assert yaml.safe_load(text)["workflow"]["tasks"][0]["runtimeInSeconds"] == 99999  # what PyYAML does
    with pytest.raises(
        FieldError,
        match=r"^w\.yaml: field 'workflow\.tasks\[0\]': duplicate key 'runtimeInSeconds' at line 5 \(first at line 4\)",
    ):
        load_yaml(text, "w.yaml")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("a: 1\nb: 2\na: 3\n", "'a'"),
        ("1: x\n0x1: y\n", "1"),
        ("{on: 1, true: 2}", "True"),
        ("top:\n  x: 1\n  x: 1\n", "'x'"),
    ],
)
def test_keys_are_compared_as_values_not_as_spelled(text: str, key: str) -> None:
    with pytest.raises(FieldError, match=f"duplicate key {key}"):
        load_yaml(text, "w.yaml")


def test_a_merge_may_override_keys_it_brings_in() -> None:
    text = "base: &base {a: 1, b: 2}\nx: {deep: &d {<<: *base, a: 2}}\ny:\n  <<: *d\n  b: 5\n"
    assert load_yaml(text, "w.yaml") == yaml.safe_load(text)

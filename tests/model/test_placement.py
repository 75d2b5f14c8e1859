"""A task's placement in its executor_config (model/placement.py): the policy writes it, the executor reads."""

from __future__ import annotations

import pytest

from agora_optimizer.errors import FieldError
from agora_optimizer.model.placement import Placement, placement_from_config


def test_a_placement_reads_back_as_written_gpus_included() -> None:
    placement = Placement("gpu-node", 4, 2**30, 60.0, "gpu-node#1", 5.0, "plan", "abc", gpus=2)
    assert placement_from_config({"agora": {"placement": placement.to_config()}}, "d.t") == placement


def test_a_placement_written_before_gpus_reads_as_none_reserved() -> None:
    config = {"agora": {"placement": {"resource": "small", "cores": 1, "memory_bytes": 2**20}}}
    found = placement_from_config(config, "d.t")
    assert found is not None and found.gpus == 0


@pytest.mark.parametrize("gpus", [-1, 1.5e9, "two", True])
def test_a_bad_gpus_value_is_an_error_naming_the_task_and_field(gpus: object) -> None:
    config = {"agora": {"placement": {"resource": "small", "cores": 1, "memory_bytes": 2**20, "gpus": gpus}}}
    with pytest.raises(FieldError, match=r"task d\.t.*executor_config\.agora\.placement\.gpus"):
        placement_from_config(config, "d.t")


@pytest.mark.parametrize("key", ["machine", "source", "plan_version"])
def test_a_name_that_is_not_a_string_is_an_error_naming_the_field_quoted_short(key: str) -> None:
    placement = {"resource": "small", "cores": 1, "memory_bytes": 2**20, key: ["small#0"] * 10_000}
    with pytest.raises(FieldError, match=rf"task d\.t.*executor_config\.agora\.placement\.{key}': must be a string"):
        placement_from_config({"agora": {"placement": placement}}, "d.t")
    placement[key] = ""  # absent or empty: the default
    assert placement_from_config({"agora": {"placement": placement}}, "d.t") is not None


def test_a_bad_number_is_quoted_short_on_one_line() -> None:
    placement = {"resource": "small", "cores": [1] * 10_000, "memory_bytes": 2**20}
    with pytest.raises(FieldError, match=r"placement\.cores': must be a number") as caught:
        placement_from_config({"agora": {"placement": placement}}, "d.t")
    assert len(str(caught.value)) < 300

"""The one reader of a task's ``executor_config["agora"]`` hints (model/task_hints.py): no Airflow, the task
objects stand in for its operators and task instances."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agora_optimizer.errors import FieldError
from agora_optimizer.model.catalog import GIB
from agora_optimizer.model.task_hints import (
    DeclaredNeeds,
    agora_config,
    declared_category,
    declared_needs,
    task_agora_config,
    task_source,
    unknown_key,
)


def _task(config: object, task_id: str = "train") -> SimpleNamespace:
    dag = SimpleNamespace(fileloc="dags/etl.py")
    return SimpleNamespace(task_id=task_id, dag_id="etl", dag=dag, executor_config=config)


def test_the_dict_is_read_leniently_where_there_is_none_or_it_is_no_mapping() -> None:
    assert agora_config({"agora": {"cores": 2}}) == {"cores": 2}
    for config in (None, {}, {"agora": None}, {"agora": ["cores"]}, "agora", {"KubernetesExecutor": {}}):
        assert agora_config(config) == {}
    instance = SimpleNamespace(executor_config={"agora": {"category": "io"}})
    assert task_agora_config(None, instance) == {"category": "io"}  # a task instance's own, where no task says
    assert task_agora_config(_task({"agora": {"cores": 2}}), instance) == {"cores": 2}  # the task's first


def test_the_declared_category_is_stripped_text_else_none() -> None:
    assert declared_category({"category": " train "}) == "train"
    assert declared_category({"category": 7}) == declared_category({}) == ""


def test_declared_needs_read_every_hint_and_default_what_is_not_declared() -> None:
    hints = {"cores": 4, "gpus": 1, "runtime_s": 600, "memory_gib": 8, "category": " fit "}
    assert declared_needs(_task({"agora": hints}), "dags/etl.py") == DeclaredNeeds(4, 1, 600.0, 8 * GIB, "fit")
    assert declared_needs(_task({"agora": {"memory_bytes": 100, "memory_gib": 8}}), "x").memory_bytes == 100
    assert declared_needs(_task(None), "x") == DeclaredNeeds()


@pytest.mark.parametrize(
    ("hints", "field", "reason"),
    [
        ({"cores": "four"}, "cores", "expected a number, got 'four'"),
        ({"cores": 0}, "cores", "must be >= 1, got 0"),
        ({"gpus": 1.5}, "gpus", "expected a whole number, got 1.5"),
        ({"runtime_s": 0}, "runtime_s", "must be > 0, got 0"),
        ({"memory_gib": -1}, "memory_gib", "must be >= 0, got -1"),
        ({"category": " "}, "category", "expected a non-empty string, got ' '"),
    ],
)
def test_a_bad_hint_is_one_error_naming_the_source_the_task_and_the_field(
    hints: dict[str, object], field: str, reason: str
) -> None:
    task = _task({"agora": hints})
    with pytest.raises(FieldError) as error:
        declared_needs(task, task_source(task))
    assert str(error.value) == f"dags/etl.py (DAG 'etl'): field 'train.executor_config.agora.{field}': {reason}"


def test_hints_that_are_not_a_mapping_are_named() -> None:
    with pytest.raises(FieldError, match=r"field 'train\.executor_config\.agora': expected a mapping, got list"):
        declared_needs(_task({"agora": ["cores"]}), "d.py")


def test_a_key_neither_declared_nor_written_by_agora_is_found() -> None:
    assert unknown_key({"cores": 1, "placement": {}, "instances": {}, "input_bytes": "{{ x }}"}) is None
    assert unknown_key({"memroy_gib": 2, "cores": 1, "zz": 0}) == "memroy_gib"


def test_the_source_names_what_the_task_knows_of_its_dag() -> None:
    assert task_source(_task({})) == "dags/etl.py (DAG 'etl')"
    assert task_source(SimpleNamespace(task_id="t", dag_id="etl")) == "DAG 'etl'"
    assert task_source(SimpleNamespace(task_id="t")) == "task t"

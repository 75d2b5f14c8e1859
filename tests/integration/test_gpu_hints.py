"""A task's declared GPUs (``executor_config={"agora": {"gpus": N}}``), from the DAG to the shapes the
predictor plans from (integration/airflow_dag.py): no Airflow, the task objects stand in for its."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from agora_optimizer.errors import FieldError
from agora_optimizer.integration.airflow_dag import _dag_task, expand_mapped, workflow_shape
from agora_optimizer.integration.dag_shape import DagShape
from agora_optimizer.predict.map_width import MapWidth


def _task(task_id: str, agora: dict[str, object], upstream: tuple[str, ...] = ()) -> SimpleNamespace:
    return SimpleNamespace(
        task_id=task_id, task_type="PythonOperator", upstream_task_ids=set(upstream), executor_config={"agora": agora}
    )


def test_declared_gpus_reach_the_workflow_shape_and_mapped_instances() -> None:
    train = _dag_task("d.py", _task("train", {"cores": 4, "gpus": 2}))
    prep = _dag_task("d.py", _task("prep", {"cores": 1}))
    assert (train.gpus, prep.gpus) == (2, 0)
    shape = DagShape("d", "d.py", (prep, train))
    assert [t.gpus for t in workflow_shape(shape).tasks] == [0, 2]
    mapped = DagShape("d", "d.py", (prep, replace(train, mapped=True)))
    expanded = expand_mapped(mapped, {"train": MapWidth(3, "literal")})
    assert [t.gpus for t in expanded.tasks if t.task_id != "prep"] == [2, 2, 2]


@pytest.mark.parametrize("bad", [-1, 1.5, "two", True])
def test_a_bad_gpus_hint_is_named(bad: object) -> None:
    with pytest.raises(FieldError, match=r"d\.py: field 'train\.executor_config\.agora\.gpus'"):
        _dag_task("d.py", _task("train", {"gpus": bad}))

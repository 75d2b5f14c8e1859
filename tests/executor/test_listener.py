"""The trace listener's reading of a task's agora hints (here: Airflow imported in this process)."""

from __future__ import annotations


def test_the_listener_records_the_declared_category() -> None:
    from types import SimpleNamespace

    from agora_optimizer.traces.listener import declared_category

    def ti(config: object) -> SimpleNamespace:
        return SimpleNamespace(task=SimpleNamespace(executor_config=config))

    assert declared_category(ti({"agora": {"category": " train "}})) == "train"
    assert declared_category(ti({"agora": {"cores": 2}})) == declared_category(ti(None)) == ""
    assert declared_category(ti({"agora": {"category": 7}})) == ""  # the DAG's parse refuses it first


def test_a_mapped_instance_is_recorded_on_its_own_planned_machine_else_the_overflow() -> None:
    from types import SimpleNamespace

    from agora_optimizer.traces.listener import _planned

    config = {
        "agora": {
            "placement": {"resource": "big", "machine": "", "plan_version": "v1", "source": "overflow"},
            "instances": {
                "0": {"machine": "small#0", "plan_version": "v1"},
                "1": {"machine": "big#1", "plan_version": "v1"},
            },
        }
    }

    def ti(map_index: int) -> SimpleNamespace:
        return SimpleNamespace(task=SimpleNamespace(executor_config=config), map_index=map_index)

    assert _planned(ti(0)) == {"machine": "small#0", "plan_version": "v1"}
    assert _planned(ti(1)) == {"machine": "big#1", "plan_version": "v1"}
    assert _planned(ti(7)) == {"machine": "", "plan_version": "v1"}  # beyond the planned width

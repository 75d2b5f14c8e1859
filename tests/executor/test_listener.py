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

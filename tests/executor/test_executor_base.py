"""The executor's parts (executor/executor_base.py): every call one part declares for the others is defined by one."""

from __future__ import annotations

import inspect


def test_every_call_the_base_declares_is_defined_by_a_part_of_the_executor() -> None:
    from agora_optimizer.executor.agora_executor import AgoraExecutor
    from agora_optimizer.executor.executor_base import ExecutorBase

    declared = [
        name
        for name, member in vars(ExecutorBase).items()
        if inspect.isfunction(member) and "raise NotImplementedError" in inspect.getsource(member)
    ]
    assert declared, "the base declares the calls its parts make on each other"
    for name in declared:
        owner = next(cls for cls in AgoraExecutor.__mro__ if name in vars(cls))
        assert owner is not ExecutorBase, f"{name} is declared in ExecutorBase but no part of AgoraExecutor defines it"


def test_the_executor_keeps_its_import_path_and_airflows_calls() -> None:
    from airflow.executors.base_executor import BaseExecutor

    from agora_optimizer.executor import agora_executor

    executor = agora_executor.AgoraExecutor
    assert executor.__module__ == "agora_optimizer.executor.agora_executor"  # [core] executor names this path
    for call in ("start", "sync", "end", "terminate", "revoke_task", "try_adopt_task_instances", "_process_workloads"):
        assert getattr(executor, call) is not getattr(BaseExecutor, call), call

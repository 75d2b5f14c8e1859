"""The executor's shape (issue 33): parts composed, not inherited; tests that use the parts' public names only.

``AgoraExecutor`` was one class spread over six mixins sharing ``ExecutorBase``'s tables, calling each other
through ``NotImplementedError`` stubs; tests reached into its private attributes some 80 times. These checks
keep both from coming back.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import agora_optimizer.executor

TESTS = Path(__file__).resolve().parents[1]
PRIVATE_REACH = re.compile(r"executor\.(_[A-Za-z]\w*)")  # any executor's private attribute (a dunder is not one)


def project_ancestors(cls: type) -> list[type]:
    """The project classes ``cls`` inherits from, directly or not."""
    return [base for base in cls.__mro__[1:] if base.__module__.startswith("agora_optimizer.")]


def executor_classes() -> list[type]:
    """Every class defined in the executor's modules, the backends' included, but for errors (one small
    hierarchy each, as style.md wants)."""
    found = []
    package = agora_optimizer.executor
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        if info.name.endswith(".__main__"):
            continue
        module = importlib.import_module(info.name)
        found += [
            cls
            for cls in vars(module).values()
            if inspect.isclass(cls) and cls.__module__ == module.__name__ and not issubclass(cls, BaseException)
        ]
    return found


def test_no_class_of_the_executor_inherits_from_more_than_one_project_class() -> None:
    classes = executor_classes()
    assert any(cls.__name__ == "AgoraExecutor" for cls in classes) and len(classes) > 50
    several = {f"{cls.__module__}.{cls.__name__}": project_ancestors(cls) for cls in classes}
    assert {name: bases for name, bases in several.items() if len(bases) > 1} == {}


def test_the_check_sees_a_class_made_of_parts_by_inheritance() -> None:
    from agora_optimizer.executor.jobs.table import JobTable
    from agora_optimizer.executor.runs.leases import OpenLeases

    class Mixed(JobTable, OpenLeases):  # what AgoraExecutor(Adoption, PlannedRuns, ...) was
        pass

    assert project_ancestors(Mixed) == [JobTable, OpenLeases]


def test_no_test_reaches_into_an_executors_private_attributes() -> None:
    reaches = {
        f"{path.relative_to(TESTS)}:{number}: {match.group(0)}"
        for path in TESTS.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in PRIVATE_REACH.finditer(line)
    }
    assert reaches == set()
    assert PRIVATE_REACH.search("aws_executor" + "._jobs[key]") and not PRIVATE_REACH.search("executor.__module__")


def test_the_executor_keeps_its_import_path_and_airflows_calls() -> None:
    from airflow.executors.base_executor import BaseExecutor

    from agora_optimizer.executor import agora_executor

    cls = agora_executor.AgoraExecutor
    assert cls.__module__ == "agora_optimizer.executor.agora_executor"  # [core] executor names this path
    for call in ("start", "sync", "end", "terminate", "revoke_task", "try_adopt_task_instances", "_process_workloads"):
        assert getattr(cls, call) is not getattr(BaseExecutor, call), call

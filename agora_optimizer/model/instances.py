"""The names of a mapped task's instances in a workflow and a plan: ``task_id[map_index]``.

Airflow expands a mapped task (``.expand()``, or any task of a mapped task group) into task
instances told apart by their ``map_index`` (0, 1, ...); an unmapped task has ``map_index`` -1.
agora plans each expected instance as a task of its own, named as Airflow's UI names it, so a
plan stays a plain list of tasks that anyone can check from the spec alone.
"""

from __future__ import annotations

import re

_INSTANCE = re.compile(r"^(?P<task>.+)\[(?P<index>0|[1-9]\d*)\]$")


def instance_id(task_id: str, map_index: int) -> str:
    """The plan's name of one task instance: ``load[3]``, or the task id itself when unmapped (``map_index`` < 0)."""
    return f"{task_id}[{map_index}]" if map_index >= 0 else task_id


def split_instance(name: str) -> tuple[str, int]:
    """``load[3]`` -> ``("load", 3)``; a name without an index -> ``(name, -1)``."""
    found = _INSTANCE.match(name)
    if found is None:
        return name, -1
    return found["task"], int(found["index"])

"""Workflows: tasks, the edges between them, and the DAG's derived structure.

Section 1 of ``docs/spec/agora-model.md``. No I/O and no Airflow here.
"""

from __future__ import annotations

import heapq
import math
import re
import reprlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal, TypeVar

from agora_optimizer.errors import CyclicWorkflowError, FieldError
from agora_optimizer.model.limits import MAX_CORES, MAX_GPUS, MAX_MEMORY_BYTES, MAX_RUNTIME_S

MemorySource = Literal["recorded", "category-median", "default", "predicted", "declared"]
Node = TypeVar("Node")

_ID_SUFFIX = re.compile(r"(_ID\d+|_\d+)$")


_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = _SHORT_REPR.maxlong = 80
_SHORT_REPR.maxlist = _SHORT_REPR.maxdict = 4
_SHORT_REPR.maxlevel = 2


def shown(value: object) -> str:
    """``repr(value)`` cut short: an error message quotes the bad value, not a whole document."""
    return _SHORT_REPR.repr(value)


def category_of(name: str) -> str:
    """The category a task belongs to, derived from its name.

    ``mProject_ID0000001`` -> ``mProject``; ``NFCORE_X.X.PREPARE_GENOME.BWA_INDEX_5``
    -> ``BWA_INDEX``. Used where the source records no category.
    """
    base = _ID_SUFFIX.sub("", name) or name
    return base.rsplit(".", 1)[-1] or base


def check_number(
    source: str,
    field_path: str,
    value: object,
    *,
    minimum: float = 0.0,
    maximum: float = math.inf,
    integer: bool = False,
    strictly_positive: bool = False,
) -> float:
    """Return ``value`` as a number, or raise a ``FieldError`` that names the field."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FieldError(source, field_path, f"expected a number, got {shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):  # ints are finite, however large
        raise FieldError(source, field_path, f"expected a finite number, got {shown(value)}")
    if integer and value != int(value):
        raise FieldError(source, field_path, f"expected a whole number, got {shown(value)}")
    if strictly_positive and value <= 0:
        raise FieldError(source, field_path, f"must be > 0, got {shown(value)}")
    if value < minimum:
        raise FieldError(source, field_path, f"must be >= {minimum:g}, got {shown(value)}")
    if value > maximum:
        raise FieldError(source, field_path, f"must be <= {maximum:g}, got {shown(value)} (absurd)")
    return value


@dataclass(frozen=True)
class Task:
    """One task of a workflow, with its needs on a reference core of speed 1.0."""

    id: str
    runtime_s: float
    cores: int
    memory_bytes: int
    category: str
    memory_source: MemorySource = "recorded"
    # Not a workflow-file field (files neither read nor write it): a planning input, like a type's
    # ``release_s``. The task starts no earlier than this, e.g. after an Airflow sensor's predicted
    # wait (:mod:`agora_optimizer.integration.waits`). A plan that honours it is still a plan of the
    # spec's (releases only delay), so the spec's checker needs no word of it.
    release_s: float = 0.0
    # Accelerators the task holds while it runs (section 5 of the spec); 0: none.
    gpus: int = 0


@dataclass(frozen=True)
class Edge:
    """``parent`` must finish (and send ``bytes`` across machines) before ``child`` starts."""

    parent: str
    child: str
    bytes: int = 0


def parents_first(
    waiting: Mapping[Node, int], children: Callable[[Node], Iterable[Node]], key: Callable[[Node], Any]
) -> list[Node]:
    """Nodes parents first, of those ready the one of least ``key`` first (Kahn's algorithm on a heap).

    ``waiting``: each node with how many of its parents are among the nodes; a child not in it is
    ignored. Nodes on a cycle (and after one) are left out: fewer nodes come back.
    """
    left = dict(waiting)
    ready = [(key(node), node) for node, count in left.items() if count == 0]
    heapq.heapify(ready)
    order: list[Node] = []
    while ready:
        _, node = heapq.heappop(ready)
        order.append(node)
        for child in children(node):
            if child in left:
                left[child] -= 1
                if left[child] == 0:
                    heapq.heappush(ready, (key(child), child))
    return order


@dataclass(frozen=True)
class Workflow:
    """A DAG of tasks. Build it with :meth:`create`, which checks it is one."""

    name: str
    tasks: tuple[Task, ...]
    edges: tuple[Edge, ...]
    source: str = field(default="<memory>", compare=False)

    @classmethod
    def create(
        cls,
        name: str,
        tasks: list[Task] | tuple[Task, ...],
        edges: list[Edge] | tuple[Edge, ...],
        source: str = "<memory>",
    ) -> Workflow:
        """Check ids, numbers and acyclicity, then build the workflow."""
        seen: set[str] = set()
        for index, task in enumerate(tasks):
            if not isinstance(task.id, str) or not task.id:
                raise FieldError(source, f"tasks[{index}].id", f"expected a non-empty string, got {shown(task.id)}")
            where = f"tasks[{task.id}]"
            if task.id in seen:
                raise FieldError(source, where, "duplicate task id")
            if not isinstance(task.category, str):
                raise FieldError(source, f"{where}.category", f"expected a string, got {shown(task.category)}")
            seen.add(task.id)
            check_number(source, f"{where}.runtime_s", task.runtime_s, maximum=MAX_RUNTIME_S)
            check_number(source, f"{where}.cores", task.cores, minimum=1, maximum=MAX_CORES, integer=True)
            check_number(source, f"{where}.memory_bytes", task.memory_bytes, maximum=MAX_MEMORY_BYTES, integer=True)
            check_number(source, f"{where}.release_s", task.release_s, maximum=MAX_RUNTIME_S)
            check_number(source, f"{where}.gpus", task.gpus, maximum=MAX_GPUS, integer=True)
        merged: dict[tuple[str, str], int] = {}
        for edge in edges:
            for end in (edge.parent, edge.child):
                if end not in seen:
                    raise FieldError(source, f"edges[{edge.parent}->{edge.child}]", f"unknown task {shown(end)}")
            if edge.parent == edge.child:
                raise CyclicWorkflowError(name, [edge.parent])
            check_number(source, f"edges[{edge.parent}->{edge.child}].bytes", edge.bytes, maximum=2**60, integer=True)
            key = (edge.parent, edge.child)
            merged[key] = max(merged.get(key, 0), edge.bytes)
        workflow = cls(
            name=name,
            tasks=tuple(tasks),
            edges=tuple(Edge(p, c, b) for (p, c), b in merged.items()),
            source=source,
        )
        workflow.topological_order  # noqa: B018 - raises CyclicWorkflowError on a cycle
        return workflow

    @cached_property
    def by_id(self) -> dict[str, Task]:
        return {task.id: task for task in self.tasks}

    @cached_property
    def uses_gpus(self) -> bool:
        """Whether some task needs a GPU (engines that cannot pack GPUs decline such a workflow)."""
        return any(task.gpus for task in self.tasks)

    @cached_property
    def parents(self) -> dict[str, list[Edge]]:
        result: dict[str, list[Edge]] = {task.id: [] for task in self.tasks}
        for edge in self.edges:
            result[edge.child].append(edge)
        return result

    @cached_property
    def children(self) -> dict[str, list[Edge]]:
        result: dict[str, list[Edge]] = {task.id: [] for task in self.tasks}
        for edge in self.edges:
            result[edge.parent].append(edge)
        return result

    @cached_property
    def topological_order(self) -> tuple[str, ...]:
        """Task ids, parents first (Kahn's algorithm, ties by file order)."""
        position = {task.id: i for i, task in enumerate(self.tasks)}
        order = parents_first(
            {task.id: len(self.parents[task.id]) for task in self.tasks},
            lambda task_id: (edge.child for edge in self.children[task_id]),
            position.__getitem__,
        )
        if len(order) != len(self.tasks):
            raise CyclicWorkflowError(self.name, self._find_cycle(set(self.by_id) - set(order)))
        return tuple(order)

    def _find_cycle(self, remaining: set[str]) -> list[str]:
        """One cycle among the tasks that Kahn's algorithm could not order."""
        start = min(remaining)
        path: list[str] = []
        on_path: dict[str, int] = {}
        node = start
        while node not in on_path:
            on_path[node] = len(path)
            path.append(node)
            node = min(e.parent for e in self.parents[node] if e.parent in remaining)
        return path[on_path[node] :][::-1]

"""The workflow as integer arrays, fast enough for 30,000 tasks, and the topological orders the
partitioning cuts."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agora_optimizer.model.workflow import Workflow


class TaskGraph:
    """A workflow as integer-indexed arrays, with a depth-first topological order.

    ``parents[v]`` and ``children[v]`` hold ``(task, bytes)`` pairs; ``order`` is a
    topological order that follows chains depth-first (Kahn's algorithm with a stack), so
    that cutting it into contiguous pieces keeps chains together, as dagP's
    topological-order-based initial partitioning does.
    """

    __slots__ = (
        "children",
        "cores",
        "ids",
        "memory",
        "order",
        "parents",
        "position",
        "release",
        "runtime",
        "scratch",
        "weight",
    )

    def __init__(
        self,
        ids: Sequence[str],
        runtime: Sequence[float],
        cores: Sequence[int],
        memory: Sequence[int],
        edges: Iterable[tuple[int, int, int]],
        release: Sequence[float] | None = None,
    ) -> None:
        n = len(ids)
        self.ids = list(ids)
        self.release = [float(r) for r in release] if release is not None else [0.0] * n  # each task's release_s
        self.runtime = [float(r) for r in runtime]
        self.cores = list(cores)
        self.memory = list(memory)
        self.parents: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        self.children: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for parent, child, nbytes in edges:
            self.parents[child].append((parent, nbytes))
            self.children[parent].append((child, nbytes))
        self.order = depth_first_order(self.parents, self.children)
        self.position = [0] * n
        for index, v in enumerate(self.order):
            self.position[v] = index
        work = [r * c for r, c in zip(self.runtime, self.cores, strict=True)]
        floor = (sum(work) / n if n else 0.0) * 0.01 or 1.0
        self.weight = [w + floor for w in work]  # a zero-runtime task still weighs a little
        self.scratch = [-1] * n  # per-task working space; whoever sets entries resets them to -1

    @classmethod
    def from_workflow(cls, workflow: Workflow) -> TaskGraph:
        index = {task.id: i for i, task in enumerate(workflow.tasks)}
        return cls(
            [t.id for t in workflow.tasks],
            [t.runtime_s for t in workflow.tasks],
            [t.cores for t in workflow.tasks],
            [t.memory_bytes for t in workflow.tasks],
            ((index[e.parent], index[e.child], e.bytes) for e in workflow.edges),
            [t.release_s for t in workflow.tasks],
        )

    @property
    def n(self) -> int:
        return len(self.ids)


def depth_first_order(parents: list[list[tuple[int, int]]], children: list[list[tuple[int, int]]]) -> list[int]:
    """A topological order that finishes a chain before it starts the next (ready tasks on a stack)."""
    indegree = [len(p) for p in parents]
    stack = [v for v in reversed(range(len(parents))) if indegree[v] == 0]
    order: list[int] = []
    while stack:
        v = stack.pop()
        order.append(v)
        for child, _ in reversed(children[v]):
            indegree[child] -= 1
            if indegree[child] == 0:
                stack.append(child)
    if len(order) != len(parents):
        raise ValueError("the task graph has a cycle")
    return order


def grouped_order(graph: TaskGraph, labels: Sequence[int]) -> list[int]:
    """A depth-first topological order that stays on one label while a task of it is ready.

    With ``labels`` = the set of processor types a task fits, contiguous pieces of this order
    mostly hold tasks that fit the same processors (the heterogeneity-aware partition).
    """
    n = graph.n
    indegree = [len(p) for p in graph.parents]
    emitted = [False] * n
    per_label: dict[int, list[int]] = {}
    recent: list[int] = []

    def push(v: int) -> None:
        per_label.setdefault(labels[v], []).append(v)
        recent.append(v)

    for v in reversed(range(n)):
        if indegree[v] == 0:
            push(v)
    order: list[int] = []
    current = -1
    while len(order) < n:
        same = per_label.get(current, [])
        while same and emitted[same[-1]]:
            same.pop()
        if same:
            v = same.pop()
        else:
            while emitted[recent[-1]]:
                recent.pop()
            v = recent.pop()
            current = labels[v]
        emitted[v] = True
        order.append(v)
        for child, _ in reversed(graph.children[v]):
            indegree[child] -= 1
            if indegree[child] == 0:
                push(child)
    return order

from __future__ import annotations

import math

import pytest

from agora_optimizer.errors import CyclicWorkflowError, FieldError
from agora_optimizer.model import Edge, Task, Workflow, category_of


def _task(task_id: str, runtime_s: float = 1.0) -> Task:
    return Task(task_id, runtime_s, 1, 1000, category_of(task_id))


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("mProject_ID0000001", "mProject"),
        ("split_fasta_ID000001", "split_fasta"),
        ("NFCORE_ATACSEQ.ATACSEQ.PREPARE_GENOME.BWA_INDEX_5", "BWA_INDEX"),
        ("plain", "plain"),
    ],
)
def test_category_is_derived_from_the_task_name(name: str, category: str) -> None:
    assert category_of(name) == category


def test_topological_order_puts_parents_first() -> None:
    edges = [Edge("a", "c"), Edge("b", "c"), Edge("c", "d"), Edge("a", "d")]
    workflow = Workflow.create("w", [_task(t) for t in "dcba"], edges)
    order = workflow.topological_order
    for edge in edges:
        assert order.index(edge.parent) < order.index(edge.child)


def test_a_cycle_is_named() -> None:
    tasks = [_task(t) for t in ("entry", "p", "q", "r", "exit")]
    edges = [Edge("entry", "p"), Edge("p", "q"), Edge("q", "r"), Edge("r", "p"), Edge("r", "exit")]
    with pytest.raises(CyclicWorkflowError) as caught:
        Workflow.create("loopy", tasks, edges)
    assert sorted(caught.value.cycle) == ["p", "q", "r"]
    assert "loopy" in str(caught.value)
    cycle = caught.value.cycle
    for parent, child in zip(cycle, cycle[1:] + cycle[:1], strict=True):
        assert Edge(parent, child) in edges


def test_self_loop_is_a_cycle() -> None:
    with pytest.raises(CyclicWorkflowError, match="a -> a"):
        Workflow.create("w", [_task("a")], [Edge("a", "a")])


def test_duplicate_ids_and_unknown_edge_ends_are_named() -> None:
    with pytest.raises(FieldError, match=r"tasks\[a\].*duplicate"):
        Workflow.create("w", [_task("a"), _task("a")], [])
    with pytest.raises(FieldError, match="unknown task 'ghost'"):
        Workflow.create("w", [_task("a")], [Edge("a", "ghost")])


@pytest.mark.parametrize("bad", [["x"] * 1000, 7, None, {"a": 1}], ids=lambda v: type(v).__name__)
def test_ids_and_categories_must_be_strings_and_are_quoted_short(bad: object) -> None:
    """What a loader let through is refused here, naming the field, never turned into text by str()."""
    with pytest.raises(FieldError, match=r"w\.json: field 'tasks\[a\]\.category': expected a string, got") as caught:
        Workflow.create("w", [Task("a", 1.0, 1, 1000, bad)], [], source="w.json")  # type: ignore[arg-type]
    assert len(str(caught.value)) < 200
    with pytest.raises(FieldError, match=r"w\.json: field 'tasks\[1\]\.id': expected a non-empty string, got"):
        Workflow.create("w", [_task("a"), Task(bad, 1.0, 1, 1000, "c")], [], source="w.json")  # type: ignore[arg-type]
    with pytest.raises(FieldError, match=r"field 'tasks\[0\]\.id': expected a non-empty string, got ''"):
        Workflow.create("w", [Task("", 1.0, 1, 1000, "c")], [], source="w.json")


@pytest.mark.parametrize("runtime", [-1.0, math.nan, math.inf, 1e12])
def test_absurd_runtimes_are_refused(runtime: float) -> None:
    with pytest.raises(FieldError, match="runtime_s"):
        Workflow.create("w", [_task("a", runtime)], [])


def test_parallel_edges_merge_keeping_the_larger_transfer() -> None:
    workflow = Workflow.create("w", [_task("a"), _task("b")], [Edge("a", "b", 5), Edge("a", "b", 9)])
    assert workflow.edges == (Edge("a", "b", 9),)


def test_gpus_default_to_none_and_are_checked() -> None:
    plain = Workflow.create("w", [_task("a")], [])
    assert plain.tasks[0].gpus == 0 and not plain.uses_gpus
    assert Workflow.create("w", [_task("a"), Task("g", 1.0, 1, 1, "g", gpus=2)], []).uses_gpus
    for bad in (-1, 1.5, 10**6):
        with pytest.raises(FieldError, match=r"tasks\[g\]\.gpus"):
            Workflow.create("w", [Task("g", 1.0, 1, 1, "g", gpus=bad)], [])  # type: ignore[arg-type]

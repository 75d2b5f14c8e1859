"""Machine slots: the skipping timeline answers exactly as the plain one, and slots respect counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.arrivals import Arrivals
from agora_optimizer.planning.slots import SlotChoice, SlotPool, widest_level
from agora_optimizer.planning.timeline import MachineTimeline, SkippingTimeline
from tests.engines.plan_checks import edge, processor, task

VCPUS, MEMORY = 4, 16
TASKS = st.tuples(
    st.integers(0, 40).map(float),  # ready
    st.integers(0, 12).map(float),  # duration
    st.integers(1, VCPUS),  # cores
    st.integers(2, MEMORY),  # memory
)


@pytest.mark.slow  # 300 examples
@settings(max_examples=300, deadline=None)
@given(st.lists(TASKS, min_size=1, max_size=30))
def test_skipping_timeline_places_tasks_where_the_plain_one_does(tasks: list[tuple[float, float, int, int]]) -> None:
    plain, skipping = MachineTimeline(VCPUS, MEMORY), SkippingTimeline(VCPUS, MEMORY, min_task_memory_bytes=2)
    for ready, duration, cores, memory in tasks:
        start = plain.earliest_start(ready, duration, cores, memory)
        assert skipping.earliest_start(ready, duration, cores, memory) == start
        plain.add(start, start + duration, cores, memory)
        skipping.add(start, start + duration, cores, memory)
    assert skipping.times == plain.times and skipping.cores == plain.cores


def test_open_times_skip_a_packed_machine() -> None:
    timeline = SkippingTimeline(1, 8, min_task_memory_bytes=1)
    for k in range(100):
        timeline.add(float(k), float(k + 1), 1, 1)
    assert timeline.open_times == [100.0]
    assert timeline.earliest_start(0.0, 5.0, 1, 1) == 100.0


def test_pool_offers_used_slots_and_one_fresh_slot_up_to_the_count() -> None:
    duo = processor("duo", 1.0, count=2)
    pool = SlotPool(Catalog((duo,), 1e6), unlimited_slots=8)
    first = pool.candidates(duo)
    assert [s.id for s in first] == ["duo#0"]
    pool.occupy(task("a", 1), SlotChoice(first[0], 0.0, 1.0))
    second = pool.candidates(duo)
    assert [s.id for s in second] == ["duo#0", "duo#1"]
    pool.occupy(task("b", 1), SlotChoice(second[1], 0.0, 1.0))
    assert [s.id for s in pool.candidates(duo)] == ["duo#0", "duo#1"]


def test_arrivals_are_free_from_the_same_slot() -> None:
    duo = processor("duo", 1.0, count=2)
    pool = SlotPool(Catalog((duo,), 1e6), unlimited_slots=8)
    one = pool.candidates(duo)[0]
    pool.occupy(task("a", 1), SlotChoice(one, 0.0, 10.0))
    other = pool.candidates(duo)[1]
    arrivals = Arrivals([(one, 10.0, 5.0)])
    assert arrivals.on(one) == 10.0 and arrivals.on(other) == 15.0


def test_widest_level() -> None:
    workflow = Workflow.create(
        "w", [task(n, 1) for n in "abcde"], [edge("a", "b", 0), edge("a", "c", 0), edge("a", "d", 0), edge("b", "e", 0)]
    )
    assert widest_level(workflow) == 3

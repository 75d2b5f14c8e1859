from __future__ import annotations

import pytest

from agora_optimizer.model.catalog import GIB
from agora_optimizer.planning.timeline import MachineTimeline, SkippingTimeline


def test_tasks_share_a_machine_while_cores_and_memory_allow() -> None:
    timeline = MachineTimeline(vcpus=2, memory_bytes=100)
    timeline.add(0.0, 10.0, 1, 60)
    assert timeline.earliest_start(0.0, 5.0, 1, 40) == 0.0  # fits beside it
    assert timeline.earliest_start(0.0, 5.0, 1, 41) == 10.0  # memory would overflow
    assert timeline.earliest_start(0.0, 5.0, 2, 1) == 10.0  # cores would overflow


def test_insertion_finds_a_gap_long_enough() -> None:
    timeline = MachineTimeline(vcpus=1, memory_bytes=10)
    timeline.add(0.0, 4.0, 1, 1)
    timeline.add(6.0, 9.0, 1, 1)
    timeline.add(12.0, 20.0, 1, 1)
    assert timeline.earliest_start(0.0, 2.0, 1, 1) == 4.0
    assert timeline.earliest_start(0.0, 3.0, 1, 1) == 9.0
    assert timeline.earliest_start(0.0, 4.0, 1, 1) == 20.0
    assert timeline.earliest_start(5.0, 0.0, 1, 1) == 5.0  # zero-length occupies nothing


def test_gpus_are_a_third_capacity() -> None:
    timeline = MachineTimeline(vcpus=8, memory_bytes=100, gpus=2)
    timeline.add(0.0, 10.0, 1, 10, 1)
    assert timeline.earliest_start(0.0, 5.0, 1, 10, 1) == 0.0  # the second GPU is free
    timeline.add(0.0, 10.0, 1, 10, 1)
    assert timeline.earliest_start(0.0, 5.0, 1, 10, 1) == 10.0  # both taken: a third waits
    assert timeline.earliest_start(0.0, 5.0, 1, 10) == 0.0  # a task without GPUs does not


@pytest.mark.parametrize("kind", [MachineTimeline, SkippingTimeline])
def test_a_gpu_task_waits_for_gpus_through_stretches_open_to_cpu_tasks(kind: type[MachineTimeline]) -> None:
    timeline = SkippingTimeline(4, 100, 1, gpus=1) if kind is SkippingTimeline else MachineTimeline(4, 100, gpus=1)
    timeline.add(0.0, 3.0, 1, 10, 1)
    timeline.add(3.0, 6.0, 1, 10, 1)
    timeline.add(8.0, 9.0, 1, 10, 1)
    timeline.add(0.0, 20.0, 4 - 1 - 1, 10)  # cores left for one more task all along
    assert timeline.earliest_start(0.0, 2.0, 1, 10, 1) == 6.0  # the GPU's first gap long enough
    assert timeline.earliest_start(0.0, 3.0, 1, 10, 1) == 9.0
    assert timeline.earliest_start(0.0, 3.0, 1, 10) == 0.0


def test_latest_start_finds_the_last_gap_that_holds_the_run() -> None:
    timeline = MachineTimeline(2, 4 * GIB)
    timeline.add(0.0, 100.0, 2, GIB)  # full
    timeline.add(150.0, 200.0, 1, 3 * GIB)  # half the cores, too little memory for 2 GiB more
    assert timeline.latest_start(0.0, 300.0, 50.0, 1, 2 * GIB) == pytest.approx(250.0)
    assert timeline.latest_start(0.0, 190.0, 40.0, 1, 2 * GIB) == pytest.approx(110.0)  # before the second
    assert timeline.latest_start(0.0, 190.0, 40.0, 1, GIB // 2) == pytest.approx(150.0)  # beside it
    assert timeline.latest_start(120.0, 190.0, 40.0, 1, 2 * GIB) is None  # no gap of 40 s from 120 s

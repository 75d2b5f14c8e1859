from __future__ import annotations

from agora_optimizer.planning.timeline import MachineTimeline


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

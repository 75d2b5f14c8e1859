"""What lets a machine that opens on time open early (docs/running-plans.md), shared by the executor and replays."""

from __future__ import annotations

from agora_optimizer.planning.leases import opening_before, outside_parents


def test_outside_parents_are_the_parents_on_other_machines() -> None:
    parents = {"b": ["a"], "c": ["b", "x"], "d": []}
    assert outside_parents(["b", "c"], parents) == {"a", "x"}  # b, c's parent, is on the machine itself
    assert outside_parents(["d"], parents) == set()
    assert outside_parents(["unknown"], parents) == set()


def test_machines_opening_before_are_of_the_same_type_and_planned_sooner() -> None:
    openings = {"m#0": ("m", 0.0), "m#1": ("m", 10.0), "m#2": ("m", 20.0), "n#0": ("n", 5.0), "m#3": ("m", 20.0)}
    assert opening_before("m#2", openings) == ["m#0", "m#1"]  # m#3, planned at the same time, is not before it
    assert opening_before("m#0", openings) == []
    assert opening_before("n#0", openings) == []

"""The window bound's helpers (the bound itself is tested against exact optima in tests/planning/test_bounds.py)."""

from __future__ import annotations

from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.workflow import Task
from agora_optimizer.planning.window_bound import timing_types


def _type(name: str, speed: float, boot_s: float = 0.0, price: float = 1.0) -> Resource:
    return Resource(name, "aws", vcpus=4, memory_gib=8, speed=speed, price_per_hour_usd=price, boot_s=boot_s)


def test_types_alike_in_start_speed_and_latency_are_one_and_every_least_end_is_the_same() -> None:
    small, large, fast, booting = _type("s", 1.0), _type("l", 1.0, price=2.0), _type("f", 2.0), _type("b", 2.0, 30.0)
    options = {"a": [small, large, fast, booting], "b": [large, fast]}
    timing = timing_types(options)
    assert timing["a"] == [small, fast, booting]  # large runs and starts as small does: the first one stands for both
    assert timing["b"] == [large, fast]
    task = Task(id="a", runtime_s=100.0, cores=1, memory_bytes=1, category="c", release_s=5.0)
    for ready in (0.0, 10.0, 40.0):
        ends = [max(ready, r.earliest_start_of(task)) + r.runtime_s(task) for r in options["a"]]
        assert min(ends) == min(max(ready, r.earliest_start_of(task)) + r.runtime_s(task) for r in timing["a"])

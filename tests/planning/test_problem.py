"""The problem's bounds: under a deadline the cost bound is the larger of the packed-work and the bucket bounds."""

from __future__ import annotations

import pytest

from agora_optimizer.model import Catalog, Edge, Objective, Resource, Task, Workflow
from agora_optimizer.planning.bounds import cost_lower_bound_usd
from agora_optimizer.planning.problem import Problem, lower_bounds

PER_HOUR = 3600.0  # a price of 3,600 USD an hour is 1 USD a second


def _chain() -> tuple[Workflow, Catalog]:
    """a -> b, 10 reference seconds each; by 12 s neither can run on the slow type."""
    tasks = [Task("a", 10.0, 1, 1, "t"), Task("b", 10.0, 1, 1, "t")]
    slow = Resource("slow", "local", vcpus=1, memory_gib=1, speed=1.0, price_per_hour_usd=PER_HOUR, count=1)
    fast = Resource("fast", "local", vcpus=1, memory_gib=1, speed=2.0, price_per_hour_usd=3 * PER_HOUR, count=1)
    return Workflow.create("w", tasks, [Edge("a", "b")]), Catalog((slow, fast), 1e9)


def test_a_deadline_that_only_the_fast_type_meets_raises_the_cost_bound_to_the_fast_types_cost() -> None:
    workflow, catalog = _chain()
    assert cost_lower_bound_usd(workflow, catalog, 12.0) == pytest.approx(24.0, rel=1e-6)
    problem = Problem.create(workflow, catalog, Objective(kind="cost", deadline_s=12.0))
    assert problem.bounds.cost_usd == pytest.approx(30.0, rel=1e-6)  # a and b on fast: 10 s at 3 USD a second


def test_without_its_time_share_the_bucket_bound_leaves_the_packed_work_bound() -> None:
    workflow, catalog = _chain()
    assert lower_bounds(workflow, catalog, 12.0, windowed_s=0.0).cost_usd == pytest.approx(24.0, rel=1e-6)
    assert lower_bounds(workflow, catalog, 12.0, windowed_s=None).cost_usd == pytest.approx(30.0, rel=1e-6)
    assert lower_bounds(workflow, catalog).cost_usd == cost_lower_bound_usd(workflow, catalog)  # no deadline

"""The learning loop's pieces that need no plan: which instances are held out, memory against reservations."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agora_optimizer.errors import AgoraError
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.predict.learning_loop import family_of, held_out_instances, memory_over_reservation

GIB = 2**30


def test_every_instance_of_a_family_of_two_or_more_is_held_out_and_no_other() -> None:
    files = [Path(f"/x/{name}.json") for name in ("blast-a-001", "blast-b-002", "bacass-dirt02-001", "bwa-s-001")]
    assert family_of(files[0]) == "blast"
    assert [p.stem for p in held_out_instances(files)] == ["blast-a-001", "blast-b-002"]
    assert [p.stem for p in held_out_instances(files, ["bacass-dirt02-001"])] == ["bacass-dirt02-001"]  # as named
    with pytest.raises(AgoraError, match="no instance nope-001 among the 4 training files"):
        held_out_instances(files, ["nope-001"])


def test_memory_over_reservation_counts_tasks_with_a_recorded_peak_only() -> None:
    tasks = [
        Task("a", 1.0, 1, 2 * GIB, "c"),  # peak 2 GiB, 1 GiB reserved: over
        Task("b", 1.0, 1, GIB, "c"),  # 4 GiB reserved for 1 GiB
        Task("c", 1.0, 1, GIB, "c", memory_source="default"),  # no recorded peak: not counted
    ]
    workflow = Workflow.create("w", tasks, [])
    ran = [Assignment(t, "r", "r#0", 0.0, 1.0, 1, memory) for t, memory in (("a", GIB), ("b", 4 * GIB), ("c", 1))]
    assert memory_over_reservation(ran, workflow) == {
        "memory_tasks": 2,
        "tasks_over_reservation": 1,
        "memory_retries": 0,
        "median_reservation_over_peak": pytest.approx((0.5 + 4.0) / 2),
    }
    # b's first attempt, at 0.5 GiB, and a's second, at 1.5 GiB, were killed: both first attempts were over, and
    # the reservation that counts is the last attempt's
    retried = [replace(ran[0], memory_bytes=3 * GIB), *ran[1:]]
    killed = [replace(ran[1], memory_bytes=GIB // 2), ran[0], replace(ran[0], memory_bytes=GIB * 3 // 2)]
    assert memory_over_reservation(retried, workflow, killed) == {
        "memory_tasks": 2,
        "tasks_over_reservation": 2,
        "memory_retries": 3,
        "median_reservation_over_peak": pytest.approx((1.5 + 4.0) / 2),
    }


def test_the_scale_is_the_replay_dags_clamped_runtime_and_capped_memory_plus_the_process() -> None:
    from agora_optimizer.predict.learning_loop import Scale
    from agora_optimizer.traces.records import TaskAttempt

    scale = Scale(time_s=0.02, min_runtime_s=5.0, max_runtime_s=60.0, memory=0.25, max_memory_bytes=GIB // 4,
                  process_bytes=100)  # fmt: skip
    assert [scale.runtime_s(s) for s in (10.0, 1000.0, 10_000.0)] == [5.0, pytest.approx(20.0), 60.0]
    assert scale.memory_bytes(GIB // 2) == GIB // 8 + 100 and scale.memory_bytes(4 * GIB) == GIB // 4 + 100
    attempt = scale.attempt(TaskAttempt("d", "t", "r", runtime_s=1000.0, peak_rss_bytes=None))
    assert attempt.runtime_s == pytest.approx(20.0) and attempt.peak_rss_bytes is None
    workflow = Workflow.create("w", [Task("a", 1000.0, 1, GIB, "c"), Task("b", 1.0, 1, GIB, "c", "default")], [])
    scaled = scale.workflow(workflow)
    assert scaled.by_id["a"].memory_bytes == GIB // 4 + 100 and scaled.by_id["b"].memory_bytes == GIB  # not recorded
    assert Scale().workflow(workflow) is workflow
    assert [scale.clamped(s) for s in (10.0, 1000.0, 10_000.0)] == [True, False, True]  # 5 s and 60 s: the bounds
    assert not Scale().clamped(1e-3)


def test_the_runtime_error_is_scored_on_the_tasks_the_scale_does_not_clamp() -> None:
    """Clamped to the scale's 1 s, predicted and true alike: counted, they made a family's MdAPE 0 % in a real run."""
    from agora_optimizer.model.catalog import Catalog, Resource
    from agora_optimizer.model.plan import Objective
    from agora_optimizer.optimize.optimize import optimize
    from agora_optimizer.predict.learning_loop import LoopPlan, LoopSettings, plan_fields

    truth = Workflow.create(
        "w", [Task(f"t{i}", 1.0, 1, GIB, "c") for i in range(3)] + [Task("long", 4.0, 1, GIB, "c")], []
    )
    guess = Workflow.create(
        "w", [Task(f"t{i}", 1.0, 1, GIB, "c") for i in range(3)] + [Task("long", 2.0, 1, GIB, "c")], []
    )
    catalog = Catalog((Resource("r", "local", 4, 8, 1.0, 0.1),), 1e9, "<test>")
    plan = optimize(guess, catalog, Objective("time"), "<test>", 0.5)
    planned = LoopPlan(guess, truth, 10.0, plan, None, None, {}, scored=frozenset({"long"}))
    assert plan_fields(Path("w-1.json"), planned, LoopSettings())["runtime_mdape"] == pytest.approx(0.5)
    every = LoopPlan(guess, truth, 10.0, plan, None, None, {})
    assert plan_fields(Path("w-1.json"), every, LoopSettings())["runtime_mdape"] == 0.0

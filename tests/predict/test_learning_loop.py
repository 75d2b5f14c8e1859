"""The learning loop's pieces that need no plan: which instances are held out, memory against reservations."""

from __future__ import annotations

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
        "median_reservation_over_peak": pytest.approx((0.5 + 4.0) / 2),
    }

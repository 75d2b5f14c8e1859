"""Job keys: one per attempt, safe as a file and job name, the same after a restart."""

from __future__ import annotations

import re

from agora_optimizer.executor.backends.slurm import JOB_NAME_MAX, job_name
from agora_optimizer.executor.jobs.spec import job_key

LONG_TASK = "extract_" + "x" * 250


def test_try_1_and_try_2_of_a_long_task_id_get_different_keys() -> None:
    assert job_key("etl", LONG_TASK, "manual__1", 1, -1) != job_key("etl", LONG_TASK, "manual__1", 2, -1)


def test_run_ids_that_differ_only_in_an_unsafe_character_get_different_keys() -> None:
    plus = job_key("etl", "load", "manual__2026-11-30T10:00:00+00:00", 1, -1)
    underscore = job_key("etl", "load", "manual__2026-11-30T10:00:00_00:00", 1, -1)
    assert plus != underscore


def test_parts_that_would_join_the_same_way_get_different_keys() -> None:
    assert job_key("a.b", "c", "r", 1, -1) != job_key("a", "b.c", "r", 1, -1)
    assert job_key("d", "t", "r", 1, -1) != job_key("d", "t", "r", 1, 0)  # map index -1 is not 0


def test_a_key_is_a_pure_function_of_the_attempt_and_safe_everywhere() -> None:
    attempts = [
        ("etl.daily", "extract.users", "scheduled__2026-11-30T00:00:00+00:00", 1, 3),
        ("d" * 300, LONG_TASK, "r/../../etc", 12, -1),
        ("dåg", "tâsk", "run id with spaces", 1, -1),
    ]
    for attempt in attempts:
        key = job_key(*attempt)
        assert key == job_key(*attempt)
        assert re.fullmatch(r"[A-Za-z0-9_.-]+", key) and len(key) <= 81
        assert not key.startswith(".")
        # no SLURM name (a job's or a pilot's) has to be cut, so none loses the key's digest
        assert job_name(key) == f"agora-{key}" and len(job_name(f"pilot-{key}")) <= JOB_NAME_MAX
    assert job_key("etl.daily", "extract.users", "r", 2, 3).startswith("etl.daily.extract.users.try2.map3-")

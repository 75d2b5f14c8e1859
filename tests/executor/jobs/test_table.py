"""The executor's job table (executor/jobs/table.py): each job's latest version, shown read only."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import JobSpec, MachineLease
from agora_optimizer.executor.lifecycle import Job, JobState

LEASE = MachineLease("lease-1", "etl", "r1", "small#0", "small", 2, 2**30, 2)


def job(task: str, state: JobState, backend: str = "local", external_id: str = "", on_machine: bool = False) -> Job:
    record = JobRecord("etl", task, "r1", 1, -1, "small", backend, 1, 2**20)
    spec = JobSpec(task, task, "small", 1, 2**20, None, (), Path("/jobs") / task, lease=LEASE if on_machine else None)
    return Job(task, spec, record, state=state, external_id=external_id)


def test_the_table_keeps_each_jobs_latest_version_until_it_is_forgotten_and_shows_it_read_only() -> None:
    from agora_optimizer.executor.jobs.table import JobTable

    table = JobTable()
    view = table.view()
    held = job("a", JobState.HELD, on_machine=True)
    table.keep(held)
    table.keep(job("b", JobState.QUEUED, backend="slurm", external_id="42"))
    assert list(view) == ["a", "b"] and view["a"] is held  # the view follows the table
    with pytest.raises(TypeError):
        view["c"] = held  # type: ignore[index]
    table.keep(replace(held, state=JobState.DONE))  # the lifecycle has just made it done: not stored again
    assert view["a"] is held
    assert [j.key for j in table.in_state(JobState.HELD)] == ["a"]
    assert {name: [j.key for j in jobs] for name, jobs in table.on_backends().items()} == {"slurm": ["b"]}
    assert table.lease_keys() == {"lease-1"} and table.job_dir_names() == {"a", "b"}
    assert table.forget("a") is held and table.forget("a") is None and "a" not in table and len(table) == 1

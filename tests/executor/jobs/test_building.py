"""From a workload to a job (executor/jobs/building.py): the worker's environment, a retry after an OOM kill."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.executor.jobs.spec import job_key
from tests.executor.conftest import RUN_AFTER, TaskInstanceTable
from tests.executor.test_agora_executor import KEY, MIB, executor, placement, workload

__all__ = ["executor"]  # the fixture, imported


def test_a_job_gets_airflows_settings_but_not_the_schedulers_secrets(
    executor: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://airflow:pw@db/airflow",
        "AIRFLOW__API_AUTH__JWT_SECRET": "signs-every-token",
        "AIRFLOW__CORE__FERNET_KEY_CMD": "cat /secret/fernet",
        "AIRFLOW__API__SECRET_KEY": "ui-sessions",
        "AIRFLOW__CORE__SQL_ALCHEMY_CONN": "postgresql://airflow:pw@db/airflow",  # deprecated names Airflow reads
        "AIRFLOW__WEBSERVER__SECRET_KEY": "ui-sessions",
        "AIRFLOW__WEBSERVER__SECRET_KEY_SECRET": "path/in/the/secrets/backend",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", "postgresql+psycopg://agora:pw@db/traces")
    monkeypatch.setenv("AIRFLOW_CONN_WAREHOUSE", "postgresql://task:pw@warehouse/db")  # the tasks' own
    passed = executor.builder.worker_environment()
    assert not set(secrets) & set(passed)
    assert passed["AIRFLOW__AGORA__TRACE_STORE_URL"].endswith("/traces")  # the listener writes the task's row
    assert "AIRFLOW_CONN_WAREHOUSE" in passed and passed["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]


def test_the_variables_task_environment_names_reach_every_task_and_no_others(
    executor: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DAG file that reads MYDAGS_* when parsed finds them in a SLURM job too, which inherits nothing."""
    from dataclasses import replace

    monkeypatch.setenv("MYDAGS_WORKFLOW", "bacass")
    monkeypatch.setenv("MYDAGS_SCALE", "0.02")
    monkeypatch.setenv("DATA_ROOT", "/data")
    monkeypatch.setenv("UNRELATED_TOKEN", "stays home")
    assert "MYDAGS_WORKFLOW" not in executor.builder.worker_environment()  # none by default
    executor.config = replace(executor.config, task_environment=("MYDAGS_*", "DATA_ROOT"))
    passed = executor.builder.worker_environment()
    assert (passed["MYDAGS_WORKFLOW"], passed["MYDAGS_SCALE"], passed["DATA_ROOT"]) == ("bacass", "0.02", "/data")
    assert "UNRELATED_TOKEN" not in passed
    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "signs-every-token")
    executor.config = replace(executor.config, task_environment=("*",))
    assert "AIRFLOW__API_AUTH__JWT_SECRET" not in executor.builder.worker_environment()  # never, whatever it names


@pytest.mark.parametrize(("killed_for_memory", "reserved_mib"), [(True, 384), (False, 256)])
def test_a_retry_after_an_oom_kill_reserves_more_memory_than_the_try_that_died(
    executor: Any, tmp_path: Path, killed_for_memory: bool, reserved_mib: int
) -> None:

    from agora_optimizer.executor.jobs.records import JobRecord
    from agora_optimizer.executor.jobs.spec import JobResult

    first = tmp_path / "jobs" / KEY  # try 1, as the executor left it: its record and the worker's result
    JobRecord(
        dag_id="unit", task_id="t", run_id="r1", try_number=1, map_index=-1, resource="local-small", backend="local",
        cores=1, memory_bytes=256 * MIB,
    ).write(first)  # fmt: skip
    now = datetime.now(UTC)
    JobResult(
        exit_code=137 if killed_for_memory else 1, oom_killed=killed_for_memory, timed_out=False,
        reason="killed: over its memory" if killed_for_memory else "exited with code 1", host="h", started_at=now,
        ended_at=now, peak_rss_bytes=300 * MIB, cpu_time_s=1.0, memory_limit_bytes=256 * MIB,
    ).write(first / "result.json")  # fmt: skip
    item = workload("t", placement(memory_mib=256), tmp_path)
    item = item.model_copy(update={"ti": item.ti.model_copy(update={"try_number": 2})})
    job = executor.builder.job(item)  # what try 2 is submitted with (not submitted here: nothing to clean up)
    assert job.spec.memory_bytes == reserved_mib * MIB
    assert f"--memory-bytes {reserved_mib * MIB} " in " ".join(job.spec.command)  # the worker's limit too
    second = tmp_path / "jobs" / job_key("unit", "t", "r1", 2, -1)
    assert json.loads((second / "job.json").read_text())["memory_bytes"] == reserved_mib * MIB


def test_a_task_of_a_run_with_its_own_plan_runs_on_that_plans_machine_and_says_so_to_the_task(
    executor: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task_instances: TaskInstanceTable
) -> None:
    from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
    from agora_optimizer.plans.store import PlanStore, plan_version

    monkeypatch.setenv("AIRFLOW__AGORA__PLAN_DIR", str(tmp_path / "plans"))  # the plan store the executor reads
    placed = (Assignment("t", "local-large", "local-large#0", 5.0, 10.0, 1, 300 * MIB),)
    solver = SolverInfo("window:joint", "heuristic", None, 0.0)
    own = Plan("unit", "local", Objective(), 10.0, 0.0, placed, solver, "2026-12-01T00:00:00Z")
    store = PlanStore(tmp_path / "plans")
    # the plan of run r1, by its run_after in Airflow's dag_run table (r2: a run the window did not plan)
    version = plan_version(store.save_run("unit", RUN_AFTER, own).path.read_bytes())
    parsed = {**placement("local-small"), "machine": "local-small#0", "plan_version": "parsed", "time_limit_s": 60}
    item = workload("t", parsed, tmp_path)
    job = executor.builder.job(item, write=False)
    assert (job.record.resource, job.record.machine, job.record.plan_version) == (
        "local-large",
        "local-large#0",
        version,
    )
    assert job.record.memory_bytes == 300 * MIB and job.spec.time_limit_s == 60  # the task's own limit
    assert job.spec.lease is not None and job.spec.lease.machine == "local-large#0"  # its run plan's machine order
    told = {k: v for k, v in job.spec.environment.items() if k.startswith("AGORA_")}
    assert told == {
        "AGORA_RESOURCE_TYPE": "local-large", "AGORA_BACKEND": "local", "AGORA_MACHINE": "local-large#0",
        "AGORA_PLAN_VERSION": version,
    }  # fmt: skip
    other = item.model_copy(update={"ti": item.ti.model_copy(update={"run_id": "r2"})})
    job = executor.builder.job(other, write=False)
    assert (job.record.resource, job.record.machine, job.record.plan_version) == (
        "local-small",
        "local-small#0",
        "parsed",
    )


def test_a_resource_not_in_the_catalog_is_quoted_short_on_one_line(executor: Any, tmp_path: Path) -> None:
    from airflow.utils.state import TaskInstanceState

    from agora_optimizer.executor.backends.local.backend import LocalBackend
    from tests.executor.test_agora_executor import Flaky, run_with

    item = workload("t", placement("gpu-" + "x" * 50_000 + "\nsecond line"), tmp_path)
    state, info = run_with(executor, Flaky(LocalBackend({})), [item])[item.ti.key]
    assert state == TaskInstanceState.FAILED and "resource 'gpu-xxx" in info and "is not in [agora] catalog" in info
    assert "\n" not in info and len(info) < 600


def test_a_local_jobs_worker_command_is_the_one_the_local_pools_fork_from_their_warm_server(
    executor: Any, tmp_path: Path
) -> None:
    """A local pool forks a job from its warm server (Airflow already imported) only when the job's command is
    ``python -m WORKER_MODULE``; any other command starts a cold Python, seconds slower."""
    import importlib
    import importlib.util

    from agora_optimizer.executor.backends.base import WORKER_MODULE
    from agora_optimizer.executor.backends.local.processes import WARM_MODULES

    job = executor.builder.job(workload("t", placement(), tmp_path), write=False)
    assert job.spec.command[1:3] == ("-m", WORKER_MODULE)
    assert importlib.util.find_spec(f"{WORKER_MODULE}.__main__") is not None  # python -m runs the worker
    assert hasattr(importlib.import_module(WARM_MODULES[0]), "main")  # it warms the worker, not only its package

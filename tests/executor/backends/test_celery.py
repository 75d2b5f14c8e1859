"""A task placed on a Celery pool that reaches the AgoraExecutor anyway fails at once, saying why.

The CeleryExecutor runs a Celery pool's tasks (the cluster policy routes them there); the
AgoraExecutor's ``celery`` backend refuses any job, naming the task and the resource, so that such
a task fails with what to change instead of waiting in a queue no agora backend serves.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.executor.backends.celery import CeleryPoolRefusal
from agora_optimizer.executor.backends.registry import make_backend
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec
from agora_optimizer.io.catalog_file import load_catalog
from tests.conftest import CATALOGS
from tests.executor.test_agora_executor import hand_over, workload

MIB = 2**20


def test_the_celery_backend_refuses_every_job_naming_its_task_and_resource(tmp_path: Path) -> None:
    backend = make_backend("celery", load_catalog(CATALOGS / "celery-loopback.yaml").by_name)
    assert isinstance(backend, CeleryPoolRefusal)
    job = JobSpec("k", "d.t run r try 1", "pool_small", 1, 256 * MIB, None, ("true",), tmp_path)
    with pytest.raises(BackendError) as refused:
        backend.submit(job)
    assert not refused.value.transient  # never retried: no agora backend will ever run it
    assert "task d.t run r try 1" in str(refused.value) and "'pool_small' is a Celery pool" in str(refused.value)
    assert backend.status(["x"])["x"].phase == "lost"


def test_the_executor_fails_a_task_placed_on_a_celery_pool_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.utils.state import TaskInstanceState

    from agora_optimizer.executor.agora_executor import AgoraExecutor

    catalogs = f"{CATALOGS / 'local.yaml'},{CATALOGS / 'celery-loopback.yaml'}"
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", catalogs)
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", f"sqlite:///{tmp_path / 'traces.db'}")
    executor = AgoraExecutor()
    executor.start()
    item = workload("t", {"resource": "pool_small", "cores": 1, "memory_bytes": 256 * MIB}, tmp_path)
    hand_over(executor, [item])
    events: dict[Any, Any] = {}
    deadline = time.monotonic() + 20
    while item.ti.key not in events and time.monotonic() < deadline:
        executor.sync()
        events |= {k: v for k, v in executor.get_event_buffer().items() if v[0] != TaskInstanceState.QUEUED}
        time.sleep(0.05)
    state, info = events[item.ti.key]
    assert state == TaskInstanceState.FAILED
    assert "unit.t" in info and "'pool_small' is a Celery pool" in info and "celery_executor" in info
    assert "after" not in info  # refused once, not retried


def test_a_long_pool_name_is_quoted_short_on_one_line(tmp_path: Path) -> None:
    backend = make_backend("celery", load_catalog(CATALOGS / "celery-loopback.yaml").by_name)
    name = "pool_" + "x" * 50_000 + "\nsecond line"
    with pytest.raises(BackendError, match=r"resource 'pool_xxx.*' is a Celery pool") as refused:
        backend.submit(JobSpec("k", "d.t run r try 1", name, 1, 256 * MIB, None, ("true",), tmp_path))
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 600

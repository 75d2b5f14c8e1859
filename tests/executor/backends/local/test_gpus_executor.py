"""The AgoraExecutor hands a planned GPU task's GPUs to its local pool, which gives it its own devices.

The executor runs in this process on a real local GPU pool of a catalog written here (this
machine has no GPU: the pool names devices 0 and 1, or the 2 and 3 of a scheduler started with
CUDA_VISIBLE_DEVICES=2,3); the plan is a real plan file in a real plan store. What each task was
told is read where the pool starts its worker.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.executor.backends.local import backend as local
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec, job_key
from agora_optimizer.model.plan import Assignment
from tests.executor.test_agora_executor import MIB, hand_over, workload
from tests.executor.test_executor_machines import cancel, heartbeat_until, save_plan

GIB = 2**30
CATALOG = """
network: {bandwidth_bytes_per_s: 2000000000}
resources:
  - {name: gpu-box, backend: local, vcpus: 3, memory_gib: 4, speed: 1.0, price_per_hour_usd: 0.0, count: 1,
     billing: {granularity_s: 1, minimum_s: 0}, boot_s: 0, cpu_set: [0, 1], gpus: 2, gpu_model: NVIDIA L4}
"""
# Three tasks at once on one 3-core, 2-GPU machine: two take a GPU each, the third none.
PLANNED = (
    Assignment("train_a", "gpu-box", "gpu-box#0", 0.0, 10.0, 1, GIB // 2, gpus=1),
    Assignment("train_b", "gpu-box", "gpu-box#0", 0.0, 10.0, 1, GIB // 2, gpus=1),
    Assignment("report", "gpu-box", "gpu-box#0", 0.0, 2.0, 1, GIB // 2),
)


def unstarted_executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An AgoraExecutor on the GPU catalog, with its settings in this process's environment."""
    from agora_optimizer.executor.agora_executor import AgoraExecutor

    catalog = tmp_path / "gpu-catalog.yaml"
    catalog.write_text(CATALOG)
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(catalog))
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", f"sqlite:///{tmp_path / 'traces.db'}")
    monkeypatch.setenv("AIRFLOW__AGORA__PLAN_DIR", str(tmp_path / "plans"))
    monkeypatch.setenv("AIRFLOW__AGORA__BACKOFF_MAX_S", "0.2")
    return AgoraExecutor()


@pytest.fixture
def executor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheduler_gpus: str | None) -> Any:
    """The started executor of a scheduler whose CUDA_VISIBLE_DEVICES is ``scheduler_gpus`` (None: unset)."""
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    if scheduler_gpus is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", scheduler_gpus)
    executor = unstarted_executor(tmp_path, monkeypatch)
    executor.start()
    return executor


@pytest.mark.slow  # starts real workers, then stops them (there is no Airflow API for their tasks here)
@pytest.mark.parametrize(("scheduler_gpus", "pool_gpus"), [(None, ["0", "1"]), ("2,3", ["2", "3"])])
def test_planned_gpu_tasks_get_their_own_devices_and_a_cpu_task_none(
    executor: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool_gpus: list[str]
) -> None:
    started: dict[str, JobSpec] = {}  # by job key: each job as its pool starts its worker
    start_worker = local.start_worker

    def recording(job: JobSpec, warm: bool) -> Any:
        started[job.key] = job
        return start_worker(job, warm)

    monkeypatch.setattr(local, "start_worker", recording)
    version = save_plan(tmp_path / "plans", PLANNED)
    items = []
    for a in PLANNED:
        placement = {"resource": a.resource, "cores": a.cores, "memory_bytes": 512 * MIB, "gpus": a.gpus}
        items.append(workload(a.task, {**placement, "machine": a.machine, "plan_version": version}, tmp_path))
    hand_over(executor, items)
    heartbeat_until(executor, lambda: len(started) == len(PLANNED))  # every worker started
    cancel(executor, items)
    jobs = {item.ti.task_id: started[job_key("unit", item.ti.task_id, "r1", 1, -1)] for item in items}
    assert {task: job.gpus for task, job in jobs.items()} == {"train_a": 1, "train_b": 1, "report": 0}
    lease = jobs["train_a"].lease
    assert lease is not None and lease.gpus == 2  # the machine's type's
    told = {task: job.environment for task, job in jobs.items()}
    assert sorted(told[task]["CUDA_VISIBLE_DEVICES"] for task in ("train_a", "train_b")) == pool_gpus
    assert told["report"]["CUDA_VISIBLE_DEVICES"] == ""
    assert {environment["CUDA_DEVICE_ORDER"] for environment in told.values()} == {"PCI_BUS_ID"}


def test_a_gpu_pool_the_schedulers_cuda_visible_devices_cannot_hold_fails_the_executors_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # one GPU for a pool of two
    executor = unstarted_executor(tmp_path, monkeypatch)
    with pytest.raises(BackendError, match=r"resource gpu-box: gpu_ids \[0, 1\] reach past the scheduler's "):
        executor.start()

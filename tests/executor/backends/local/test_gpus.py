"""GPUs on local pools: each task sees its own devices through CUDA_VISIBLE_DEVICES, and waits for them.

This machine has no GPU: the tests check what a task is told (its environment, written to a file
by the task itself) and when the pool lets it start, which is all agora controls. A CUDA program
given those variables would see those devices, numbered as nvidia-smi numbers them. The scheduler
(this process) has no CUDA_VISIBLE_DEVICES unless a test gives it one, as a scheduler started in
a GPU allocation or by hand with ``CUDA_VISIBLE_DEVICES=2,3`` has.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agora_optimizer.executor.backends.local.backend import LocalBackend
from agora_optimizer.executor.backends.local.pools import LocalPool, machine_gpus
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec, MachineLease, lease_key
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.catalog import Resource
from tests.executor.backends.local.test_backend import MIB, job, wait_all

ENVIRONMENT = "import json, os, time; json.dump(dict(os.environ), open('environment.json', 'w')); "
UUIDS = "GPU-8d1f0c3e-51a4-4c1b-9f7e-2b6a9e0d4c11,MIG-5a0b7c2d-93e1-5f48-a6d2-7c4e1b9f3a20"  # a GPU, a MIG slice


@pytest.fixture(autouse=True)
def scheduler_without_cuda_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's device numbers and CUDA's order are the tests' to set, whatever ran this suite has."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)


def gpu_job(
    tmp_path: Path, name: str, gpus: int, *, sleep_s: float = 1.0, machine: MachineLease | None = None
) -> JobSpec:
    spec = job(tmp_path, name, ENVIRONMENT + f"time.sleep({sleep_s})", pool="gpu", memory_mib=100)
    return replace(spec, gpus=gpus, lease=machine)


def machine(name: str, gpus: int, *, cores: int = 1) -> MachineLease:
    return MachineLease(lease_key("dag", "run", name), "dag", "run", name, "gpu", cores, 300 * MIB, 2, gpus=gpus)


def seen(spec: JobSpec) -> dict[str, str]:
    return dict(json.loads((spec.job_dir / "environment.json").read_text()))


def devices(spec: JobSpec) -> str:
    return seen(spec)["CUDA_VISIBLE_DEVICES"]


@pytest.fixture
def backend() -> LocalBackend:
    """A pool of two machines of a one-core, one-GPU type (gpus 1 x count 2) on devices 0 and 1."""
    return LocalBackend({"gpu": LocalPool("gpu", 2, 600 * MIB, (0, 1), gpus=2)}, warm=False)


@pytest.mark.slow  # waits on real jobs for seconds
def test_two_one_gpu_tasks_on_a_two_gpu_machine_run_at_once_on_different_devices(
    tmp_path: Path, backend: LocalBackend
) -> None:
    two = machine("gpu#0", 2, cores=2)
    specs = [gpu_job(tmp_path, f"g{i}", 1, machine=two) for i in range(2)]
    ids = [backend.submit(spec) for spec in specs]
    assert [s.phase for s in backend.status(ids).values()] == ["running", "running"]
    assert backend.lease_gpus(two.key) == ("0", "1")
    statuses = wait_all(backend, ids)
    assert all(s.succeeded for s in statuses.values())
    assert statuses[ids[1]].started_at < statuses[ids[0]].ended_at  # type: ignore[operator]
    assert sorted(devices(spec) for spec in specs) == ["0", "1"]
    assert {seen(spec)["CUDA_DEVICE_ORDER"] for spec in specs} == {"PCI_BUS_ID"}  # the ids nvidia-smi shows


@pytest.mark.slow  # waits on real jobs for seconds
def test_on_a_one_gpu_machine_the_second_gpu_task_waits_while_the_next_machine_runs_on_its_own_gpu(
    tmp_path: Path,
) -> None:
    backend = LocalBackend({"gpu": LocalPool("gpu", 4, 1200 * MIB, (0, 1), gpus=2)}, warm=False)
    first, second = machine("gpu#0", 1, cores=2), machine("gpu#1", 1, cores=2)  # cores to spare: the GPU is held
    specs = [
        gpu_job(tmp_path, "a", 1, machine=first),
        gpu_job(tmp_path, "b", 1, machine=first, sleep_s=0),
        gpu_job(tmp_path, "c", 1, machine=second),
    ]
    ids = [backend.submit(spec) for spec in specs]
    assert [s.phase for s in backend.status(ids).values()] == ["running", "pending", "running"]
    statuses = wait_all(backend, ids)
    assert all(s.succeeded for s in statuses.values())
    assert statuses[ids[0]].ended_at <= statuses[ids[1]].started_at  # type: ignore[operator]
    assert [devices(spec) for spec in specs] == ["0", "0", "1"]  # machine k owns the k-th device


@pytest.mark.slow  # waits on real jobs for seconds
def test_a_task_without_gpus_sees_none_beside_a_gpu_task_on_the_same_machine(
    tmp_path: Path, backend: LocalBackend
) -> None:
    one = machine("gpu#0", 1, cores=2)
    gpu, cpu = gpu_job(tmp_path, "gpu", 1, machine=one), gpu_job(tmp_path, "cpu", 0, machine=one)
    ids = [backend.submit(gpu), backend.submit(cpu)]
    assert [s.phase for s in backend.status(ids).values()] == ["running", "running"]  # a CPU task takes no GPU
    assert all(s.succeeded for s in wait_all(backend, ids).values())
    assert (devices(gpu), devices(cpu)) == ("0", "")  # empty: CUDA shows no device


@pytest.mark.slow  # waits on real jobs for seconds
def test_gpu_tasks_without_a_machine_share_the_pools_devices_and_a_third_waits(tmp_path: Path) -> None:
    backend = LocalBackend({"gpu": LocalPool("gpu", 4, 600 * MIB, gpus=2, gpu_ids=(2, 3))}, warm=False)
    specs = [gpu_job(tmp_path, f"p{i}", 1, sleep_s=0.5) for i in range(3)]
    ids = [backend.submit(spec) for spec in specs]
    assert [s.phase for s in backend.status(ids).values()] == ["running", "running", "pending"]
    statuses = wait_all(backend, ids)
    assert all(s.succeeded for s in statuses.values())
    assert sorted(devices(spec) for spec in specs[:2]) == ["2", "3"]  # the host's ids the pool names
    assert devices(specs[2]) in ("2", "3")


@pytest.mark.slow  # waits on real jobs for seconds
def test_a_pool_without_gpus_leaves_the_schedulers_cuda_variables_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    backend = LocalBackend({"cpu": LocalPool("cpu", 1, 400 * MIB)}, warm=False)
    spec = job(tmp_path, "cpu", ENVIRONMENT, pool="cpu")
    assert wait_all(backend, [backend.submit(spec)])[spec.key].succeeded
    assert devices(spec) == "7" and "CUDA_DEVICE_ORDER" not in seen(spec)


@pytest.mark.slow  # waits on real jobs for seconds
@pytest.mark.parametrize(("scheduler_gpus", "device"), [(None, "0"), (UUIDS, UUIDS.split(",")[0])])
def test_an_adopted_gpu_task_keeps_its_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheduler_gpus: str | None, device: str
) -> None:
    if scheduler_gpus is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", scheduler_gpus)
    pools = {"gpu": LocalPool("gpu", 2, 600 * MIB, gpus=1)}
    backend = LocalBackend(pools, warm=False)
    spec = gpu_job(tmp_path, "long", 1, sleep_s=2)
    external_id = backend.submit(spec)
    time.sleep(0.3)
    restarted = LocalBackend(pools, warm=False)  # a new scheduler: knows nothing but the job directory
    assert restarted.adopt(external_id, spec.job_dir, "gpu")
    later_spec = gpu_job(tmp_path, "later", 1, sleep_s=0)
    later = restarted.submit(later_spec)
    assert restarted.status([later])[later].phase == "pending"  # the device is still the adopted task's
    assert all(s.succeeded for s in wait_all(restarted, [external_id, later]).values())
    assert devices(spec) == devices(later_spec) == device


@pytest.mark.slow  # waits on real jobs for seconds
def test_gpu_ids_index_the_schedulers_own_cuda_visible_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # the scheduler may use the host's GPUs 2 and 3
    backend = LocalBackend({"gpu": LocalPool("gpu", 4, 1200 * MIB, (0, 1), gpus=2)}, warm=False)
    first, second = machine("gpu#0", 1, cores=2), machine("gpu#1", 1, cores=2)
    specs = [gpu_job(tmp_path, "a", 1, machine=first), gpu_job(tmp_path, "b", 1, machine=second)]
    ids = [backend.submit(spec) for spec in specs]
    assert all(s.succeeded for s in wait_all(backend, ids).values())
    assert [devices(spec) for spec in specs] == ["2", "3"]  # not 0 and 1: GPUs the scheduler was not given
    assert (backend.lease_gpus(first.key), backend.lease_gpus(second.key)) == (("2",), ("3",))


@pytest.mark.slow  # waits on real jobs for seconds
def test_the_schedulers_gpu_uuids_and_mig_ids_are_handed_on_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", UUIDS)
    backend = LocalBackend({"gpu": LocalPool("gpu", 2, 600 * MIB, gpus=1, gpu_ids=(1,))}, warm=False)
    spec = gpu_job(tmp_path, "mig", 1, sleep_s=0)
    assert wait_all(backend, [backend.submit(spec)])[spec.key].succeeded
    assert devices(spec) == UUIDS.split(",")[1]  # the MIG slice, gpu_ids' index 1


@pytest.mark.slow  # waits on real jobs for seconds
def test_while_a_pool_has_gpus_jobs_that_reserve_none_see_none_in_any_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    pools = {"cpu": LocalPool("cpu", 1, 400 * MIB), "gpu": LocalPool("gpu", 2, 600 * MIB, gpus=1)}
    backend = LocalBackend(pools, warm=False)
    cpu = job(tmp_path, "cpu", ENVIRONMENT, pool="cpu")
    specs = [cpu, gpu_job(tmp_path, "gpu", 1, sleep_s=0), gpu_job(tmp_path, "gpu-pool-cpu", 0, sleep_s=0)]
    assert all(s.succeeded for s in wait_all(backend, [backend.submit(spec) for spec in specs]).values())
    assert [devices(spec) for spec in specs] == ["", "2", ""]  # the CPU pool's job no longer sees 2 and 3


def test_gpu_ids_past_the_schedulers_devices_are_refused_naming_the_resource_and_both_lists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pools = {"cpu": LocalPool("cpu", 1, MIB), "gpu": LocalPool("gpu", 2, MIB, gpus=2, gpu_ids=(1, 2))}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    with pytest.raises(
        BackendError,
        match=r"resource gpu: gpu_ids \[1, 2\] reach past the scheduler's "
        r"CUDA_VISIBLE_DEVICES \['2', '3'\]; gpu_ids index that list \(0 \.\. 1\)",
    ) as caught:
        LocalBackend(pools, warm=False)
    assert not caught.value.transient
    for hidden in ("", "-1", "-1,0"):  # CUDA reads up to the first negative entry: no GPU at all
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        with pytest.raises(BackendError, match="resource gpu: has 2 GPUs but the scheduler's CUDA_VISIBLE_DEVICES"):
            LocalBackend(pools, warm=False)
        LocalBackend({"cpu": pools["cpu"]}, warm=False)  # a pool without GPUs needs none
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6,7")
    LocalBackend(pools, warm=False)  # indices 1 and 2 of three: GPUs 6 and 7


def test_machine_k_gets_the_kth_run_of_the_pools_devices() -> None:
    assert machine_gpus(["0", "1", "2", "3"], "t#0", 2) == ("0", "1")
    assert machine_gpus(["0", "1", "2", "3"], "t#1", 2) == ("2", "3")
    assert machine_gpus(["4", "6"], "t#1", 1) == ("6",)
    assert machine_gpus(["GPU-b", "GPU-a"], "t#1", 1) == ("GPU-a",)  # the pool's order, not the ids' sort order
    assert machine_gpus(["0", "1"], "t#0", 0) == ()  # a type without GPUs


def test_gpus_and_gpu_ids_come_from_the_catalog_and_errors_name_resource_and_field() -> None:
    def pool(**extra: object) -> LocalPool:
        base = Resource("box", "local", 8, 32, 1.0, 0.0, count=2, gpus=2, extra=extra)
        return LocalPool.from_resource(base)

    assert (pool().gpus, pool().gpu_indices) == (4, (0, 1, 2, 3))  # gpus x count, default ids
    assert pool(gpu_ids=[3, 2, 1, 0]).gpu_indices == (3, 2, 1, 0)
    with pytest.raises(BackendError, match=r"resource box: gpu_ids must list the pool's 4 GPUs \(gpus x count\)"):
        pool(gpu_ids=[0, 1])
    with pytest.raises(BackendError, match="each once"):
        pool(gpu_ids=[0, 1, 1, 2])
    with pytest.raises(BackendError, match="resource box: gpu_ids must be a list of GPU device ids, got 'all'"):
        pool(gpu_ids="all")
    cpu_only = Resource("cpu", "local", 1, 4, 1.0, 0.0, extra={"gpu_ids": [0]})
    with pytest.raises(BackendError, match="resource cpu: gpu_ids must list the pool's 0 GPUs"):
        LocalPool.from_resource(cpu_only)


CATALOG = """
network: {bandwidth_bytes_per_s: 2000000000}
resources:
  - {name: cpu-box, backend: local, vcpus: 1, memory_gib: 4, speed: 1.0, price_per_hour_usd: 0.0, count: 1,
     billing: {granularity_s: 1, minimum_s: 0}, boot_s: 0, cpu_set: [0]}
  - {name: gpu-box, backend: local, vcpus: 2, memory_gib: 8, speed: 1.0, price_per_hour_usd: 0.0, count: 2,
     billing: {granularity_s: 1, minimum_s: 0}, boot_s: 0, cpu_set: [0, 1], gpus: 1, gpu_model: NVIDIA L4,
     gpu_ids: [1, 0]}
"""


def test_a_catalog_files_gpus_and_gpu_ids_make_the_pool(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG)
    pools = {resource.name: LocalPool.from_resource(resource) for resource in load_catalog(path).resources}
    assert (pools["gpu-box"].gpus, pools["gpu-box"].gpu_indices) == (2, (1, 0))
    assert (pools["cpu-box"].gpus, pools["cpu-box"].gpu_indices) == (0, ())
    backend = LocalBackend(pools, warm=False)
    machines = [replace(machine(f"gpu-box#{k}", 1, cores=2), resource="gpu-box") for k in range(2)]
    for each in machines:
        backend.open_lease(each)
    assert [backend.lease_gpus(each.key) for each in machines] == [("1",), ("0",)]  # the k-th of the ids listed


def test_pools_claiming_one_device_and_tasks_reserving_more_than_there_is_are_refused(
    tmp_path: Path, backend: LocalBackend
) -> None:
    with pytest.raises(BackendError, match="pools a and b both hold GPU 1; give them disjoint gpu_ids"):
        LocalBackend({"a": LocalPool("a", 1, MIB, gpus=2), "b": LocalPool("b", 1, MIB, gpus=1, gpu_ids=(1,))})
    with pytest.raises(BackendError, match=r"dag\.big reserves 3 GPUs; pool gpu has 2") as caught:
        backend.submit(gpu_job(tmp_path, "big", 3))
    assert not caught.value.transient
    with pytest.raises(BackendError, match=r"dag\.two reserves 2 GPUs; its machine gpu#0 has 1"):
        backend.submit(gpu_job(tmp_path, "two", 2, machine=machine("gpu#0", 1)))
    with pytest.raises(BackendError, match="machine gpu#1 reserves 4 GPUs; pool gpu has 2"):
        backend.open_lease(machine("gpu#1", 4))

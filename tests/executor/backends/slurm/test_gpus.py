"""GPUs on SLURM (issue 21): a task's job and a planned machine's allocation ask for them with
``--gres``, the allocation's driver packs them among its tasks and gives each running task its own
as ``CUDA_VISIBLE_DEVICES``, and a request no node of the partition can meet is refused by name.

The driver's packing is shown twice: by running the bash driver here, without SLURM, and on the
loopback cluster's ``accel`` partition (node ``agora-gpu``, two placeholder GPUs ``gpu:loopback``
that SLURM counts, allocates and exposes as it would devices)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.executor.backends.slurm import SlurmBackend, SlurmJobRef
from agora_optimizer.executor.backends.slurm.pilot_files import PILOT_DRIVER, Manifest, Pilot, pilot_task
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec, MachineLease, read_result
from agora_optimizer.model.catalog import Resource
from agora_optimizer.slurm.commands import run_slurm
from tests.executor.backends.slurm.test_backend import MIB, accounting, show_job, wait_finished
from tests.executor.backends.slurm.test_leases import allocation_of, lease_of, on
from tests.slurm_cluster import NODES, SlurmCluster, scancel
from tests.slurm_fixtures import Tracked

GPU_ENV = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "SLURM_JOB_GPUS")
# The loopback catalog's GPU type (the whole agora-gpu node), and one GPU of it.
GPU_TYPE = Resource(
    "slurm-gpu",
    "slurm",
    vcpus=4,
    memory_gib=2,
    speed=1.0,
    price_per_hour_usd=2.0,
    gpus=2,
    extra={"partition": "accel", "gres_type": "loopback"},
)
ONE_GPU = replace(GPU_TYPE, name="slurm-gpu-one", vcpus=2, memory_gib=1, gpus=1)
# What a task writes: the GPU variables it sees ("unset" when absent), and its start and end.
SEEN = (
    "import json, os, time; start = time.time(); time.sleep({seconds}); "
    "json.dump({{'env': {{k: os.environ.get(k, 'unset') for k in {names!r}}}, 'start': start, 'end': time.time()}}, "
    "open('seen.json', 'w'))"
)


def seen(job_dir: Path) -> dict[str, Any]:
    return json.loads((job_dir / "seen.json").read_text())


def visible(job_dir: Path) -> str:
    return str(seen(job_dir)["env"]["CUDA_VISIBLE_DEVICES"])


# -- the driver alone, without SLURM ------------------------------------------------------------


def task(tmp_path: Path, name: str, gpus: int, seconds: float = 1.0, cores: int = 1) -> JobSpec:
    """A task whose command (no worker) records what it sees in its job directory."""
    code = SEEN.format(seconds=seconds, names=GPU_ENV)
    return JobSpec(
        key=name,
        label=f"dag.{name}",
        resource="slurm-gpu",
        cores=cores,
        memory_bytes=100 * MIB,
        time_limit_s=60.0,
        command=(sys.executable, "-c", code),
        job_dir=tmp_path / name,
        gpus=gpus,
    )


def drive(tmp_path: Path, tasks: Sequence[JobSpec], arguments: Sequence[str], **environment: str) -> None:
    """Run the allocation driver here, as SLURM would run it, on ``tasks`` handed over and closed."""
    directory = tmp_path / "allocation"
    directory.mkdir()
    (directory / "pilot.sbatch").write_text(PILOT_DRIVER)
    pilot = Pilot("accel", directory, minutes=0, release_at=0.0)
    pilot.write([pilot_task(spec, index, 1) for index, spec in enumerate(tasks)])
    (directory / "closed").touch()
    base = {k: v for k, v in os.environ.items() if k not in GPU_ENV and not k.startswith("SLURM_")}
    done = subprocess.run(
        ["bash", "pilot.sbatch", "lease", *arguments],
        cwd=directory,
        env={**base, **environment},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert all((directory / f"exit.{index}").read_text().strip() == "0" for index in range(len(tasks)))


def test_a_task_line_names_its_gpus_and_a_task_without_keeps_the_old_line(tmp_path: Path) -> None:
    assert pilot_task(task(tmp_path, "cpu", 0), 0, 1).line.startswith("run_task 0 1 100 ")
    gpu = pilot_task(task(tmp_path, "gpu", 2), 1, 1)
    assert gpu.line.startswith("run_gpu_task 1 1 100 2 ") and gpu.gpus == 2


@pytest.mark.slow
def test_the_driver_gives_tasks_running_at_once_disjoint_gpus_and_a_cpu_task_none(tmp_path: Path) -> None:
    tasks = [task(tmp_path, "a", 1, seconds=2), task(tmp_path, "b", 1, seconds=2), task(tmp_path, "cpu", 0)]
    drive(tmp_path, tasks, ["4", "1000", "0", "2"])  # 4 cores, 1000 MiB, no idle limit, 2 GPUs (count-only)
    a, b = seen(tmp_path / "a"), seen(tmp_path / "b")
    assert {visible(tmp_path / "a"), visible(tmp_path / "b")} == {"0", "1"}
    assert float(b["start"]) < float(a["end"])  # both at once: the GPUs hold both
    assert seen(tmp_path / "a")["env"]["GPU_DEVICE_ORDINAL"] == visible(tmp_path / "a")
    assert visible(tmp_path / "cpu") == ""  # in an allocation with GPUs, a task without sees none


@pytest.mark.slow
def test_the_driver_runs_gpu_tasks_one_after_the_other_when_the_gpus_do_not_hold_both(tmp_path: Path) -> None:
    tasks = [task(tmp_path, "a", 1), task(tmp_path, "b", 1), task(tmp_path, "both", 2), task(tmp_path, "c", 1)]
    drive(tmp_path, tasks, ["4", "1000", "0", "2"])
    a, b, both, c = (seen(tmp_path / name) for name in ("a", "b", "both", "c"))
    assert {visible(tmp_path / "a"), visible(tmp_path / "b")} == {"0", "1"}
    # "both" needs the two GPUs: it waits for a and b, and c (handed over after it) waits for it.
    assert float(both["start"]) >= max(float(a["end"]), float(b["end"]))
    assert visible(tmp_path / "both") in ("0,1", "1,0")
    assert float(c["start"]) >= float(both["end"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({"CUDA_VISIBLE_DEVICES": "5,7", "SLURM_JOB_GPUS": "5,7"}, {"5", "7"}),  # SLURM's indices, split
        ({"SLURM_JOB_GPUS": "2,3"}, {"2", "3"}),
        ({}, {"0", "1"}),  # count-only GPUs: SLURM sets neither
    ],
)
def test_the_driver_splits_the_allocations_gpus_as_slurm_set_them(
    tmp_path: Path, environment: dict[str, str], expected: set[str]
) -> None:
    drive(tmp_path, [task(tmp_path, "a", 1, seconds=2), task(tmp_path, "b", 1, seconds=2)], ["4", "1000", "0", "2"],
          **environment)  # fmt: skip
    assert {visible(tmp_path / "a"), visible(tmp_path / "b")} == expected


@pytest.mark.slow
def test_an_allocation_without_gpus_leaves_the_tasks_environment_alone(tmp_path: Path) -> None:
    """The driver of an allocation opened before GPUs (four arguments) runs its tasks as it did."""
    drive(tmp_path, [task(tmp_path, "a", 0)], ["4", "1000", "0"], CUDA_VISIBLE_DEVICES="3")
    assert visible(tmp_path / "a") == "3"


def test_a_manifest_keeps_the_gpus_and_one_written_before_gpus_reads_as_none(tmp_path: Path) -> None:
    lease = replace(lease_of(GPU_TYPE), gpus=2)
    pilot = Pilot("accel", tmp_path, minutes=0, release_at=0.0, lease=lease)
    tasks = [pilot_task(task(tmp_path, name, gpus), index, 1) for index, (name, gpus) in
             enumerate((("cpu", 0), ("gpu", 1)))]  # fmt: skip
    pilot.write(tasks)
    manifest = Manifest.read(tmp_path)
    assert manifest is not None and manifest.lease == lease and [t.gpus for t in manifest.tasks] == [0, 1]
    raw = json.loads((tmp_path / "pilot.json").read_text())
    del raw["lease"]["gpus"]
    for entry in raw["tasks"]:
        del entry["gpus"]
    (tmp_path / "pilot.json").write_text(json.dumps(raw))
    older = Manifest.read(tmp_path)
    assert older is not None and older.lease is not None and older.lease.gpus == 0
    assert [t.gpus for t in older.tasks] == [0, 0]


# -- on the loopback cluster ----------------------------------------------------------------------


def gpu_job(tmp_path: Path, name: str, gpus: int, seconds: float = 0.5, partition: str = "accel") -> JobSpec:
    """A task under the agora worker, in ``partition`` (the GPU type's), that records what it sees."""
    worker = [sys.executable, "-m", "agora_optimizer.executor.worker", "--job-dir", str(tmp_path / name)]
    spec = task(tmp_path, name, gpus, seconds)
    return replace(
        spec,
        key=f"{tmp_path.name}-{name}",
        command=(*worker, "--memory-bytes", str(spec.memory_bytes), "--", *spec.command),
        options={"partition": partition, "gres_type": "loopback"},
    )


@pytest.mark.slow
def test_a_gpu_task_is_a_job_of_its_own_with_its_gres(
    tmp_path: Path, slurm_cluster: SlurmCluster, tracked: Tracked
) -> None:
    backend = SlurmBackend(pilot_max_tasks=4, pilot_window_s=30)  # pilots on: a GPU task is still alone
    job_id = tracked.submit(backend, gpu_job(tmp_path, "one", 1))
    assert SlurmJobRef.parse(job_id) == SlurmJobRef(job_id)
    shown = show_job(job_id)
    assert (shown["Partition"], shown["TresPerNode"]) == ("accel", "gres:gpu:loopback:1")
    status = wait_finished(backend, [job_id])[job_id]
    assert status.succeeded and status.host == NODES["accel"].name, status
    env = seen(tmp_path / "one")["env"]
    assert env["CUDA_VISIBLE_DEVICES"] in ("0", "1") and env["SLURM_JOB_GPUS"] == env["CUDA_VISIBLE_DEVICES"]
    accounting(job_id)
    assert "gres/gpu=1" in _alloc_tres(job_id)


@pytest.mark.slow
def test_a_gpu_request_no_node_of_the_partition_meets_is_refused_naming_it(
    tmp_path: Path, slurm_cluster: SlurmCluster
) -> None:
    backend = SlurmBackend(resources={"slurm-gpu-many": replace(GPU_TYPE, name="slurm-gpu-many", gpus=4)})
    with pytest.raises(BackendError) as many:
        backend.submit(gpu_job(tmp_path, "three", 3))
    assert "needs 3 GPUs of type loopback" in str(many.value) and "partition accel" in str(many.value)
    assert "agora-gpu has 2" in str(many.value) and not many.value.transient
    with pytest.raises(BackendError) as none:
        backend.submit(gpu_job(tmp_path, "cpu-only", 1, partition="debug"))
    assert "partition debug" in str(none.value) and "agora-small has 0" in str(none.value), none.value
    with pytest.raises(BackendError) as machine:
        backend.open_lease(gpu_lease(backend.resources["slurm-gpu-many"]))
    assert "slurm-gpu-many#0" in str(machine.value) and "agora-gpu has 2" in str(machine.value), machine.value
    assert backend.allocations.job_ids() == [] and not (tmp_path / "three").exists()


@pytest.fixture
def gpu_leases(tmp_path: Path, slurm_cluster: SlurmCluster) -> Iterator[SlurmBackend]:
    """A backend that knows the GPU types, whose allocations are cancelled when the test ends."""
    backend = SlurmBackend(resources={GPU_TYPE.name: GPU_TYPE, ONE_GPU.name: ONE_GPU}, lease_root=tmp_path / "leases")
    yield backend
    scancel(*backend.allocations.job_ids())


def gpu_lease(resource: Resource) -> MachineLease:
    return replace(lease_of(resource), gpus=resource.gpus)


@pytest.mark.slow
def test_a_gpu_machines_allocation_asks_for_its_gpus_and_its_tasks_get_disjoint_ones(
    tmp_path: Path, gpu_leases: SlurmBackend
) -> None:
    lease = gpu_lease(GPU_TYPE)
    gpu_leases.open_lease(lease)
    allocation = allocation_of(gpu_leases, lease)
    shown = show_job(allocation)
    assert (shown["Partition"], shown["NumCPUs"], shown["TresPerNode"]) == ("accel", "4", "gres:gpu:loopback:2")
    first = gpu_leases.submit(on(gpu_job(tmp_path, "first", 1, seconds=3), lease))
    second = gpu_leases.submit(on(gpu_job(tmp_path, "second", 1, seconds=3), lease))
    statuses = wait_finished(gpu_leases, [first, second])
    assert statuses[first].succeeded and statuses[second].succeeded, statuses
    assert {visible(tmp_path / "first"), visible(tmp_path / "second")} == {"0", "1"}
    firsts, seconds = (read_result(tmp_path / name / "result.json") for name in ("first", "second"))
    assert firsts is not None and seconds is not None and seconds.started_at < firsts.ended_at  # at once

    # A scheduler restarted takes the allocation over, GPUs and all, and hands it the next GPU task.
    restarted = SlurmBackend(resources=gpu_leases.resources, lease_root=tmp_path / "leases")
    restarted.open_lease(lease)
    held = restarted.allocations.held(lease.key)
    assert held is not None and held.job_id == allocation and held.lease == lease
    third = restarted.submit(on(gpu_job(tmp_path, "third", 2), lease))
    assert third == f"{allocation}+2" and wait_finished(restarted, [third])[third].succeeded
    assert visible(tmp_path / "third") in ("0,1", "1,0")
    restarted.close_lease(lease)
    gpu_leases.allocations.forget(lease.key)  # (its allocation is the restarted one's now)
    assert accounting(allocation)["State"] == "COMPLETED"
    assert "gres/gpu=2" in _alloc_tres(allocation)


@pytest.mark.slow
def test_gpu_tasks_of_a_one_gpu_machine_run_one_after_the_other(tmp_path: Path, gpu_leases: SlurmBackend) -> None:
    lease = gpu_lease(ONE_GPU)
    gpu_leases.open_lease(lease)
    assert show_job(allocation_of(gpu_leases, lease))["TresPerNode"] == "gres:gpu:loopback:1"
    # One core each of the machine's two: only the one GPU keeps them apart.
    ids = [gpu_leases.submit(on(gpu_job(tmp_path, name, 1, seconds=1), lease)) for name in ("first", "second")]
    statuses = wait_finished(gpu_leases, ids)
    assert all(status.succeeded for status in statuses.values()), statuses
    firsts, seconds = (seen(tmp_path / name) for name in ("first", "second"))
    assert float(seconds["start"]) >= float(firsts["end"])
    assert visible(tmp_path / "first") == visible(tmp_path / "second") == firsts["env"]["SLURM_JOB_GPUS"]
    with pytest.raises(BackendError, match="needs 1 cores, 100 MiB and 2 GPUs, more than machine"):
        gpu_leases.submit(on(gpu_job(tmp_path, "too-many", 2), lease))
    gpu_leases.close_lease(lease)


def _alloc_tres(job_id: str) -> str:
    return run_slurm(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "AllocTRES"]).strip()

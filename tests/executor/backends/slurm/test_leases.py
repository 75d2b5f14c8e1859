"""Planned machines on the real loopback SLURM: each lease is one allocation, sized as its type, that
runs the tasks handed to it in that order until it is closed; its times come from SLURM accounting."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from agora_optimizer.executor.backends.slurm import SlurmBackend, SlurmJobRef
from agora_optimizer.executor.jobs.spec import (
    TASK_ENDED_MARK,
    BackendError,
    JobSpec,
    MachineLease,
    lease_key,
    read_result,
)
from agora_optimizer.model.catalog import Resource
from agora_optimizer.runs.lease_record import LeaseRecord
from tests.executor.backends.slurm.test_backend import SLEEP, accounting, job, show_job, wait_finished
from tests.slurm_cluster import NODES, scancel, wait_until

pytestmark = pytest.mark.slow

# A small machine type of the debug partition, so a lease holds a part of the node, not all of it.
SMALL = Resource(
    "slurm-debug-small", "slurm", vcpus=2, memory_gib=1, speed=1.0, price_per_hour_usd=0.1, extra={"partition": "debug"}
)


def lease_of(resource: Resource, machine: str = "#0", tasks: int = 2) -> MachineLease:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    name = resource.name + machine
    return MachineLease(
        key=lease_key("dag", run_id, name),
        dag_id="dag",
        run_id=run_id,
        machine=name,
        resource=resource.name,
        cores=resource.vcpus,
        memory_bytes=resource.memory_bytes,
        tasks=tasks,
    )


@pytest.fixture
def leases(tmp_path: Path) -> Iterator[SlurmBackend]:
    """A backend that knows SMALL, whose allocations are cancelled when the test ends."""
    backend = SlurmBackend(resources={SMALL.name: SMALL}, lease_root=tmp_path / "leases")
    yield backend
    scancel(*backend.allocations.job_ids())


def allocation_of(backend: SlurmBackend, lease: MachineLease) -> str:
    """The SLURM id of the allocation ``backend`` holds for ``lease``."""
    held = backend.allocations.held(lease.key)
    assert held is not None, f"{lease.machine} is not open"
    return held.job_id


def on(spec: JobSpec, lease: MachineLease) -> JobSpec:
    return replace(spec, resource=lease.resource, lease=lease)


def test_a_lease_runs_its_tasks_in_order_in_one_allocation_and_ends_when_closed(
    tmp_path: Path, leases: SlurmBackend
) -> None:
    lease = lease_of(SMALL)
    leases.open_lease(lease)
    allocation = allocation_of(leases, lease)
    shown = show_job(allocation)
    assert (shown["NumCPUs"], shown["MinMemoryNode"], shown["Partition"]) == ("2", "1G", "debug")
    # Two tasks of 2 cores each: the second fits only once the first has ended, so order shows in times.
    first = leases.submit(on(job(tmp_path, "first", SLEEP.format(2), cores=2), lease))
    second = leases.submit(on(job(tmp_path, "second", "pass", cores=2), lease))
    assert {SlurmJobRef.parse(first).job_id, SlurmJobRef.parse(second).job_id} == {allocation}  # type: ignore[union-attr]
    statuses = wait_finished(leases, [first, second])
    assert statuses[first].succeeded and statuses[second].succeeded, statuses
    results = [read_result(tmp_path / name / "result.json") for name in ("first", "second")]
    assert results[0] is not None and results[1] is not None
    assert results[0].ended_at <= results[1].started_at  # handed over second, run second
    assert show_job(allocation)["JobState"] in ("RUNNING", "PENDING")  # open: more tasks may come
    assert leases.finished_leases() == []
    assert leases.lease_lead_s(SMALL.name) == 0.0  # no allocation of its partition has ended: no wait known

    leases.close_lease(lease)
    row = accounting(allocation)
    assert (row["State"], row["AllocCPUS"], row["Partition"]) == ("COMPLETED", "2", "debug")
    records: list[LeaseRecord] = []
    wait_until(lambda: bool(records.extend(leases.finished_leases()) or records), 30, "the released lease")
    [record] = records
    assert (record.machine, record.resource, record.external_id, record.source) == (
        lease.machine, SMALL.name, allocation, "slurm accounting"
    )  # fmt: skip
    submit, start, end = _sacct_times(allocation)
    assert (int(record.started_at.timestamp()), int(record.ended_at.timestamp())) == (start, end)
    assert leases.lease_lead_s(SMALL.name) == pytest.approx(start - submit, abs=1)  # its wait, from accounting
    assert record.seconds >= 2  # it held the machine for at least the first task
    assert leases.finished_leases() == []  # reported once


def test_a_leased_machine_frees_a_tasks_cores_at_its_task_ended_mark_not_at_its_workers_exit(
    tmp_path: Path, leases: SlurmBackend
) -> None:
    """The first task marks its own end (as the worker does when Airflow's task process exits), then
    lingers as Airflow's supervisor does while it reports: the machine's next task starts at the mark."""
    lease = lease_of(SMALL)
    leases.open_lease(lease)
    lingering = "import time, datetime; time.sleep(0.5); "
    lingering += f"open('{TASK_ENDED_MARK}', 'w').write(datetime.datetime.now(datetime.UTC).isoformat()); time.sleep(4)"
    first = leases.submit(on(job(tmp_path, "first", lingering, cores=2), lease))
    second = leases.submit(on(job(tmp_path, "second", "pass", cores=2), lease))
    wait_until(lambda: leases.status([first])[first].task_ended_at is not None, 30, "the first task's end mark")
    assert leases.status([first])[first].phase == "running"  # its worker lingers: SLURM still runs it
    statuses = wait_finished(leases, [first, second])
    assert statuses[first].succeeded and statuses[second].succeeded, statuses
    firsts, seconds = (read_result(tmp_path / name / "result.json") for name in ("first", "second"))
    assert firsts is not None and seconds is not None
    assert seconds.started_at < firsts.ended_at  # both hold 2 of the machine's 2 cores: only the mark let it in
    leases.close_lease(lease)


def test_a_task_of_a_lease_is_reported_by_a_new_instance_after_a_restart(tmp_path: Path, leases: SlurmBackend) -> None:
    lease = lease_of(SMALL)
    leases.open_lease(lease)
    first = leases.submit(on(job(tmp_path, "before", SLEEP.format(1)), lease))
    allocation = allocation_of(leases, lease)
    restarted = SlurmBackend(resources={SMALL.name: SMALL}, lease_root=tmp_path / "leases")
    restarted.open_lease(lease)  # takes over the allocation instead of requesting another
    assert allocation_of(restarted, lease) == allocation
    second = restarted.submit(on(job(tmp_path, "after", "pass"), lease))
    assert second == f"{allocation}+1"
    statuses = wait_finished(restarted, [first, second])
    assert statuses[first].succeeded and statuses[second].succeeded, statuses
    restarted.close_lease(lease)
    assert accounting(allocation)["State"] == "COMPLETED"
    leases.allocations.forget(lease.key)  # (its allocation is the restarted one's now)


@pytest.fixture
def down_partition() -> Iterator[str]:
    """A partition of its own in state DOWN on the small node (the shared partitions stay up)."""
    name = f"agoradown{uuid.uuid4().hex[:6]}"
    node = NODES["debug"].name
    subprocess.run(
        ["scontrol", "create", f"PartitionName={name}", f"Nodes={node}", "State=DOWN", "MaxTime=10"], check=True
    )
    yield name
    subprocess.run(["scancel", f"--partition={name}"], check=False)
    subprocess.run(["scontrol", "delete", f"PartitionName={name}"], check=False)


def test_a_down_partition_or_a_refused_size_is_a_backend_error_from_open_lease(
    tmp_path: Path, down_partition: str
) -> None:
    down = replace(SMALL, name="slurm-down", extra={"partition": down_partition})
    huge = replace(SMALL, name="slurm-huge", vcpus=64)  # more cores than any node of debug has
    backend = SlurmBackend(resources={down.name: down, huge.name: huge}, lease_root=tmp_path)
    lease = lease_of(down)
    with pytest.raises(BackendError) as caught:
        backend.open_lease(lease)
    assert lease.machine in str(caught.value) and down_partition in str(caught.value) and "down" in str(caught.value)
    with pytest.raises(BackendError) as refused:
        backend.open_lease(lease_of(huge))
    assert "slurm-huge#0" in str(refused.value) and "sbatch refused" in str(refused.value), refused.value
    assert backend.allocations.job_ids() == [] and list(tmp_path.iterdir()) == []  # nothing left behind


def test_a_task_larger_than_its_machine_is_refused(tmp_path: Path, leases: SlurmBackend) -> None:
    lease = lease_of(SMALL)
    with pytest.raises(BackendError, match="more than machine"):
        leases.submit(on(job(tmp_path, "big", cores=4), lease))


def _sacct_times(job_id: str) -> tuple[int, int, int]:
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "Submit,Start,End"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SLURM_TIME_FORMAT": "%s"},
    ).stdout.split()[0]
    submit, start, end = out.split("|")
    return int(submit), int(start), int(end)

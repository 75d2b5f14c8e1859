"""SLURM preemption as spot capacity: a job (or a planned machine's task) on the loopback cluster's
preemptible partition ``spot`` that a compute job takes the node from finishes ``interrupted``, with
a reason naming the partition; a spot job that ends, fails or that agora cancels does not."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agora_optimizer.executor.backends.slurm import SlurmBackend, SlurmJobRef
from agora_optimizer.executor.backends.slurm.status import ended_by_preemption, final_status
from agora_optimizer.executor.jobs.spec import JobResult, JobStatus, read_result
from agora_optimizer.executor.worker.preemption import SPOT_ENV, probe_for, slurm_preempted
from agora_optimizer.model.catalog import Resource
from agora_optimizer.slurm.commands import run_slurm
from agora_optimizer.slurm.jobs import SlurmRecord
from tests.executor.backends.slurm.test_backend import SLEEP, job, wait_finished
from tests.executor.backends.slurm.test_leases import allocation_of, lease_of, on
from tests.slurm_cluster import SPOT, SlurmCluster, sbatch, scancel, wait_until
from tests.slurm_fixtures import Tracked

T0 = datetime(2026, 12, 3, 5, 0, tzinfo=UTC)
# The whole spot node: any compute job then needs cores a spot job holds, so SLURM preempts it.
SPOT_MACHINE = Resource(
    "slurm-spot", "slurm", vcpus=SPOT.cpus, memory_gib=1, speed=1.0, price_per_hour_usd=0.1, extra={"partition": "spot"}
)


def preempted_record(**changes: object) -> SlurmRecord:
    record = SlurmRecord("7", "PREEMPTED", node=SPOT.name, partition="spot", exit_code=0, ended_at=T0)
    return replace(record, **changes)  # type: ignore[arg-type]


def result(exit_code: int, ended_at: datetime) -> JobResult:
    reason = "" if exit_code == 0 else "cancelled by signal SIGTERM"
    return JobResult(exit_code, False, False, reason, "h", ended_at - timedelta(seconds=5), ended_at, 1, 0.1, None)


# -- without a cluster ----------------------------------------------------------------------------


def test_only_a_preemption_finishes_interrupted_with_the_partition_named() -> None:
    status = final_status("SLURM job 7", preempted_record(), None, "the worker wrote no result.json")
    assert (status.phase, status.interrupted, status.exit_code, status.host) == ("finished", True, 143, SPOT.name)
    assert "SLURM job 7 was preempted on SLURM partition spot (node agora-large)" in status.reason
    killed = final_status("SLURM job 7", preempted_record(), result(143, T0), "")
    assert killed.interrupted and "preempted" in killed.reason and killed.exit_code == 143
    # Its task had already succeeded when SLURM preempted the job: done, not to be re-run.
    assert not final_status("SLURM job 7", preempted_record(), result(0, T0), "").interrupted
    for state in ("CANCELLED", "NODE_FAIL", "FAILED", "TIMEOUT", "COMPLETED"):  # agora's scancel, a lost node ...
        other = final_status("SLURM job 7", preempted_record(state=state), None, "no result")
        assert not other.interrupted and "preempted" not in other.reason, state


def test_a_lease_task_is_interrupted_only_if_it_ended_with_its_allocations_preemption() -> None:
    record = preempted_record()
    assert ended_by_preemption(record, 143, T0 + timedelta(seconds=0.4))  # the preemption's SIGTERM ended it
    assert ended_by_preemption(record, 143, T0 - timedelta(seconds=0.5))  # SLURM's end time is to the second
    assert not ended_by_preemption(record, 1, T0 - timedelta(seconds=30))  # failed on its own, before
    assert not ended_by_preemption(record, 0, T0)  # done before SLURM took the node
    assert not ended_by_preemption(replace(record, state="CANCELLED"), 143, T0)
    assert not ended_by_preemption(None, 143, T0)


# -- on the cluster -------------------------------------------------------------------------------


def take_back_spot_node(minutes: int = 1) -> str:
    """What a real cluster's owner does: a job of the higher-priority partition on the spot node."""
    return sbatch("--partition=compute", "--cpus-per-task=4", "--mem=500M", f"--time={minutes}", command="sleep 1")


def sacct_state(job_id: str) -> str:
    return run_slurm(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State"]).strip()


def wait_running(backend: SlurmBackend, ids: list[str], timeout_s: float = 60) -> None:
    def running() -> bool:
        return all(s.phase == "running" for s in backend.status(ids).values())

    wait_until(running, timeout_s, f"jobs {ids} to run")


def test_a_spot_job_preempted_by_a_compute_job_finishesended_by_preemption(tmp_path: Path, tracked: Tracked) -> None:
    backend = SlurmBackend()
    spec = job(tmp_path, "spot", SLEEP.format(120), partition="spot", cores=SPOT.cpus, time_limit_s=None)
    spot = tracked.submit(backend, spec)
    wait_running(backend, [spot])
    owner = take_back_spot_node()
    tracked.ids.add(owner)
    [status] = wait_finished(backend, [spot], timeout_s=60).values()
    assert (status.phase, status.interrupted, status.oom_killed, status.host) == ("finished", True, False, SPOT.name)
    assert status.exit_code == 143 and not status.succeeded  # the worker's report of the SIGTERM
    assert f"SLURM job {spot} was preempted on SLURM partition spot (node {SPOT.name})" in status.reason
    assert status.started_at is not None and status.ended_at is not None and status.ended_at >= status.started_at
    wait_until(lambda: sacct_state(spot) == "PREEMPTED", 30, f"sacct to record job {spot} as PREEMPTED")
    wait_until(lambda: sacct_state(owner) == "COMPLETED", 60, f"the compute job {owner} to run")
    # A new backend (a restarted scheduler) reads the same from SLURM's records alone.
    assert SlurmBackend().status([spot])[spot].interrupted


def test_the_tasks_of_a_preempted_spot_pilot_areended_by_preemption(tmp_path: Path, tracked: Tracked) -> None:
    backend = SlurmBackend(pilot_max_tasks=2, pilot_window_s=5)  # two short jobs packed into one allocation
    half = SPOT.cpus // 2
    ids = [
        tracked.submit(backend, job(tmp_path, f"t{i}", SLEEP.format(120), partition="spot", cores=half)) for i in (0, 1)
    ]
    pilot = SlurmJobRef.parse(ids[0]).job_id  # type: ignore[union-attr]
    assert all(external_id.startswith(f"{pilot}+") for external_id in ids)
    wait_running(backend, ids)
    tracked.ids.add(take_back_spot_node())
    statuses = wait_finished(backend, ids, timeout_s=60)
    for index, external_id in enumerate(ids):
        status = statuses[external_id]
        assert status.phase == "finished" and status.interrupted and status.exit_code != 0, status
        assert f"task {index} of pilot SLURM job {pilot} was preempted on SLURM partition spot" in status.reason


def test_a_spot_job_that_ends_fails_or_is_cancelled_by_agora_is_notended_by_preemption(
    tmp_path: Path, tracked: Tracked
) -> None:
    backend = SlurmBackend()
    done = tracked.submit(backend, job(tmp_path, "done", "pass", partition="spot", time_limit_s=None))
    failed = tracked.submit(
        backend, job(tmp_path, "failed", "raise SystemExit(3)", partition="spot", time_limit_s=None)
    )
    cancelled = tracked.submit(
        backend, job(tmp_path, "cancelled", SLEEP.format(60), partition="spot", time_limit_s=None)
    )
    wait_running(backend, [cancelled])
    backend.cancel(cancelled)
    statuses = wait_finished(backend, [done, failed, cancelled])
    assert statuses[done].succeeded and statuses[failed].exit_code == 3, statuses
    assert statuses[cancelled].exit_code != 0 and "preempted" not in statuses[cancelled].reason
    assert not any(s.interrupted for s in statuses.values()), statuses


# A stand-in for Airflow's supervisor: at a SIGTERM it reports the task's failure to Airflow a moment
# later (the real one takes tens of milliseconds: its task's shell child died, it logs, it calls the API).
REPORTS_AT_SIGTERM = """
import pathlib, signal, sys, time
def report(*_):
    time.sleep(0.5)
    pathlib.Path({mark!r}).write_text("failed")
    sys.exit(1)
signal.signal(signal.SIGTERM, report)
pathlib.Path({mark!r}).write_text("running")
time.sleep(120)
"""


def test_a_preempted_spot_worker_stops_the_supervisor_before_it_reports(tmp_path: Path, tracked: Tracked) -> None:
    """On spot capacity ($AGORA_SPOT) the worker holds the supervisor at SLURM's SIGTERM and asks SLURM: a
    preemption kills it unheard (Airflow's try stays running, for the executor to re-run); agora's own
    cancel lets it go on and report, as on any partition."""
    backend = SlurmBackend()
    marks = {name: tmp_path / f"{name}.reported" for name in ("cancelled", "preempted")}

    def spot_job(name: str) -> str:
        code = REPORTS_AT_SIGTERM.format(mark=str(marks[name]))
        spec = job(tmp_path, name, code, partition="spot", cores=SPOT.cpus, time_limit_s=None)
        return tracked.submit(backend, replace(spec, environment={**spec.environment, SPOT_ENV: "1"}))

    def wait_task(name: str) -> None:
        wait_until(lambda: marks[name].exists(), 60, f"the {name} job's stand-in to start")

    cancelled = spot_job("cancelled")
    wait_task("cancelled")
    backend.cancel(cancelled)
    [cancelled_status] = wait_finished(backend, [cancelled]).values()
    assert not cancelled_status.interrupted and "cancelled by signal SIGTERM" in cancelled_status.reason
    assert marks["cancelled"].read_text() == "failed"  # let go: it reported, as it would without spot
    preempted = spot_job("preempted")
    wait_task("preempted")
    tracked.ids.add(take_back_spot_node())
    [status] = wait_finished(backend, [preempted], timeout_s=60).values()
    assert status.interrupted and status.exit_code == 143, status
    written = read_result(tmp_path / "preempted" / "result.json")
    assert written is not None and written.reason.startswith(f"preempted: SLURM preempted job {preempted} at ")
    assert f"(partition spot, node {SPOT.name})" in written.reason
    time.sleep(1.0)  # twice the stand-in's delay: a supervisor let go would have reported by now
    assert marks["preempted"].read_text() == "running"  # never reported: killed while held


def test_the_probe_reads_slurms_preempt_time_and_needs_spot_and_a_slurm_job() -> None:
    assert probe_for({SPOT_ENV: "1"}) is None  # no SLURM job: no way to ask (AWS Batch: not yet)
    assert probe_for({"SLURM_JOB_ID": "7"}) is None  # not on spot capacity: a SIGTERM is a cancel
    assert probe_for({SPOT_ENV: "1", "SLURM_JOB_ID": "7"}) is not None


def test_the_probe_of_a_job_slurm_does_not_know_says_not_preempted(slurm_cluster: SlurmCluster) -> None:
    assert slurm_preempted("999999999") == ""


@pytest.fixture
def spot_leases(tmp_path: Path, slurm_cluster: SlurmCluster) -> Iterator[SlurmBackend]:
    backend = SlurmBackend(resources={SPOT_MACHINE.name: SPOT_MACHINE}, lease_root=tmp_path / "leases")
    yield backend
    scancel(*backend.allocations.job_ids())


def test_the_running_task_of_a_preempted_spot_machine_is_interrupted_not_the_one_done_before(
    tmp_path: Path, spot_leases: SlurmBackend
) -> None:
    lease = lease_of(SPOT_MACHINE, tasks=3)
    spot_leases.open_lease(lease)
    allocation = allocation_of(spot_leases, lease)
    first = spot_leases.submit(on(job(tmp_path, "first", "pass", partition="spot"), lease))
    second = spot_leases.submit(on(job(tmp_path, "second", SLEEP.format(120), partition="spot"), lease))
    wait_until(lambda: spot_leases.status([first])[first].succeeded, 60, "the machine's first task")
    wait_until(lambda: spot_leases.status([second])[second].phase == "running", 30, "the machine's second task")
    owner = take_back_spot_node()
    statuses: dict[str, JobStatus] = dict(wait_finished(spot_leases, [first, second], timeout_s=60))
    # A task handed to the machine afterwards gets another allocation of it, as after any end of the
    # first (re-running the interrupted one elsewhere is the executor's choice, not the backend's).
    third = spot_leases.submit(on(job(tmp_path, "third", "pass", partition="spot"), lease))
    statuses.update(wait_finished(spot_leases, [third], timeout_s=60))
    try:
        assert statuses[first].succeeded and not statuses[first].interrupted, statuses[first]
        assert statuses[second].phase == "finished" and statuses[second].interrupted, statuses[second]
        assert SlurmJobRef.parse(second).job_id == allocation  # type: ignore[union-attr]
        assert f"of machine {lease.machine} (SLURM job {allocation}) was preempted" in statuses[second].reason
        assert "partition spot" in statuses[second].reason and statuses[second].exit_code != 0
        assert statuses[third].succeeded and not statuses[third].interrupted, statuses[third]
        assert SlurmJobRef.parse(third).job_id != allocation  # type: ignore[union-attr]
        assert sacct_state(allocation) == "PREEMPTED"
    finally:
        scancel(owner)

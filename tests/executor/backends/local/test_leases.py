"""Planned machines on local pools: each gets its CPU slice and its type's capacity; a task frees it when it ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from agora_optimizer.executor.backends.local.backend import LocalBackend
from agora_optimizer.executor.backends.local.pools import LocalPool, machine_cpus, pinned
from agora_optimizer.executor.jobs.spec import TASK_ENDED_MARK, BackendError, JobSpec, MachineLease, lease_key
from tests.executor.backends.local.test_backend import MIB, job, wait_all

AFFINITY = "import json, os, sys, time; json.dump(sorted(os.sched_getaffinity(0)), open('affinity.json', 'w')); "


def lease(machine: str, *, cores: int = 1, memory_mib: int = 300, resource: str = "pool") -> MachineLease:
    return MachineLease(lease_key("dag", "run", machine), "dag", "run", machine, resource, cores, memory_mib * MIB, 2)


def on(spec: JobSpec, machine: MachineLease) -> JobSpec:
    return replace(spec, lease=machine)


@pytest.fixture
def backend() -> LocalBackend:
    """Two CPUs (this machine's), room for two one-core machines of 300 MiB."""
    return LocalBackend({"pool": LocalPool("pool", 2, 600 * MIB, (0, 1))}, warm=False)


def test_machine_k_gets_the_kth_slice_wrapping_around() -> None:
    assert machine_cpus([4, 5, 6, 7], "t#0", 2) == (4, 5)
    assert machine_cpus([4, 5, 6, 7], "t#1", 2) == (6, 7)
    assert machine_cpus([4, 5, 6, 7], "t#2", 2) == (4, 5)  # wraps
    assert machine_cpus([0, 1, 2], "t#1", 2) == (0, 2)
    assert machine_cpus([0, 1], "t#0", 4) == (0, 1)  # more vcpus than CPUs: all of them
    with pytest.raises(BackendError, match="no CPUs"):
        machine_cpus([], "t#0", 1)


def test_the_command_is_pinned_to_the_slice_before_the_tasks_own_arguments() -> None:
    command = ("py", "-m", "w", "--job-dir", "d", "--cpu-set", "0,1,2", "--", "py", "--cpu-set", "9")
    assert pinned(command, (1,)) == ("py", "-m", "w", "--job-dir", "d", "--cpu-set", "1", "--", "py", "--cpu-set", "9")
    assert pinned(("py", "-m", "w"), (0, 1)) == ("py", "-m", "w", "--cpu-set", "0,1")


@pytest.mark.slow
def test_each_machines_jobs_run_pinned_to_its_own_cpus(tmp_path: Path, backend: LocalBackend) -> None:
    first, second = lease("pool#0"), lease("pool#1")
    backend.open_lease(first)
    backend.open_lease(second)
    assert (backend.lease_cpus(first.key), backend.lease_cpus(second.key)) == ((0,), (1,))
    specs = [
        on(job(tmp_path, "a", AFFINITY + "time.sleep(0.3)", pool="pool"), first),
        on(job(tmp_path, "b", AFFINITY + "time.sleep(0.3)", pool="pool"), second),
        job(tmp_path, "free", AFFINITY, pool="pool"),  # no machine: the pool's whole cpu_set, as before
    ]
    ids = [backend.submit(spec) for spec in specs]
    assert all(s.succeeded for s in wait_all(backend, ids).values())
    seen = {spec.key: json.loads((spec.job_dir / "affinity.json").read_text()) for spec in specs}
    assert seen == {"a": [0], "b": [1], "free": [0, 1]}


@pytest.mark.slow
def test_a_machine_runs_no_more_than_its_type_holds_while_the_pool_has_room(
    tmp_path: Path, backend: LocalBackend
) -> None:
    machine = lease("pool#0")
    backend.open_lease(machine)
    ids = [
        backend.submit(on(job(tmp_path, f"m{i}", "import time; time.sleep(1)", pool="pool"), machine)) for i in range(2)
    ]
    other = backend.submit(job(tmp_path, "other", "import time; time.sleep(1)", pool="pool"))
    phases = [s.phase for s in backend.status([*ids, other]).values()]
    assert phases == ["running", "pending", "running"]  # the machine's one core is taken; the pool's second is not
    statuses = wait_all(backend, [*ids, other])
    assert statuses[ids[0]].ended_at <= statuses[ids[1]].started_at  # type: ignore[operator]


def test_a_job_bigger_than_its_machine_is_refused_and_a_machine_bigger_than_its_pool_too(
    tmp_path: Path, backend: LocalBackend
) -> None:
    with pytest.raises(BackendError, match=r"dag\.big needs 1 cores and 419430400 bytes; its machine pool#0"):
        backend.submit(on(job(tmp_path, "big", "pass", pool="pool", memory_mib=400), lease("pool#0")))
    with pytest.raises(BackendError, match="machine pool#5 needs 4 cores") as caught:
        backend.open_lease(lease("pool#5", cores=4))
    assert not caught.value.transient
    with pytest.raises(BackendError, match="no local pool named 'gone'"):
        backend.open_lease(lease("gone#0", resource="gone"))


@pytest.mark.slow
def test_capacity_is_free_when_the_task_ends_not_when_its_worker_exits(tmp_path: Path, backend: LocalBackend) -> None:
    """The task marks its own end (as the worker does when the task process exits), then lingers as
    Airflow's supervisor does while it reports: the next task of the machine starts at the mark."""
    machine = lease("pool#0")
    lingering = "import time, datetime; time.sleep(0.3); "
    lingering += f"open('{TASK_ENDED_MARK}', 'w').write(datetime.datetime.now(datetime.UTC).isoformat()); time.sleep(3)"
    first = backend.submit(on(job(tmp_path, "first", lingering, pool="pool"), machine))
    second = backend.submit(on(job(tmp_path, "second", "pass", pool="pool"), machine))
    deadline = time.monotonic() + 20
    while backend.status([second])[second].phase == "pending" and time.monotonic() < deadline:
        time.sleep(0.1)
    status = backend.status([first, second])
    assert status[first].phase == "running" and status[first].task_ended_at is not None
    assert status[second].phase in ("running", "finished")  # started while the first worker still ran
    statuses = wait_all(backend, [first, second])
    assert statuses[second].started_at < statuses[first].ended_at  # type: ignore[operator]
    backend.close_lease(machine)
    (record,) = backend.finished_leases()
    assert (record.machine, record.backend, record.resource) == ("pool#0", "local", "pool")
    assert record.started_at <= record.ended_at
    assert backend.finished_leases() == []  # each once


def test_a_machine_whose_tasks_never_started_here_reports_no_lease(backend: LocalBackend) -> None:
    """Its jobs held, then moved to another machine by a repair: it held nothing, and costs nothing."""
    machine = lease("pool#0")
    backend.open_lease(machine)
    time.sleep(0.05)
    backend.close_lease(machine)
    assert backend.finished_leases() == []


def test_the_worker_marks_the_tasks_end_before_its_result(tmp_path: Path) -> None:
    worker = [sys.executable, "-m", "agora_optimizer.executor.worker", "--job-dir", str(tmp_path)]
    subprocess.run([*worker, "--", sys.executable, "-c", "pass"], check=True, timeout=60)
    ended = datetime.fromisoformat((tmp_path / TASK_ENDED_MARK).read_text())
    result = json.loads((tmp_path / "result.json").read_text())
    assert ended <= datetime.fromisoformat(result["ended_at"])
    assert os.stat(tmp_path / TASK_ENDED_MARK).st_mode & 0o077 == 0

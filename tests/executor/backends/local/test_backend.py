"""Local pools: real subprocesses, never more at once than the pool holds, adoptable after a restart."""

from __future__ import annotations

import gc
import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from agora_optimizer.executor.backends.local.backend import LocalBackend
from agora_optimizer.executor.backends.local.pools import LocalPool
from agora_optimizer.executor.backends.local.processes import WARM_MODULES, fork_context, warm_up
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec, JobStatus, job_key, read_result
from tests.conftest import REPO

MIB = 2**20


def job(
    tmp_path: Path,
    name: str,
    code: str,
    *,
    pool: str = "small",
    cores: int = 1,
    memory_mib: int = 100,
    key: str | None = None,
    environment: Mapping[str, str] | None = None,
) -> JobSpec:
    job_dir = tmp_path / (key or name)
    worker = [sys.executable, "-m", "agora_optimizer.executor.worker", "--job-dir", str(job_dir)]
    return JobSpec(
        key=key or name,
        label=f"dag.{name}",
        resource=pool,
        cores=cores,
        memory_bytes=memory_mib * MIB,
        time_limit_s=None,
        command=(*worker, "--memory-bytes", str(memory_mib * MIB), "--", sys.executable, "-c", code),
        job_dir=job_dir,
        environment=environment or {},
    )


def wait_all(backend: LocalBackend, ids: list[str], timeout_s: float = 60) -> Mapping[str, JobStatus]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        statuses = backend.status(ids)
        if all(s.phase in ("finished", "lost") for s in statuses.values()):
            return statuses
        time.sleep(0.2)
    raise AssertionError(f"jobs did not finish: {backend.status(ids)}")


@pytest.fixture
def backend() -> LocalBackend:
    return LocalBackend({"small": LocalPool("small", 1, 400 * MIB, (0,)), "wide": LocalPool("wide", 2, 400 * MIB)})


@pytest.mark.slow  # waits on real jobs for seconds (and forks them from the warm server)
def test_a_one_core_pool_runs_its_jobs_one_after_the_other(tmp_path: Path, backend: LocalBackend) -> None:
    ids = [backend.submit(job(tmp_path, f"j{i}", "import time; time.sleep(0.8)")) for i in range(3)]
    assert [s.phase for s in backend.status(ids).values()] == ["running", "pending", "pending"]
    statuses = wait_all(backend, ids)
    assert all(s.succeeded for s in statuses.values())
    spans = sorted((s.started_at, s.ended_at) for s in statuses.values())
    assert all(previous[1] <= following[0] for previous, following in itertools.pairwise(spans))


@pytest.mark.slow  # waits on real jobs for seconds
def test_a_pool_with_room_for_two_runs_two_at_once(tmp_path: Path, backend: LocalBackend) -> None:
    ids = [backend.submit(job(tmp_path, f"w{i}", "import time; time.sleep(1.5)", pool="wide")) for i in range(2)]
    assert [s.phase for s in backend.status(ids).values()] == ["running", "running"]
    wait_all(backend, ids)


@pytest.mark.slow  # forks from the warm server, which imports Airflow first: seconds
def test_memory_limits_admission_too(tmp_path: Path, backend: LocalBackend) -> None:
    ids = [
        backend.submit(job(tmp_path, f"m{i}", "import time; time.sleep(0.5)", pool="wide", memory_mib=300))
        for i in range(2)
    ]
    assert [s.phase for s in backend.status(ids).values()] == ["running", "pending"]  # 2 cores free, but not 600 MiB
    wait_all(backend, ids)


def test_a_job_the_pool_can_never_hold_is_refused_naming_it(tmp_path: Path, backend: LocalBackend) -> None:
    with pytest.raises(BackendError, match=r"dag\.big needs 2 cores") as caught:
        backend.submit(job(tmp_path, "big", "pass", cores=2))
    assert not caught.value.transient and "pool small has 1 cores" in str(caught.value)
    with pytest.raises(BackendError, match="no local pool named 'gpu'"):
        backend.submit(job(tmp_path, "gpu", "pass", pool="gpu"))


@pytest.mark.slow  # forks from the warm server, which imports Airflow first: seconds
def test_oom_and_exit_codes_come_back_from_the_result_file(tmp_path: Path, backend: LocalBackend) -> None:
    # It holds its memory for a moment: a spike shorter than the worker's sampling interval, ended by the
    # task itself, is not killed (a loaded CI run saw the task exit before a sample passed the limit).
    hog_code = "import time; b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096]); time.sleep(2)"
    hog = backend.submit(job(tmp_path, "hog", hog_code))
    bad = backend.submit(job(tmp_path, "bad", "raise SystemExit(5)"))
    statuses = wait_all(backend, [hog, bad])
    assert statuses[hog].oom_killed and statuses[hog].exit_code == 137 and "out of memory" in statuses[hog].reason
    assert statuses[bad].exit_code == 5 and not statuses[bad].succeeded


@pytest.mark.slow  # forks from the warm server, which imports Airflow first: seconds
def test_cancel_stops_a_running_job_and_drops_a_queued_one(tmp_path: Path, backend: LocalBackend) -> None:
    running = backend.submit(job(tmp_path, "r", "import time; time.sleep(60)"))
    queued = backend.submit(job(tmp_path, "q", "import time; time.sleep(60)"))
    time.sleep(1.0)
    backend.cancel(queued)
    backend.cancel(running)
    statuses = wait_all(backend, [running, queued], timeout_s=30)
    assert statuses[queued].exit_code == 143 and "before it started" in statuses[queued].reason
    assert statuses[running].exit_code != 0 and "cancelled" in statuses[running].reason
    assert not (tmp_path / "q" / "local.json").exists()  # it never ran


@pytest.mark.slow  # waits on real jobs for seconds
def test_a_new_backend_adopts_a_running_job_and_reads_its_result(tmp_path: Path, backend: LocalBackend) -> None:
    spec = job(tmp_path, "long", "import time; time.sleep(2); print('finished')")
    external_id = backend.submit(spec)
    time.sleep(0.5)
    restarted = LocalBackend(backend.pools)  # a new scheduler: knows nothing but the job directory
    assert restarted.status([external_id])[external_id].phase == "lost"
    assert restarted.adopt(external_id, spec.job_dir, "small")
    assert restarted.status([external_id])[external_id].phase == "running"
    later = restarted.submit(job(tmp_path, "later", "pass"))
    assert restarted.status([later])[later].phase == "pending"  # the adopted job still holds the pool's core
    statuses = wait_all(restarted, [external_id, later])
    assert statuses[external_id].succeeded and statuses[later].succeeded
    result = read_result(spec.result_path)
    assert result is not None and result.exit_code == 0
    assert (spec.job_dir / "task.log").read_text().count("finished") == 1  # ran once


@pytest.mark.slow  # forks from the warm server, which imports Airflow first: seconds
def test_try_2_of_a_long_task_id_gets_its_own_exit_code_not_try_1s(tmp_path: Path, backend: LocalBackend) -> None:
    task_id = "extract_" + "x" * 250
    first = job(tmp_path, "try1", "raise SystemExit(3)", key=job_key("etl", task_id, "manual__1", 1, -1))
    assert wait_all(backend, [backend.submit(first)])[first.key].exit_code == 3
    second = job(tmp_path, "try2", "pass", key=job_key("etl", task_id, "manual__1", 2, -1))
    second_id = backend.submit(second)
    assert second_id != first.key
    status = wait_all(backend, [second_id])[second_id]
    assert status.succeeded, status
    assert (second.job_dir / "result.json").is_file() and second.job_dir != first.job_dir


def test_a_job_that_never_started_is_not_adopted(tmp_path: Path, backend: LocalBackend) -> None:
    assert not LocalBackend(backend.pools).adopt("ghost", tmp_path / "ghost", "small")


def _report_inherited_state(answers: multiprocessing.SimpleQueue[tuple[int, list[str]]]) -> None:
    """In a child of the fork server: how many objects the collector skips, and which warm modules are missing."""
    answers.put((gc.get_freeze_count(), [name for name in WARM_MODULES if name not in sys.modules]))


@pytest.mark.slow  # forks from the warm server, which imports Airflow first: seconds
def test_workers_are_forked_with_the_task_path_loaded_and_the_collector_frozen() -> None:
    context = fork_context()
    answers: multiprocessing.SimpleQueue[tuple[int, list[str]]] = context.SimpleQueue()
    child = context.Process(target=_report_inherited_state, args=(answers,))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    frozen, missing = answers.get()
    assert missing == []  # what the worker, the supervisor and the task import
    assert frozen > 100_000  # Airflow's objects: a task's collections never scan (and so copy) them


def test_warm_up_names_what_it_could_not_import_and_still_freezes() -> None:
    try:
        assert warm_up(("json", "agora_no_such_module")) == ["agora_no_such_module"]
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


@pytest.mark.slow  # starts a Python that imports Airflow
def test_the_fork_server_module_drops_the_working_directory_then_warms_up(tmp_path: Path) -> None:
    probe = (
        "import gc, sys; import agora_optimizer.executor.backends.local.fork_server; "
        "print('' in sys.path, gc.get_freeze_count() > 0, 'airflow.dag_processing.dagbag' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.stdout.split() == ["False", "True", "True"], done.stderr[-2000:]  # python -c put '' first


DUMP_ENVIRONMENT = "import json, os; json.dump(sorted(os.environ), open('environment.json', 'w'))"
SCHEDULER_SECRETS = {  # values Airflow can start with: the warm server imports it with them
    "AIRFLOW__CORE__SQL_ALCHEMY_CONN": "sqlite:////tmp/agora-test-scheduler-only.db",  # deprecated name, still read
    "AIRFLOW__WEBSERVER__SECRET_KEY": "signs-sessions",
    "AIRFLOW__CORE__FERNET_KEY_CMD": "echo lsVQzxRUR_mIBRCMN9zNXqLw0uWNV5S0q1tfFhoVkzo=",
}


def test_a_job_started_afresh_gets_no_scheduler_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SCHEDULER_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AGORA_KEPT", "1")
    backend = LocalBackend({"small": LocalPool("small", 1, 400 * MIB)}, warm=False)
    spec = job(tmp_path, "env", DUMP_ENVIRONMENT, environment={"AIRFLOW__WEBSERVER__SECRET_KEY_SECRET": "path"})
    assert wait_all(backend, [backend.submit(spec)])[spec.key].succeeded
    seen = set(json.loads((spec.job_dir / "environment.json").read_text()))
    assert "AGORA_KEPT" in seen and not {*SCHEDULER_SECRETS, "AIRFLOW__WEBSERVER__SECRET_KEY_SECRET"} & seen


WARM_JOB = """
import json, sys, time
from pathlib import Path
from agora_optimizer.executor.backends.local.backend import LocalBackend
from agora_optimizer.executor.backends.local.pools import LocalPool
from tests.executor.backends.local.test_backend import DUMP_ENVIRONMENT, job, wait_all
backend = LocalBackend({"small": LocalPool("small", 1, 400 * 2**20)}, warm=True)
backend.start_fork_server()  # started with the scheduler's whole environment, secrets included
spec = job(Path(sys.argv[1]), "warm", DUMP_ENVIRONMENT)
print(json.dumps(wait_all(backend, [backend.submit(spec)])[spec.key].succeeded))
"""


@pytest.mark.slow  # starts a Python that imports Airflow
def test_a_job_forked_from_the_warm_server_gets_no_scheduler_secret(tmp_path: Path) -> None:
    environment = {**os.environ, **SCHEDULER_SECRETS, "AGORA_KEPT": "1"}
    done = subprocess.run(
        [sys.executable, "-c", WARM_JOB, str(tmp_path)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "true", done.stderr[-2000:]
    seen = set(json.loads((tmp_path / "warm" / "environment.json").read_text()))
    assert "AGORA_KEPT" in seen and not set(SCHEDULER_SECRETS) & seen


@pytest.mark.slow  # waits on real jobs for seconds
def test_a_long_lived_backend_keeps_only_the_newest_finished_statuses(tmp_path: Path) -> None:
    backend = LocalBackend({"small": LocalPool("small", 1, 400 * MIB)}, warm=False, done_max=2)
    ids = []
    for name in ("first", "second", "third"):
        ids.append(backend.submit(job(tmp_path, name, "pass")))
        assert wait_all(backend, ids[-1:])[ids[-1]].succeeded
    statuses = backend.status(ids)
    assert statuses[ids[0]].phase == "lost" and "unknown" in statuses[ids[0]].reason  # forgotten, as by a restart
    assert statuses[ids[1]].succeeded and statuses[ids[2]].succeeded


@pytest.mark.slow  # waits on real jobs for seconds
def test_a_try_submitted_again_after_its_job_finished_gets_the_new_jobs_status(
    tmp_path: Path, backend: LocalBackend
) -> None:
    """A deferred task resumes (a reschedule sensor pokes again) under the same try: the same job key."""
    first = backend.submit(job(tmp_path, "sensor", "raise SystemExit(0)", key="dag.sensor.try1"))
    assert wait_all(backend, [first])[first].exit_code == 0
    (tmp_path / "dag.sensor.try1").rename(tmp_path / "dag.sensor.try1~1")  # as the executor sets it aside
    again = backend.submit(
        job(tmp_path, "sensor", "import time; time.sleep(1); raise SystemExit(3)", key="dag.sensor.try1")
    )
    assert again == first
    assert backend.status([again])[again].phase != "finished"  # not the deferral's finished job
    assert wait_all(backend, [again])[again].exit_code == 3


def test_a_bad_cpu_set_is_named_and_quoted_short_on_one_line() -> None:
    from agora_optimizer.model.catalog import Resource

    bad = ["x" * 50_000, *range(10_000)]
    resource = Resource("box", "local", 2, 4, 1.0, 0.0, extra={"cpu_set": bad})
    with pytest.raises(BackendError, match=r"resource box: cpu_set must be a list of CPU ids, got \['xxx") as caught:
        LocalPool.from_resource(resource)
    assert len(str(caught.value)) < 300

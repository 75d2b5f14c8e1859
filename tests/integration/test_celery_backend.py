"""Celery pools in a real Airflow 3.3: a 12-task DAG planned on two pools runs each task on its planned pool.

A real Redis (``scripts/start_redis.sh``) is the broker; Airflow runs the LocalExecutor, the
AgoraExecutor and the CeleryExecutor side by side (api-server, dag-processor, scheduler on SQLite,
as the other integration tests run them), and two real Celery workers serve the two pools of
``catalogs/celery-loopback.yaml``: ``pool_small`` pinned to CPU 0, each of its processes limited to
2 GiB of address space, ``pool_large`` to CPU 1 and 4 GiB. ``agora optimize airflow:agora_celery
--apply`` plans the DAG (its two big tasks fit the large pool only; the time objective spreads the
rest over both) and the cluster policy routes each task to the CeleryExecutor on its pool's queue.
After the run: every task instance succeeded, once, on the queue of its planned pool; each task saw
the CPU and memory limit of that pool's worker; each trace row names the worker that ran it, and that
worker serves the planned pool; Celery's result backend holds one success per task and no queue
holds a message.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.plan_file import load_plan
from agora_optimizer.model.plan import Plan
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore
from harness.local_airflow import AIRFLOW, EXECUTORS, AirflowDeployment, agora_deployment, wait_until
from tests import leftovers
from tests.conftest import CATALOGS
from tests.redis_server import RedisServer, redis_server

pytestmark = [pytest.mark.airflow, pytest.mark.celery]
__all__ = ["redis_server"]  # the fixture, used by name

DAG_ID = "agora_celery"
CATALOG = CATALOGS / "celery-loopback.yaml"
SMALL_TASKS = [f"small_{i:02d}" for i in range(8)]
BIG_TASKS = ["big_0", "big_1"]  # 3 GiB each: only pool_large (4 GiB) holds them
TASKS = ["prepare", *SMALL_TASKS, *BIG_TASKS, "report"]

DAG = f"""
import json, os, resource, time
from datetime import datetime
from pathlib import Path
from airflow.sdk import DAG, task

def _run(name, report_dir):
    started = time.time()
    time.sleep(1)
    Path(report_dir, name + ".json").write_text(json.dumps({{
        "cpus": sorted(os.sched_getaffinity(0)),
        "address_space": resource.getrlimit(resource.RLIMIT_AS)[0],
        "started": started,
        "ended": time.time(),
    }}))

def _task(name, memory_gib):
    hints = {{"agora": {{"cores": 1, "memory_gib": memory_gib, "runtime_s": 4}}}}
    return task(task_id=name, retries=0, executor_config=hints)(_run)(name, "{{{{ dag_run.conf['report_dir'] }}}}")

with DAG(dag_id="{DAG_ID}", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    middle = [_task(name, 0.25) for name in {SMALL_TASKS!r}] + [_task(name, 3) for name in {BIG_TASKS!r}]
    _task("prepare", 0.25) >> middle >> _task("report", 0.25)
"""


@dataclass(frozen=True)
class Worker:
    """One Celery worker: it serves the queue of its pool, pinned to one CPU, its processes' memory limited."""

    pool: str
    cpu: int
    concurrency: int
    address_space_bytes: int

    @property
    def component(self) -> str:
        return f"celery-{self.pool}"

    def argv(self) -> list[str]:
        return [
            "taskset", "-c", str(self.cpu), "prlimit", f"--as={self.address_space_bytes}",
            AIRFLOW, "celery", "worker", "--queues", self.pool, "--concurrency", str(self.concurrency),
            "--celery-hostname", f"{self.pool}@%h", "--skip-serve-logs", "--without-mingle", "--without-gossip",
        ]  # fmt: skip


def workers() -> dict[str, Worker]:
    """One worker per pool of the catalog, as large as the pool's machine: its cores, its memory."""
    cpus = {"pool_small": 0, "pool_large": 1}
    return {r.name: Worker(r.name, cpus[r.name], r.vcpus, r.memory_bytes) for r in load_catalog(CATALOG).resources}


@dataclass
class CeleryRun:
    """What the module's one run left: the plan, the task instances, the tasks' reports, the traces."""

    plan: Plan
    task_instances: dict[str, dict[str, Any]]
    reports: dict[str, dict[str, Any]]
    attempts: list[TaskAttempt]
    results: dict[str, int]  # Celery result states -> how many
    queued: dict[str, int]  # broker queue -> messages still in it
    workers: dict[str, Worker]


def _optimize(airflow: AirflowDeployment, tmp: Path) -> Plan:
    """``agora optimize airflow:agora_celery --apply``, as a user runs it with the deployment's configuration."""
    out = tmp / "plan.json"
    done = subprocess.run(
        [
            sys.executable, "-m", "agora_optimizer", "optimize", f"airflow:{DAG_ID}", "--catalog", str(CATALOG),
            "--dag-folder", str(airflow.dags_folder), "--store", airflow.env["AIRFLOW__AGORA__TRACE_STORE_URL"],
            "--objective", "time", "--time-limit-s", "10", "-o", str(out), "--json", "--apply",
            "--plan-dir", str(tmp / "plans"),
        ],
        env=airflow.env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return load_plan(out)


def _broker_state(redis: RedisServer, queues: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """(Celery result states -> count, queue -> messages waiting), read from Redis itself."""
    import redis as redis_client

    results: dict[str, int] = {}
    backend = redis_client.Redis.from_url(redis.database(1))
    broker = redis_client.Redis.from_url(redis.database(0))
    try:
        for key in backend.scan_iter("celery-task-meta-*"):
            raw = backend.get(key)
            state = json.loads(raw)["status"] if raw else "gone"
            results[state] = results.get(state, 0) + 1
        queued = {queue: int(broker.llen(queue)) for queue in queues}
    finally:
        backend.close()
        broker.close()
    return results, queued


def _wait_ready(airflow: AirflowDeployment, worker: Worker, timeout_s: float = 180) -> None:
    """Until the worker's log says it is ready (it then consumes its queue), or fail with its log."""

    def ready() -> bool:
        process, log = airflow.processes[worker.component], airflow.log(worker.component)
        if process.poll() is not None:
            raise AssertionError(f"{worker.component} exited {process.returncode}:\n{log[-3000:]}")
        return f"{worker.pool}@" in log and " ready." in log

    try:
        wait_until(ready, timeout_s, f"Celery worker {worker.pool}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- {worker.component}.log\n{airflow.log(worker.component)[-3000:]}") from None


@pytest.fixture(scope="module")
def celery_run(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Iterator[CeleryRun]:
    tmp = tmp_path_factory.mktemp("celery")
    dags, reports = tmp / "dags", tmp / "reports"
    dags.mkdir()
    reports.mkdir()
    (dags / f"{DAG_ID}.py").write_text(DAG)
    catalog = tmp / CATALOG.name
    shutil.copy(CATALOG, catalog)
    store_url = f"sqlite:///{tmp / 'traces.db'}"
    airflow = agora_deployment(
        tmp,
        catalog,
        store_url,
        executor=f"{EXECUTORS},CeleryExecutor",
        extra_env={
            "AIRFLOW__CELERY__BROKER_URL": redis_server.database(0),
            "AIRFLOW__CELERY__RESULT_BACKEND": redis_server.database(1),
            "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "3600",
        },
    )
    pools = workers()
    airflow.migrate()
    plan = _optimize(airflow, tmp)
    with airflow:
        airflow.start()
        for worker in pools.values():
            airflow.launch(worker.component, worker.argv())
        for worker in pools.values():
            _wait_ready(airflow, worker)
        seen = {process.pid for process in leftovers.processes_under(tmp)}  # what the session's check would find
        assert {airflow.processes[worker.component].pid for worker in pools.values()} <= seen
        airflow.wait_for_dag(DAG_ID)
        run_id = airflow.trigger(DAG_ID, {"report_dir": str(reports)})
        state = airflow.wait_for_run(DAG_ID, run_id, timeout_s=420)
        task_instances = airflow.task_instances(DAG_ID, run_id)
        if state != "success":
            logs = "\n".join(f"--- {w.component}.log\n{airflow.log(w.component)[-3000:]}" for w in pools.values())
            pytest.fail(f"run {state}: {json.dumps({t: ti['state'] for t, ti in task_instances.items()})}\n{logs}")
        # A task's run succeeds when its task process reports it; its Celery task (the supervisor) ends after.
        wait_until(lambda: set(_broker_state(redis_server, list(pools))[0]) <= {"SUCCESS", "FAILURE"}, 60, "Celery")
        results, queued = _broker_state(redis_server, list(pools))
    assert airflow.leftover_processes() == []  # the workers and their task processes are gone too
    with TraceStore(store_url) as store:
        attempts = store.attempts(dag_id=DAG_ID)
    yield CeleryRun(
        plan=plan,
        task_instances=task_instances,
        reports={path.stem: json.loads(path.read_text()) for path in reports.glob("*.json")},
        attempts=attempts,
        results=results,
        queued=queued,
        workers=pools,
    )


def test_the_plan_puts_tasks_on_both_pools_and_the_big_ones_on_the_large_pool(celery_run: CeleryRun) -> None:
    planned = {a.task: a.resource for a in celery_run.plan.assignments}
    assert sorted(planned) == sorted(TASKS)
    assert set(planned.values()) == {"pool_small", "pool_large"}
    assert all(planned[name] == "pool_large" for name in BIG_TASKS)


def test_every_task_ran_once_on_the_queue_of_its_planned_pool(celery_run: CeleryRun) -> None:
    planned = {a.task: a.resource for a in celery_run.plan.assignments}
    tis = celery_run.task_instances
    assert sorted(tis) == sorted(TASKS)  # none lost, none added
    for name, ti in tis.items():
        assert (ti["state"], ti["try_number"]) == ("success", 1), (name, ti["state"], ti["try_number"])
        assert ti["queue"] == planned[name], name
        assert ti["executor"] == "CeleryExecutor", name
    assert celery_run.results == {"SUCCESS": len(TASKS)}  # the broker's side: one success per task
    assert celery_run.queued == {"pool_small": 0, "pool_large": 0}


def test_each_task_ran_inside_its_planned_pools_worker(celery_run: CeleryRun) -> None:
    planned = {a.task: a.resource for a in celery_run.plan.assignments}
    assert sorted(celery_run.reports) == sorted(TASKS)
    for name, seen in celery_run.reports.items():
        worker = celery_run.workers[planned[name]]
        assert seen["cpus"] == [worker.cpu], name  # the worker's CPU, as the operating system tells the task
        assert seen["address_space"] == worker.address_space_bytes, name  # and its memory limit


def test_each_trace_names_the_worker_that_ran_it_and_that_worker_serves_the_planned_pool(
    celery_run: CeleryRun,
) -> None:
    planned = {a.task: a for a in celery_run.plan.assignments}
    attempts = {a.task_id: a for a in celery_run.attempts}
    assert len(celery_run.attempts) == len(TASKS) and sorted(attempts) == sorted(TASKS)
    for name, attempt in attempts.items():
        pool = attempt.host.split("@", 1)[0]
        assert pool in celery_run.workers, f"{name}: host {attempt.host!r} names no worker of the run"
        assert pool == planned[name].resource, name  # the worker that ran it serves the planned pool
        assert (attempt.resource_type, attempt.backend, attempt.state) == (planned[name].resource, "celery", "success")
        assert attempt.machine == planned[name].machine and attempt.plan_version, name

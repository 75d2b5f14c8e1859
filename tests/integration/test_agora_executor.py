"""The AgoraExecutor in a real Airflow 3.3 (api-server, dag-processor, scheduler on SQLite).

The example pipeline is planned with ``agora optimize airflow:... --apply`` and triggered
through the REST API; each task must land where its plan put it, as the operating system
(CPU affinity, seen by the task itself) and SLURM (``sacct``) record it. A second DAG has a
task that exceeds its memory, one that raises, and two long tasks during which the
scheduler is killed and restarted.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.plans.store import PlanStore
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore
from agora_optimizer.integration.local_airflow import AirflowDeployment, wait_until
from tests.conftest import CATALOGS, REPO

pytestmark = pytest.mark.airflow
MIB = 2**20

FAULTS = """
import time
from datetime import datetime
from airflow.sdk import DAG, task

with DAG(dag_id="agora_faults", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    @task(retries=0)
    def hog():
        block = bytearray(900 * 2**20)
        block[::4096] = b"x" * len(block[::4096])
        time.sleep(5)

    @task(retries=0)
    def boom():
        raise ValueError("boom on purpose")

    hog()
    boom()

with DAG(dag_id="agora_slow", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    @task(retries=0)
    def slow_a():
        time.sleep(20)
        return "a"

    @task(retries=0)
    def slow_b():
        time.sleep(20)
        return "b"

    slow_a()
    slow_b()
"""


@dataclass
class Cluster:
    airflow: AirflowDeployment
    store_url: str
    plans: PlanStore
    catalog: Path

    def attempts(self, dag_id: str, tasks: int) -> dict[str, TaskAttempt]:
        """The DAG's rows once the executor has added its part to all ``tasks`` (a heartbeat after the run ends)."""

        def read() -> dict[str, TaskAttempt]:
            with TraceStore(self.store_url) as store:
                return {a.task_id: a for a in store.attempts(dag_id=dag_id)}

        wait_until(
            lambda: sum(1 for a in read().values() if a.backend) >= tasks, 60, f"executor trace rows of {dag_id}"
        )
        return read()


def _plan(tasks: dict[str, tuple[str, int]]) -> Plan:
    assignments = tuple(
        Assignment(task, resource, f"{resource}#0", 0.0, 30.0, 1, memory) for task, (resource, memory) in tasks.items()
    )
    return Plan(
        "faults",
        "catalogs/local.yaml",
        Objective(),
        30.0,
        0.0,
        assignments,
        SolverInfo("test", "heuristic", None, 0.0),
        "2026-11-30T00:00:00Z",
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("agora-airflow")
    dags = root / "dags"
    dags.mkdir()
    shutil.copy(REPO / "dags" / "agora_example_etl.py", dags)
    (dags / "agora_faults.py").write_text(FAULTS)
    catalog = CATALOGS / "local.yaml"
    store_url = f"sqlite:///{root / 'traces.db'}"
    airflow = AirflowDeployment(
        home=root / "home",
        dags_folder=dags,
        extra_env={
            "AIRFLOW__AGORA__CATALOG": str(catalog),
            "AIRFLOW__AGORA__PLAN_DIR": str(root / "plans"),
            "AIRFLOW__AGORA__STATE_DIR": str(root / "jobs"),
            "AIRFLOW__AGORA__TRACE_STORE_URL": store_url,
        },
    )
    airflow.migrate()
    plans = PlanStore(root / "plans")
    agora = str(Path(sys.executable).with_name("agora"))
    command = [agora, "optimize", "airflow:agora_example_etl", "--catalog", str(catalog), "--dag-folder", str(dags)]
    command += ["-o", str(root / "etl-plan.json"), "--apply", "--plan-dir", str(root / "plans")]
    optimize = subprocess.run(command, capture_output=True, text=True, env=airflow.env, timeout=300)
    assert optimize.returncode == 0, optimize.stderr[-3000:]
    plans.save("agora_faults", _plan({"hog": ("local-small", 512 * MIB), "boom": ("local-large", 512 * MIB)}))
    plans.save("agora_slow", _plan({"slow_a": ("local-small", 512 * MIB), "slow_b": ("local-large", 512 * MIB)}))
    airflow.start()
    try:
        for dag_id in ("agora_example_etl", "agora_faults", "agora_slow"):
            airflow.wait_for_dag(dag_id)
        yield Cluster(airflow, store_url, plans, catalog)
    finally:
        airflow.stop_all()


def test_the_example_pipeline_runs_each_task_where_its_plan_put_it(cluster: Cluster, tmp_path: Path) -> None:
    run_id = cluster.airflow.trigger("agora_example_etl", {"report_dir": str(tmp_path)})
    assert cluster.airflow.wait_for_run("agora_example_etl", run_id) == "success"
    current = cluster.plans.current("agora_example_etl")
    assert current is not None
    planned = {a.task: a.resource for a in current.plan.assignments}
    assert len(set(planned.values())) == 2  # the plan uses both pools, so where a task ran tells them apart
    cpu_sets = {r.name: r.extra["cpu_set"] for r in load_catalog(cluster.catalog).resources}
    instances = cluster.airflow.task_instances("agora_example_etl", run_id)
    for task_id, resource in planned.items():
        seen = json.loads((tmp_path / f"{task_id}.json").read_text())  # written by the task itself
        assert seen["cpus"] == cpu_sets[resource], task_id
        assert instances[task_id]["state"] == "success" and instances[task_id]["executor"] == "agora"
        assert instances[task_id]["queue"] == resource
    attempts = cluster.attempts("agora_example_etl", 5)
    assert set(attempts) == set(planned)
    for task_id, attempt in attempts.items():
        assert (attempt.resource_type, attempt.backend, attempt.state) == (planned[task_id], "local", "success")
        assert attempt.peak_rss_bytes and attempt.runtime_s and attempt.requested_memory_bytes
    assert attempts["aggregate"].peak_rss_bytes > 600 * MIB  # it holds 600 MiB


def test_a_task_over_its_memory_is_killed_recorded_as_oom_and_fails(cluster: Cluster) -> None:
    run_id = cluster.airflow.trigger("agora_faults")
    assert cluster.airflow.wait_for_run("agora_faults", run_id) == "failed"
    instances = cluster.airflow.task_instances("agora_faults", run_id)
    assert instances["hog"]["state"] == "failed" and instances["boom"]["state"] == "failed"
    attempts = cluster.attempts("agora_faults", 2)
    assert attempts["hog"].state == "oom_killed"
    assert "out of memory" in attempts["hog"].error_text and str(512 * MIB) in attempts["hog"].error_text
    assert attempts["hog"].requested_memory_bytes == 512 * MIB and attempts["hog"].resource_type == "local-small"
    assert attempts["boom"].state == "failed" and "boom on purpose" in attempts["boom"].error_text
    assert attempts["boom"].backend == "local"


def test_a_restarted_scheduler_adopts_running_jobs_none_lost_none_twice(cluster: Cluster) -> None:
    airflow = cluster.airflow
    run_id = airflow.trigger("agora_slow")

    def both_running() -> bool:
        return all(ti["state"] == "running" for ti in airflow.task_instances("agora_slow", run_id).values())

    wait_until(both_running, 120, "both slow tasks to run", airflow)
    airflow.kill_scheduler_only()
    time.sleep(3)
    airflow.start("scheduler")
    assert airflow.wait_for_run("agora_slow", run_id, timeout_s=240) == "success"
    for task_id in ("slow_a", "slow_b"):
        tries = airflow.tries("agora_slow", run_id, task_id)
        assert [t["try_number"] for t in tries] == [1], task_id  # never run a second time
    assert "Adopted agora_slow.slow_a" in airflow.log("scheduler")
    job_dirs = sorted(p.name for p in (cluster.airflow.home.parent / "jobs").glob("agora_slow__*"))
    assert len(job_dirs) == 2 and all(name.endswith("try1") for name in job_dirs)
    attempts = cluster.attempts("agora_slow", 2)
    assert {a.state for a in attempts.values()} == {"success"} and set(attempts) == {"slow_a", "slow_b"}

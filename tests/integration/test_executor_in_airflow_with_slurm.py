"""The AgoraExecutor in a real Airflow 3.3 (api-server, dag-processor, scheduler on SQLite).

The example pipeline gets a plan over two local pools and two SLURM partitions of the
loopback cluster (``scripts/start_slurm.sh``) and is triggered through the REST API; each
task must land where its plan put it, as the operating system (CPU affinity, seen by the
task itself) and SLURM (``sacct``: partition and node of the job) record it. A second DAG has a
task that exceeds its memory, one that raises, and two long tasks during which the
scheduler is killed and restarted. A third waits in a SLURM partition that another job holds
for longer than Airflow's ``task_queued_timeout``, and must run once, on its first job. A fourth
has a shell task (no retries) on the preemptible partition ``spot`` (``slurm-loopback-spot.yaml``):
SLURM preempts it, and its same try must run again on the fallback and succeed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from agora_optimizer.executor.backends.slurm import LEASE_IDLE_S, job_name
from agora_optimizer.executor.jobs.spec import job_key, lease_key
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.plans.store import PlanStore
from agora_optimizer.queue_wait.recorder import QueueWaitStore
from agora_optimizer.runs.store import RunStore
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore
from harness.local_airflow import AirflowDeployment, agora_deployment, wait_until
from tests.conftest import CATALOGS, REPO
from tests.slurm_cluster import slurm_cluster_or_skip

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

with DAG(dag_id="agora_patient", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    @task(retries=0)
    def patient():
        return "ran after its queue wait"

    patient()

with DAG(dag_id="agora_spot", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    @task.bash(retries=0)
    def crunch():
        # a shell child, as most tasks have: SLURM's SIGTERM at a preemption reaches it too
        return 'echo "$SLURM_JOB_PARTITION $AGORA_RESOURCE_TYPE" >> {{ dag_run.conf["report"] }}; sleep 20'

    crunch()

with DAG(dag_id="agora_gpu", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    @task(retries=0)
    def train(**context):
        import json, os

        seen = {name: os.environ.get(name, "") for name in
                ("SLURM_JOB_ID", "SLURM_JOB_PARTITION", "CUDA_VISIBLE_DEVICES", "AGORA_RESOURCE_TYPE")}
        with open(context["dag_run"].conf["report"], "w") as out:
            json.dump(seen, out)

    train()
"""
QUEUED_TIMEOUT_S = 20  # Airflow's [scheduler] task_queued_timeout here: short, so a SLURM queue outlasts it


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
            # requested memory is the executor's part (the listener's row names the backend too)
            lambda: sum(1 for a in read().values() if a.backend and a.requested_memory_bytes) >= tasks,
            60,
            f"executor trace rows of {dag_id}",
        )
        return read()


def _plan(tasks: dict[str, tuple[str, int]], gpus: dict[str, int] | None = None) -> Plan:
    assignments = tuple(
        Assignment(task, resource, f"{resource}#0", 0.0, 30.0, 1, memory, (gpus or {}).get(task, 0))
        for task, (resource, memory) in tasks.items()
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


ETL_PLAN = {
    "extract": ("local-small", 512 * MIB),
    "clean": ("slurm-compute", 512 * MIB),
    "aggregate": ("slurm-debug", 1024 * MIB),
    "profile": ("local-large", 512 * MIB),
    "load": ("local-small", 512 * MIB),
}
SLURM_NODES = {"debug": "agora-small", "compute": "agora-large"}


def sacct_jobs(name_prefix: str) -> list[dict[str, str]]:
    """SLURM's own record of the jobs (of the last two hours) whose name starts with ``name_prefix``."""
    fields = ["JobID", "JobName%200", "Partition", "NodeList", "State"]
    result = subprocess.run(
        ["sacct", "-X", "-n", "-P", "--starttime", "now-2hours", "-o", ",".join(fields)],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    keys = [field.split("%")[0] for field in fields]
    rows = [dict(zip(keys, line.split("|"), strict=True)) for line in result.stdout.splitlines() if line]
    return [row for row in rows if row["JobName"].startswith(name_prefix)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    slurm_cluster_or_skip()
    root = tmp_path_factory.mktemp("agora-airflow")
    dags = root / "dags"
    dags.mkdir()
    shutil.copy(REPO / "dags" / "agora_example_etl.py", dags)
    (dags / "agora_faults.py").write_text(FAULTS)
    catalog = CATALOGS / "local.yaml"
    catalogs = f"{catalog},{CATALOGS / 'slurm-loopback-spot.yaml'}"  # slurm-loopback.yaml and a spot type
    store_url = f"sqlite:///{root / 'traces.db'}"
    airflow = agora_deployment(
        root,
        catalogs,
        store_url,
        extra_env={
            "AIRFLOW__AGORA__AIRFLOW_POOLS": "True",
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": str(QUEUED_TIMEOUT_S),
            "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL": "3",
        },
    )
    airflow.migrate()
    plans = PlanStore(root / "plans")
    plans.save("agora_example_etl", _plan(ETL_PLAN))
    plans.save("agora_faults", _plan({"hog": ("local-small", 512 * MIB), "boom": ("local-large", 512 * MIB)}))
    plans.save("agora_slow", _plan({"slow_a": ("slurm-debug", 512 * MIB), "slow_b": ("local-large", 512 * MIB)}))
    plans.save("agora_patient", _plan({"patient": ("slurm-debug", 256 * MIB)}))
    plans.save("agora_spot", _plan({"crunch": ("slurm-spot", 256 * MIB)}))
    plans.save("agora_gpu", _plan({"train": ("slurm-gpu", 256 * MIB)}, gpus={"train": 1}))
    try:
        airflow.start("api-server")
        # A pool the operator made before agora: left as it is.
        airflow.request("POST", "/pools", json={"name": "agora_local-large", "slots": 7, "description": "mine"})
        airflow.start("dag-processor", "scheduler")
        for dag_id in ("agora_example_etl", "agora_faults", "agora_slow", "agora_patient", "agora_spot", "agora_gpu"):
            airflow.wait_for_dag(dag_id)
        yield Cluster(airflow, store_url, plans, catalog)
    finally:
        airflow.stop_all()


def test_the_example_pipeline_runs_each_task_where_its_plan_put_it(cluster: Cluster, tmp_path: Path) -> None:
    run_id = cluster.airflow.trigger("agora_example_etl", {"report_dir": str(tmp_path)})
    assert cluster.airflow.wait_for_run("agora_example_etl", run_id) == "success"
    resources = {r.name: r for r in load_catalog(cluster.catalog).resources}
    resources |= {r.name: r for r in load_catalog(CATALOGS / "slurm-loopback.yaml").resources}
    instances = cluster.airflow.task_instances("agora_example_etl", run_id)
    reports = {task_id: json.loads((tmp_path / f"{task_id}.json").read_text()) for task_id in ETL_PLAN}
    slurm_ids = {report["slurm_job_id"] for report in reports.values() if report["slurm_job_id"]}

    def slurm_jobs_done() -> bool:  # the task reports success before its job's worker has exited
        states = {row["JobID"]: row["State"] for row in sacct_jobs("agora-lease-agora_example_etl.")}
        return all(states.get(job_id) == "COMPLETED" for job_id in slurm_ids)

    wait_until(slurm_jobs_done, 60, "SLURM to record the jobs as completed")
    jobs = {row["JobID"]: row for row in sacct_jobs("agora-lease-agora_example_etl.")}
    for task_id, (resource_name, _) in ETL_PLAN.items():
        resource = resources[resource_name]
        seen = reports[task_id]  # written by the task itself
        assert instances[task_id]["state"] == "success" and instances[task_id]["executor"] == "agora"
        assert instances[task_id]["queue"] == resource_name
        assert (instances[task_id]["pool"], instances[task_id]["pool_slots"]) == (f"agora_{resource_name}", 1)
        if resource.backend == "local":
            assert seen["cpus"] == resource.extra["cpu_set"] and not seen["slurm_job_id"], task_id
        else:
            partition = str(resource.extra["partition"])
            assert seen["slurm_partition"] == partition, task_id
            job = jobs[seen["slurm_job_id"]]  # SLURM's record of the job the task ran in
            # a planned machine is one allocation (a lease), in which the task ran
            assert job["JobName"] == job_name(lease_key("agora_example_etl", run_id, f"{resource_name}#0"))
            assert job["Partition"] == partition
            assert job["NodeList"] == SLURM_NODES[partition]
    attempts = cluster.attempts("agora_example_etl", 5)
    for task_id, attempt in attempts.items():
        resource = resources[ETL_PLAN[task_id][0]]
        assert (attempt.resource_type, attempt.backend, attempt.state) == (resource.name, resource.backend, "success")
        assert attempt.peak_rss_bytes and attempt.runtime_s and attempt.requested_memory_bytes
        assert attempt.cpu_time_s is not None  # the worker's measure: the listener leaves sampling to it
    assert attempts["aggregate"].peak_rss_bytes > 600 * MIB  # it holds 600 MiB
    assert attempts["aggregate"].host and attempts["aggregate"].queued_at is not None  # from SLURM's records
    pools = {p["name"]: p for p in cluster.airflow.request("GET", "/pools", params={"limit": 100})["pools"]}
    for name, resource in resources.items():  # made by the executor: one slot per core of the resource
        expected = 7 if name == "local-large" else (resource.count or 0) * resource.vcpus
        assert pools[f"agora_{name}"]["slots"] == expected, name


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
    name = job_name(lease_key("agora_slow", run_id, "slurm-debug#0"))  # slow_a's planned machine
    # The restarted scheduler took over the task's lease too: it releases the allocation once the machine's
    # task is over, well before the allocation's own idle limit (LEASE_IDLE_S) would have ended it.
    wait_until(
        lambda: [j["State"] for j in sacct_jobs(name)] == ["COMPLETED"], LEASE_IDLE_S / 2, f"sacct: {name} completed"
    )
    assert "SLURM: took over allocation" in airflow.log("scheduler")
    (job,) = sacct_jobs(name)  # one allocation for the task's machine: adopted, not submitted again
    assert job["Partition"] == "debug" and job["NodeList"] == "agora-small"
    job_dirs = {p.name for p in (cluster.airflow.home.parent / "jobs").glob("agora_slow.*")}
    assert job_dirs == {job_key("agora_slow", task_id, run_id, 1, -1) for task_id in ("slow_a", "slow_b")}
    attempts = cluster.attempts("agora_slow", 2)
    assert {a.state for a in attempts.values()} == {"success"} and set(attempts) == {"slow_a", "slow_b"}


def test_a_slurm_queue_wait_longer_than_airflows_queued_timeout_runs_the_task_once(cluster: Cluster) -> None:
    """A job pending in its partition keeps its place and its token past ``task_queued_timeout``."""
    airflow = cluster.airflow
    blocker = subprocess.run(
        ["sbatch", "--parsable", "-p", "debug", "--exclusive", "-J", "agora-test-blocker", "-o", "/dev/null",
         "--wrap", "sleep 45"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.strip().split(";")[0]  # fmt: skip
    try:
        wait_until(
            lambda: [j["State"] for j in sacct_jobs("agora-test-blocker") if j["JobID"] == blocker] == ["RUNNING"],
            60,
            "the blocker to hold the debug partition",
        )
        run_id = airflow.trigger("agora_patient")
        assert airflow.wait_for_run("agora_patient", run_id, timeout_s=240) == "success"
    finally:
        subprocess.run(["scancel", blocker], capture_output=True, timeout=30, check=False)
    assert [t["try_number"] for t in airflow.tries("agora_patient", run_id, "patient")] == [1]
    name = job_name(lease_key("agora_patient", run_id, "slurm-debug#0"))  # patient's planned machine
    wait_until(lambda: [j["State"] for j in sacct_jobs(name)] == ["COMPLETED"], 60, f"sacct to show {name} completed")
    (job,) = sacct_jobs(name)  # one job: not cancelled and submitted again when Airflow found it "stuck"
    times = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job["JobID"], "-o", "Submit,Start"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.split("|")  # fmt: skip
    submitted, started = (datetime.fromisoformat(value.strip()) for value in times)
    assert (started - submitted).total_seconds() > QUEUED_TIMEOUT_S  # it did wait longer than the timeout
    # The executor recorded the queue the job met and, from accounting, its wait (the default store).
    waits = QueueWaitStore(f"sqlite:///{cluster.airflow.home / 'agora' / 'queue_waits.db'}")
    wait_until(
        lambda: job["JobID"] in {o.job_id for o in waits.observations()}, 90, "the executor to record the job's wait"
    )
    (seen,) = [o for o in waits.observations() if o.job_id == job["JobID"]]
    assert seen.features.partition == "debug" and seen.features.running_jobs >= 1  # the blocker was running
    assert seen.wait_s > QUEUED_TIMEOUT_S
    waits.close()
    log = airflow.log("scheduler")
    assert "Not revoking agora_patient.patient" in log and "waits in slurm-debug's queue" in log
    events = airflow.request("GET", "/eventLogs", params={"dag_id": "agora_patient", "limit": 100})
    assert not [e for e in events["event_logs"] if "stuck in queued" in (e["event"] or "")]
    assert cluster.attempts("agora_patient", 1)["patient"].state == "success"


def test_a_task_preempted_on_spot_runs_its_same_try_again_on_its_fallback(cluster: Cluster, tmp_path: Path) -> None:
    """SLURM preempts the spot allocation under a running shell task (with no retries): the executor re-runs
    the same try on the spot type's fallback, Airflow sees one try and its success, the trace row and the
    run's repair say what happened."""
    airflow = cluster.airflow
    report = tmp_path / "crunch.txt"
    run_id = airflow.trigger("agora_spot", {"report": str(report)})
    spot = job_name(lease_key("agora_spot", run_id, "slurm-spot#0"))  # crunch's planned machine
    wait_until(
        lambda: report.exists() and [j["State"] for j in sacct_jobs(spot)] == ["RUNNING"],
        120,
        "crunch to run on its spot machine",
        airflow,
    )
    owner = subprocess.run(  # an owner takes its node back: a compute job that needs all of agora-large's cores
        ["sbatch", "--parsable", "-p", "compute", "-c", "16", "-J", "agora-test-owner", "-o", "/dev/null",
         "--wrap", "sleep 2"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.strip().split(";")[0]  # fmt: skip
    assert airflow.wait_for_run("agora_spot", run_id, timeout_s=240) == "success"
    assert [t["try_number"] for t in airflow.tries("agora_spot", run_id, "crunch")] == [1]  # no retry spent
    assert [j["State"] for j in sacct_jobs(spot)] == ["PREEMPTED"]
    assert [j["State"] for j in sacct_jobs("agora-test-owner") if j["JobID"] == owner] == ["COMPLETED"]
    ran = [line.split() for line in report.read_text().splitlines()]  # written by the task, once per run of it
    assert [(partition, resource) for partition, resource in ran] == [
        ("spot", "slurm-spot"),
        ("compute", "slurm-compute"),
    ]
    attempt = cluster.attempts("agora_spot", 1)["crunch"]
    where = (attempt.resource_type, attempt.backend, attempt.machine)
    assert where == ("slurm-compute", "slurm", "") and attempt.state == "success"
    assert attempt.try_number == 1 and attempt.peak_rss_bytes and attempt.runtime_s and attempt.runtime_s >= 20
    with RunStore(cluster.store_url) as runs:
        (repair,) = [r for r in runs.repairs("agora_spot", run_id) if "interrupted" in r.reason]
    assert "crunch interrupted on spot slurm-spot" in repair.reason and "PREEMPTED" in repair.reason
    assert "re-run on slurm-compute (on demand), the same try 1" in repair.detail
    # The run's cost counts both: the preempted spot allocation (SLURM's accounting of the machine's lease)
    # and the re-run on compute (its attempt); recorded again once the executor has reported the lease.

    def spot_lease_reported() -> bool:
        with RunStore(cluster.store_url) as runs:
            return any(lease.machine == "slurm-spot#0" for lease in runs.leases("agora_spot", run_id))

    wait_until(spot_lease_reported, 60, "the executor to report the spot machine's lease")
    command = [sys.executable, "-m", "agora_optimizer", "runs", "record", "--dag", "agora_spot"]
    done = subprocess.run(command, env=airflow.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with RunStore(cluster.store_url) as runs:
        record = runs.get("agora_spot", run_id)
    assert record is not None and record.state == "success"
    held = {(lease.machine, lease.resource, lease.source) for lease in record.leases}
    assert held == {("slurm-spot#0", "slurm-spot", "slurm accounting"), ("", "slurm-compute", "attempt")}
    assert record.actual_cost_usd == pytest.approx(sum(lease.cost_usd for lease in record.leases))
    assert all(lease.cost_usd > 0 for lease in record.leases)


def test_a_gpu_task_runs_on_its_planned_gpu_machine_with_one_gpu_of_its_own(cluster: Cluster, tmp_path: Path) -> None:
    """A task planned with one GPU on ``slurm-gpu#0`` (partition ``accel``, node ``agora-gpu``, two
    placeholder GPUs): its machine's allocation asks SLURM for the type's GPUs, and the task sees one."""
    report = tmp_path / "train.json"
    run_id = cluster.airflow.trigger("agora_gpu", {"report": str(report)})
    assert cluster.airflow.wait_for_run("agora_gpu", run_id) == "success"
    seen = json.loads(report.read_text())  # written by the task itself
    assert (seen["SLURM_JOB_PARTITION"], seen["AGORA_RESOURCE_TYPE"]) == ("accel", "slurm-gpu")
    assert seen["CUDA_VISIBLE_DEVICES"] in ("0", "1")  # one of the allocation's two, its own
    name = job_name(lease_key("agora_gpu", run_id, "slurm-gpu#0"))
    wait_until(lambda: [j["State"] for j in sacct_jobs(name)] == ["COMPLETED"], 60, f"sacct: {name} completed")
    (job,) = sacct_jobs(name)
    assert job["JobID"] == seen["SLURM_JOB_ID"] and job["NodeList"] == "agora-gpu"
    tres = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job["JobID"], "-o", "AllocTRES"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    assert "gres/gpu=2" in tres  # the machine: its type's two GPUs, shared out among its tasks by agora
    attempt = cluster.attempts("agora_gpu", 1)["train"]
    assert (attempt.resource_type, attempt.backend, attempt.machine, attempt.state) == (
        "slurm-gpu",
        "slurm",
        "slurm-gpu#0",
        "success",
    )
    assert attempt.peak_rss_bytes and attempt.requested_memory_bytes == 256 * MIB

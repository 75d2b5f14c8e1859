"""Spot types on AWS Batch, against a moto server of this module's own (the levers below change it for good).

- A spot type's compute environment is of Spot Instances (``SPOT``, ``SPOT_PRICE_CAPACITY_OPTIMIZED``), in
  a queue of its own; its on-demand twin's stays ``EC2``; both name the real EC2 type.
- A reclaimed Spot Instance, as moto lets a test play it: a job RUNNING on the spot queue (moto's
  Docker mode, the container's start held by a Docker engine that never answers) is terminated with the
  reason AWS writes for a lost host, ``Host EC2 (instance i-...) terminated.``, and fails when its
  container's start fails (the engine's socket closed): Batch's FAILED job with that ``statusReason``.
  The backend reads it from DescribeJobs as an interruption; a job that fails otherwise stays a failure.
- The executor, with the Batch backend it makes itself from the catalog and an Airflow connection to
  that server: the interrupted try re-runs on the fallback's queue, Airflow hears one success, the
  trace row names the fallback and the run's repairs say why.

AWS itself cannot be reached from here: Batch's real reclaim is not exercised, only its documented words.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.executor.backends.aws.backend import AwsBatchBackend
from agora_optimizer.executor.backends.aws.jobs import status_from_description
from agora_optimizer.executor.jobs.spec import JobSpec, JobStatus
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.catalog import GIB, Catalog
from tests.airflow_home import private_airflow_home
from tests.executor.backends.aws.conftest import (
    IMAGE,
    REGION,
    MotoServer,
    client,
    fake_session,
    make_network,
    start_moto,
)

FLEET_ROLE = "arn:aws:iam::123456789012:role/agora-spot-fleet"  # an account that wants one

private_airflow_home("agora-spot-tests-")  # removed at exit

RECLAIMED = "Host EC2 (instance i-0a1b2c3d4e5f60718) terminated."  # AWS's words for a lost host
BUCKET = "agora-spot-jobs"
CATALOG = """
network: {bandwidth_bytes_per_s: 1250000000}
resources:
  - {name: c7i.large, backend: aws, vcpus: 2, memory_gib: 4, speed: 1.3, price_per_hour_usd: 0.08925, count: 2}
  - {name: c7i.xlarge, backend: aws, vcpus: 4, memory_gib: 8, speed: 1.3, price_per_hour_usd: 0.1785, count: 2}
  - {name: c7i.large-spot, backend: aws, vcpus: 2, memory_gib: 4, speed: 1.3, price_per_hour_usd: 0.03124,
     count: 2, spot: true, interruption_rate_per_hour: 0.0044, fallback: c7i.large}
  - {name: c7i.xlarge-spot, backend: aws, vcpus: 4, memory_gib: 8, speed: 1.3, price_per_hour_usd: 0.06248,
     count: 2, spot: true, interruption_rate_per_hour: 0.0044, fallback: c7i.xlarge}
"""


@dataclass
class Spot:
    """This module's moto server, its spot catalog, a backend on it, and a Batch client to read it."""

    moto: MotoServer
    catalog_path: Path
    catalog: Catalog
    backend: AwsBatchBackend
    batch: Any
    network: tuple[str, str, str, str]  # subnet, security group, instance profile, service role


@pytest.fixture(scope="module")
def spot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spot]:
    workdir = tmp_path_factory.mktemp("spot-moto")
    server = start_moto(workdir)
    try:
        catalog_path = workdir / "spot.yaml"
        catalog_path.write_text(CATALOG)
        catalog = load_catalog(catalog_path)
        made = make_network(server)
        role, profile, subnet, group = made.service_role, made.instance_role, made.subnet, made.security_group
        client(server, "s3").create_bucket(Bucket=BUCKET)
        backend = AwsBatchBackend(
            session=fake_session(), region_name=REGION, endpoint_url=server.url, resources=catalog.by_name
        )
        backend.ensure_infrastructure(
            catalog.resources, image=IMAGE, subnets=[subnet], security_group_ids=[group],
            instance_role=profile, service_role=role, poll_s=0.05,
        )  # fmt: skip
        yield Spot(server, catalog_path, catalog, backend, client(server, "batch"), (subnet, group, profile, role))
    finally:
        server.stop()


def wait_for(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{what} not within {timeout_s:g} s")


def spec(key: str, resource: str) -> JobSpec:
    return JobSpec(
        key=key, label=f"dag.{key}", resource=resource, cores=1, memory_bytes=GIB, time_limit_s=None,
        command=("python", "-m", "agora_optimizer.executor.worker", "--job-dir", f"/tmp/agora/{key}"),
        job_dir=Path("/var/lib/agora/jobs") / key,
    )  # fmt: skip


def batch_state(spot: Spot, job_id: str) -> str:
    return str(spot.batch.describe_jobs(jobs=[job_id])["jobs"][0]["status"])


# -- compute environments --------------------------------------------------------------------


def test_a_spot_type_gets_a_spot_compute_environment_and_its_twin_an_on_demand_one(spot: Spot) -> None:
    assert spot.backend.queue_for("c7i.large-spot", {}) == "agora-c7i-spot"
    assert spot.backend.queue_for("c7i.large", {}) == "agora-c7i"
    described = spot.batch.describe_compute_environments(computeEnvironments=["agora-c7i-spot", "agora-c7i"])
    compute = {item["computeEnvironmentName"]: item["computeResources"] for item in described["computeEnvironments"]}
    assert compute["agora-c7i-spot"]["type"] == "SPOT"
    assert compute["agora-c7i-spot"]["allocationStrategy"] == "SPOT_PRICE_CAPACITY_OPTIMIZED"
    assert compute["agora-c7i-spot"]["instanceTypes"] == ["c7i.large", "c7i.xlarge"]  # EC2's names, not the catalog's
    on_demand = compute["agora-c7i"]
    assert on_demand["type"] == "EC2" and on_demand["allocationStrategy"] == "BEST_FIT_PROGRESSIVE"
    queues = spot.batch.describe_job_queues(jobQueues=["agora-c7i-spot"])["jobQueues"]
    assert [queue["state"] for queue in queues] == ["ENABLED"]


def test_agora_aws_provision_makes_spot_queues_for_the_bundled_spot_catalog(
    spot: Spot, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agora_optimizer.cli import main
    from tests.conftest import CATALOGS

    extra = {"region_name": REGION, "endpoint_url": spot.moto.url}
    connection = {"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_AGORA_SPOT", json.dumps(connection))
    subnet, group, profile, role = spot.network
    code = main(
        ["aws", "provision", "--catalog", str(CATALOGS / "aws-us-east-1-spot.yaml"), "--conn-id", "agora_spot",
         "--image", IMAGE, "--subnets", subnet, "--security-group-ids", group, "--instance-role", profile,
         "--service-role", role, "--spot-fleet-role", FLEET_ROLE]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert {"created job queue agora-m7i-spot", "created job queue agora-r7i-spot"} <= set(out.splitlines())
    assert "already there job queue agora-c7i-spot" in out.splitlines()  # the module's, from its own catalog
    [m7i] = spot.batch.describe_compute_environments(computeEnvironments=["agora-m7i-spot"])["computeEnvironments"]
    resources = m7i["computeResources"]
    assert (resources["type"], resources["allocationStrategy"]) == ("SPOT", "SPOT_PRICE_CAPACITY_OPTIMIZED")
    assert resources["instanceTypes"] == ["m7i.large", "m7i.xlarge"]
    assert resources["spotIamFleetRole"] == FLEET_ROLE  # as the option (or [agora] aws_spot_fleet_role) says
    [m7i_on_demand] = spot.batch.describe_compute_environments(computeEnvironments=["agora-m7i"])["computeEnvironments"]
    assert m7i_on_demand["computeResources"]["type"] == "EC2"
    assert "spotIamFleetRole" not in m7i_on_demand["computeResources"]  # on demand: no Spot Fleet


def test_a_planned_machine_of_a_spot_type_gets_a_spot_compute_environment_of_its_own(spot: Spot) -> None:
    from agora_optimizer.executor.backends.aws.provisioning import ComputeNetwork

    spot_type = spot.catalog.by_name["c7i.xlarge-spot"]
    queue = spot.backend.lease_queue(spot_type.name, {})
    assert queue == "agora-c7i-xlarge-spot"
    [described] = spot.batch.describe_compute_environments(computeEnvironments=["agora-c7i-spot"])[
        "computeEnvironments"
    ]
    network = ComputeNetwork(
        subnets=described["computeResources"]["subnets"],
        security_group_ids=described["computeResources"]["securityGroupIds"],
        instance_role=described["computeResources"]["instanceRole"],
        service_role=described.get("serviceRole"),
    )
    spot.backend.provisioner.create_type_queue(spot_type, queue, network, timeout_s=30)
    [made] = spot.batch.describe_compute_environments(computeEnvironments=[queue])["computeEnvironments"]
    assert made["computeResources"]["type"] == "SPOT" and made["computeResources"]["instanceTypes"] == ["c7i.xlarge"]


def test_a_queue_of_spot_and_on_demand_types_is_refused_naming_both(spot: Spot) -> None:
    from dataclasses import replace

    from agora_optimizer.executor.jobs.spec import BackendError

    mixed = [replace(r, extra={"job_queue": "agora-mixed"}) for r in spot.catalog.resources if "large" in r.name]
    with pytest.raises(BackendError, match=r"agora-mixed would hold spot types \(c7i.large-spot"):
        spot.backend.ensure_infrastructure(
            mixed, image=IMAGE, subnets=["subnet-1"], security_group_ids=["sg-1"], instance_role="role", dry_run=True
        )


# -- interruptions ---------------------------------------------------------------------------


def test_batchs_words_for_a_lost_host_are_an_interruption_and_other_failures_are_not() -> None:
    failed = {"status": "FAILED", "container": {}, "attempts": []}
    assert status_from_description({**failed, "statusReason": RECLAIMED}).interrupted
    assert status_from_description({**failed, "statusReason": "Host EC2 Terminated"}).interrupted  # older wording
    on_attempt = {**failed, "statusReason": "", "attempts": [{"statusReason": "Host EC2 (instance i-1) terminated."}]}
    assert status_from_description(on_attempt).interrupted  # a job whose own reason Batch left empty
    for reason in ("Essential container in task exited", "cancelled by agora", "Task failed to start"):
        plain = status_from_description({**failed, "statusReason": reason})
        assert not plain.interrupted and plain.phase == "finished" and plain.exit_code == 1
    succeeded = status_from_description({"status": "SUCCEEDED", "statusReason": RECLAIMED, "container": {}})
    assert succeeded.succeeded and not succeeded.interrupted


def reclaim(spot: Spot, job_id: str) -> None:
    """Play a Spot reclaim on a job RUNNING in moto's Docker mode: terminate it with AWS's words for a lost host,
    then let its container's start fail (the engine's socket closes): Batch fails it with that reason."""
    spot.batch.terminate_job(jobId=job_id, reason=RECLAIMED)
    spot.moto.batch_runs_containers(False)  # jobs submitted from now on succeed at submit (the fallback's)
    spot.moto.close_docker()
    wait_for(lambda: batch_state(spot, job_id) == "FAILED", 20, "FAILED")


def running_job(spot: Spot, submit: Callable[[], str]) -> str:
    spot.moto.batch_runs_containers(True)
    spot.moto.job_transitions({"progression": "time", "seconds": 0.1})
    job_id = submit()
    wait_for(lambda: batch_state(spot, job_id) == "RUNNING", 20, "RUNNING")
    return job_id


def test_a_reclaimed_spot_job_is_interrupted_and_a_failed_one_is_not(spot: Spot) -> None:
    """Also leaves the module's server with its Docker engine gone: every test after it submits in simple mode."""
    job_id = running_job(spot, lambda: spot.backend.submit(spec("reclaimed", "c7i.large-spot")))
    assert spot.backend.status([job_id])[job_id].phase == "running"
    reclaim(spot, job_id)
    status: JobStatus = spot.backend.status([job_id])[job_id]
    assert status.phase == "finished" and status.interrupted and not status.succeeded
    assert RECLAIMED in status.reason

    spot.moto.batch_runs_containers(True)  # the engine is gone: a job that reaches RUNNING fails, for no reason
    failed_id = spot.backend.submit(spec("fails", "c7i.large-spot"))
    wait_for(lambda: batch_state(spot, failed_id) == "FAILED", 20, "FAILED")
    failed = spot.backend.status([failed_id])[failed_id]
    assert failed.phase == "finished" and not failed.interrupted and failed.exit_code == 1
    spot.moto.batch_runs_containers(False)


def test_the_executor_reruns_a_reclaimed_spot_task_on_its_fallback_and_airflow_sees_one_success(
    spot: Spot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real AgoraExecutor and AwsBatchBackend on moto; only Airflow's metadata database is played (the
    try is put back to QUEUED there: :func:`requeue_task_instance`, recorded here)."""
    from airflow.utils.state import TaskInstanceState

    from agora_optimizer.executor import airflow_db
    from agora_optimizer.executor.agora_executor import AgoraExecutor
    from agora_optimizer.executor.lifecycle import parse_external_id
    from agora_optimizer.runs.store import RunStore

    requeued: list[tuple[Any, int]] = []
    monkeypatch.setattr(airflow_db, "requeue_task_instance", lambda ti_id, n: requeued.append((ti_id, n)) or "")
    monkeypatch.setenv("AIRFLOW__AGORA__CATALOG", str(spot.catalog_path))
    monkeypatch.setenv("AIRFLOW__AGORA__STATE_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW__AGORA__TRACE_STORE_URL", f"sqlite:///{tmp_path / 'traces.db'}")
    monkeypatch.setenv("AIRFLOW__AGORA__AWS_S3_PREFIX", f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/")
    extra = {"region_name": REGION, "endpoint_url": spot.moto.url}
    connection = {"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_AGORA_SPOT", json.dumps(connection))
    monkeypatch.setenv("AIRFLOW__AGORA__AWS_CONN_ID", "agora_spot")
    executor = AgoraExecutor()
    executor.start()  # its Batch backend is its own, made from the catalog and the connection
    item = workload("t", "c7i.large-spot")
    executor.queue_workload(item, session=None)

    # The reclaim, played on a job held in SUBMITTED (the module's Docker engine is gone, or goes now: a job
    # reaching RUNNING fails at once): terminated with AWS's words, it walks on and fails with them.
    spot.moto.close_docker()
    spot.moto.batch_runs_containers(True)
    spot.moto.job_transitions({"progression": "manual", "times": 10**9})
    executor.trigger_tasks(executor.parallelism)
    state, external_id = executor.get_event_buffer()[item.ti.key]  # queued on Batch, under its external id
    assert state == TaskInstanceState.QUEUED
    _, resource, spot_id = parse_external_id(external_id)  # type: ignore[misc]
    assert resource == "c7i.large-spot"
    [described] = spot.batch.describe_jobs(jobs=[spot_id])["jobs"]
    assert described["jobQueue"].endswith("job-queue/agora-c7i-spot")
    spot.moto.reset_recording()
    spot.batch.terminate_job(jobId=spot_id, reason=RECLAIMED)
    spot.moto.batch_runs_containers(False)  # the fallback's job succeeds at submit
    spot.moto.job_transitions(None)
    wait_for(lambda: batch_state(spot, spot_id) == "FAILED", 20, "FAILED")

    events: dict[Any, Any] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and events.get(item.ti.key, (None,))[0] not in (
        TaskInstanceState.SUCCESS,
        TaskInstanceState.FAILED,
    ):
        executor.sync()
        events.update(executor.get_event_buffer())
        time.sleep(0.05)
    executor.end()
    assert events[item.ti.key][0] == TaskInstanceState.SUCCESS  # one success; no failure ever reached Airflow
    assert requeued == [(item.ti.id, 1)]
    [rerun] = spot.moto.recorded("submitjob")
    assert rerun["jobQueue"] == "agora-c7i" and rerun["tags"]["agora-resource"] == "c7i.large"
    logged = capsys.readouterr().out  # Airflow's structlog writes the executor's log there
    assert (
        "unit.t run r1 try 1 was interrupted on spot c7i.large-spot (Host EC2 (instance i-0a1b2c3d4e5f60718) "
        "terminated.); re-running it on c7i.large (on demand), same try" in logged
    )
    with RunStore(f"sqlite:///{tmp_path / 'traces.db'}") as store:
        (attempt,) = store.attempts(dag_id="unit")
        (repair,) = store.repairs("unit", "r1")
    assert attempt.resource_type == "c7i.large" and attempt.state == "success" and attempt.try_number == 1
    assert repair.reason == f"task t interrupted on spot c7i.large-spot: {RECLAIMED}" and repair.tasks == ("t",)
    assert f"aws job {spot_id}" in repair.detail and "re-run on c7i.large (on demand), the same try 1" in repair.detail


def workload(task_id: str, resource: str) -> Any:
    from airflow.executors.workloads import ExecuteTask
    from airflow.executors.workloads.base import BundleInfo
    from airflow.executors.workloads.task import TaskInstanceDTO

    placement = {"resource": resource, "cores": 1, "memory_bytes": GIB}
    ti = TaskInstanceDTO(
        id=uuid.uuid4(), dag_version_id=uuid.uuid4(), task_id=task_id, dag_id="unit", run_id="r1", try_number=1,
        map_index=-1, pool_slots=1, priority_weight=1, queue="default",
        executor_config={"agora": {"placement": placement}},
    )  # fmt: skip
    return ExecuteTask(
        ti=ti, dag_rel_path="unit.py", token="first", log_path=None, bundle_info=BundleInfo(name="dags-folder")
    )

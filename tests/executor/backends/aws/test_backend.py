"""The AWS Batch backend against a moto server on loopback (see conftest.py for what moto plays).

What moto cannot produce (throttling, 5xx, OOM kills, exit codes) is tested on AWS's
documented shapes: canned HTTP answers parsed by botocore, and DescribeJobs job details.
"""

from __future__ import annotations

import json
import re
import sys
import time
import types
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError

from agora_optimizer.executor.backends.aws.backend import AwsBatchBackend
from agora_optimizer.executor.backends.aws.credentials import session_from_connection
from agora_optimizer.executor.backends.aws.jobs import (
    attempt_duration_s,
    batch_job_name,
    memory_mib,
    queue_name,
    status_from_description,
)
from agora_optimizer.executor.backends.aws.provisioning import Infrastructure
from agora_optimizer.executor.jobs.spec import BackendError, JobSpec, JobStatus, job_key
from agora_optimizer.model.catalog import GIB, Catalog
from harness.local_airflow import free_port
from tests.executor.backends.aws.canned import CannedServer, batch_error
from tests.executor.backends.aws.conftest import (
    IMAGE,
    REGION,
    SPECIAL_QUEUE,
    MotoServer,
    Network,
    fake_session,
    setup_infrastructure,
)

WORKER = ("python", "-m", "agora_optimizer.executor.worker", "--job-dir", "/var/lib/agora/jobs/k")
FAMILIES = ("c5", "c6i", "c7i", "m5", "m6i", "m7i", "r5", "r6i", "r7i", "g5", "g6", "p4d", "p5")
JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")  # Batch's rule for job names


def spec(
    key: str,
    resource: str = "c5.large",
    *,
    cores: int = 1,
    memory_bytes: int = GIB,
    time_limit_s: float | None = None,
    options: Mapping[str, object] | None = None,
    environment: Mapping[str, str] | None = None,
) -> JobSpec:
    return JobSpec(
        key=key,
        label=f"dag.{key}",
        resource=resource,
        cores=cores,
        memory_bytes=memory_bytes,
        time_limit_s=time_limit_s,
        command=WORKER,
        job_dir=Path("/var/lib/agora/jobs") / key,
        options=options or {},
        environment=environment or {},
    )


def wait_for(check: Callable[[], JobStatus | None], timeout_s: float, what: str) -> JobStatus:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{what} not within {timeout_s:g} s")


# -- setting up an account -------------------------------------------------------------------


def test_ensure_infrastructure_makes_a_queue_and_compute_environment_per_family(
    infrastructure: Infrastructure, batch: Any, catalog: Catalog, backend: AwsBatchBackend, network: Network
) -> None:
    assert set(infrastructure.queues) == {f"agora-{family}" for family in FAMILIES} | {SPECIAL_QUEUE}
    assert infrastructure.queues["agora-c5"] == ("c5.large", "c5.xlarge", "c5.2xlarge")
    assert infrastructure.queues[SPECIAL_QUEUE] == ("c5.4xlarge",)
    assert len(infrastructure.created) == 2 * len(infrastructure.queues) + 1

    environments = {
        e["computeEnvironmentName"]: e for e in batch.describe_compute_environments()["computeEnvironments"]
    }
    queues = {q["jobQueueName"]: q for q in batch.describe_job_queues()["jobQueues"]}
    assert set(queues) == set(environments) == set(infrastructure.queues)
    c5 = environments["agora-c5"]
    assert c5["type"] == "MANAGED" and c5["serviceRole"] == network.service_role
    resources = c5["computeResources"]
    assert sorted(resources["instanceTypes"]) == ["c5.2xlarge", "c5.large", "c5.xlarge"]
    assert (resources["minvCpus"], resources["maxvCpus"]) == (0, 8 * 2 + 8 * 4 + 8 * 8)  # catalog count x vcpus
    assert resources["subnets"] == [network.subnet] and resources["securityGroupIds"] == [network.security_group]
    assert environments[SPECIAL_QUEUE]["computeResources"]["maxvCpus"] == 256  # no count in the catalog
    order = queues["agora-r7i"]["computeEnvironmentOrder"]
    assert [entry["computeEnvironment"] for entry in order] == [environments["agora-r7i"]["computeEnvironmentArn"]]

    [definition] = batch.describe_job_definitions(jobDefinitionName="agora-worker", status="ACTIVE")["jobDefinitions"]
    assert definition["jobDefinitionArn"] == infrastructure.job_definition_arn
    assert definition["containerProperties"]["image"] == IMAGE

    again = setup_infrastructure(backend, catalog, network, IMAGE)
    assert again.created == ()
    assert len(again.existing) == len(infrastructure.queues) + 1
    assert again.job_definition_arn == infrastructure.job_definition_arn


def test_a_new_image_registers_a_new_revision_of_the_job_definition(
    infrastructure: Infrastructure, backend: AwsBatchBackend, catalog: Catalog, network: Network
) -> None:
    newer = setup_infrastructure(backend, catalog, network, "agora:test-2")
    assert newer.updated == (f"job definition {newer.job_definition_arn}",) and newer.created == ()
    assert newer.job_definition_arn.endswith("agora-worker:2")
    back = setup_infrastructure(backend, catalog, network, IMAGE)
    assert back.job_definition_arn.endswith(":3")  # the active revision with this image is the newest again


def test_ensure_infrastructure_reports_what_batch_refuses(
    backend: AwsBatchBackend, catalog: Catalog, network: Network
) -> None:
    fresh = replace(catalog.by_name["m5.large"], extra={"job_queue": "agora-fresh"})
    with pytest.raises(BackendError) as caught:
        backend.ensure_infrastructure(
            [fresh],
            image=IMAGE,
            subnets=["subnet-0000000000000000"],
            security_group_ids=[network.security_group],
            instance_role=network.instance_role,
            service_role=network.service_role,
        )
    assert not caught.value.transient
    assert "cannot create compute environment agora-fresh for m5.large" in caught.value.reason
    assert "subnet-0000000000000000 does not exist" in caught.value.reason  # moto's message
    local = replace(catalog.by_name["m5.large"], backend="local")
    with pytest.raises(BackendError, match="no resource with backend aws"):
        setup_infrastructure(backend, replace(catalog, resources=(local,)), network, IMAGE)


# -- queue names, job names, sizes -----------------------------------------------------------


def test_queue_naming() -> None:
    assert queue_name("c5.large", {}) == "agora-c5"
    assert queue_name("m6i.2xlarge", {}) == "agora-m6i"
    assert queue_name("c5.large", {}, "agora-{type}") == "agora-c5-large"
    assert queue_name("c5.large", {"job_queue": "gpu-queue"}) == "gpu-queue"
    arn = "arn:aws:batch:us-east-1:123456789012:job-queue/shared"
    assert queue_name("c5.large", {"job_queue": arn}) == arn
    with pytest.raises(BackendError, match=r"resource c5.large: job queue name 'bad queue'"):
        queue_name("c5.large", {"job_queue": "bad queue"})
    with pytest.raises(BackendError, match=r"queue pattern 'agora-\{size\}' is malformed"):
        AwsBatchBackend(region_name=REGION, queue_pattern="agora-{size}")


def test_job_names_follow_batch_rules() -> None:
    short = job_key("etl.daily", "extract.users", "scheduled__2026-11-30T00:00:00+00:00", 1, 3)
    assert batch_job_name(short) == short.replace(".", "_")
    long_a = job_key("d" * 150, "task", "run", 1, -1)
    long_b = job_key("d" * 150, "task", "run", 2, -1)
    assert batch_job_name(long_a) == long_a.replace(".", "_") != batch_job_name(long_b)  # a key is never cut
    cut_a, cut_b = "d" * 150 + "a", "d" * 150 + "b"  # names longer than Batch allows keep a hash of the whole
    for key in (short, long_a, long_b, cut_a, "_leading_underscore", "x" * 128):
        name = batch_job_name(key)
        assert JOB_NAME.match(name), name
    assert len(batch_job_name(cut_a)) == 128
    assert batch_job_name(cut_a) != batch_job_name(cut_b)


def test_memory_and_timeout_sizes() -> None:
    assert memory_mib(GIB) == 1024
    assert memory_mib(GIB + 1) == 1025
    assert attempt_duration_s(None) is None
    assert attempt_duration_s(5) == 60  # Batch's minimum
    assert attempt_duration_s(600.5) == 631  # the worker's own limit first, Batch 30 s later


# -- submit ----------------------------------------------------------------------------------


def test_submit_sends_queue_resources_command_environment_timeout_and_tags(
    backend: AwsBatchBackend, infrastructure: Infrastructure, batch: Any, moto: MotoServer
) -> None:
    key = job_key("etl.daily", "load", "manual__2026-11-30T10:00:00+00:00", 2, -1)
    environment = {
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": "http://airflow:8080/execution/",
        "AGORA_RUN": "42",
        "PATH": "/home/scheduler/.venv/bin:/usr/bin",
        "AIRFLOW_CONN_WAREHOUSE": "postgres://user:pw@db/warehouse",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://airflow:pw@db/airflow",
        "AIRFLOW__CORE__SQL_ALCHEMY_CONN": "postgresql://airflow:pw@db/airflow",  # deprecated, still read
        "AIRFLOW__CORE__SQL_ALCHEMY_CONN_CMD": "cat /secret/db",
        "AIRFLOW__CELERY__BROKER_URL": "redis://:pw@redis:6379/0",
    }
    job = spec(key, "m6i.xlarge", cores=3, memory_bytes=5 * GIB + 1, time_limit_s=600.5, environment=environment)
    moto.reset_recording()
    job_id = backend.submit(job)

    [described] = batch.describe_jobs(jobs=[job_id])["jobs"]
    assert described["jobQueue"].endswith(":job-queue/agora-m6i")
    [definition] = batch.describe_job_definitions(jobDefinitions=[described["jobDefinition"]])["jobDefinitions"]
    assert definition["jobDefinitionName"] == "agora-worker" and definition["containerProperties"]["image"] == IMAGE
    assert described["jobName"] == batch_job_name(key)
    assert described["container"]["command"] == list(WORKER)
    sent = {pair["name"]: pair["value"] for pair in described["container"]["environment"]}
    assert sent["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow:8080/execution/"
    assert sent["AGORA_RUN"] == "42"
    assert set(sent) - {"AWS_BATCH_JOB_ID"} == {
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL",
        "AGORA_RUN",
    }  # Batch adds its id
    assert described["timeout"] == {"attemptDurationSeconds": 631}
    assert described["tags"] == {"agora-key": key, "agora-resource": "m6i.xlarge"}

    [request] = moto.recorded("submitjob")
    assert request["containerOverrides"]["resourceRequirements"] == [
        {"type": "VCPU", "value": "3"},
        {"type": "MEMORY", "value": "5121"},  # 5 GiB + 1 byte, rounded up to MiB
    ]


def test_a_resource_with_its_own_queue_submits_there(
    backend: AwsBatchBackend, infrastructure: Infrastructure, batch: Any
) -> None:
    job_id = backend.submit(spec("special", "c5.4xlarge", options={"job_queue": SPECIAL_QUEUE}))
    [described] = batch.describe_jobs(jobs=[job_id])["jobs"]
    assert described["jobQueue"].endswith(f":job-queue/{SPECIAL_QUEUE}")


def test_an_unknown_queue_is_a_permanent_error_naming_resource_and_queue(
    backend: AwsBatchBackend, infrastructure: Infrastructure
) -> None:
    with pytest.raises(BackendError) as caught:
        backend.submit(spec("nowhere", "x9.large"))
    error = caught.value
    assert not error.transient
    assert "resource x9.large" in error.reason and "job queue 'agora-x9'" in error.reason
    assert "ClientException" in error.reason and "does not exist" in error.reason  # AWS's (moto's) own message
    with pytest.raises(BackendError, match="empty command") as empty:
        backend.submit(JobSpec("k", "l", "c5.large", 1, GIB, None, ("python", ""), Path("/tmp")))
    assert not empty.value.transient


# -- status ----------------------------------------------------------------------------------


def test_a_job_that_succeeds(backend: AwsBatchBackend, infrastructure: Infrastructure) -> None:
    before = datetime.now(UTC)
    job_id = backend.submit(spec("succeeds"))
    status = backend.status([job_id])[job_id]
    assert status.phase == "finished" and status.exit_code == 0 and status.succeeded
    assert status.host == f"agora-worker/default/{job_id}"  # the container's CloudWatch log stream
    assert status.queued_at is not None and status.started_at is not None and status.ended_at is not None
    assert status.queued_at.tzinfo is UTC
    assert abs((status.queued_at - before).total_seconds()) < 24 * 3600  # moto stamps local time as UTC
    assert status.queued_at <= status.started_at <= status.ended_at


def test_status_follows_a_job_from_submitted_through_running_to_failed(
    backend: AwsBatchBackend, infrastructure: Infrastructure, moto: MotoServer
) -> None:
    moto.batch_runs_containers(True)
    moto.job_transitions({"progression": "manual", "times": 10**9})  # held in SUBMITTED
    job_id = backend.submit(spec("walks"))
    held = backend.status([job_id])[job_id]
    assert held.phase == "pending" and held.queued_at is not None and held.started_at is None

    moto.job_transitions({"progression": "time", "seconds": 0.1})  # one state further every 0.1 s
    seen: list[str] = []

    def running() -> JobStatus | None:
        status = backend.status([job_id])[job_id]
        seen.append(status.phase)
        # moto stamps startedAt a moment after the state turns (AWS at once): wait for both
        return status if status.phase == "running" and status.started_at is not None else None

    status = wait_for(running, 15, "RUNNING")
    assert set(seen) == {"pending", "running"}
    assert status.started_at is not None and status.host and status.exit_code is None
    assert status.host.startswith("arn:aws:batch:")  # the attempt's task ARN: no log stream before the container

    moto.close_docker()  # the container cannot start: Batch fails the job, without an exit code

    def finished() -> JobStatus | None:
        status = backend.status([job_id])[job_id]
        return status if status.phase == "finished" else None

    failed = wait_for(finished, 15, "FAILED")
    assert failed.exit_code == 1 and not failed.succeeded and not failed.oom_killed
    assert failed.ended_at is not None and status.started_at <= failed.ended_at


def test_status_asks_in_chunks_of_100_and_reports_unknown_ids_lost(
    backend: AwsBatchBackend, infrastructure: Infrastructure, moto: MotoServer
) -> None:
    real = [backend.submit(spec(f"chunk{index}")) for index in range(3)]
    ghosts = [str(uuid.uuid4()) for _ in range(230)]
    moto.reset_recording()
    statuses = backend.status([*ghosts[:120], *real, *ghosts[120:]])
    assert [len(call["jobs"]) for call in moto.recorded("describejobs")] == [100, 100, 33]
    assert all(statuses[job_id].phase == "finished" for job_id in real)
    assert all(statuses[ghost].phase == "lost" and ghost in statuses[ghost].reason for ghost in ghosts)


OOM_REASON = "OutOfMemoryError: Container killed due to memory usage"


def detail(status: str, **fields: Any) -> dict[str, Any]:
    """A DescribeJobs ``JobDetail`` as AWS documents it (only the fields the mapping reads)."""
    return {
        "jobId": "0ff1c3d4-0000-4000-8000-000000000001",
        "jobName": "k",
        "status": status,
        "createdAt": 1_764_500_000_000,
        **fields,
    }


@pytest.mark.parametrize("state", ["SUBMITTED", "PENDING", "RUNNABLE", "STARTING"])
def test_states_before_running_are_pending(state: str) -> None:
    status = status_from_description(detail(state))
    assert status.phase == "pending" and status.queued_at == datetime(2025, 11, 30, 10, 53, 20, tzinfo=UTC)


def test_running_job_mapping() -> None:
    status = status_from_description(
        detail(
            "RUNNING",
            startedAt=1_764_500_060_500,
            container={"logStreamName": "agora-worker/default/abc", "taskArn": "arn:aws:ecs:task/1"},
        )
    )
    assert status.phase == "running" and status.host == "agora-worker/default/abc"
    assert status.started_at == datetime(2025, 11, 30, 10, 54, 20, 500000, tzinfo=UTC) and status.ended_at is None


@pytest.mark.parametrize(
    ("fields", "exit_code", "oom_killed", "reason"),
    [
        ({"status": "SUCCEEDED", "container": {"exitCode": 0}}, 0, False, ""),
        (
            {"status": "FAILED", "statusReason": "Essential container in task exited", "container": {"exitCode": 2}},
            2,
            False,
            "Essential container in task exited",
        ),
        ({"status": "FAILED", "statusReason": "cancelled by agora"}, 1, False, "cancelled by agora"),
        (
            {
                "status": "FAILED",
                "statusReason": "Essential container in task exited",
                "container": {"exitCode": 137, "reason": OOM_REASON},
            },
            137,
            True,
            f"Essential container in task exited; {OOM_REASON}",
        ),
        (
            {"status": "FAILED", "statusReason": OOM_REASON, "attempts": [{"container": {"exitCode": 137}}]},
            137,
            True,
            OOM_REASON,
        ),
        (
            {
                "status": "FAILED",
                "statusReason": "Job attempt duration exceeded timeout",
                "container": {"exitCode": 137},
            },
            137,
            False,
            "Job attempt duration exceeded timeout",
        ),
    ],
)
def test_finished_job_mapping(fields: dict[str, Any], exit_code: int, oom_killed: bool, reason: str) -> None:
    state = fields.pop("status")
    status = status_from_description(detail(state, startedAt=1_764_500_060_000, stoppedAt=1_764_500_120_000, **fields))
    assert (status.phase, status.exit_code, status.oom_killed, status.reason) == (
        "finished",
        exit_code,
        oom_killed,
        reason,
    )
    assert status.ended_at == datetime(2025, 11, 30, 10, 55, 20, tzinfo=UTC)


def test_an_unknown_state_keeps_the_job_watched() -> None:
    status = status_from_description(detail("HIBERNATING"))
    assert status.phase == "pending" and "HIBERNATING" in status.reason


# -- cancel ----------------------------------------------------------------------------------


def test_cancel_terminates_the_job(
    backend: AwsBatchBackend, infrastructure: Infrastructure, batch: Any, moto: MotoServer
) -> None:
    moto.batch_runs_containers(True)
    moto.job_transitions({"progression": "manual", "times": 10**9})  # held in SUBMITTED
    job_id = backend.submit(spec("cancelled"))
    moto.reset_recording()
    backend.cancel(job_id)
    assert [(call["jobId"], call["reason"]) for call in moto.recorded("terminatejob")] == [
        (job_id, "cancelled by agora")
    ]
    [described] = batch.describe_jobs(jobs=[job_id])["jobs"]
    assert described["statusReason"] == "cancelled by agora"
    backend.cancel("no-such-job")  # never raises


# -- errors ----------------------------------------------------------------------------------


def test_an_unreachable_endpoint_is_transient_and_fails_within_seconds() -> None:
    dead = AwsBatchBackend(session=fake_session(), region_name=REGION, endpoint_url=f"http://127.0.0.1:{free_port()}")
    for call in (lambda: dead.status(["some-job"]), lambda: dead.submit(spec("dead"))):
        started = time.monotonic()
        with pytest.raises(BackendError) as caught:
            call()
        assert time.monotonic() - started < 6
        assert caught.value.transient and "unreachable" in caught.value.reason
    started = time.monotonic()
    dead.cancel("some-job")
    assert time.monotonic() - started < 6


@pytest.mark.parametrize(
    ("status", "code", "transient"),
    [
        (429, "TooManyRequestsException", True),
        (400, "ThrottlingException", True),
        (500, "ServerException", True),
        (503, "ServiceUnavailable", True),
        (400, "ClientException", False),
        (400, "ValidationException", False),
    ],
)
def test_errors_as_aws_sends_them(canned: CannedServer, status: int, code: str, transient: bool) -> None:
    canned.answer = batch_error(status, code, "as AWS says it")
    backend = AwsBatchBackend(
        session=fake_session(), region_name=REGION, endpoint_url=canned.endpoint_url, max_attempts=1
    )
    with pytest.raises(BackendError) as caught:
        backend.submit(spec("canned", "r5.large"))
    assert caught.value.transient is transient
    assert f"{code}: as AWS says it" in caught.value.reason and "r5.large" in caught.value.reason


# -- credentials from Airflow's connection ---------------------------------------------------


def test_an_airflow_connection_uri_gives_credentials_region_and_endpoint(
    moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_AWS_DEFAULT",
        f"aws://AKIDAGORAURI:secret%2Fkey@/?region_name=eu-west-1&endpoint_url={quote(moto.url, safe='')}",
    )
    backend = AwsBatchBackend.from_airflow("aws_default", "agora-worker")
    assert backend.client.meta.region_name == "eu-west-1"
    assert backend.client.meta.endpoint_url == moto.url
    moto.reset_recording()
    assert backend.status(["ghost"])["ghost"].phase == "lost"  # moto answered
    [call] = moto.recorded("describejobs")
    assert "Credential=AKIDAGORAURI/" in call["headers"]["Authorization"]
    assert "/eu-west-1/batch/aws4_request" in call["headers"]["Authorization"]


def test_an_airflow_connection_in_json(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    connection = {
        "conn_type": "aws",
        "login": "AKIDAGORAJSON",
        "password": "secret",
        "extra": {
            "region_name": "us-west-2",
            "endpoint_url": "http://not-this-one:1",
            "service_config": {"batch": {"endpoint_url": moto.url}},
            "aws_session_token": "token",
        },
    }
    monkeypatch.setenv("AIRFLOW_CONN_AGORA_JSON", json.dumps(connection))
    found = session_from_connection("agora_json")
    assert (found.region_name, found.endpoint_url) == ("us-west-2", moto.url)
    credentials = found.session.get_credentials()
    assert credentials is not None
    assert (credentials.access_key, credentials.secret_key, credentials.token) == ("AKIDAGORAJSON", "secret", "token")


def test_an_assumed_role_needs_the_amazon_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_AGORA_ROLE", json.dumps({"conn_type": "aws", "extra": {"role_arn": "arn:aws:iam::1:role/x"}})
    )
    with pytest.raises(BackendError, match="role_arn needs apache-airflow-providers-amazon") as caught:
        session_from_connection("agora_role")
    assert not caught.value.transient


def test_without_a_connection_boto3s_default_chain_is_used(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDAGORACHAIN")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-southeast-2")
    monkeypatch.setenv("AWS_ENDPOINT_URL_BATCH", moto.url)
    backend = AwsBatchBackend.from_airflow("agora_no_such_connection")
    assert backend.client.meta.region_name == "ap-southeast-2"
    moto.reset_recording()
    backend.status(["ghost"])
    [call] = moto.recorded("describejobs")
    assert "Credential=AKIDAGORACHAIN/" in call["headers"]["Authorization"]


def test_with_the_amazon_provider_its_hook_builds_the_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in for the provider's AwsBaseHook (the provider is not installed here), with the
    calls the backend makes on the real one: region_name, get_session, conn_config's endpoint."""
    calls: list[tuple[str, object]] = []
    session = fake_session()

    class ConnConfig:
        def get_service_endpoint_url(self, service_name: str) -> str:
            calls.append(("endpoint", service_name))
            return "http://127.0.0.1:4566"

    class AwsBaseHook:
        def __init__(self, aws_conn_id: str, client_type: str) -> None:
            calls.append(("hook", (aws_conn_id, client_type)))
            self.region_name = "eu-central-1"
            self.conn_config = ConnConfig()

        def get_session(self, region_name: str | None = None) -> boto3.session.Session:
            calls.append(("session", region_name))
            return session

    module = types.ModuleType("airflow.providers.amazon.aws.hooks.base_aws")
    module.AwsBaseHook = AwsBaseHook  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "airflow.providers.amazon.aws.hooks.base_aws", module)
    found = session_from_connection("aws_prod")
    assert found.session is session
    assert (found.region_name, found.endpoint_url) == ("eu-central-1", "http://127.0.0.1:4566")
    assert calls == [("hook", ("aws_prod", "batch")), ("session", "eu-central-1"), ("endpoint", "batch")]

    def unreachable_sts(self: AwsBaseHook, region_name: str | None = None) -> boto3.session.Session:
        raise EndpointConnectionError(endpoint_url="https://sts.eu-central-1.amazonaws.com/")

    monkeypatch.setattr(AwsBaseHook, "get_session", unreachable_sts)  # assuming a role calls STS here
    with pytest.raises(BackendError, match="aws_prod: cannot open an AWS session") as caught:
        session_from_connection("aws_prod")
    assert caught.value.transient

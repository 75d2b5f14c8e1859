"""Planned machines on AWS Batch: one compute environment and job queue per instance type.

AWS cannot be reached from here: these tests run against the moto server of conftest.py, which
plays Batch's API (queues, compute environments, jobs that succeed at submit in simple mode).
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.backends.aws.backend import AwsBatchBackend
from agora_optimizer.executor.backends.aws.jobs import type_queue_name
from agora_optimizer.executor.backends.aws.provisioning import ComputeNetwork
from agora_optimizer.executor.backends.aws.settings import aws_compute_network
from agora_optimizer.executor.jobs.spec import BackendError, MachineLease, lease_key
from agora_optimizer.model.catalog import Catalog, Resource
from tests.executor.backends.aws.conftest import REGION, SPECIAL_QUEUE, MotoServer, Network, fake_session
from tests.executor.backends.aws.test_backend import spec


def lease_of(resource: Resource, machine: str = "#0") -> MachineLease:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    return MachineLease(
        key=lease_key("dag", run_id, resource.name + machine),
        dag_id="dag",
        run_id=run_id,
        machine=resource.name + machine,
        resource=resource.name,
        cores=resource.vcpus,
        memory_bytes=resource.memory_bytes,
        tasks=2,
    )


def leasing(moto: MotoServer, catalog: Catalog, network: Network | None) -> AwsBatchBackend:
    compute = (
        None
        if network is None
        else ComputeNetwork([network.subnet], [network.security_group], network.instance_role, network.service_role)
    )
    return AwsBatchBackend(
        session=fake_session(),
        region_name=REGION,
        endpoint_url=moto.url,
        resources={resource.name: resource for resource in catalog.resources},
        compute_network=compute,
        create_timeout_s=30,
    )


def test_a_lease_runs_on_its_types_own_queue_created_once_and_reports_its_job_times(
    moto: MotoServer, batch: Any, catalog: Catalog, network: Network, infrastructure: Any
) -> None:
    resource = catalog.by_name["m6i.xlarge"]
    backend = leasing(moto, catalog, network)
    lease = lease_of(resource)
    backend.open_lease(lease)
    queue = type_queue_name(resource.name)
    [environment] = batch.describe_compute_environments(computeEnvironments=[queue])["computeEnvironments"]
    compute = environment["computeResources"]
    assert compute["instanceTypes"] == ["m6i.xlarge"]  # exactly the type the plan priced
    assert compute["maxvCpus"] == (resource.count or 0) * resource.vcpus and resource.count
    [described] = batch.describe_job_queues(jobQueues=[queue])["jobQueues"]
    assert described["state"] == "ENABLED"

    other = leasing(moto, catalog, network)  # a second machine of the type, another scheduler: no second queue
    other.open_lease(lease_of(resource, "#1"))
    assert len(batch.describe_compute_environments(computeEnvironments=[queue])["computeEnvironments"]) == 1

    moto.reset_recording()
    ids = [backend.submit(replace(spec(f"t{i}", resource.name), lease=lease)) for i in range(2)]
    assert [body["jobQueue"] for body in moto.recorded("submitjob")] == [queue, queue]
    assert backend.finished_leases() == []  # open: more jobs may come
    backend.close_lease(lease)
    [record] = backend.finished_leases()
    jobs = batch.describe_jobs(jobs=ids)["jobs"]
    assert record.started_at.timestamp() * 1000 == pytest.approx(min(job["startedAt"] for job in jobs), abs=1)
    assert record.ended_at.timestamp() * 1000 == pytest.approx(max(job["stoppedAt"] for job in jobs), abs=1)
    assert (record.machine, record.resource, record.source) == (lease.machine, resource.name, "batch job times")
    assert backend.finished_leases() == []  # reported once


def test_a_catalog_job_queue_is_used_as_it_is_and_a_disabled_one_refuses_the_lease(
    moto: MotoServer, batch: Any, catalog: Catalog, network: Network, infrastructure: Any
) -> None:
    special = catalog.by_name["c5.4xlarge"]  # its catalog entry names SPECIAL_QUEUE
    backend = leasing(moto, catalog, network)
    lease = lease_of(special)
    backend.open_lease(lease)
    moto.reset_recording()
    backend.submit(replace(spec("s", special.name, options=special.extra), lease=lease))
    assert [body["jobQueue"] for body in moto.recorded("submitjob")] == [SPECIAL_QUEUE]
    assert type_queue_name(special.name) not in {q["jobQueueName"] for q in batch.describe_job_queues()["jobQueues"]}

    batch.update_job_queue(jobQueue=SPECIAL_QUEUE, state="DISABLED")
    try:
        with pytest.raises(BackendError) as caught:
            leasing(moto, catalog, network).open_lease(lease_of(special, "#1"))
    finally:
        batch.update_job_queue(jobQueue=SPECIAL_QUEUE, state="ENABLED")
    assert "c5.4xlarge#1" in str(caught.value) and "DISABLED" in str(caught.value)


def test_a_missing_queue_without_a_compute_network_refuses_the_lease(moto: MotoServer, catalog: Catalog) -> None:
    resource = catalog.by_name["r7i.large"]
    with pytest.raises(BackendError) as caught:
        leasing(moto, catalog, None).open_lease(lease_of(resource))
    assert "r7i.large#0" in str(caught.value) and "compute network" in str(caught.value)


def test_the_compute_network_is_read_from_the_agora_settings_all_or_none(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = ("AWS_SUBNETS", "AWS_SECURITY_GROUP_IDS", "AWS_INSTANCE_ROLE", "AWS_SERVICE_ROLE", "AWS_SPOT_FLEET_ROLE")
    for key in keys:
        monkeypatch.delenv(f"AIRFLOW__AGORA__{key}", raising=False)
    assert aws_compute_network() is None  # none set: a type with no queue of its own is re-placed
    monkeypatch.setenv("AIRFLOW__AGORA__AWS_SUBNETS", "subnet-1, subnet-2")
    with pytest.raises(AgoraError, match=r"aws_subnets set but not aws_security_group_ids, aws_instance_role"):
        aws_compute_network()
    monkeypatch.setenv("AIRFLOW__AGORA__AWS_SECURITY_GROUP_IDS", "sg-1")
    monkeypatch.setenv("AIRFLOW__AGORA__AWS_INSTANCE_ROLE", "ecsInstanceRole")
    assert aws_compute_network() == ComputeNetwork(("subnet-1", "subnet-2"), ("sg-1",), "ecsInstanceRole", None)
    monkeypatch.setenv("AIRFLOW__AGORA__AWS_SERVICE_ROLE", "arn:aws:iam::123456789012:role/batch")
    network = aws_compute_network()
    assert network is not None and network.service_role == "arn:aws:iam::123456789012:role/batch"
    assert network.spot_fleet_role is None
    monkeypatch.setenv("AIRFLOW__AGORA__AWS_SPOT_FLEET_ROLE", "arn:aws:iam::123456789012:role/spot-fleet")
    network = aws_compute_network()
    assert network is not None and network.spot_fleet_role == "arn:aws:iam::123456789012:role/spot-fleet"

"""GPU tasks on AWS Batch: the job reserves its GPUs, and GPU types' compute environments run the GPU AMI.

AWS cannot be reached from here: these tests run against the moto server of conftest.py. What
they show is what agora asks of Batch, as moto received and recorded it; not that AWS would
give the container its GPUs. moto 5.2 stores a compute environment's ``ec2Configuration`` and
echoes it in DescribeComputeEnvironments without checking its image type; its DescribeJobs does
not echo a job's ``resourceRequirements`` at all, so the requirements are read from moto's
recording of the SubmitJob request.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from agora_optimizer.executor.backends.aws.backend import AwsBatchBackend
from agora_optimizer.executor.backends.aws.jobs import type_queue_name
from agora_optimizer.executor.backends.aws.provisioning import GPU_IMAGE_TYPE, Infrastructure, ec2_configuration
from agora_optimizer.executor.jobs.spec import BackendError
from agora_optimizer.model.catalog import GIB, Catalog
from tests.executor.backends.aws.conftest import MotoServer, Network
from tests.executor.backends.aws.test_backend import spec
from tests.executor.backends.aws.test_leases import lease_of, leasing

GPU_FAMILIES = ("g5", "g6", "p4d", "p5")


def test_a_gpu_job_reserves_its_gpus_beside_vcpu_and_memory_and_a_cpu_job_reserves_none(
    backend: AwsBatchBackend, infrastructure: Infrastructure, batch: Any, moto: MotoServer
) -> None:
    moto.reset_recording()
    gpu_job = backend.submit(replace(spec("train", "g5.12xlarge", cores=8, memory_bytes=32 * GIB), gpus=2))
    cpu_job = backend.submit(spec("prepare", "g5.12xlarge", cores=2))  # no GPU, though on a GPU type
    train, prepare = moto.recorded("submitjob")
    assert train["jobQueue"] == prepare["jobQueue"] == "agora-g5"
    assert train["containerOverrides"]["resourceRequirements"] == [
        {"type": "VCPU", "value": "8"},
        {"type": "MEMORY", "value": "32768"},
        {"type": "GPU", "value": "2"},
    ]
    assert [r["type"] for r in prepare["containerOverrides"]["resourceRequirements"]] == ["VCPU", "MEMORY"]
    described = {job["jobId"]: job for job in batch.describe_jobs(jobs=[gpu_job, cpu_job])["jobs"]}
    assert set(described) == {gpu_job, cpu_job}  # moto took both (it does not echo their requirements)


def test_the_compute_environments_of_gpu_families_run_the_gpu_ami(infrastructure: Infrastructure, batch: Any) -> None:
    environments = {
        e["computeEnvironmentName"]: e["computeResources"]
        for e in batch.describe_compute_environments()["computeEnvironments"]
    }
    for family in GPU_FAMILIES:
        assert environments[f"agora-{family}"]["ec2Configuration"] == [{"imageType": GPU_IMAGE_TYPE}], family
    assert "ec2Configuration" not in environments["agora-c5"]  # CPU families keep Batch's default
    assert "ec2Configuration" not in environments["agora-r7i"]


def test_a_planned_gpu_machine_gets_a_gpu_compute_environment_and_its_jobs_their_gpus(
    moto: MotoServer, batch: Any, catalog: Catalog, network: Network, infrastructure: Any
) -> None:
    resource = catalog.by_name["g6.xlarge"]
    backend = leasing(moto, catalog, network)
    lease = replace(lease_of(resource), gpus=resource.gpus)
    backend.open_lease(lease)
    queue = type_queue_name(resource.name)
    [environment] = batch.describe_compute_environments(computeEnvironments=[queue])["computeEnvironments"]
    assert environment["computeResources"]["instanceTypes"] == ["g6.xlarge"]
    assert environment["computeResources"]["ec2Configuration"] == [{"imageType": GPU_IMAGE_TYPE}]
    moto.reset_recording()
    backend.submit(replace(spec("infer", resource.name, cores=4, memory_bytes=8 * GIB), lease=lease, gpus=1))
    [request] = moto.recorded("submitjob")
    assert request["jobQueue"] == queue
    assert {"type": "GPU", "value": "1"} in request["containerOverrides"]["resourceRequirements"]


def test_a_job_reserving_more_gpus_than_its_type_has_is_refused_naming_both(
    moto: MotoServer, catalog: Catalog, network: Network
) -> None:
    backend = leasing(moto, catalog, network)
    with pytest.raises(BackendError) as caught:
        backend.submit_request(replace(spec("train", "g5.xlarge"), gpus=2))
    assert not caught.value.transient
    assert "dag.train: reserves 2 GPUs, resource g5.xlarge has 1" in caught.value.reason
    with pytest.raises(BackendError, match=r"resource c5\.large has 0"):
        backend.submit_request(replace(spec("train", "c5.large"), gpus=1))


def test_a_compute_environment_mixing_cpu_and_gpu_types_names_both_ami_types(catalog: Catalog) -> None:
    gpu, cpu = catalog.by_name["g5.xlarge"], catalog.by_name["c5.large"]
    assert ec2_configuration([cpu]) == {}
    assert ec2_configuration([gpu]) == {"ec2Configuration": [{"imageType": "ECS_AL2023_NVIDIA"}]}
    assert ec2_configuration([cpu, gpu]) == {
        "ec2Configuration": [{"imageType": "ECS_AL2023"}, {"imageType": "ECS_AL2023_NVIDIA"}]
    }

"""``agora aws provision`` against a moto server on loopback (tests/executor/backends/aws/conftest.py).

moto is not AWS: it checks the requests' shapes and keeps what was created, so these tests show
which calls the command makes and that a second run makes none; they say nothing of a real
account's quotas, IAM or instance capacity.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.cli import main
from tests.conftest import AWS_CATALOG, CATALOGS
from tests.executor.backends.aws.conftest import REGION, MotoServer, Network, client
from tests.executor.backends.aws.test_provisioning import hand_made, hand_made_queue

FAMILIES = ("c5", "c6i", "c7i", "m5", "m6i", "m7i", "r5", "r6i", "r7i", "g5", "g6", "p4d", "p5")
CONNECTION = "agora_moto"


@pytest.fixture
def connection(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """An Airflow connection (from the environment, as Airflow reads it) to the moto server."""
    extra = {"region_name": REGION, "endpoint_url": moto.url}
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{CONNECTION.upper()}",
        json.dumps({"conn_type": "aws", "login": "testing", "password": "testing", "extra": extra}),
    )
    return CONNECTION


def _provision(capsys: pytest.CaptureFixture[str], network: Network | None, *argv: object) -> tuple[int, str, str]:
    given: list[object] = ["aws", "provision", *argv]
    if network is not None:
        given += ["--subnets", network.subnet, "--security-group-ids", network.security_group]
        given += ["--instance-role", network.instance_role, "--service-role", network.service_role]
    code = main([str(a) for a in given])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _names(batch: Any) -> tuple[set[str], set[str], list[str]]:
    """The compute environments, job queues and active agora-worker job definitions moto holds."""
    environments = {e["computeEnvironmentName"] for e in batch.describe_compute_environments()["computeEnvironments"]}
    queues = {q["jobQueueName"] for q in batch.describe_job_queues()["jobQueues"]}
    definitions = batch.describe_job_definitions(jobDefinitionName="agora-worker", status="ACTIVE")["jobDefinitions"]
    return environments, queues, [d["containerProperties"]["image"] for d in definitions]


def test_provision_creates_once_and_a_dry_run_creates_nothing(
    moto: MotoServer, network: Network, connection: str, capsys: pytest.CaptureFixture[str]
) -> None:
    batch = client(moto, "batch")
    queues = {f"agora-{family}" for family in FAMILIES}
    common = ("--catalog", AWS_CATALOG, "--conn-id", connection, "--image", "agora:1")

    code, out, err = _provision(capsys, network, *common, "--dry-run")
    assert code == 0, err
    lines = out.splitlines()
    assert {f"would create compute environment {queue}" for queue in queues} <= set(lines)
    assert {f"would create job queue {queue}" for queue in queues} <= set(lines)
    assert "would create job definition agora-worker" in lines
    assert lines[-1] == (
        f"AWS Batch in {REGION} (Airflow connection {connection}): 27 to create, 0 to update, 0 already there; "
        "dry run, nothing was changed"
    )
    assert _names(batch) == (set(), set(), [])

    code, out, err = _provision(capsys, network, *common)
    assert code == 0, err
    lines = out.splitlines()
    assert {f"created compute environment {queue}" for queue in queues} <= set(lines)
    assert {f"created job queue {queue}" for queue in queues} <= set(lines)
    assert any(line.startswith("created job definition arn:aws:batch:") for line in lines)
    assert lines[-1].endswith(": 27 created, 0 updated, 0 already there")
    assert _names(batch) == (queues, queues, ["agora:1"])
    c5 = batch.describe_compute_environments(computeEnvironments=["agora-c5"])["computeEnvironments"][0]
    assert sorted(c5["computeResources"]["instanceTypes"]) == ["c5.2xlarge", "c5.large", "c5.xlarge"]
    assert c5["computeResources"]["subnets"] == [network.subnet]

    code, out, err = _provision(capsys, network, *common)
    assert code == 0, err
    assert all(line.startswith("already there ") for line in out.splitlines()[:-1])
    assert out.splitlines()[-1].endswith(": 0 created, 0 updated, 14 already there")  # 13 queues, 1 definition
    assert _names(batch) == (queues, queues, ["agora:1"])

    common = (*common[:-1], "agora:2")
    code, out, err = _provision(capsys, network, *common, "--dry-run")
    assert code == 0, err
    assert "would update job definition agora-worker (a new revision, image agora:2)" in out.splitlines()
    assert _names(batch)[2] == ["agora:1"]
    code, out, err = _provision(capsys, network, *common)
    assert code == 0, err
    [updated] = [line for line in out.splitlines() if line.startswith("updated ")]
    assert updated.startswith("updated job definition arn:aws:batch:") and ":job-definition/agora-worker:2" in updated
    assert sorted(_names(batch)[2]) == ["agora:1", "agora:2"]


def test_bad_input_is_one_line_naming_what_is_wrong(
    moto: MotoServer, network: Network, connection: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    image = ("--image", "agora:1")
    local = CATALOGS / "local.yaml"
    code, out, err = _provision(capsys, network, "--catalog", local, "--conn-id", connection, *image)
    assert (code, out) == (2, "")
    assert err.strip() == f"agora: error: {local}: no resource with backend aws, so nothing to provision"

    code, _, err = _provision(capsys, None, "--catalog", AWS_CATALOG, "--conn-id", connection, *image)
    assert code == 2
    assert "no --subnets, --security-group-ids, --instance-role: the compute environments need them" in err
    assert "(or set [agora] aws_subnets, aws_security_group_ids, aws_instance_role)" in err

    argv = ("--catalog", AWS_CATALOG, "--conn-id", connection, *image, "--region", "us-nowhere-1")
    code, _, err = _provision(capsys, network, *argv)
    assert code == 2 and "region 'us-nowhere-1': not a region of AWS Batch" in err

    code, _, err = _provision(capsys, network, "--catalog", AWS_CATALOG, "--conn-id", "agora_none", *image)
    assert code == 2
    assert "no AWS region: pass --region, or set region_name in the extra of Airflow connection agora_none" in err
    argv = ("--catalog", AWS_CATALOG, "--conn-id", "agora_none", *image, "--region", REGION)
    code, _, err = _provision(capsys, network, *argv)
    assert code == 2
    assert f"AWS Batch in {REGION} (boto3 default chain): no AWS credentials: give Airflow connection agora_none" in err

    refused = tmp_path / "refused.yaml"
    refused.write_text(
        "network: {bandwidth_bytes_per_s: 1250000000}\nresources:\n"
        "  - {name: m5.large, backend: aws, vcpus: 2, memory_gib: 8, speed: 1.0, "
        "price_per_hour_usd: 0.096, job_queue: agora-refused}\n"
    )
    argv = ("--catalog", refused, "--conn-id", connection, *image, "--subnets", "subnet-0000000000000000")
    argv += ("--security-group-ids", network.security_group, "--instance-role", network.instance_role)
    argv += ("--service-role", network.service_role)
    code, _, err = _provision(capsys, None, *argv)
    assert code == 2
    assert err.startswith(f"agora: error: {refused}: AWS Batch in {REGION} (Airflow connection {connection}): ")
    assert "cannot create compute environment agora-refused for m5.large" in err
    assert "subnet-0000000000000000 does not exist" in err  # moto's words
    assert "agora-refused" not in _names(client(moto, "batch"))[0]


def test_a_queue_that_buys_other_capacity_than_its_types_is_one_line_naming_both_kinds(
    moto: MotoServer, network: Network, connection: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A queue made by hand on Spot Instances, named by the catalog's on-demand m5.large: refused, even in a dry run."""
    batch = client(moto, "batch")
    hand_made_queue(batch, "hand-made", [hand_made(batch, network, "hand-spot", "SPOT")])
    catalog = tmp_path / "hand-made.yaml"
    catalog.write_text(
        "network: {bandwidth_bytes_per_s: 1250000000}\nresources:\n"
        "  - {name: m5.large, backend: aws, vcpus: 2, memory_gib: 8, speed: 1.0, "
        "price_per_hour_usd: 0.096, job_queue: hand-made}\n"
    )
    argv = ("--catalog", catalog, "--conn-id", connection, "--image", "agora:1", "--dry-run")
    code, out, err = _provision(capsys, network, *argv)
    assert (code, out) == (2, "")
    assert err.strip() == (
        f"agora: error: {catalog}: AWS Batch in {REGION} (Airflow connection {connection}): job queue hand-made of "
        "m5.large: compute environment hand-spot buys SPOT (EC2 Spot Instances), but the catalog prices these types "
        "as EC2 (on-demand EC2 instances): name a queue that buys that (the catalog's job_queue option), or remove "
        "this one and let agora create its own"
    )

"""A real moto server on loopback, started once, standing in for AWS Batch.

moto runs as its own process (``python -m moto.server``), and the backend reaches it over
HTTP through ``endpoint_url``, as it would reach AWS. What moto can and cannot play:

- Batch jobs in "simple" mode (``/moto-api/config`` with ``use_docker: false``, which is
  how moto's server serves its ``batch_simple`` backend) go straight to SUCCEEDED at
  submit, without Docker.
- In Docker mode (moto's default) a job walks SUBMITTED, PENDING, RUNNABLE, STARTING and
  RUNNING as moto's state manager lets it (``/moto-api/state-manager``), then asks Docker to
  run the container. This machine has no Docker engine: the server's ``DOCKER_HOST`` points
  at a socket that accepts connections and never answers, so a job stays RUNNING until the
  test closes that socket, and then fails (FAILED, no exit code), as it would on any machine.
- moto's recorder keeps every request the server received; tests read SubmitJob's body
  from there (moto's DescribeJobs does not echo ``resourceRequirements`` overrides).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import boto3
import pytest

from agora_optimizer.executor.backends.aws.backend import AwsBatchBackend
from agora_optimizer.executor.backends.aws.provisioning import Infrastructure
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.catalog import Catalog, Resource
from harness.local_airflow import free_port
from tests.conftest import AWS_CATALOG
from tests.executor.backends.aws.canned import CannedServer, serve

REGION = "us-east-1"
IMAGE = "agora:test"
SPECIAL_QUEUE = "agora-special"
START_TIMEOUT_S = 30.0


@functools.cache
def fake_session() -> boto3.session.Session:
    """A session with moto's kind of credentials (any key works), shared: it caches Batch's API model."""
    return boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")


@dataclass
class MotoServer:
    """A moto server process and the levers its tests pull."""

    url: str
    process: subprocess.Popen[bytes]
    docker_hole: socket.socket
    log_path: Path

    def post(self, path: str, body: object = None) -> bytes:
        data = json.dumps(body if body is not None else {}).encode()
        request = urllib.request.Request(self.url + path, data=data, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            return bytes(response.read())

    def batch_runs_containers(self, on: bool) -> None:
        """Docker mode (jobs walk Batch's states) or simple mode (jobs succeed at submit)."""
        self.post("/moto-api/config", {"batch": {"use_docker": on}})

    def job_transitions(self, transition: dict[str, Any] | None) -> None:
        """How moto moves a job's state: None for its default (at once to the last state)."""
        if transition is None:
            self.post("/moto-api/state-manager/unset-transition", {"model_name": "batch::job"})
        else:
            self.post("/moto-api/state-manager/set-transition", {"model_name": "batch::job", "transition": transition})

    def close_docker(self) -> None:
        """From now on a job that reaches RUNNING fails at once: its Docker engine is gone."""
        self.docker_hole.close()

    def reset_recording(self) -> None:
        self.post("/moto-api/recorder/reset-recording")

    def recorded(self, action: str) -> list[dict[str, Any]]:
        """The JSON bodies of the requests moto received for one Batch action (``submitjob``)."""
        with urllib.request.urlopen(self.url + "/moto-api/recorder/download-recording", timeout=10) as response:
            lines = response.read().decode().splitlines()
        bodies = []
        for line in lines:
            entry = json.loads(line)
            if entry["url"].rstrip("/").endswith(f"/v1/{action}"):
                raw = base64.b64decode(entry["body"]) if entry["body_encoded"] else entry["body"].encode()
                bodies.append({"headers": entry["headers"], **json.loads(raw or b"{}")})
        return bodies

    def stop(self) -> None:
        """Kill the server: it keeps nothing worth a clean exit, and that exit takes seconds."""
        self.process.kill()
        self.process.wait()
        self.docker_hole.close()


def start_moto(workdir: Path) -> MotoServer:
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)
    port = free_port()
    log_path = workdir / "moto.log"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "MOTO_", "DOCKER_"))}
    env |= {
        "DOCKER_HOST": f"tcp://127.0.0.1:{hole.getsockname()[1]}",
        "MOTO_RECORDER_FILEPATH": str(workdir / "recording.jsonl"),
        "MOTO_EC2_LOAD_DEFAULT_AMIS": "false",
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
    server = MotoServer(f"http://127.0.0.1:{port}", process, hole, log_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            hole.close()
            raise RuntimeError(f"moto server exited with {process.returncode}: {log_path.read_text()[-2000:]}")
        try:
            server.post("/moto-api/recorder/start-recording")
            return server
        except (urllib.error.URLError, ConnectionError) as exc:
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(
                    f"moto server not up after {START_TIMEOUT_S:g} s: {log_path.read_text()[-2000:]}"
                ) from exc
            time.sleep(0.05)


@pytest.fixture(scope="package")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = start_moto(tmp_path_factory.mktemp("moto"))
    yield server
    server.stop()


@pytest.fixture
def canned() -> Iterator[CannedServer]:
    """A loopback server for the errors moto cannot produce: the test sets its ``answer`` (canned.py)."""
    with serve() as server:
        yield server


@pytest.fixture(scope="package", autouse=True)
def no_host_aws_settings() -> Iterator[None]:
    """The tests see no AWS profile, credentials or endpoint of the machine they run on."""
    with pytest.MonkeyPatch.context() as patch:
        for key in list(os.environ):
            if key.startswith("AWS_"):
                patch.delenv(key)
        patch.setenv("AWS_CONFIG_FILE", os.devnull)
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield


@pytest.fixture(autouse=True)
def simple_batch(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test that uses the server starts and ends with jobs that succeed at submit."""
    if "moto" not in request.fixturenames:
        yield
        return
    server: MotoServer = request.getfixturevalue("moto")
    server.batch_runs_containers(False)
    server.job_transitions(None)
    yield
    server.batch_runs_containers(False)
    server.job_transitions(None)


def client(moto: MotoServer, service: str, region: str = REGION) -> Any:
    session: Any = fake_session()  # Any: boto3-stubs types client() per literal service name
    return session.client(service, region_name=region, endpoint_url=moto.url)


@pytest.fixture(scope="package")
def batch(moto: MotoServer) -> Any:
    """A Batch client of the tests' own, to read moto's records."""
    return client(moto, "batch")


@dataclass(frozen=True)
class Network:
    """What an account has before agora sets up Batch: roles, a subnet, a security group."""

    service_role: str
    instance_role: str
    subnet: str
    security_group: str


@pytest.fixture(scope="package")
def network(moto: MotoServer) -> Network:
    return make_network(moto)


def make_network(moto: MotoServer) -> Network:
    """The roles, subnet and security group of an account, made on ``moto``."""
    iam, ec2 = client(moto, "iam"), client(moto, "ec2")
    role = iam.create_role(RoleName="AWSBatchServiceRole", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    profile = iam.create_instance_profile(InstanceProfileName="ecsInstanceRole")["InstanceProfile"]["Arn"]
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="agora", Description="agora workers", VpcId=vpc)["GroupId"]
    return Network(service_role=role, instance_role=profile, subnet=subnet, security_group=group)


@pytest.fixture(scope="package")
def backend(moto: MotoServer) -> AwsBatchBackend:
    return AwsBatchBackend(session=fake_session(), region_name=REGION, endpoint_url=moto.url)


@pytest.fixture(scope="package")
def catalog() -> Catalog:
    """The bundled AWS catalog plus one type whose catalog entry names its own queue."""
    bundled = load_catalog(AWS_CATALOG)
    special = Resource(
        name="c5.4xlarge",
        backend="aws",
        vcpus=16,
        memory_gib=32,
        speed=1.0,
        price_per_hour_usd=0.68,
        extra={"job_queue": SPECIAL_QUEUE},
    )
    return replace(bundled, resources=(*bundled.resources, special))


def setup_infrastructure(backend: AwsBatchBackend, catalog: Catalog, network: Network, image: str) -> Infrastructure:
    return backend.ensure_infrastructure(
        catalog.resources,
        image=image,
        subnets=[network.subnet],
        security_group_ids=[network.security_group],
        instance_role=network.instance_role,
        service_role=network.service_role,
        poll_s=0.05,
    )


@pytest.fixture(scope="package")
def infrastructure(backend: AwsBatchBackend, catalog: Catalog, network: Network) -> Infrastructure:
    return setup_infrastructure(backend, catalog, network, IMAGE)

"""Setting up AWS Batch in an account that is not empty and answers late, against a moto server of this module's own
(what the tests make there stays).

- Batch's Describe calls are eventually consistent: a compute environment or job queue created a moment
  ago may be missing from the next answers. moto lists it at once, so the tests play the lag on the
  backend's own client with botocore's event hooks (:class:`Lagging`): moto's real answers, with what the
  client has just created left out of the next few (or of all). Provisioning waits until every item it
  asked for is listed and VALID, and names the one that never is.
- What exists is reused only if it buys the capacity its catalog types are priced at: compute
  environments made by hand (here with the tests' own Batch client) that buy Spot Instances for an
  on-demand type, on-demand instances for a spot type, or Fargate, are refused naming the queue, the
  environment and both kinds.

AWS itself cannot be reached from here: the lag is played, not observed.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from agora_optimizer.executor.backends.aws.backend import AwsBatchBackend, type_queue_name
from agora_optimizer.executor.backends.aws.provisioning import wait_valid
from agora_optimizer.executor.jobs.spec import BackendError
from agora_optimizer.model.catalog import Catalog, Resource
from tests.executor.backends.aws.conftest import (
    IMAGE,
    REGION,
    MotoServer,
    Network,
    client,
    fake_session,
    make_network,
    start_moto,
)
from tests.executor.backends.aws.test_leases import lease_of, leasing

LISTS = {"computeEnvironments": "computeEnvironmentName", "jobQueues": "jobQueueName"}  # an answer's list: its key


@dataclass
class Lagging:
    """Batch's eventual consistency, played on one client: each compute environment and job queue it creates is
    left out of the next ``answers`` Describe answers that would list it (None: of every answer)."""

    answers: int | None
    hidden: dict[tuple[str, str], int | None] = field(default_factory=dict)  # (list, name) -> answers to come
    left_out: list[tuple[str, str]] = field(default_factory=list)  # each time an item was left out

    def lag(self, client: Any) -> None:
        for action in ("CreateComputeEnvironment", "CreateJobQueue"):
            client.meta.events.register(f"after-call.batch.{action}", self._created)
        for action in ("DescribeComputeEnvironments", "DescribeJobQueues"):
            client.meta.events.register(f"after-call.batch.{action}", self._described)

    def _created(self, parsed: dict[str, Any], **_: Any) -> None:
        for listed, key in (("computeEnvironments", "computeEnvironmentName"), ("jobQueues", "jobQueueName")):
            if key in parsed:
                self.hidden[(listed, parsed[key])] = self.answers

    def _described(self, parsed: dict[str, Any], **_: Any) -> None:
        for listed, key in LISTS.items():
            kept = []
            for item in parsed.get(listed, []):
                hidden = (listed, item[key])
                left = self.hidden.get(hidden, 0)
                if left == 0:
                    kept.append(item)
                    continue
                self.hidden[hidden] = None if left is None else left - 1
                self.left_out.append(hidden)
            if listed in parsed:
                parsed[listed] = kept


@dataclass
class Account:
    """This module's moto server, a Batch client of the tests' own (to read it), and the account's network."""

    moto: MotoServer
    batch: Any
    network: Network

    def backend(self) -> AwsBatchBackend:
        """A backend with a client of its own, for a test's hooks."""
        return AwsBatchBackend(session=fake_session(), region_name=REGION, endpoint_url=self.moto.url)


@pytest.fixture(scope="module")
def account(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Account]:
    server = start_moto(tmp_path_factory.mktemp("provisioning-moto"))
    try:
        yield Account(server, client(server, "batch"), make_network(server))
    finally:
        server.stop()


def provision(backend: AwsBatchBackend, resources: Sequence[Resource], network: Network, **options: Any) -> Any:
    return backend.ensure_infrastructure(
        resources,
        image=IMAGE,
        subnets=[network.subnet],
        security_group_ids=[network.security_group],
        instance_role=network.instance_role,
        service_role=network.service_role,
        poll_s=0.05,
        **options,
    )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def spot_twin(resource: Resource, **extra: object) -> Resource:
    """The spot variant of an on-demand catalog type (``m5.large-spot``, running ``m5.large``)."""
    return replace(
        resource,
        name=f"{resource.name}-spot",
        spot=True,
        interruption_rate_per_hour=0.01,
        fallback=resource.name,
        extra=extra,
    )


def hand_made(batch: Any, network: Network, name: str, capacity: str) -> str:
    """A compute environment made outside agora, buying ``capacity`` (EC2, SPOT, FARGATE ...); its ARN."""
    compute: dict[str, Any] = {
        "type": capacity,
        "maxvCpus": 16,
        "subnets": [network.subnet],
        "securityGroupIds": [network.security_group],
    }
    if capacity == "UNMANAGED":  # its owner launches its instances: Batch knows nothing of them
        made = batch.create_compute_environment(
            computeEnvironmentName=name, type="UNMANAGED", serviceRole=network.service_role
        )
        return str(made["computeEnvironmentArn"])
    if "FARGATE" not in capacity:
        compute |= {"minvCpus": 0, "instanceTypes": ["m5.large"], "instanceRole": network.instance_role}
    made = batch.create_compute_environment(
        computeEnvironmentName=name, type="MANAGED", computeResources=compute, serviceRole=network.service_role
    )
    return str(made["computeEnvironmentArn"])


def hand_made_queue(batch: Any, name: str, environments: Sequence[str]) -> None:
    order = [{"order": i + 1, "computeEnvironment": arn} for i, arn in enumerate(environments)]
    batch.create_job_queue(jobQueueName=name, state="ENABLED", priority=1, computeEnvironmentOrder=order)


# -- waiting for what Batch does not list yet ------------------------------------------------


def test_provisioning_waits_for_a_compute_environment_and_queue_that_batch_lists_late(
    account: Account, catalog: Catalog
) -> None:
    queue = unique("agora-late")
    resource = replace(catalog.by_name["m5.large"], extra={"job_queue": queue})
    late = account.backend()
    lagging = Lagging(answers=2)
    lagging.lag(late.client)

    made = provision(late, [resource], account.network)

    assert {f"compute environment {queue}", f"job queue {queue}"} <= set(made.created)
    assert lagging.left_out == [("computeEnvironments", queue)] * 2 + [("jobQueues", queue)] * 2  # both waited for
    [environment] = account.batch.describe_compute_environments(computeEnvironments=[queue])["computeEnvironments"]
    [described] = account.batch.describe_job_queues(jobQueues=[queue])["jobQueues"]
    assert [entry["computeEnvironment"] for entry in described["computeEnvironmentOrder"]] == [
        environment["computeEnvironmentArn"]
    ]


@pytest.mark.slow  # open_lease looks once a second: four answers
def test_a_planned_machine_waits_for_its_new_queue_until_batch_lists_it(account: Account, catalog: Catalog) -> None:
    resource = catalog.by_name["r5.xlarge"]
    backend = leasing(account.moto, catalog, account.network)
    lagging = Lagging(answers=2)
    lagging.lag(backend.client)

    backend.open_lease(lease_of(resource))

    queue = type_queue_name(resource.name)
    assert ("computeEnvironments", queue) in lagging.left_out and ("jobQueues", queue) in lagging.left_out
    [described] = account.batch.describe_job_queues(jobQueues=[queue])["jobQueues"]
    assert described["state"] == "ENABLED" and described["status"] == "VALID"


def test_a_compute_environment_batch_never_lists_is_an_error_naming_it(account: Account, catalog: Catalog) -> None:
    queue = unique("agora-never")
    resource = replace(catalog.by_name["m5.large"], extra={"job_queue": queue})
    never = account.backend()
    Lagging(answers=None).lag(never.client)

    with pytest.raises(BackendError) as caught:
        provision(never, [resource], account.network, wait_timeout_s=0.3)

    assert caught.value.reason == f"compute environment {queue} not listed by AWS Batch after 0.3 s"
    assert caught.value.transient  # a later run may find it listed


def test_an_invalid_compute_environment_stops_the_wait_with_batchs_reason() -> None:
    def describe() -> list[dict[str, str]]:
        return [
            {"computeEnvironmentName": "agora-c5", "status": "INVALID", "statusReason": "CLIENT_ERROR - bad role"},
            {"computeEnvironmentName": "agora-m5", "status": "VALID"},
        ]

    with pytest.raises(BackendError) as caught:
        wait_valid(describe, ["agora-m5", "agora-c5"], "computeEnvironmentName", "compute environment", 5, 0.01)
    assert caught.value.reason == "compute environment agora-c5 is INVALID: CLIENT_ERROR - bad role"
    assert not caught.value.transient


def test_the_wait_names_each_item_not_valid_in_time_and_what_batch_last_said() -> None:
    def describe() -> list[dict[str, str]]:
        return [{"jobQueueName": "agora-c5", "status": "CREATING"}, {"jobQueueName": "agora-m5", "status": "VALID"}]

    with pytest.raises(BackendError) as caught:
        wait_valid(describe, ["agora-c5", "agora-m5", "agora-r5"], "jobQueueName", "job queue", 0.05, 0.01)
    assert caught.value.reason == (
        "job queue agora-c5 still CREATING; job queue agora-r5 not listed by AWS Batch after 0.05 s"
    )


# -- reusing what exists -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spot", "capacities", "refused", "found", "wanted"),
    [
        (True, ["EC2"], 0, "EC2 (on-demand EC2 instances)", "SPOT (EC2 Spot Instances)"),
        (False, ["SPOT"], 0, "SPOT (EC2 Spot Instances)", "EC2 (on-demand EC2 instances)"),
        (False, ["EC2", "SPOT"], 1, "SPOT (EC2 Spot Instances)", "EC2 (on-demand EC2 instances)"),  # mixed
        (False, ["FARGATE"], 0, "FARGATE (Fargate, on demand)", "EC2 (on-demand EC2 instances)"),
        (True, ["UNMANAGED"], 0, "UNMANAGED (instances Batch does not manage)", "SPOT (EC2 Spot Instances)"),
    ],
    ids=[
        "spot-type-on-EC2",
        "on-demand-type-on-SPOT",
        "on-demand-type-on-EC2-then-SPOT",
        "on-demand-type-on-FARGATE",
        "spot-type-on-UNMANAGED",
    ],
)
def test_an_existing_queue_that_buys_other_capacity_is_refused_naming_queue_environment_and_both_kinds(
    account: Account,
    catalog: Catalog,
    spot: bool,
    capacities: list[str],
    refused: int,
    found: str,
    wanted: str,
) -> None:
    batch, network = account.batch, account.network
    queue = unique("hand-made")
    environments = [unique(f"hand-{capacity.lower()}") for capacity in capacities]
    hand_made_queue(
        batch, queue, [hand_made(batch, network, *made) for made in zip(environments, capacities, strict=True)]
    )
    on_demand = replace(catalog.by_name["m5.large"], extra={"job_queue": queue})
    resource = spot_twin(on_demand, job_queue=queue) if spot else on_demand

    with pytest.raises(BackendError) as caught:
        provision(account.backend(), [resource], network, dry_run=True)

    assert caught.value.reason.startswith(
        f"job queue {queue} of {resource.name}: compute environment {environments[refused]} buys {found}, "
        f"but the catalog prices these types as {wanted}"
    )
    assert not caught.value.transient


def test_a_queue_whose_compute_environment_batch_does_not_list_is_not_reused_unchecked(
    account: Account, catalog: Catalog
) -> None:
    """A queue another tool made a moment ago, its compute environment not yet in Batch's answers."""
    queue, environment = unique("hand-made"), unique("hand-late")
    hand_made_queue(account.batch, queue, [hand_made(account.batch, account.network, environment, "EC2")])
    backend = account.backend()
    lagging = Lagging(answers=None, hidden={("computeEnvironments", environment): None})
    lagging.lag(backend.client)
    resource = replace(catalog.by_name["m5.large"], extra={"job_queue": queue})

    with pytest.raises(BackendError) as caught:
        provision(backend, [resource], account.network, dry_run=True)

    assert caught.value.reason.startswith(f"job queue {queue}: its compute environment arn:aws:batch:")
    assert caught.value.reason.endswith(f":compute-environment/{environment} is not listed by AWS Batch")
    assert caught.value.transient


def test_an_existing_compute_environment_of_the_other_kind_gets_no_queue(account: Account, catalog: Catalog) -> None:
    """A queue agora would create on a compute environment of its own name that someone made as SPOT."""
    queue = unique("agora-taken")
    hand_made(account.batch, account.network, queue, "SPOT")
    resource = replace(catalog.by_name["m5.large"], extra={"job_queue": queue})

    with pytest.raises(BackendError, match=f"job queue {queue} of m5.large: compute environment {queue} buys SPOT"):
        provision(account.backend(), [resource], account.network)

    assert account.batch.describe_job_queues(jobQueues=[queue])["jobQueues"] == []


def test_a_planned_machines_queue_that_buys_other_capacity_refuses_the_lease(
    account: Account, catalog: Catalog
) -> None:
    """The queue of a spot type's planned machine, made by hand on on-demand instances."""
    spot = spot_twin(catalog.by_name["m5.xlarge"])
    queue = type_queue_name(spot.name)
    environment = unique("hand-ec2")
    hand_made_queue(account.batch, queue, [hand_made(account.batch, account.network, environment, "EC2")])
    lease = lease_of(spot)
    backend = leasing(account.moto, replace(catalog, resources=(*catalog.resources, spot)), account.network)

    with pytest.raises(BackendError) as caught:
        backend.open_lease(lease)

    assert caught.value.reason.startswith(
        f"machine {lease.machine} (resource {spot.name}, job queue {queue}): job queue {queue} of {spot.name}: "
        f"compute environment {environment} buys EC2 (on-demand EC2 instances), but the catalog prices these "
        "types as SPOT (EC2 Spot Instances)"
    )


def test_existing_queues_of_the_right_kind_are_reused(account: Account, catalog: Catalog) -> None:
    queue = unique("hand-made")
    hand_made_queue(account.batch, queue, [hand_made(account.batch, account.network, unique("hand-spot"), "SPOT")])
    resource = spot_twin(catalog.by_name["m5.large"], job_queue=queue)

    made = provision(account.backend(), [resource], account.network, dry_run=True)

    assert f"job queue {queue}" in made.existing
    assert not [item for item in made.created if queue in item]  # neither a queue nor an environment

"""Setting up an AWS account for agora: compute environments, job queues and the job definition (:class:`Provisioner`).

:meth:`~agora_optimizer.executor.backends.aws.backend.AwsBatchBackend.ensure_infrastructure` creates, per
job queue of the catalog's ``aws`` resources, a managed compute environment and the queue, and the
container job definition jobs are submitted with; :meth:`Provisioner.create_type_queue` creates the
queue of exactly one instance type when a planned machine needs it (with a :class:`ComputeNetwork`).
Everything is named, so creating is idempotent, and tagged ``agora-managed``. With ``dry_run``
:meth:`Provisioner.ensure_infrastructure` only describes, and reports what it would create
(``agora aws provision --dry-run``).

Two things of AWS's the provisioner does not take on trust. Batch's Describe calls are eventually
consistent: what was just created may be missing from the next answers, so :func:`wait_valid` waits
until every item it asked for is listed, and VALID. And what exists is reused only when it buys the
capacity its catalog types are priced at (:func:`check_capacity`): a queue or compute environment made
by hand, or by another tool, that runs a spot type on on-demand instances, or an on-demand type on
Spot Instances (where an interruption has no fallback), is refused naming both kinds.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
)

from agora_optimizer.executor.jobs.spec import (
    BackendError,
)
from agora_optimizer.model.catalog import Resource

if TYPE_CHECKING:
    from mypy_boto3_batch import BatchClient

from agora_optimizer.executor.backends.aws.errors import BACKEND, call, classify_error
from agora_optimizer.executor.backends.aws.jobs import instance_type

log = logging.getLogger(__name__)


MANAGED_TAG = {"agora-managed": "true"}
# The ECS-optimized AMIs of a compute environment (``ec2Configuration``), Amazon Linux 2023: Batch's
# default for new environments since January 2026, and the only Batch-provided one for new
# environments after June 2026, when Batch stopped creating them on Amazon Linux 2.
CPU_IMAGE_TYPE = "ECS_AL2023"
GPU_IMAGE_TYPE = "ECS_AL2023_NVIDIA"  # with the NVIDIA driver and ECS's GPU support
_COMPUTE_ENVIRONMENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{1,126}[A-Za-z0-9]$")
# What a compute environment buys, by its ``computeResources.type`` (``UNMANAGED``: an unmanaged environment,
# whose instances its owner launches); agora's types want EC2 (on demand) or SPOT (:func:`purchase`).
CAPACITY = {
    "EC2": "on-demand EC2 instances",
    "SPOT": "EC2 Spot Instances",
    "FARGATE": "Fargate, on demand",
    "FARGATE_SPOT": "Fargate Spot",
    "UNMANAGED": "instances Batch does not manage",
}


@dataclass(frozen=True)
class Infrastructure:
    """What :meth:`AwsBatchBackend.ensure_infrastructure` found and made."""

    queues: Mapping[str, tuple[str, ...]]  # job queue -> the catalog resources it serves
    created: tuple[str, ...] = ()  # "compute environment agora-c5", "job queue agora-c5", "job definition ..."
    existing: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()  # "job definition ...": a new revision, with another image or job role
    job_definition_arn: str = ""  # with dry_run, the definition's name when it would be registered
    dry_run: bool = False  # created and updated say what would be, nothing was


@dataclass(frozen=True)
class ComputeNetwork:
    """Where compute environments that the backend creates on demand put their instances."""

    subnets: Sequence[str]
    security_group_ids: Sequence[str]
    instance_role: str  # the ECS instance profile
    service_role: str | None = None  # None: Batch's service-linked role
    default_max_vcpus: int = 256  # a type without a catalog count
    spot_fleet_role: str | None = None  # the Spot Fleet role of a spot type's compute environment, where needed


@dataclass(frozen=True)
class Provisioner:
    """Creates compute environments, job queues and the job definition through ``client``, each unless it exists."""

    client: BatchClient
    job_definition: str  # the name jobs are submitted with

    def ensure_infrastructure(
        self,
        groups: Mapping[str, Sequence[Resource]],
        *,
        image: str,
        subnets: Sequence[str],
        security_group_ids: Sequence[str],
        instance_role: str,
        service_role: str | None = None,
        job_role_arn: str | None = None,
        default_max_vcpus: int = 256,
        spot_fleet_role: str | None = None,
        wait_timeout_s: float = 600.0,
        poll_s: float = 5.0,
        dry_run: bool = False,
    ) -> Infrastructure:
        """Create what ``submit`` needs and is missing; idempotent.

        Per job queue of ``groups`` (the catalog's ``aws`` resources by the queue they run on): a
        managed compute environment (named as the queue) of on-demand EC2 instances of the queue's
        types, ``minvCpus`` 0 and ``maxvCpus`` the catalog's ``count`` x ``vcpus`` summed over its types
        (``default_max_vcpus`` when a type has no count), the GPU AMI type where a type has GPUs
        (:func:`ec2_configuration`), then the queue. And the container job
        definition ``job_definition`` with ``image`` (a new revision unless the newest active one, which
        jobs get, already has that image and job role). Existing queues and compute environments are
        used as they are if they buy the capacity their types want (:func:`check_capacity`: SPOT for spot
        types, EC2 for the rest), else refused. ``instance_role`` is the ECS instance profile;
        ``service_role`` may be omitted where Batch's service-linked role exists. ``dry_run``: the same
        look-ups, no create or register call, no wait; ``created`` and ``updated`` say what would be.
        """
        if not groups:
            raise BackendError(BACKEND, "the catalog has no resource with backend aws", transient=False)
        created: list[str] = []
        existing: list[str] = []
        updated: list[str] = []
        bought = {queue: purchase(queue, members, spot_fleet_role) for queue, members in groups.items()}
        found = call(self.client.describe_job_queues, "cannot list job queues", jobQueues=list(groups))
        known = {key: queue for queue in found["jobQueues"] for key in (queue["jobQueueName"], queue["jobQueueArn"])}
        for queue, members in groups.items():
            if queue in known:
                self.check_queue(known[queue], members, bought[queue]["type"])
                existing.append(f"job queue {queue}")
        missing = {queue: members for queue, members in groups.items() if queue not in known}
        if missing:
            template = {
                "minvCpus": 0,
                "subnets": list(subnets),
                "securityGroupIds": list(security_group_ids),
                "instanceRole": instance_role,
                "tags": dict(MANAGED_TAG),
            }
            for queue, members in missing.items():
                compute = {
                    **bought[queue],
                    **template,
                    "maxvCpus": _max_vcpus(members, default_max_vcpus),
                    "instanceTypes": sorted({instance_type(r.name, r.extra) for r in members}),
                    **ec2_configuration(members),
                }
                created += self.create_compute_environment(
                    queue, members, compute, service_role, existing, dry_run=dry_run
                )
        if missing and dry_run:
            created += [f"job queue {queue}" for queue in missing]
        elif missing:
            environments = self.wait_environments(list(missing), wait_timeout_s, poll_s)
            for queue in missing:
                call(
                    self.client.create_job_queue,
                    f"cannot create job queue {queue}",
                    jobQueueName=queue,
                    state="ENABLED",
                    priority=1,
                    computeEnvironmentOrder=[
                        {"order": 1, "computeEnvironment": environments[queue]["computeEnvironmentArn"]}
                    ],
                    tags=dict(MANAGED_TAG),
                )
                created.append(f"job queue {queue}")
            self.wait_queues(list(missing), wait_timeout_s, poll_s)
        arn, outcome = self.ensure_job_definition(image, job_role_arn, dry_run=dry_run)
        {"created": created, "updated": updated, "existing": existing}[outcome].append(f"job definition {arn}")
        return Infrastructure(
            queues={queue: tuple(resource.name for resource in members) for queue, members in groups.items()},
            created=tuple(created),
            existing=tuple(existing),
            updated=tuple(updated),
            job_definition_arn=arn,
            dry_run=dry_run,
        )

    def create_type_queue(
        self, resource: Resource, queue: str, network: ComputeNetwork, timeout_s: float
    ) -> Mapping[str, Any]:
        """The compute environment (exactly ``resource``'s type) and queue named ``queue``, each unless it exists;
        the queue once Batch lists it VALID (its DescribeJobQueues entry)."""
        compute = {
            **purchase(queue, [resource], network.spot_fleet_role),
            "minvCpus": 0,
            "maxvCpus": _max_vcpus([resource], network.default_max_vcpus),
            "instanceTypes": [instance_type(resource.name, resource.extra)],
            "subnets": list(network.subnets),
            "securityGroupIds": list(network.security_group_ids),
            "instanceRole": network.instance_role,
            "tags": dict(MANAGED_TAG),
            **ec2_configuration([resource]),
        }
        self.create_compute_environment(queue, [resource], compute, network.service_role, [])
        environment = self.wait_environments([queue], timeout_s, 1.0)[queue]
        try:
            self.client.create_job_queue(
                jobQueueName=queue,
                state="ENABLED",
                priority=1,
                computeEnvironmentOrder=[{"order": 1, "computeEnvironment": environment["computeEnvironmentArn"]}],
                tags=dict(MANAGED_TAG),
            )
        except ClientError as exc:  # another scheduler made it a moment ago: as good
            if "exist" not in str(exc).lower():
                raise classify_error(exc, f"cannot create job queue {queue}") from None
        except BotoCoreError as exc:
            raise classify_error(exc, f"cannot create job queue {queue}") from None
        described = self.wait_queues([queue], timeout_s, 1.0)[queue]
        log.info("AWS Batch: created job queue and compute environment %s for %s", queue, resource.name)
        return described

    def wait_environments(self, names: Sequence[str], timeout_s: float, poll_s: float) -> dict[str, Mapping[str, Any]]:
        """The compute environments ``names``, once Batch lists each of them VALID (:func:`wait_valid`)."""
        return wait_valid(
            lambda: self.client.describe_compute_environments(computeEnvironments=list(names))["computeEnvironments"],
            names,
            "computeEnvironmentName",
            "compute environment",
            timeout_s,
            poll_s,
        )

    def wait_queues(self, names: Sequence[str], timeout_s: float, poll_s: float) -> dict[str, Mapping[str, Any]]:
        """The job queues ``names``, once Batch lists each of them VALID (:func:`wait_valid`)."""
        return wait_valid(
            lambda: self.client.describe_job_queues(jobQueues=list(names))["jobQueues"],
            names,
            "jobQueueName",
            "job queue",
            timeout_s,
            poll_s,
        )

    def check_queue(self, queue: Mapping[str, Any], members: Sequence[Resource], wanted: str) -> None:
        """Refuse the existing job ``queue`` (its DescribeJobQueues entry) for ``members`` unless each of its
        compute environments buys ``wanted`` capacity (:func:`check_capacity`)."""
        name = str(queue.get("jobQueueName", "?"))
        order = [str(entry["computeEnvironment"]) for entry in queue.get("computeEnvironmentOrder", [])]
        if not order:  # Batch runs nothing there, and says so of each job it holds RUNNABLE
            return
        found = call(
            self.client.describe_compute_environments,
            f"job queue {name}: cannot look up its compute environments",
            computeEnvironments=order,
        )["computeEnvironments"]
        listed = {
            str(item.get(key)): item for item in found for key in ("computeEnvironmentArn", "computeEnvironmentName")
        }
        for environment in order:
            if environment not in listed:
                raise BackendError(
                    BACKEND,
                    f"job queue {name}: its compute environment {environment} is not listed by AWS Batch",
                    transient=True,
                )
            check_capacity(listed[environment], wanted, f"job queue {name} of {_names(members)}")

    def create_compute_environment(
        self,
        name: str,
        members: Sequence[Resource],
        compute: Mapping[str, Any],
        service_role: str | None,
        existing: list[str],
        *,
        dry_run: bool = False,
    ) -> list[str]:
        """Create the compute environment of a new queue for ``members`` unless it exists (then it must buy
        what ``compute`` would: :func:`check_capacity`); what was (or, with ``dry_run``, would be) created."""
        types = _names(members)
        if name.startswith("arn:") or not _COMPUTE_ENVIRONMENT_NAME.match(name):
            raise BackendError(
                BACKEND,
                f"job queue {name!r} of {types} does not exist, and ensure_infrastructure creates a queue only "
                "by a name that can also name its compute environment (3 to 128 letters, digits, '-', '_')",
                transient=False,
            )
        found = call(
            self.client.describe_compute_environments,
            f"cannot look up compute environment {name}",
            computeEnvironments=[name],
        )
        if found["computeEnvironments"]:
            check_capacity(found["computeEnvironments"][0], compute["type"], f"job queue {name} of {types}")
            existing.append(f"compute environment {name}")
            return []
        if dry_run:
            return [f"compute environment {name}"]
        request: dict[str, Any] = {
            "computeEnvironmentName": name,
            "type": "MANAGED",
            "state": "ENABLED",
            "computeResources": dict(compute),
            "tags": dict(MANAGED_TAG),
        }
        if service_role:
            request["serviceRole"] = service_role
        call(self.client.create_compute_environment, f"cannot create compute environment {name} for {types}", **request)
        return [f"compute environment {name}"]

    def ensure_job_definition(
        self, image: str, job_role_arn: str | None, *, dry_run: bool = False
    ) -> tuple[str, Literal["created", "updated", "existing"]]:
        """The ARN of the newest active revision with ``image`` and ``job_role_arn``, and whether it was
        registered as the definition's first revision, as a new one, or already there. ``dry_run``: the
        definition's name instead of an ARN when it would be registered."""
        name = self.job_definition.split(":", 1)[0] if not self.job_definition.startswith("arn:") else ""
        if not name:
            raise BackendError(
                BACKEND, f"job definition {self.job_definition!r}: give a name to create, not an ARN", transient=False
            )
        found = call(
            self.client.describe_job_definitions,
            f"cannot list job definition {name}",
            jobDefinitionName=name,
            status="ACTIVE",
        )["jobDefinitions"]
        if found:  # a job names the definition without revision: Batch runs its newest active one
            newest = max(found, key=lambda definition: definition.get("revision", 0))
            current = newest.get("containerProperties") or {}
            if current.get("image") == image and (current.get("jobRoleArn") or None) == job_role_arn:
                return newest["jobDefinitionArn"], "existing"
        outcome: Literal["created", "updated"] = "updated" if found else "created"
        if dry_run:
            return name, outcome
        properties: dict[str, Any] = {
            "image": image,
            # placeholders: every job overrides both
            "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "2048"}],
        }
        if job_role_arn:
            properties["jobRoleArn"] = job_role_arn
        response = call(
            self.client.register_job_definition,
            f"cannot register job definition {name} with image {image}",
            jobDefinitionName=name,
            type="container",
            containerProperties=properties,
            retryStrategy={"attempts": 1},  # the executor retries, with its own backoff
            propagateTags=True,
            tags=dict(MANAGED_TAG),
        )
        return response["jobDefinitionArn"], outcome


def wait_valid(
    describe: Callable[[], Sequence[Mapping[str, Any]]],
    names: Sequence[str],
    name_key: str,
    kind: str,
    timeout_s: float,
    poll_s: float,
) -> dict[str, Mapping[str, Any]]:
    """Wait until ``describe`` lists each of ``names`` (by ``name_key``) VALID; their entries, by name.

    Batch's Describe calls are eventually consistent: an item created a moment ago may be missing from the
    answers for a while, so an item not listed is waited for as one still CREATING is. An INVALID one
    raises at once with Batch's ``statusReason``; one not listed, or not VALID, within ``timeout_s`` raises
    naming it and what Batch last said (transient: a later call may find it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        listed = {str(item.get(name_key)): item for item in call(describe, f"cannot describe {kind}s")}
        waiting: dict[str, str] = {}
        for name in names:
            item = listed.get(name)
            status = None if item is None else item.get("status")
            if item is not None and status == "INVALID":
                reason = item.get("statusReason") or "no reason given"
                raise BackendError(BACKEND, f"{kind} {name} is INVALID: {reason}", transient=False)
            if status != "VALID":
                waiting[name] = "not listed by AWS Batch" if item is None else f"still {status or 'without a status'}"
        if not waiting:
            return {name: listed[name] for name in names}
        if time.monotonic() > deadline:
            late = "; ".join(f"{kind} {name} {why}" for name, why in waiting.items())
            raise BackendError(BACKEND, f"{late} after {timeout_s:g} s", transient=True)
        time.sleep(poll_s)


def check_capacity(environment: Mapping[str, Any], wanted: str, user: str) -> None:
    """Refuse the described compute ``environment`` for ``user`` (a job queue and its catalog types) unless it
    buys ``wanted`` capacity (``computeResources.type``: EC2 or SPOT, :func:`purchase`).

    A spot type on on-demand instances would cost what the plan did not price, and an on-demand type on
    Spot Instances could be interrupted with no fallback to re-run on. Fargate runs no EC2 instance type
    of the catalog, and what an unmanaged environment's instances are is their owner's to say, not
    agora's to check: both are refused too."""
    found = capacity_of(environment)
    if found != wanted:
        name = environment.get("computeEnvironmentName") or environment.get("computeEnvironmentArn", "?")
        raise BackendError(
            BACKEND,
            f"{user}: compute environment {name} buys {found} ({CAPACITY.get(found, 'unknown to agora')}), but "
            f"the catalog prices these types as {wanted} ({CAPACITY[wanted]}): name a queue that buys that (the "
            "catalog's job_queue option), or remove this one and let agora create its own",
            transient=False,
        )


def capacity_of(environment: Mapping[str, Any]) -> str:
    """What a described compute environment buys: its ``computeResources.type``, else its own ``type``
    (``UNMANAGED``)."""
    resources = environment.get("computeResources") or {}
    return str(resources.get("type") or environment.get("type") or "UNMANAGED")


def purchase(queue: str, members: Sequence[Resource], spot_fleet_role: str | None = None) -> dict[str, str]:
    """How a compute environment of ``members`` buys its instances: on demand (``EC2``, as the catalog's
    prices), or Spot Instances for spot types (``SPOT``, ``SPOT_PRICE_CAPACITY_OPTIMIZED``: pools least
    likely to be interrupted, at the lowest price; no ``bidPercentage``: up to the on-demand price).
    A queue mixes neither: an interrupted job re-runs on its fallback, and an on-demand job is never
    interrupted."""
    spot = sorted(r.name for r in members if r.spot)
    if spot and len(spot) < len(members):
        on_demand = sorted(r.name for r in members if not r.spot)
        raise BackendError(
            BACKEND,
            f"job queue {queue} would hold spot types ({', '.join(spot)}) and on-demand types "
            f"({', '.join(on_demand)}): give them different job_queue options",
            transient=False,
        )
    if not spot:
        return {"type": "EC2", "allocationStrategy": "BEST_FIT_PROGRESSIVE"}
    chosen = {"type": "SPOT", "allocationStrategy": "SPOT_PRICE_CAPACITY_OPTIMIZED"}
    return {**chosen, "spotIamFleetRole": spot_fleet_role} if spot_fleet_role else chosen


def ec2_configuration(resources: Sequence[Resource]) -> dict[str, list[dict[str, str]]]:
    """The ``ec2Configuration`` of a compute environment of ``resources``: none (Batch's default) when no
    type has GPUs, the GPU AMI type when every type has, and both (Batch matches each instance type
    to one) when the environment mixes them (a catalog ``job_queue`` shared by CPU and GPU types).

    Batch would pick the GPU AMI for GPU families by itself today; saying so keeps the environment's
    instances able to run GPU jobs when Batch's defaults change again, as they did in 2026.
    """
    with_gpus = [resource for resource in resources if resource.gpus > 0]
    if not with_gpus:
        return {}
    if len(with_gpus) == len(resources):
        return {"ec2Configuration": [{"imageType": GPU_IMAGE_TYPE}]}
    return {"ec2Configuration": [{"imageType": CPU_IMAGE_TYPE}, {"imageType": GPU_IMAGE_TYPE}]}


def _names(resources: Sequence[Resource]) -> str:
    return ", ".join(resource.name for resource in resources)


def _max_vcpus(resources: Sequence[Resource], default: int) -> int:
    if any(resource.count is None for resource in resources):
        return default
    return sum(resource.vcpus * (resource.count or 0) for resource in resources)

"""AWS Batch, submission: each task attempt is one Batch job on the job queue of its resource.

A catalog resource with ``backend: aws`` is an EC2 instance type (``c5.large``). Its job
queue is the resource's catalog option ``job_queue`` if set, else ``queue_pattern``
filled with ``{family}`` (``c5``) or ``{type}`` (``c5-large``). The default,
``agora-{family}``, gives one queue (and one managed compute environment) per instance
family: within a family the catalog's speed and price per vCPU are the same, so the plan's
estimates hold on whichever size Batch packs a job onto, and 9 families fit Batch's fixed
quotas of 50 queues and 50 compute environments per region better than 21 types would.
``agora-{type}`` pins every job to the exact type the plan chose.

A planned machine (:meth:`AwsBatchBackend.open_lease`) always runs on the queue of exactly its
type, ``agora-<type>`` (:func:`type_queue_name`), so the type the plan priced is the type that
runs: its compute environment, named as the queue, has ``instanceTypes: [<type>]`` and
``maxvCpus`` = the catalog's count x vcpus, and is created the first time a lease of the type
needs it (with a :class:`ComputeNetwork`; idempotent, by name). A catalog ``job_queue`` is
the user's choice and is used as it is. :meth:`AwsBatchBackend.finished_leases` reports each
closed lease from its first job's start to its last job's stop (Batch's job records).

A job runs the agora worker as its container command with the task's cores and memory, and the
GPUs it reserves if any (Batch's ``GPU`` requirement; a job without GPUs carries none), as resource
requirements; Batch's own records give its state, exit code, reason and times.
With an ``s3_prefix`` the job's workload and result go through S3
(:mod:`~agora_optimizer.executor.worker.remote_files`): ``submit`` uploads the workload to the
worker's ``--workload-url``, and ``status`` completes a finished job with the result the
worker uploaded to its ``--result-url`` (its own OOM kill, peak memory, CPU time).
:meth:`AwsBatchBackend.ensure_infrastructure` creates the compute environments, queues and
job definition that ``submit`` needs.

This module is the submission side (the backend's calls). Beside it:
:mod:`~agora_optimizer.executor.backends.aws_jobs` (queue and job names, sizes, Batch's states),
:mod:`~agora_optimizer.executor.backends.aws_provisioning` (setting up an account),
:mod:`~agora_optimizer.executor.backends.aws_credentials` (Airflow's AWS connection,
:func:`session_from_connection`) and :mod:`~agora_optimizer.executor.backends.aws_errors`
(boto3's errors as BackendErrors).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoRegionError,
)

from agora_optimizer.executor.backends.aws_credentials import AwsConnection, mapping, session_from_connection
from agora_optimizer.executor.backends.aws_errors import BACKEND, call, classify_error
from agora_optimizer.executor.backends.aws_jobs import (
    DEFAULT_QUEUE_PATTERN,
    MIB,
    SPOT_SUFFIX,
    TIMEOUT_GRACE_S,
    attempt_duration_s,
    batch_job_name,
    container_environment,
    family_of,
    memory_mib,
    queue_name,
    resource_requirements,
    status_from_description,
    status_with_result,
    type_queue_name,
)
from agora_optimizer.executor.backends.aws_provisioning import ComputeNetwork, Infrastructure, Provisioner, purchase
from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.jobs.spec import (
    BackendError,
    JobResult,
    JobSpec,
    JobStatus,
    MachineLease,
    read_result,
)
from agora_optimizer.executor.worker.remote_files import RemoteFileNotFound, RemoteFiles, job_urls
from agora_optimizer.model.catalog import Resource
from agora_optimizer.runs.lease_record import LeaseRecord

if TYPE_CHECKING:
    from mypy_boto3_batch import BatchClient

__all__ = [
    "BACKEND",
    "DEFAULT_QUEUE_PATTERN",
    "MIB",
    "AwsBatchBackend",
    "AwsConnection",
    "ComputeNetwork",
    "Infrastructure",
    "attempt_duration_s",
    "batch_job_name",
    "classify_error",
    "container_environment",
    "family_of",
    "memory_mib",
    "queue_name",
    "resource_requirements",
    "session_from_connection",
    "status_from_description",
    "status_with_result",
    "type_queue_name",
]

log = logging.getLogger(__name__)

DEFAULT_JOB_DEFINITION = "agora-worker"
DESCRIBE_CHUNK = 100  # DescribeJobs takes at most 100 ids
CANCEL_REASON = "cancelled by agora"

# Variables of the scheduler's environment that must not reach a container: paths of the
# scheduler's machine, names Batch reserves, and secrets (a job's environment is readable
# by anyone allowed to call DescribeJobs).
DEFAULT_ENVIRONMENT_EXCLUDE: tuple[str, ...] = (
    "PATH",
    "HOME",
    "PWD",
    "PYTHONPATH",
    "PYTHONHOME",
    "VIRTUAL_ENV",
    "AWS_BATCH*",
    "AIRFLOW_CONN_*",
    "AIRFLOW_VAR_*",
    "AIRFLOW__DATABASE__*",
    "*SECRET*",
    "*PASSWORD*",
    "*FERNET*",
)

# -- the backend -----------------------------------------------------------------------------


@dataclass
class _BatchLease:
    """A planned machine on Batch: its type's queue, and the jobs handed to it."""

    lease: MachineLease
    queue: str
    job_ids: list[str] = field(default_factory=list)


@dataclass(eq=False)
class AwsBatchBackend(Backend):
    """Runs jobs on AWS Batch. Only ``submit`` and ``status`` raise (:class:`BackendError`).

    ``session`` is a boto3 session (default: boto3's default chain); ``region_name`` and
    ``endpoint_url`` (a VPC endpoint, or moto in tests) override the session's. Clients fail
    fast: short timeouts and ``max_attempts`` tries in botocore's standard retry mode, as the
    executor retries transient errors itself with backoff. ``s3_prefix`` (``s3://bucket/path/``)
    turns on the S3 exchange of workloads and results, through ``s3_endpoint_url`` if given.
    """

    session: boto3.session.Session | None = None
    region_name: str | None = None
    endpoint_url: str | None = None
    job_definition: str = DEFAULT_JOB_DEFINITION
    queue_pattern: str = DEFAULT_QUEUE_PATTERN
    connect_timeout_s: float = 3.0
    read_timeout_s: float = 20.0
    max_attempts: int = 2
    timeout_grace_s: float = TIMEOUT_GRACE_S
    environment_exclude: Sequence[str] = DEFAULT_ENVIRONMENT_EXCLUDE
    cancel_reason: str = CANCEL_REASON
    s3_prefix: str = ""
    s3_endpoint_url: str | None = None
    resources: Mapping[str, Resource] = field(default_factory=dict)  # the catalog's aws resources, by name
    compute_network: ComputeNetwork | None = None  # lets open_lease create a type's queue that is missing
    create_timeout_s: float = 600.0  # how long open_lease waits for a new queue to be VALID
    name: str = field(default=BACKEND, init=False)
    client: BatchClient = field(init=False, repr=False)
    files: RemoteFiles | None = field(default=None, init=False, repr=False)
    _leases: dict[str, _BatchLease] = field(default_factory=dict, init=False, repr=False)
    _closed: dict[str, _BatchLease] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        queue_name("c5.large", {}, self.queue_pattern)  # a bad pattern fails here, not at the first task
        if self.max_attempts < 1:
            raise BackendError(BACKEND, f"max_attempts must be at least 1, got {self.max_attempts}", transient=False)
        session = self.session or boto3.session.Session()
        config = Config(
            connect_timeout=self.connect_timeout_s,
            read_timeout=self.read_timeout_s,
            retries={"mode": "standard", "total_max_attempts": self.max_attempts},
            user_agent_extra="agora-optimizer",
        )
        try:
            self.client = session.client(
                "batch", region_name=self.region_name, endpoint_url=self.endpoint_url, config=config
            )
        except NoRegionError:
            raise BackendError(
                BACKEND,
                "no AWS region: set region_name in the Airflow connection's extra, or AWS_DEFAULT_REGION",
                transient=False,
            ) from None
        except ValueError as exc:  # a malformed endpoint URL
            raise BackendError(BACKEND, f"endpoint {self.endpoint_url!r}: {exc}", transient=False) from None
        if self.s3_prefix:
            job_urls(self.s3_prefix, "check")  # a malformed prefix fails here, not at the first task
            self.files = RemoteFiles.from_session(
                session,
                region_name=self.region_name,
                endpoint_url=self.s3_endpoint_url,
                connect_timeout_s=self.connect_timeout_s,
                read_timeout_s=self.read_timeout_s,
                max_attempts=self.max_attempts,
            )

    @classmethod
    def from_airflow(
        cls, conn_id: str = "aws_default", job_definition: str = DEFAULT_JOB_DEFINITION, **options: Any
    ) -> AwsBatchBackend:
        """A backend on the session, region and endpoints of Airflow connection ``conn_id``."""
        connection = session_from_connection(conn_id)
        if options.get("s3_prefix") and "s3_endpoint_url" not in options:
            options["s3_endpoint_url"] = session_from_connection(conn_id, "s3").endpoint_url
        return cls(
            session=connection.session,
            region_name=connection.region_name,
            endpoint_url=connection.endpoint_url,
            job_definition=job_definition,
            **options,
        )

    def queue_for(self, resource: str, options: Mapping[str, object]) -> str:
        """The resource's job queue; a spot type's is its family's with ``-spot`` (its compute environment is
        of Spot Instances, never shared with on-demand types), unless the catalog names one."""
        known = self.resources.get(resource)
        return self._queue(resource, options, spot=known is not None and known.spot)

    def _queue(self, resource: str, options: Mapping[str, object], *, spot: bool) -> str:
        name = queue_name(resource, options, self.queue_pattern)
        if spot and "job_queue" not in options and not name.endswith(SPOT_SUFFIX):
            name = queue_name(resource, {"job_queue": f"{name}{SPOT_SUFFIX}"})
        return name

    # -- the three calls of the executor -------------------------------------------------------

    def submit_request(self, job: JobSpec) -> dict[str, Any]:
        """The ``SubmitJob`` arguments for a job (no call is made)."""
        if job.cores < 1:
            raise BackendError(BACKEND, f"{job.label}: cores must be at least 1, got {job.cores}", transient=False)
        if not job.command or any(part == "" for part in job.command):
            raise BackendError(
                BACKEND,
                f"{job.label}: Batch refuses an empty command or argument: {list(job.command)!r}",
                transient=False,
            )
        known = self.resources.get(job.resource)
        if known is not None and job.gpus > known.gpus:  # Batch would hold it RUNNABLE for ever
            raise BackendError(
                BACKEND,
                f"{job.label}: reserves {job.gpus} GPUs, resource {job.resource} has {known.gpus}",
                transient=False,
            )
        request: dict[str, Any] = {
            "jobName": batch_job_name(job.key),
            "jobQueue": self._queue_of(job),
            "jobDefinition": self.job_definition,
            "containerOverrides": {
                "command": list(job.command),
                "environment": container_environment(job.environment, self.environment_exclude),
                "resourceRequirements": resource_requirements(job.cores, job.memory_bytes, job.gpus),
            },
            "tags": {"agora-key": job.key, "agora-resource": job.resource},
        }
        duration = attempt_duration_s(job.time_limit_s, self.timeout_grace_s)
        if duration is not None:
            request["timeout"] = {"attemptDurationSeconds": duration}
        return request

    def submit(self, job: JobSpec) -> str:
        """Upload the job's workload if its worker fetches it, and submit the job to its resource's
        queue; the Batch job id."""
        request = self.submit_request(job)
        self.publish_workload(job)
        try:
            response = self.client.submit_job(**request)
        except (ClientError, BotoCoreError) as exc:
            raise classify_error(
                exc,
                f"cannot submit {job.label} (resource {job.resource}) to job queue {request['jobQueue']!r} "
                f"with job definition {self.job_definition!r}",
            ) from None
        job_id = str(response["jobId"])
        if job.lease is not None:
            self._leases.setdefault(job.lease.key, _BatchLease(job.lease, request["jobQueue"])).job_ids.append(job_id)
        return job_id

    def _queue_of(self, job: JobSpec) -> str:
        """A planned machine's job goes to its lease's queue (its type's, or the catalog's ``job_queue``)."""
        if job.lease is None:
            return self.queue_for(job.resource, job.options)
        opened = self._leases.get(job.lease.key)
        return opened.queue if opened is not None else self.lease_queue(job.lease.resource, job.options)

    def lease_queue(self, resource: str, options: Mapping[str, object]) -> str:
        """The queue of a planned machine of ``resource``: the catalog's ``job_queue`` if the user set
        one, else the queue of exactly that type (:func:`type_queue_name`)."""
        return queue_name(resource, options if "job_queue" in options else {"job_queue": type_queue_name(resource)})

    # -- planned machines --------------------------------------------------------------------------

    def open_lease(self, lease: MachineLease) -> None:
        """Make sure the machine's queue takes jobs, creating its type's queue if it is missing.

        The queue of a type and its compute environment (named as the queue, exactly that instance
        type, ``maxvCpus`` the catalog's count x vcpus) are created once, by whichever lease needs
        them first; both are named by the type, so creating is idempotent. BackendError, naming the
        machine and Batch's words, when the queue is disabled or invalid, or missing and cannot be
        created (a catalog ``job_queue``, or no :class:`ComputeNetwork`), or when a compute environment
        of an existing queue buys other capacity than the type's (SPOT for a spot type, EC2 for the
        rest: :meth:`~agora_optimizer.executor.backends.aws_provisioning.Provisioner.check_queue`)."""
        if lease.key in self._leases:
            return
        resource = self.resources.get(lease.resource)
        options = resource.extra if resource is not None else {}
        queue = self.lease_queue(lease.resource, options)
        try:
            self._ready_queue(queue, resource, named_by_catalog="job_queue" in options)
        except BackendError as exc:
            what = f"machine {lease.machine} (resource {lease.resource}, job queue {queue})"
            raise BackendError(BACKEND, f"{what}: {exc.reason}", transient=exc.transient) from None
        self._leases[lease.key] = _BatchLease(lease, queue)

    def _ready_queue(self, queue: str, resource: Resource | None, *, named_by_catalog: bool) -> None:
        """:meth:`open_lease`'s look at ``queue``: there (or made now), enabled, and, if it was there, of
        compute environments that buy the capacity ``resource`` wants."""
        queues = call(self.client.describe_job_queues, "cannot look up its queue", jobQueues=[queue])["jobQueues"]
        reused = bool(queues)
        if not queues:
            if named_by_catalog:
                raise BackendError(BACKEND, "the catalog's job queue does not exist", transient=False)
            if resource is None or self.compute_network is None:
                why = "unknown to this backend" if resource is None else "no compute network is configured"
                raise BackendError(BACKEND, f"the queue does not exist and cannot be created ({why})", transient=False)
            queues = [self.provisioner.create_type_queue(resource, queue, self.compute_network, self.create_timeout_s)]
        for described in queues:
            state, status = described.get("state"), described.get("status")
            if state != "ENABLED" or status == "INVALID":
                reason = described.get("statusReason") or "no reason given"
                raise BackendError(BACKEND, f"the queue is {state} and {status} ({reason})", transient=False)
            if reused and resource is not None:
                self.provisioner.check_queue(described, [resource], purchase(queue, [resource])["type"])

    def close_lease(self, lease: MachineLease) -> None:
        """No more jobs come; the lease is reported once its jobs have ended. Never raises."""
        opened = self._leases.pop(lease.key, None)
        if opened is not None:
            self._closed[lease.key] = opened

    def finished_leases(self) -> list[LeaseRecord]:
        """Per closed lease whose jobs all ended: its first job's start to its last job's stop, from
        Batch's job records. A lease none of whose jobs started held nothing and is not reported."""
        finished: list[LeaseRecord] = []
        for key, closed in list(self._closed.items()):
            try:
                statuses = self.status(closed.job_ids) if closed.job_ids else {}
            except BackendError as exc:
                log.warning("AWS Batch: machine %s: cannot read its jobs: %s", closed.lease.machine, exc.reason)
                continue
            if any(status.phase in ("pending", "running") for status in statuses.values()):
                continue
            del self._closed[key]
            starts = [status.started_at for status in statuses.values() if status.started_at is not None]
            ends = [status.ended_at for status in statuses.values() if status.ended_at is not None]
            if not starts or not ends:
                continue
            lease = closed.lease
            finished.append(lease.record(BACKEND, closed.queue, min(starts), max(ends), "batch job times"))
        return finished

    def status(self, external_ids: Sequence[str]) -> Mapping[str, JobStatus]:
        """Batch's view of each job; an id Batch does not return is ``lost``."""
        wanted = list(dict.fromkeys(external_ids))
        found: dict[str, JobStatus] = {}
        for start in range(0, len(wanted), DESCRIBE_CHUNK):
            chunk = wanted[start : start + DESCRIBE_CHUNK]
            try:
                response = self.client.describe_jobs(jobs=chunk)
            except (ClientError, BotoCoreError) as exc:
                raise classify_error(exc, f"cannot describe {len(chunk)} jobs") from None
            for description in response.get("jobs", []):
                status = self._with_worker_result(description, status_from_description(description))
                found[description["jobId"]] = status
                if description.get("jobArn"):
                    found[description["jobArn"]] = status
        return {
            job_id: found.get(job_id)
            or JobStatus("lost", reason=f"AWS Batch does not know job {job_id} (never submitted, or expired)")
            for job_id in wanted
        }

    def publish_workload(self, job: JobSpec) -> None:
        """Upload ``job.workload_path`` to the ``--workload-url`` of the job's command (none: nothing to do).

        ``submit`` calls it; the executor calls it again when it renews the token of a job
        that still waits in a queue (the worker reads the workload when it starts).
        """
        url = _command_option(job.command, "--workload-url")
        if url is None:
            return
        if self.files is None:
            raise BackendError(
                BACKEND,
                f"{job.label}: its worker fetches its workload from {url}, but this backend has no s3_prefix "
                "([agora] aws_s3_prefix)",
                transient=False,
            )
        try:
            data = job.workload_path.read_bytes()
        except OSError as exc:
            raise BackendError(BACKEND, f"{job.label}: workload unreadable: {exc}", transient=False) from None
        self.files.write(url, data)

    def _with_worker_result(self, description: Mapping[str, Any], status: JobStatus) -> JobStatus:
        """A finished job's status completed by the result its worker uploaded to ``--result-url``.

        No result (the container died before the worker wrote one, or never started): Batch's
        view as it is. A transient S3 error raises (the executor polls again); a result that
        cannot be read for good is noted in the reason.
        """
        if status.phase != "finished" or self.files is None:
            return status
        url = _command_option(mapping(description.get("container")).get("command") or (), "--result-url")
        if url is None:
            return status
        try:
            result = _read_result(self.files, url)
        except RemoteFileNotFound:
            return status
        except BackendError as exc:
            if exc.transient:
                raise
            log.warning("AWS Batch job %s: %s", description.get("jobId"), exc)
            return replace(status, reason="; ".join(part for part in (status.reason, str(exc)) if part))
        return status_with_result(status, result)

    def cancel(self, external_id: str) -> None:
        """Terminate the job in whatever state it is. Never raises: the executor cancels on its
        way out of a task, and a failure here must not stop that."""
        try:
            self.client.terminate_job(jobId=external_id, reason=self.cancel_reason)
        except Exception as exc:
            log.warning("Cannot terminate AWS Batch job %s: %s", external_id, exc)

    # -- setting up an account (aws_provisioning) ----------------------------------------------

    def ensure_infrastructure(self, resources: Iterable[Resource], **options: Any) -> Infrastructure:
        """Create what ``submit`` needs and is missing, per job queue of the ``aws`` resources; idempotent
        (:meth:`~agora_optimizer.executor.backends.aws_provisioning.Provisioner.ensure_infrastructure`)."""
        groups: dict[str, list[Resource]] = {}
        for resource in resources:
            if resource.backend == BACKEND:
                queue = self._queue(resource.name, resource.extra, spot=resource.spot)  # the catalog's, not ours
                groups.setdefault(queue, []).append(resource)
        return self.provisioner.ensure_infrastructure(groups, **options)

    @property
    def provisioner(self) -> Provisioner:
        return Provisioner(self.client, self.job_definition)


def _command_option(command: Sequence[object], flag: str) -> str | None:
    """The value after ``flag`` in the worker's own options (``--result-url URL``), None without one."""
    parts = [str(part) for part in command]
    if "--" in parts:
        parts = parts[: parts.index("--")]
    if flag in parts[:-1]:
        return parts[parts.index(flag) + 1]
    return None


def _read_result(files: RemoteFiles, url: str) -> JobResult:
    """The worker's result at ``url``, parsed as the local backends parse theirs."""
    data = files.read(url)
    with tempfile.TemporaryDirectory(prefix="agora-result-") as scratch:
        path = Path(scratch) / "result.json"
        path.write_bytes(data)
        try:
            result = read_result(path)
        except BackendError as exc:
            raise BackendError(BACKEND, f"worker result {url}: {exc.reason}", transient=False) from None
    if result is None:  # cannot happen: the file was just written
        raise RemoteFileNotFound(BACKEND, f"worker result {url} vanished", transient=False)
    return result

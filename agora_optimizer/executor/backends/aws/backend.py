"""AWS Batch: each task attempt is one Batch job on the job queue of its resource.

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

The backend's calls; the rest of the package (:mod:`~agora_optimizer.executor.backends.aws`) is beside it.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.backends.aws.credentials import batch_client, mapping, session_from_connection
from agora_optimizer.executor.backends.aws.errors import BACKEND, call, classify_error
from agora_optimizer.executor.backends.aws.jobs import (
    DEFAULT_ENVIRONMENT_EXCLUDE,
    DEFAULT_QUEUE_PATTERN,
    SPOT_SUFFIX,
    TIMEOUT_GRACE_S,
    attempt_duration_s,
    batch_job_name,
    command_option,
    container_environment,
    queue_name,
    resource_requirements,
    status_from_description,
    status_with_result,
    type_queue_name,
)
from agora_optimizer.executor.backends.aws.provisioning import ComputeNetwork, Infrastructure, Provisioner, purchase
from agora_optimizer.executor.backends.aws.settings import AwsSettings
from agora_optimizer.executor.backends.base import Backend, worker_argv
from agora_optimizer.executor.jobs.spec import (
    BackendError,
    JobResult,
    JobSpec,
    JobStatus,
    MachineLease,
    read_result,
)
from agora_optimizer.executor.worker.remote_files import CONTAINER_JOB_ROOT, RemoteFileNotFound, RemoteFiles, job_urls
from agora_optimizer.model.catalog import Resource
from agora_optimizer.runs.lease_record import LeaseRecord

if TYPE_CHECKING:
    from mypy_boto3_batch import BatchClient

log = logging.getLogger(__name__)

DEFAULT_JOB_DEFINITION = "agora-worker"
DESCRIBE_CHUNK = 100  # DescribeJobs takes at most 100 ids
CANCEL_REASON = "cancelled by agora"

# -- the backend -----------------------------------------------------------------------------


@dataclass
class _BatchAllocation:
    """What Batch holds for a planned machine's lease: its type's queue, and the jobs handed to it."""

    lease: MachineLease
    queue: str
    job_ids: list[str] = field(default_factory=list)


@dataclass(eq=False)
class AwsBatchBackend(Backend):
    """Runs jobs on AWS Batch. Only ``submit`` and ``status`` raise (:class:`BackendError`).

    ``session`` is a boto3 session (default: boto3's default chain); ``region_name`` and
    ``endpoint_url`` (a VPC endpoint, or moto in tests) override the session's; with ``conn_id``, all
    three come from that Airflow connection instead (:func:`session_from_connection`). The clients are
    made at the first call that needs them, so making the backend (when the executor starts) opens no
    connection and assumes no role. They fail fast: short timeouts and ``max_attempts`` tries in
    botocore's standard retry mode, as the executor retries transient errors itself with backoff.
    ``s3_prefix`` (``s3://bucket/path/``) turns on the S3 exchange of workloads and results, through
    ``s3_endpoint_url`` if given (with ``conn_id``: the connection's S3 endpoint).
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
    conn_id: str | None = None  # the Airflow connection of the session, region and endpoints (opened at first use)
    _clients: tuple[BatchClient, RemoteFiles | None] | None = field(default=None, init=False, repr=False)
    _allocations: dict[str, _BatchAllocation] = field(default_factory=dict, init=False, repr=False)
    _closed: dict[str, _BatchAllocation] = field(default_factory=dict, init=False, repr=False)

    name: ClassVar[str] = BACKEND

    def __post_init__(self) -> None:
        queue_name("c5.large", {}, self.queue_pattern)  # a bad pattern fails here, not at the first task
        if self.max_attempts < 1:
            raise BackendError(BACKEND, f"max_attempts must be at least 1, got {self.max_attempts}", transient=False)
        if self.s3_prefix:
            job_urls(self.s3_prefix, "check")  # a malformed prefix fails here, not at the first task

    @classmethod
    def from_settings(cls, resources: Mapping[str, Resource]) -> AwsBatchBackend:
        """On the Airflow connection ``[agora] aws_conn_id`` (opened at the first call), with ``aws_job_definition``,
        ``aws_s3_prefix`` and the compute network of ``aws_subnets`` ...; AgoraError naming the option of a bad
        value (:class:`~agora_optimizer.executor.backends.aws.settings.AwsSettings`). Without ``aws_s3_prefix``
        every task on AWS fails, naming it: said now, once."""
        read = AwsSettings.from_agora()
        if not read.s3_prefix:
            log.warning(
                "The catalog has AWS Batch resources but [agora] aws_s3_prefix is not set: "
                "every task on them will fail until it is (s3://bucket/path/)"
            )
        return cls.from_airflow(
            read.conn_id,
            read.job_definition,
            s3_prefix=read.s3_prefix,
            resources=resources,
            compute_network=read.compute_network,
        )

    @classmethod
    def from_airflow(
        cls, conn_id: str = "aws_default", job_definition: str = DEFAULT_JOB_DEFINITION, **options: Any
    ) -> AwsBatchBackend:
        """A backend on the session, region and endpoints of Airflow connection ``conn_id``, read at its first call."""
        return cls(conn_id=conn_id, job_definition=job_definition, **options)

    @property
    def client(self) -> BatchClient:
        """The Batch client (made at the first call; BackendError naming what is wrong when it cannot be)."""
        return self._connected()[0]

    @property
    def files(self) -> RemoteFiles | None:
        """The S3 exchange of workloads and results; None without an ``s3_prefix``."""
        return self._connected()[1] if self.s3_prefix else None

    def _connected(self) -> tuple[BatchClient, RemoteFiles | None]:
        if self._clients is None:
            self._clients = self._connect()
        return self._clients

    def _connect(self) -> tuple[BatchClient, RemoteFiles | None]:
        session, region_name, endpoint_url = self.session, self.region_name, self.endpoint_url
        s3_endpoint_url = self.s3_endpoint_url
        if self.conn_id is not None:
            connection = session_from_connection(self.conn_id)
            session, region_name, endpoint_url = connection.session, connection.region_name, connection.endpoint_url
            if self.s3_prefix and s3_endpoint_url is None:
                s3_endpoint_url = session_from_connection(self.conn_id, "s3").endpoint_url
        session = session or boto3.session.Session()
        client = batch_client(
            session,
            region_name,
            endpoint_url,
            connect_timeout_s=self.connect_timeout_s,
            read_timeout_s=self.read_timeout_s,
            max_attempts=self.max_attempts,
        )
        files = None
        if self.s3_prefix:
            files = RemoteFiles.from_session(
                session,
                region_name=region_name,
                endpoint_url=s3_endpoint_url,
                connect_timeout_s=self.connect_timeout_s,
                read_timeout_s=self.read_timeout_s,
                max_attempts=self.max_attempts,
            )
        return client, files

    def worker_command(
        self, job_dir: Path, resource: str, *, memory_bytes: int, time_limit_s: float | None, label: str
    ) -> list[str]:
        """The worker in the container's ``python``, which cannot see ``job_dir``: it works in a directory of the
        container (:data:`~agora_optimizer.executor.worker.remote_files.CONTAINER_JOB_ROOT`) and fetches its workload
        from, and returns its result to, S3 under ``s3_prefix`` (AgoraError naming the task without one)."""
        if not self.s3_prefix:
            raise AgoraError(
                f"task {label}: resource {resource} runs on AWS Batch, whose jobs get their workload and return "
                "their result through S3: set [agora] aws_s3_prefix (s3://bucket/path/)"
            )
        urls = job_urls(self.s3_prefix, job_dir.name)
        return worker_argv(
            "python",
            f"{CONTAINER_JOB_ROOT}/{job_dir.name}",
            memory_bytes=memory_bytes,
            time_limit_s=time_limit_s,
            workload_url=urls.workload,
            result_url=urls.result,
        )

    def adopt(self, external_id: str, job_dir: Path, resource: str) -> bool:
        """Watch a job an earlier scheduler submitted; False when Batch cannot be asked (its connection fails)."""
        try:
            self._connected()
        except BackendError as exc:
            log.warning("AWS Batch: cannot adopt job %s: %s", external_id, exc.reason)
            return False
        return True

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
            self._allocations.setdefault(
                job.lease.key, _BatchAllocation(job.lease, request["jobQueue"])
            ).job_ids.append(job_id)
        return job_id

    def _queue_of(self, job: JobSpec) -> str:
        """A planned machine's job goes to its lease's queue (its type's, or the catalog's ``job_queue``)."""
        if job.lease is None:
            return self.queue_for(job.resource, job.options)
        opened = self._allocations.get(job.lease.key)
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
        rest: :meth:`~agora_optimizer.executor.backends.aws.provisioning.Provisioner.check_queue`)."""
        if lease.key in self._allocations:
            return
        resource = self.resources.get(lease.resource)
        options = resource.extra if resource is not None else {}
        queue = self.lease_queue(lease.resource, options)
        try:
            self._ready_queue(queue, resource, named_by_catalog="job_queue" in options)
        except BackendError as exc:
            what = f"machine {lease.machine} (resource {lease.resource}, job queue {queue})"
            raise BackendError(BACKEND, f"{what}: {exc.reason}", transient=exc.transient) from None
        self._allocations[lease.key] = _BatchAllocation(lease, queue)

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
        opened = self._allocations.pop(lease.key, None)
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
        url = command_option(job.command, "--workload-url")
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
        url = command_option(mapping(description.get("container")).get("command") or (), "--result-url")
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
        (:meth:`~agora_optimizer.executor.backends.aws.provisioning.Provisioner.ensure_infrastructure`)."""
        groups: dict[str, list[Resource]] = {}
        for resource in resources:
            if resource.backend == BACKEND:
                queue = self._queue(resource.name, resource.extra, spot=resource.spot)  # the catalog's, not ours
                groups.setdefault(queue, []).append(resource)
        return self.provisioner.ensure_infrastructure(groups, **options)

    @property
    def provisioner(self) -> Provisioner:
        return Provisioner(self.client, self.job_definition)


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

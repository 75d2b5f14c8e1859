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

A job runs the agora worker as its container command with the task's cores and memory as
resource requirements; Batch's own records give its state, exit code, reason and times.
With an ``s3_prefix`` the job's workload and result go through S3
(:mod:`~agora_optimizer.executor.remote_files`): ``submit`` uploads the workload to the
worker's ``--workload-url``, and ``status`` completes a finished job with the result the
worker uploaded to its ``--result-url`` (its own OOM kill, peak memory, CPU time).
:meth:`AwsBatchBackend.ensure_infrastructure` creates the compute environments, queues and
job definition that ``submit`` needs.

Credentials follow Airflow's AWS connection (:func:`session_from_connection`).
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import math
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.environment import job_environment
from agora_optimizer.executor.jobs import (
    BackendError,
    JobPhase,
    JobResult,
    JobSpec,
    JobStatus,
    MachineLease,
    read_result,
)
from agora_optimizer.executor.remote_files import RemoteFileNotFound, RemoteFiles, job_urls
from agora_optimizer.model.catalog import Resource
from agora_optimizer.runs.lease_record import LeaseRecord

if TYPE_CHECKING:
    from mypy_boto3_batch import BatchClient

log = logging.getLogger(__name__)

BACKEND = "aws"
DEFAULT_JOB_DEFINITION = "agora-worker"
DEFAULT_QUEUE_PATTERN = "agora-{family}"
MIB = 2**20
MIN_ATTEMPT_DURATION_S = 60  # Batch refuses a shorter timeout
TIMEOUT_GRACE_S = 30.0  # the worker stops the task at its limit (SIGTERM, SIGKILL 10 s later); Batch is the backstop
DESCRIBE_CHUNK = 100  # DescribeJobs takes at most 100 ids
CANCEL_REASON = "cancelled by agora"
MANAGED_TAG = {"agora-managed": "true"}

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

# Batch job states -> agora phases. A state Batch may add later counts as pending: the job
# stays watched instead of being reported lost.
STATE_MAPPINGS: Mapping[str, JobPhase] = {
    "SUBMITTED": "pending",
    "PENDING": "pending",
    "RUNNABLE": "pending",
    "STARTING": "pending",
    "RUNNING": "running",
    "SUCCEEDED": "finished",
    "FAILED": "finished",
}
UNKNOWN_STATE_PHASE: JobPhase = "pending"

OOM_MARKER = "OutOfMemoryError"  # ECS: "OutOfMemoryError: Container killed due to memory usage"
THROTTLING_CODES = frozenset(
    {"ThrottlingException", "TooManyRequestsException", "Throttling", "RequestLimitExceeded", "SlowDown"}
)
SERVER_ERROR_CODES = frozenset({"ServerException", "InternalFailure", "ServiceUnavailable", "InternalError"})

_JOB_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_JOB_NAME_MAX = 128
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
_COMPUTE_ENVIRONMENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{1,126}[A-Za-z0-9]$")
_REJECTED_EXTRA = ("role_arn", "assume_role_method", "assume_role_kwargs", "profile_name")


# -- names and sizes -------------------------------------------------------------------------


def family_of(resource: str) -> str:
    """The instance family of an EC2 type name: ``c5`` for ``c5.large``."""
    return resource.split(".", 1)[0]


def queue_name(resource: str, options: Mapping[str, object], pattern: str = DEFAULT_QUEUE_PATTERN) -> str:
    """The job queue of a resource: its ``job_queue`` option, else ``pattern`` filled in.

    ``{family}`` is ``c5`` for ``c5.large``, ``{type}`` is ``c5-large`` (queue names allow
    letters, digits, ``-`` and ``_``). An option may also be a queue ARN.
    """
    option = options.get("job_queue")
    if option is not None:
        if not isinstance(option, str) or not option:
            raise BackendError(
                BACKEND, f"resource {resource}: job_queue must be a queue name, got {option!r}", transient=False
            )
        name = option
    else:
        try:
            name = pattern.format(family=family_of(resource), type=resource.replace(".", "-"))
        except (KeyError, IndexError, ValueError) as exc:
            raise BackendError(
                BACKEND,
                f"queue pattern {pattern!r} is malformed ({type(exc).__name__}: {exc}); "
                "it may use {family} and {type}",
                transient=False,
            ) from None
    if not name.startswith("arn:") and not _QUEUE_NAME.match(name):
        raise BackendError(
            BACKEND,
            f"resource {resource}: job queue name {name!r} is not a Batch name "
            "(up to 128 letters, digits, '-' and '_', starting with a letter or digit)",
            transient=False,
        )
    return name


def type_queue_name(resource: str) -> str:
    """The job queue (and compute environment) of exactly one instance type: ``agora-c5-large``.

    A planned machine's jobs go there, so the type the plan priced is the type that runs."""
    return "agora-" + resource.replace(".", "-")


def batch_job_name(key: str) -> str:
    """A Batch job name for a job key: letters, digits, ``-`` and ``_``, at most 128.

    Names need not be unique (the job id is); a key that had to be cut ends in a hash of
    the whole key, so people can still tell two long keys apart.
    """
    name = _JOB_NAME_UNSAFE.sub("_", key)
    if not name[:1].isalnum():
        name = "j" + name
    if len(name) > _JOB_NAME_MAX:
        digest = hashlib.sha256(key.encode()).hexdigest()[:10]
        name = f"{name[: _JOB_NAME_MAX - len(digest) - 1]}-{digest}"
    return name


def memory_mib(memory_bytes: int) -> int:
    """Bytes as whole MiB, rounded up: Batch's MEMORY is in MiB."""
    return max(1, math.ceil(memory_bytes / MIB))


def attempt_duration_s(time_limit_s: float | None, grace_s: float = TIMEOUT_GRACE_S) -> int | None:
    """Batch's ``attemptDurationSeconds`` for a task time limit: limit + grace, at least 60 s.

    The worker enforces the limit itself and ends the task cleanly; Batch's timeout is the
    backstop that kills the container if the worker cannot.
    """
    if time_limit_s is None:
        return None
    return max(MIN_ATTEMPT_DURATION_S, math.ceil(time_limit_s + grace_s))


def container_environment(environment: Mapping[str, str], exclude: Sequence[str]) -> list[dict[str, str]]:
    """``environment`` as Batch key-value pairs, without the scheduler's secrets under any name Airflow
    reads them by (:func:`~agora_optimizer.executor.environment.job_environment`) and the names ``exclude``
    matches."""
    return [
        {"name": name, "value": value}
        for name, value in sorted(job_environment(environment).items())
        if not any(fnmatch.fnmatchcase(name, pattern) for pattern in exclude)
    ]


# -- Batch's answers -------------------------------------------------------------------------


def status_from_description(description: Mapping[str, Any]) -> JobStatus:
    """One ``DescribeJobs`` job (AWS's ``JobDetail`` shape) as a :class:`JobStatus`.

    Finished jobs: the container's ``exitCode``; a FAILED job without one (it never ran,
    or was terminated) gets 1, a SUCCEEDED one 0. ``oom_killed`` when Batch or ECS says
    ``OutOfMemoryError``. Times are epoch milliseconds.
    """
    state = str(description.get("status", ""))
    phase = STATE_MAPPINGS.get(state, UNKNOWN_STATE_PHASE)
    container = _mapping(description.get("container"))
    attempts = description.get("attempts") or []
    last_attempt = _mapping(_mapping(attempts[-1]).get("container")) if attempts else {}
    reasons = [
        str(text)
        for text in (description.get("statusReason"), container.get("reason"), last_attempt.get("reason"))
        if text
    ]
    reason = "; ".join(dict.fromkeys(reasons))
    host = str(
        container.get("logStreamName")
        or last_attempt.get("logStreamName")
        or container.get("taskArn")
        or last_attempt.get("taskArn")
        or ""
    )
    exit_code: int | None = None
    oom_killed = False
    if phase == "finished":
        raw = container.get("exitCode", last_attempt.get("exitCode"))
        exit_code = int(raw) if raw is not None else (0 if state == "SUCCEEDED" else 1)
        oom_killed = OOM_MARKER in reason
    if phase == "pending" and state not in STATE_MAPPINGS:
        reason = f"unknown Batch state {state!r}" + (f": {reason}" if reason else "")
    return JobStatus(
        phase=phase,
        exit_code=exit_code,
        oom_killed=oom_killed,
        reason=reason,
        host=host,
        queued_at=_moment(description.get("createdAt")),
        started_at=_moment(description.get("startedAt")),
        ended_at=_moment(description.get("stoppedAt")) if phase == "finished" else None,
    )


def status_with_result(status: JobStatus, result: JobResult) -> JobStatus:
    """Batch's view of a finished job completed by its worker's result.

    Batch knows the job's times and log stream; the worker knows what Batch cannot tell
    from an exit code: that it killed the task for its memory, the peak resident memory,
    the CPU time, and why the task ended. A non-zero exit code of Batch's wins over the
    worker's (the container failed after the worker wrote its result).
    """
    return replace(
        status,
        exit_code=status.exit_code or result.exit_code,
        oom_killed=status.oom_killed or result.oom_killed,
        reason=result.reason or status.reason,
        peak_rss_bytes=result.peak_rss_bytes,
        cpu_time_s=result.cpu_time_s,
    )


def classify_error(exc: Exception, what: str) -> BackendError:
    """A boto3 failure as a BackendError: throttling, 5xx and lost connections are transient.

    ``what`` says what was being done, naming the job, resource and queue.
    """
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        message = str(error.get("Message", "")) or str(exc)
        http_status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        transient = code in THROTTLING_CODES or code in SERVER_ERROR_CODES or http_status >= 500 or http_status == 429
        return BackendError(BACKEND, f"{what}: {code}: {message}", transient=transient)
    if isinstance(exc, BotoConnectionError | HTTPClientError):  # no connection, timeouts, dropped connections
        return BackendError(BACKEND, f"{what}: AWS unreachable: {exc}", transient=True)
    if isinstance(exc, NoCredentialsError):
        return BackendError(
            BACKEND, f"{what}: no AWS credentials (set login/password on the Airflow connection)", transient=False
        )
    return BackendError(BACKEND, f"{what}: {type(exc).__name__}: {exc}", transient=False)


# -- credentials -----------------------------------------------------------------------------


@dataclass(frozen=True)
class AwsConnection:
    """A boto3 session with the region and endpoint an Airflow connection names."""

    session: boto3.session.Session
    region_name: str | None
    endpoint_url: str | None
    source: str


def session_from_connection(conn_id: str = "aws_default", service: str = "batch") -> AwsConnection:
    """The session of Airflow's AWS connection ``conn_id``, with the endpoint of ``service``.

    With apache-airflow-providers-amazon installed, its ``AwsBaseHook`` builds the session
    (every option it supports, assumed roles included). Without it the connection is read
    here as the provider reads it: login = access key id, password = secret access key (or
    extra ``aws_access_key_id``, ``aws_secret_access_key``), extra ``aws_session_token``,
    ``region_name``, ``endpoint_url`` (``service_config.<service>.endpoint_url`` first); an
    assumed role or a profile needs the provider and is refused. No such connection:
    boto3's default chain (environment, profile, instance role).
    """
    try:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    except ImportError:
        pass
    else:
        try:
            hook = AwsBaseHook(aws_conn_id=conn_id, client_type=service)
            region = hook.region_name
            return AwsConnection(
                session=hook.get_session(region_name=region),  # assumes the role now, if one is set
                region_name=region,
                endpoint_url=hook.conn_config.get_service_endpoint_url(service),
                source=f"Airflow connection {conn_id} (Amazon provider)",
            )
        except (ClientError, BotoCoreError) as exc:
            raise classify_error(exc, f"Airflow connection {conn_id}: cannot open an AWS session") from exc
        except Exception as exc:  # the provider's own errors: a malformed connection
            raise BackendError(
                BACKEND, f"Airflow connection {conn_id}: {type(exc).__name__}: {exc}", transient=False
            ) from exc

    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        log.info("No Airflow connection %s: boto3's default credential chain", conn_id)
        return AwsConnection(boto3.session.Session(), None, None, "boto3 default chain")
    extra = conn.extra_dejson
    if not isinstance(extra, dict):
        raise BackendError(BACKEND, f"Airflow connection {conn_id}: extra must be a JSON object", transient=False)
    rejected = [key for key in _REJECTED_EXTRA if extra.get(key)]
    if rejected:
        raise BackendError(
            BACKEND,
            f"Airflow connection {conn_id}: extra {', '.join(rejected)} needs apache-airflow-providers-amazon "
            "(assumed roles and profiles are not read without it); install it, or give the access key as "
            "login and the secret key as password",
            transient=False,
        )
    key_id = conn.login or _optional_str(extra.get("aws_access_key_id"), conn_id, "aws_access_key_id")
    secret = conn.password or _optional_str(extra.get("aws_secret_access_key"), conn_id, "aws_secret_access_key")
    if bool(key_id) != bool(secret):
        raise BackendError(
            BACKEND,
            f"Airflow connection {conn_id}: login (access key id) and password (secret key) go together",
            transient=False,
        )
    region = _optional_str(extra.get("region_name"), conn_id, "region_name")
    service_config = _mapping(_mapping(extra.get("service_config")).get(service))
    endpoint = _optional_str(service_config.get("endpoint_url", extra.get("endpoint_url")), conn_id, "endpoint_url")
    session = boto3.session.Session(
        aws_access_key_id=key_id or None,
        aws_secret_access_key=secret or None,
        aws_session_token=_optional_str(extra.get("aws_session_token"), conn_id, "aws_session_token"),
        region_name=region,
    )
    return AwsConnection(session, region, endpoint, f"Airflow connection {conn_id}")


# -- the backend -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Infrastructure:
    """What :meth:`AwsBatchBackend.ensure_infrastructure` found and made."""

    queues: Mapping[str, tuple[str, ...]]  # job queue -> the catalog resources it serves
    created: tuple[str, ...] = ()  # "compute environment agora-c5", "job queue agora-c5", "job definition ..."
    existing: tuple[str, ...] = ()
    job_definition_arn: str = ""


@dataclass(frozen=True)
class ComputeNetwork:
    """Where compute environments that the backend creates on demand put their instances."""

    subnets: Sequence[str]
    security_group_ids: Sequence[str]
    instance_role: str  # the ECS instance profile
    service_role: str | None = None  # None: Batch's service-linked role
    default_max_vcpus: int = 256  # a type without a catalog count


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
        return queue_name(resource, options, self.queue_pattern)

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
        request: dict[str, Any] = {
            "jobName": batch_job_name(job.key),
            "jobQueue": self._queue_of(job),
            "jobDefinition": self.job_definition,
            "containerOverrides": {
                "command": list(job.command),
                "environment": container_environment(job.environment, self.environment_exclude),
                "resourceRequirements": [
                    {"type": "VCPU", "value": str(job.cores)},
                    {"type": "MEMORY", "value": str(memory_mib(job.memory_bytes))},
                ],
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
        created (a catalog ``job_queue``, or no :class:`ComputeNetwork`)."""
        if lease.key in self._leases:
            return
        resource = self.resources.get(lease.resource)
        options = resource.extra if resource is not None else {}
        queue = self.lease_queue(lease.resource, options)
        what = f"machine {lease.machine} (resource {lease.resource}, job queue {queue})"
        found = self._call(self.client.describe_job_queues, f"{what}: cannot look up its queue", jobQueues=[queue])
        queues = found.get("jobQueues", [])
        if not queues:
            if "job_queue" in options:
                raise BackendError(BACKEND, f"{what}: the catalog's job queue does not exist", transient=False)
            if resource is None or self.compute_network is None:
                why = "unknown to this backend" if resource is None else "no compute network is configured"
                raise BackendError(
                    BACKEND, f"{what}: the queue does not exist and cannot be created ({why})", transient=False
                )
            try:
                self._create_type_queue(resource, queue, self.compute_network)
            except BackendError as exc:
                raise BackendError(BACKEND, f"{what}: {exc.reason}", transient=exc.transient) from None
            queues = self._call(self.client.describe_job_queues, f"{what}: cannot look up its queue", jobQueues=[queue])
            queues = queues["jobQueues"]
        for described in queues:
            state, status = described.get("state"), described.get("status")
            if state != "ENABLED" or status == "INVALID":
                reason = described.get("statusReason") or "no reason given"
                raise BackendError(BACKEND, f"{what}: the queue is {state} and {status} ({reason})", transient=False)
        self._leases[lease.key] = _BatchLease(lease, queue)

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

    def _create_type_queue(self, resource: Resource, queue: str, network: ComputeNetwork) -> None:
        """The compute environment (exactly ``resource``'s type) and queue named ``queue``, each unless it exists."""
        compute = {
            "type": "EC2",  # on demand, as the catalog's prices
            "allocationStrategy": "BEST_FIT_PROGRESSIVE",
            "minvCpus": 0,
            "maxvCpus": _max_vcpus([resource], network.default_max_vcpus),
            "instanceTypes": [resource.name],
            "subnets": list(network.subnets),
            "securityGroupIds": list(network.security_group_ids),
            "instanceRole": network.instance_role,
            "tags": dict(MANAGED_TAG),
        }
        self._create_compute_environment(queue, compute, network.service_role, [])
        [environment] = self._wait_valid(
            lambda: self.client.describe_compute_environments(computeEnvironments=[queue])["computeEnvironments"],
            "computeEnvironmentName",
            "compute environment",
            self.create_timeout_s,
            1.0,
        )
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
        self._wait_valid(
            lambda: self.client.describe_job_queues(jobQueues=[queue])["jobQueues"],
            "jobQueueName",
            "job queue",
            self.create_timeout_s,
            1.0,
        )
        log.info("AWS Batch: created job queue and compute environment %s for %s", queue, resource.name)

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
        url = _command_option(_mapping(description.get("container")).get("command") or (), "--result-url")
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

    # -- setting up an account -----------------------------------------------------------------

    def ensure_infrastructure(
        self,
        resources: Iterable[Resource],
        *,
        image: str,
        subnets: Sequence[str],
        security_group_ids: Sequence[str],
        instance_role: str,
        service_role: str | None = None,
        job_role_arn: str | None = None,
        default_max_vcpus: int = 256,
        wait_timeout_s: float = 600.0,
        poll_s: float = 5.0,
    ) -> Infrastructure:
        """Create what ``submit`` needs and is missing; idempotent.

        Per job queue of the ``aws`` resources: a managed compute environment (named as the
        queue) of on-demand EC2 instances of the queue's types, ``minvCpus`` 0 and ``maxvCpus``
        the catalog's ``count`` x ``vcpus`` summed over its types (``default_max_vcpus`` when a
        type has no count), then the queue. And the container job definition
        ``job_definition`` with ``image`` (a new revision unless the newest active one, which
        jobs get, already has that image and job role). Existing queues and compute
        environments are used as they are. ``instance_role`` is the ECS instance profile;
        ``service_role`` may be omitted where Batch's service-linked role exists.
        """
        groups: dict[str, list[Resource]] = {}
        for resource in resources:
            if resource.backend == BACKEND:
                groups.setdefault(self.queue_for(resource.name, resource.extra), []).append(resource)
        if not groups:
            raise BackendError(BACKEND, "the catalog has no resource with backend aws", transient=False)
        created: list[str] = []
        existing: list[str] = []
        found = self._call(self.client.describe_job_queues, "cannot list job queues", jobQueues=list(groups))
        known = {queue["jobQueueName"] for queue in found["jobQueues"]} | {
            queue["jobQueueArn"] for queue in found["jobQueues"]
        }
        existing += [f"job queue {queue}" for queue in groups if queue in known]
        missing = {queue: members for queue, members in groups.items() if queue not in known}
        if missing:
            template = {
                "type": "EC2",  # on demand, as the catalog's prices
                "allocationStrategy": "BEST_FIT_PROGRESSIVE",
                "minvCpus": 0,
                "subnets": list(subnets),
                "securityGroupIds": list(security_group_ids),
                "instanceRole": instance_role,
                "tags": dict(MANAGED_TAG),
            }
            for queue, members in missing.items():
                compute = {
                    **template,
                    "maxvCpus": _max_vcpus(members, default_max_vcpus),
                    "instanceTypes": sorted(resource.name for resource in members),
                }
                created += self._create_compute_environment(queue, compute, service_role, existing)
            environments = self._wait_valid(
                lambda: self.client.describe_compute_environments(computeEnvironments=list(missing))[
                    "computeEnvironments"
                ],
                "computeEnvironmentName",
                "compute environment",
                wait_timeout_s,
                poll_s,
            )
            arns = {str(item["computeEnvironmentName"]): str(item["computeEnvironmentArn"]) for item in environments}
            for queue in missing:
                self._call(
                    self.client.create_job_queue,
                    f"cannot create job queue {queue}",
                    jobQueueName=queue,
                    state="ENABLED",
                    priority=1,
                    computeEnvironmentOrder=[{"order": 1, "computeEnvironment": arns[queue]}],
                    tags=dict(MANAGED_TAG),
                )
                created.append(f"job queue {queue}")
            self._wait_valid(
                lambda: self.client.describe_job_queues(jobQueues=list(missing))["jobQueues"],
                "jobQueueName",
                "job queue",
                wait_timeout_s,
                poll_s,
            )
        arn, made = self._ensure_job_definition(image, job_role_arn)
        (created if made else existing).append(f"job definition {arn}")
        return Infrastructure(
            queues={queue: tuple(resource.name for resource in members) for queue, members in groups.items()},
            created=tuple(created),
            existing=tuple(existing),
            job_definition_arn=arn,
        )

    def _create_compute_environment(
        self, name: str, compute: Mapping[str, Any], service_role: str | None, existing: list[str]
    ) -> list[str]:
        """Create the compute environment of a new queue unless it exists; what was created."""
        types = ", ".join(compute["instanceTypes"])
        if name.startswith("arn:") or not _COMPUTE_ENVIRONMENT_NAME.match(name):
            raise BackendError(
                BACKEND,
                f"job queue {name!r} of {types} does not exist, and ensure_infrastructure creates a queue only "
                "by a name that can also name its compute environment (3 to 128 letters, digits, '-', '_')",
                transient=False,
            )
        found = self._call(
            self.client.describe_compute_environments,
            f"cannot look up compute environment {name}",
            computeEnvironments=[name],
        )
        if found["computeEnvironments"]:
            existing.append(f"compute environment {name}")
            return []
        request: dict[str, Any] = {
            "computeEnvironmentName": name,
            "type": "MANAGED",
            "state": "ENABLED",
            "computeResources": dict(compute),
            "tags": dict(MANAGED_TAG),
        }
        if service_role:
            request["serviceRole"] = service_role
        self._call(
            self.client.create_compute_environment, f"cannot create compute environment {name} for {types}", **request
        )
        return [f"compute environment {name}"]

    def _ensure_job_definition(self, image: str, job_role_arn: str | None) -> tuple[str, bool]:
        name = self.job_definition.split(":", 1)[0] if not self.job_definition.startswith("arn:") else ""
        if not name:
            raise BackendError(
                BACKEND, f"job definition {self.job_definition!r}: give a name to create, not an ARN", transient=False
            )
        found = self._call(
            self.client.describe_job_definitions,
            f"cannot list job definition {name}",
            jobDefinitionName=name,
            status="ACTIVE",
        )["jobDefinitions"]
        if found:  # a job names the definition without revision: Batch runs its newest active one
            newest = max(found, key=lambda definition: definition.get("revision", 0))
            current = newest.get("containerProperties") or {}
            if current.get("image") == image and (current.get("jobRoleArn") or None) == job_role_arn:
                return newest["jobDefinitionArn"], False
        properties: dict[str, Any] = {
            "image": image,
            # placeholders: every job overrides both
            "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "2048"}],
        }
        if job_role_arn:
            properties["jobRoleArn"] = job_role_arn
        response = self._call(
            self.client.register_job_definition,
            f"cannot register job definition {name} with image {image}",
            jobDefinitionName=name,
            type="container",
            containerProperties=properties,
            retryStrategy={"attempts": 1},  # the executor retries, with its own backoff
            propagateTags=True,
            tags=dict(MANAGED_TAG),
        )
        return response["jobDefinitionArn"], True

    def _wait_valid(
        self,
        describe: Callable[[], Sequence[Mapping[str, Any]]],
        name_key: str,
        kind: str,
        timeout_s: float,
        poll_s: float,
    ) -> Sequence[Mapping[str, Any]]:
        """Wait until every described item is VALID (and return them); an INVALID one raises."""
        deadline = time.monotonic() + timeout_s
        while True:
            items = self._call(describe, f"cannot describe {kind}s")
            waiting = []
            for item in items:
                status = item.get("status")
                if status == "INVALID":
                    raise BackendError(
                        BACKEND,
                        f"{kind} {item[name_key]} is INVALID: {item.get('statusReason', 'no reason given')}",
                        transient=False,
                    )
                if status != "VALID":
                    waiting.append(str(item[name_key]))
            if not waiting:
                return items
            if time.monotonic() > deadline:
                raise BackendError(
                    BACKEND, f"{kind}s {', '.join(waiting)} not VALID after {timeout_s:g} s", transient=True
                )
            time.sleep(poll_s)

    @staticmethod
    def _call(call: Callable[..., Any], what: str, **arguments: Any) -> Any:
        try:
            return call(**arguments)
        except (ClientError, BotoCoreError) as exc:
            raise classify_error(exc, what) from None


def _max_vcpus(resources: Sequence[Resource], default: int) -> int:
    if any(resource.count is None for resource in resources):
        return default
    return sum(resource.vcpus * (resource.count or 0) for resource in resources)


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


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _moment(milliseconds: object) -> datetime | None:
    if not isinstance(milliseconds, int | float) or isinstance(milliseconds, bool) or milliseconds <= 0:
        return None
    return datetime.fromtimestamp(milliseconds / 1000.0, tz=UTC)


def _optional_str(value: object, conn_id: str, key: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BackendError(BACKEND, f"Airflow connection {conn_id}: extra {key} must be a string", transient=False)
    return value

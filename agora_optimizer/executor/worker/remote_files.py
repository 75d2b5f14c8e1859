"""Small files at ``s3://bucket/key`` URLs: how an AWS Batch job gets its workload and returns its result.

A Batch container cannot see the scheduler's job directory. For a job on AWS the
executor's worker command therefore names two URLs under ``[agora] aws_s3_prefix``
(:func:`job_urls`, one folder per job key) and a directory inside the container
(:data:`CONTAINER_JOB_ROOT`):

1. the backend uploads ``workload.json`` before it submits the job, and again whenever the
   executor renews the token of a job still waiting in a queue. The workload holds the
   task's Execution API token, which is why it never goes into the job's command or
   environment: DescribeJobs shows both to anyone allowed to call it;
2. the worker downloads it, runs the task, and uploads ``result.json``;
3. the backend reads that result when Batch reports the job finished.

The scheduler's client comes from its Airflow AWS connection (the backend's
:func:`~agora_optimizer.executor.backends.aws.credentials.session_from_connection`); the worker's
from boto3's default chain in the container (the job definition's job role), with
``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` as endpoint when set. Both need
``s3:GetObject`` and ``s3:PutObject`` under the prefix. Every failure is a
:class:`~agora_optimizer.executor.jobs.spec.BackendError` naming the URL; throttling, 5xx
answers and lost connections are transient.

boto3 is imported only when a client is made, so the executor and the worker can import
this module for free.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agora_optimizer.executor.jobs.spec import BackendError
from agora_optimizer.executor.state_files import write_private

if TYPE_CHECKING:
    import boto3

BACKEND = "s3"
CONTAINER_JOB_ROOT = "/tmp/agora"  # the worker's job directory in a container: <root>/<job key>
WORKLOAD_NAME = "workload.json"
RESULT_NAME = "result.json"

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")  # S3's rule for bucket names
_MISSING_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "Forbidden",
        "403",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
    }
)
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
    }
)


class RemoteFileNotFound(BackendError):
    """The bucket exists but holds no object at the URL (a result the worker never wrote)."""


@dataclass(frozen=True)
class JobUrls:
    """Where one job's workload and result live."""

    workload: str
    result: str


def split_s3_url(url: str, *, what: str = "S3 URL") -> tuple[str, str]:
    """``(bucket, key)`` of ``s3://bucket/key``; the key may be empty. A malformed URL raises BackendError."""
    scheme, _, rest = url.partition("://")
    bucket, _, key = rest.partition("/")
    if scheme != "s3" or not _BUCKET.match(bucket):
        raise BackendError(
            BACKEND,
            f"{what} {url!r} is not an s3://bucket/... URL (bucket: 3 to 63 lower-case letters, digits, '.', '-')",
            transient=False,
        )
    return bucket, key


def job_urls(prefix: str, key: str) -> JobUrls:
    """The workload and result URLs of job ``key`` under ``prefix`` (``s3://bucket`` or ``s3://bucket/path/``)."""
    bucket, path = split_s3_url(prefix, what="S3 prefix")
    folder = "/".join(part for part in (path.strip("/"), key) if part)
    return JobUrls(f"s3://{bucket}/{folder}/{WORKLOAD_NAME}", f"s3://{bucket}/{folder}/{RESULT_NAME}")


class RemoteFiles:
    """Reads and writes small S3 objects through one boto3 S3 client."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @classmethod
    def from_session(
        cls,
        session: boto3.session.Session | None = None,
        *,
        region_name: str | None = None,
        endpoint_url: str | None = None,
        connect_timeout_s: float = 3.0,
        read_timeout_s: float = 20.0,
        max_attempts: int = 3,
    ) -> RemoteFiles:
        """A client of ``session`` (a boto3 session; None: boto3's default chain).

        botocore retries ``max_attempts`` times in its standard mode before an error reaches
        the caller; the short timeouts keep a dead endpoint from stalling the scheduler.
        """
        import boto3
        from botocore.config import Config

        config = Config(
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
            retries={"mode": "standard", "total_max_attempts": max_attempts},
            user_agent_extra="agora-optimizer",
        )
        try:
            client = (session or boto3.session.Session()).client(
                "s3", region_name=region_name, endpoint_url=endpoint_url, config=config
            )
        except ValueError as exc:  # a malformed endpoint URL
            raise BackendError(BACKEND, f"endpoint {endpoint_url!r}: {exc}", transient=False) from None
        return cls(client)

    @classmethod
    def from_environment(cls, *, max_attempts: int = 5) -> RemoteFiles:
        """What the worker in a container uses: boto3's default chain (the job role) and the
        endpoint of ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL``, if set."""
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
        return cls.from_session(endpoint_url=endpoint, max_attempts=max_attempts)

    def read(self, url: str) -> bytes:
        """The object's bytes. No such object raises :class:`RemoteFileNotFound`."""
        bucket, key = split_s3_url(url)
        return bytes(self._call("read", url, lambda: self.client.get_object(Bucket=bucket, Key=key)["Body"].read()))

    def write(self, url: str, data: bytes) -> None:
        bucket, key = split_s3_url(url)
        self._call("write", url, lambda: self.client.put_object(Bucket=bucket, Key=key, Body=data))

    def download(self, url: str, path: Path) -> None:
        """The object into ``path``, written atomically (a reader sees all of it or nothing)."""
        write_private(path, self.read(url))  # mode 0600 (it holds a token), never through a symlink

    def upload(self, path: Path, url: str) -> None:
        self.write(url, path.read_bytes())

    @staticmethod
    def _call(doing: str, url: str, call: Callable[[], Any]) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return call()
        except (ClientError, BotoCoreError) as exc:
            raise classify_error(exc, doing, url) from None


def classify_error(exc: Exception, doing: str, url: str) -> BackendError:
    """A boto3 failure on ``url`` as a BackendError (:class:`RemoteFileNotFound` for a missing object)."""
    from botocore.exceptions import ClientError, HTTPClientError, NoCredentialsError
    from botocore.exceptions import ConnectionError as BotoConnectionError

    what = f"cannot {doing} {url}"
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "Unknown"))
        message = str(error.get("Message", "")) or str(exc)
        http_status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code == "NoSuchBucket":
            return BackendError(BACKEND, f"{what}: bucket {split_s3_url(url)[0]} does not exist", transient=False)
        if code in _MISSING_CODES:
            return RemoteFileNotFound(BACKEND, f"{what}: no such object", transient=False)
        if code in _DENIED_CODES or http_status == 403:
            return BackendError(
                BACKEND,
                f"{what}: access denied ({code}: {message}); the credentials need s3:GetObject and s3:PutObject "
                "there (S3 also answers so for a missing object when they may not list the bucket)",
                transient=False,
            )
        transient = code in _TRANSIENT_CODES or http_status >= 500 or http_status == 429
        return BackendError(BACKEND, f"{what}: {code}: {message}", transient=transient)
    if isinstance(exc, BotoConnectionError | HTTPClientError):  # no connection, timeouts, dropped connections
        return BackendError(BACKEND, f"{what}: S3 unreachable: {exc}", transient=True)
    if isinstance(exc, NoCredentialsError):
        return BackendError(BACKEND, f"{what}: no AWS credentials", transient=False)
    return BackendError(BACKEND, f"{what}: {type(exc).__name__}: {exc}", transient=False)

"""How AWS Batch's failures reach the executor: every boto3 error as a :class:`BackendError`, transient or not."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from agora_optimizer.executor.jobs.spec import (
    BackendError,
)

if TYPE_CHECKING:
    pass


BACKEND = "aws"
THROTTLING_CODES = frozenset(
    {"ThrottlingException", "TooManyRequestsException", "Throttling", "RequestLimitExceeded", "SlowDown"}
)
SERVER_ERROR_CODES = frozenset({"ServerException", "InternalFailure", "ServiceUnavailable", "InternalError"})


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


def call(call: Callable[..., Any], what: str, **arguments: Any) -> Any:
    """``call(**arguments)``, its boto3 failure raised as a BackendError that says ``what`` was being done."""
    try:
        return call(**arguments)
    except (ClientError, BotoCoreError) as exc:
        raise classify_error(exc, what) from None

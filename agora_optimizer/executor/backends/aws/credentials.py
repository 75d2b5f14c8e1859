"""AWS credentials for the Batch backend: a boto3 session from Airflow's AWS connection, and its Batch client."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoRegionError

from agora_optimizer.executor.backends.aws.errors import BACKEND, classify_error
from agora_optimizer.executor.jobs.spec import BackendError

if TYPE_CHECKING:
    from mypy_boto3_batch import BatchClient

log = logging.getLogger(__name__)

_REJECTED_EXTRA = ("role_arn", "assume_role_method", "assume_role_kwargs", "profile_name")


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
    service_config = mapping(mapping(extra.get("service_config")).get(service))
    endpoint = _optional_str(service_config.get("endpoint_url", extra.get("endpoint_url")), conn_id, "endpoint_url")
    session = boto3.session.Session(
        aws_access_key_id=key_id or None,
        aws_secret_access_key=secret or None,
        aws_session_token=_optional_str(extra.get("aws_session_token"), conn_id, "aws_session_token"),
        region_name=region,
    )
    return AwsConnection(session, region, endpoint, f"Airflow connection {conn_id}")


def batch_client(
    session: boto3.session.Session,
    region_name: str | None,
    endpoint_url: str | None,
    *,
    connect_timeout_s: float,
    read_timeout_s: float,
    max_attempts: int,
) -> BatchClient:
    """A Batch client of ``session`` that fails fast: short timeouts and ``max_attempts`` tries in botocore's
    standard retry mode. BackendError (not transient) without a region, or for a malformed endpoint URL."""
    config = Config(
        connect_timeout=connect_timeout_s,
        read_timeout=read_timeout_s,
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        user_agent_extra="agora-optimizer",
    )
    try:
        return session.client("batch", region_name=region_name, endpoint_url=endpoint_url, config=config)
    except NoRegionError:
        raise BackendError(
            BACKEND,
            "no AWS region: set region_name in the Airflow connection's extra, or AWS_DEFAULT_REGION",
            transient=False,
        ) from None
    except ValueError as exc:  # a malformed endpoint URL
        raise BackendError(BACKEND, f"endpoint {endpoint_url!r}: {exc}", transient=False) from None


def _optional_str(value: object, conn_id: str, key: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BackendError(BACKEND, f"Airflow connection {conn_id}: extra {key} must be a string", transient=False)
    return value


def mapping(value: object) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one (JSON read from a connection or from Batch)."""
    return value if isinstance(value, Mapping) else {}

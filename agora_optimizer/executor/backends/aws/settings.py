"""The AWS Batch backend's ``[agora] aws_*`` settings, read and checked once: :class:`AwsSettings`.

Read when the backend is made (:meth:`~agora_optimizer.executor.backends.aws.backend.AwsBatchBackend.from_settings`,
when the executor starts): a bad value is an AgoraError (or BackendError) naming its option. No AWS
client is made here.
"""

from __future__ import annotations

from dataclasses import dataclass

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.backends.aws.provisioning import ComputeNetwork
from agora_optimizer.executor.worker.remote_files import split_s3_url

_NETWORK_KEYS = ("aws_subnets", "aws_security_group_ids", "aws_instance_role")


@dataclass(frozen=True)
class AwsSettings:
    """The Airflow connection of the AWS credentials, the job definition, where workloads and results go
    (``s3://bucket/path/``; '' if unset), and the network of the compute environments agora may create."""

    conn_id: str
    job_definition: str
    s3_prefix: str
    compute_network: ComputeNetwork | None

    @classmethod
    def from_agora(cls) -> AwsSettings:
        """``[agora] aws_*``; AgoraError (or BackendError) naming the option of a bad value."""
        s3_prefix = settings.get("aws_s3_prefix")
        if s3_prefix:
            split_s3_url(s3_prefix, what="[agora] aws_s3_prefix")
        return cls(
            conn_id=settings.get("aws_conn_id"),
            job_definition=settings.get("aws_job_definition"),
            s3_prefix=s3_prefix,
            compute_network=aws_compute_network(),
        )


def aws_compute_network() -> ComputeNetwork | None:
    """The network of the compute environments agora may create (``[agora] aws_subnets`` ...), None when
    none of its settings is set; AgoraError naming what is missing when only some are."""
    values = {
        "aws_subnets": _listed(settings.get("aws_subnets")),
        "aws_security_group_ids": _listed(settings.get("aws_security_group_ids")),
        "aws_instance_role": _listed(settings.get("aws_instance_role")),
    }
    if not any(values.values()):
        return None
    missing = [key for key in _NETWORK_KEYS if not values[key]]
    if missing:
        raise AgoraError(
            f"[agora] {', '.join(k for k in _NETWORK_KEYS if values[k])} set but not {', '.join(missing)}: "
            "agora creates a compute environment per planned instance type only with all three"
        )
    return ComputeNetwork(
        subnets=values["aws_subnets"],
        security_group_ids=values["aws_security_group_ids"],
        instance_role=values["aws_instance_role"][0],
        service_role=settings.get("aws_service_role") or None,
        spot_fleet_role=settings.get("aws_spot_fleet_role") or None,
    )


def _listed(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())

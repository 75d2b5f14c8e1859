"""``agora aws provision``: set up in an AWS account what the executor's ``aws`` resources run on.

For the catalog's ``aws`` resources, grouped by job queue as the executor groups them (one queue per
instance family unless a resource names its ``job_queue``), it creates what is missing: a managed
compute environment and a job queue per group, and the container job definition jobs are submitted
with (:meth:`~agora_optimizer.executor.backends.aws.provisioning.Provisioner.ensure_infrastructure`).
Idempotent: what exists is used as it is, never changed, if it buys the capacity its types are priced
at (SPOT for spot types, EC2 for the rest; else it is refused naming the queue, the compute environment
and both kinds), and the job definition gets a new revision only when its image or job role changed.
One line per object says what happened to it; ``--dry-run`` only describes. Credentials, region and
endpoint come from the Airflow connection the executor uses (``[agora] aws_conn_id``); the network
and the job definition's name from the same ``[agora]`` keys.
Errors are one line naming the file, resource or option, exit code 2 (:func:`~agora_optimizer.cli.common.user_errors`).

The queue of exactly one type that a planned machine runs on (``agora-<type>``) is not made here:
the executor creates it at the machine's first lease, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from agora_optimizer.cli.common import CatalogOpt, command_group, say, user_errors
from agora_optimizer.errors import AgoraError

if TYPE_CHECKING:
    import boto3

    from agora_optimizer.executor.backends.aws.provisioning import Infrastructure

aws_app = command_group("AWS Batch: set up the compute environments, job queues and job definition agora's jobs need.")

_SETTING_OF = {
    "--subnets": "aws_subnets",
    "--security-group-ids": "aws_security_group_ids",
    "--instance-role": "aws_instance_role",
}


@aws_app.command("provision")
def provision(
    catalog: CatalogOpt,
    image: Annotated[str, typer.Option(help="Container image of the job definition (agora and Airflow installed).")],
    conn_id: Annotated[
        str | None, typer.Option("--conn-id", help="Airflow AWS connection (default: setting aws_conn_id).")
    ] = None,
    region: Annotated[str | None, typer.Option(help="AWS region (default: the connection's region_name).")] = None,
    job_definition: Annotated[
        str | None, typer.Option(help="Job definition name (default: setting aws_job_definition).")
    ] = None,
    subnets: Annotated[
        str | None, typer.Option(help="Comma-separated subnet ids (default: setting aws_subnets).")
    ] = None,
    security_group_ids: Annotated[
        str | None, typer.Option(help="Comma-separated security group ids (default: setting aws_security_group_ids).")
    ] = None,
    instance_role: Annotated[
        str | None, typer.Option(help="ECS instance profile of the instances (default: setting aws_instance_role).")
    ] = None,
    service_role: Annotated[
        str | None,
        typer.Option(
            help="Service role of the compute environments (default: setting aws_service_role, else Batch's)."
        ),
    ] = None,
    job_role_arn: Annotated[str | None, typer.Option(help="IAM role the jobs' containers run as.")] = None,
    spot_fleet_role: Annotated[
        str | None,
        typer.Option(
            help="Spot Fleet role of spot types' compute environments (default: setting aws_spot_fleet_role)."
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be created; create nothing.")] = False,
) -> None:
    """Create the catalog's AWS Batch compute environments, job queues and job definition, each unless it exists."""
    from agora_optimizer import settings
    from agora_optimizer.executor.backends.aws.backend import AwsBatchBackend
    from agora_optimizer.executor.backends.aws.credentials import session_from_connection
    from agora_optimizer.executor.backends.aws.errors import BACKEND
    from agora_optimizer.executor.jobs.spec import BackendError
    from agora_optimizer.io.catalog_file import load_catalog

    with user_errors():
        resources = [resource for resource in load_catalog(catalog).resources if resource.backend == BACKEND]
        if not resources:
            raise AgoraError(f"{catalog}: no resource with backend aws, so nothing to provision")
        given = {"--subnets": subnets, "--security-group-ids": security_group_ids, "--instance-role": instance_role}
        network = {option: _listed(value, _SETTING_OF[option]) for option, value in given.items()}
        missing = [option for option, values in network.items() if not values]
        if missing:
            raise AgoraError(
                f"no {', '.join(missing)}: the compute environments need them "
                f"(or set [agora] {', '.join(_SETTING_OF[option] for option in missing)})"
            )
        conn_id = conn_id or settings.get("aws_conn_id")
        connection = session_from_connection(conn_id)
        region = _checked_region(connection.session, region or connection.region_name, conn_id)
        where = f"AWS Batch in {region} ({connection.source})"
        if connection.session.get_credentials() is None:
            raise AgoraError(
                f"{where}: no AWS credentials: give Airflow connection {conn_id} a login (access key id) and "
                "password (secret key), or set them in the environment"
            )
        try:
            backend = AwsBatchBackend(
                session=connection.session,
                region_name=region,
                endpoint_url=connection.endpoint_url,
                job_definition=job_definition or settings.get("aws_job_definition"),
            )
            made = backend.ensure_infrastructure(
                resources,
                image=image,
                subnets=network["--subnets"],
                security_group_ids=network["--security-group-ids"],
                instance_role=network["--instance-role"][0],
                service_role=service_role or settings.get("aws_service_role") or None,
                job_role_arn=job_role_arn,
                spot_fleet_role=spot_fleet_role or settings.get("aws_spot_fleet_role") or None,
                dry_run=dry_run,
            )
        except BackendError as exc:
            raise AgoraError(f"{catalog}: {where}: {exc.reason}") from None
    for line in report(made, image):
        say(line)
    say(summary(made, where))


def report(made: Infrastructure, image: str) -> list[str]:
    """One line per object: what was (or would be) created or updated, then what was already there."""
    created, updated = ("would create", "would update") if made.dry_run else ("created", "updated")
    lines = [f"{created} {item}" for item in made.created]
    lines += [f"{updated} {item} (a new revision, image {image})" for item in made.updated]
    return lines + [f"already there {item}" for item in made.existing]


def summary(made: Infrastructure, where: str) -> str:
    """The last line: where, and how many objects were (or would be) created, updated, already there."""
    verbs = ("to create", "to update") if made.dry_run else ("created", "updated")
    counts = f"{len(made.created)} {verbs[0]}, {len(made.updated)} {verbs[1]}"
    tail = "; dry run, nothing was changed" if made.dry_run else ""
    return f"{where}: {counts}, {len(made.existing)} already there{tail}"


def _listed(value: str | None, setting: str) -> list[str]:
    """A comma-separated option, else its ``[agora]`` setting, as a list."""
    from agora_optimizer import settings

    text = value if value is not None else settings.get(setting)
    return [part.strip() for part in text.split(",") if part.strip()]


def _checked_region(session: boto3.session.Session, region: str | None, conn_id: str) -> str:
    """``region`` if AWS Batch runs there, as this botocore knows; else an AgoraError naming it.

    Checked before any call: a misspelt region would otherwise be an endpoint that never answers.
    """
    region = region or session.region_name
    if not region:
        raise AgoraError(
            f"no AWS region: pass --region, or set region_name in the extra of Airflow connection {conn_id} "
            "(or AWS_DEFAULT_REGION)"
        )
    known = {
        name
        for partition in session.get_available_partitions()
        for name in session.get_available_regions("batch", partition)
    }
    if region not in known:
        raise AgoraError(
            f"region {region!r}: not a region of AWS Batch (botocore knows {len(known)}, e.g. us-east-1, "
            "eu-west-1; a region newer than this botocore needs a newer boto3)"
        )
    return region

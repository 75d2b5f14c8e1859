"""AWS Batch jobs in agora's terms: queue and job names, sizes, and Batch's states and answers as a JobStatus.

Pure functions of names and Batch's records (no client, no call): the backend
(:mod:`~agora_optimizer.executor.backends.aws.backend`) builds its requests and reads its answers with them.
"""

from __future__ import annotations

import fnmatch
import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from agora_optimizer.executor.backends.aws.credentials import mapping
from agora_optimizer.executor.backends.aws.errors import BACKEND
from agora_optimizer.executor.jobs.spec import (
    BackendError,
    JobPhase,
    JobResult,
    JobStatus,
)
from agora_optimizer.executor.worker.environment import job_environment
from agora_optimizer.model.workflow import shown

DEFAULT_QUEUE_PATTERN = "agora-{family}"
MIB = 2**20
MIN_ATTEMPT_DURATION_S = 60  # Batch refuses a shorter timeout
TIMEOUT_GRACE_S = 30.0  # the worker stops the task at its limit (SIGTERM, SIGKILL 10 s later); Batch is the backstop

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
# Batch's words for a job whose instance went away under it, e.g. a Spot Instance reclaimed:
# "Host EC2 (instance i-08784105ffff56b4f) terminated." (older accounts: "Host EC2 Terminated"), in the
# job's statusReason and its attempts' statusReason. On a spot type it is an interruption, not a failure.
HOST_TERMINATED = re.compile(r"\bHost EC2 (\(instance [^)]*\) )?terminated\b", re.IGNORECASE)
SPOT_SUFFIX = "-spot"  # a catalog name's suffix for the spot variant of an EC2 type (c7i.large-spot)

_JOB_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_JOB_NAME_MAX = 128
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


# -- names and sizes -------------------------------------------------------------------------


def instance_type(resource: str, options: Mapping[str, object]) -> str:
    """The EC2 instance type of a catalog resource: its ``instance_type`` option, else its name without
    the spot variant's :data:`SPOT_SUFFIX` (``c7i.large`` for ``c7i.large-spot``)."""
    option = options.get("instance_type")
    if isinstance(option, str) and option:
        return option
    return resource.removesuffix(SPOT_SUFFIX)


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
                BACKEND, f"resource {resource}: job_queue must be a queue name, got {shown(option)}", transient=False
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
            f"resource {resource}: job queue name {shown(name)} is not a Batch name "
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


def resource_requirements(cores: int, memory_bytes: int, gpus: int = 0) -> list[dict[str, str]]:
    """Batch's ``resourceRequirements`` for a job: its VCPU and MEMORY (MiB), and its GPU only when it
    reserves GPUs (section 5 of the spec).

    Batch and ECS assign a GPU to a container only through a GPU requirement (each GPU to one
    container); a job without one is assigned none.
    """
    requirements = [
        {"type": "VCPU", "value": str(cores)},
        {"type": "MEMORY", "value": str(memory_mib(memory_bytes))},
    ]
    if gpus > 0:
        requirements.append({"type": "GPU", "value": str(gpus)})
    return requirements


def attempt_duration_s(time_limit_s: float | None, grace_s: float = TIMEOUT_GRACE_S) -> int | None:
    """Batch's ``attemptDurationSeconds`` for a task time limit: limit + grace, at least 60 s.

    The worker enforces the limit itself and ends the task cleanly; Batch's timeout is the
    backstop that kills the container if the worker cannot.
    """
    if time_limit_s is None:
        return None
    return max(MIN_ATTEMPT_DURATION_S, math.ceil(time_limit_s + grace_s))


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


def container_environment(environment: Mapping[str, str], exclude: Sequence[str]) -> list[dict[str, str]]:
    """``environment`` as Batch key-value pairs, without the scheduler's secrets under any name Airflow
    reads them by (:func:`~agora_optimizer.executor.worker.environment.job_environment`) and the names ``exclude``
    matches."""
    return [
        {"name": name, "value": value}
        for name, value in sorted(job_environment(environment).items())
        if not any(fnmatch.fnmatchcase(name, pattern) for pattern in exclude)
    ]


def command_option(command: Sequence[object], flag: str) -> str | None:
    """The value after ``flag`` in the worker's own options (``--result-url URL``), None without one."""
    parts = [str(part) for part in command]
    if "--" in parts:
        parts = parts[: parts.index("--")]
    if flag in parts[:-1]:
        return parts[parts.index(flag) + 1]
    return None


# -- Batch's answers -------------------------------------------------------------------------


def status_from_description(description: Mapping[str, Any]) -> JobStatus:
    """One ``DescribeJobs`` job (AWS's ``JobDetail`` shape) as a :class:`JobStatus`.

    Finished jobs: the container's ``exitCode``; a FAILED job without one (it never ran,
    or was terminated) gets 1, a SUCCEEDED one 0. ``oom_killed`` when Batch or ECS says
    ``OutOfMemoryError``; ``interrupted`` when a FAILED job lost its host (:func:`host_terminated`,
    a reclaimed Spot Instance). Times are epoch milliseconds.
    """
    state = str(description.get("status", ""))
    phase = STATE_MAPPINGS.get(state, UNKNOWN_STATE_PHASE)
    container = mapping(description.get("container"))
    attempts = description.get("attempts") or []
    last_attempt = mapping(mapping(attempts[-1]).get("container")) if attempts else {}
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
    oom_killed = interrupted = False
    if phase == "finished":
        raw = container.get("exitCode", last_attempt.get("exitCode"))
        exit_code = int(raw) if raw is not None else (0 if state == "SUCCEEDED" else 1)
        oom_killed = OOM_MARKER in reason
        interrupted = state == "FAILED" and host_terminated(description)
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
        interrupted=interrupted,
    )


def host_terminated(description: Mapping[str, Any]) -> bool:
    """Whether Batch says the job's last attempt lost its instance (:data:`HOST_TERMINATED`): the job's
    ``statusReason``, or its last attempt's (a job retried by Batch keeps each attempt's reason)."""
    attempts = description.get("attempts") or []
    last = mapping(attempts[-1]) if attempts else {}
    texts = (description.get("statusReason"), last.get("statusReason"), mapping(last.get("container")).get("reason"))
    return any(isinstance(text, str) and HOST_TERMINATED.search(text) for text in texts)


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
        interrupted=False,  # the worker wrote its result: the task ran to its end before any host went away
    )


def _moment(milliseconds: object) -> datetime | None:
    if not isinstance(milliseconds, int | float) or isinstance(milliseconds, bool) or milliseconds <= 0:
        return None
    return datetime.fromtimestamp(milliseconds / 1000.0, tz=UTC)

"""The AgoraExecutor's settings (:class:`ExecutorConfig`), read once when it starts, and its clock."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from agora_optimizer import settings
from agora_optimizer.executor.lifecycle import LifecycleConfig, Now
from agora_optimizer.planning.run_state import REPLAN_SLACK
from agora_optimizer.predict.memory_in_run import OOM_RETRY_GROWTH  # noqa: F401  (the jobs' and runs' retry growth)
from agora_optimizer.predict.runtime_in_run import RUN_SHRINK_K


@dataclass(frozen=True)
class ExecutorConfig:
    """The executor's ``[agora]`` settings (and Airflow's ``task_queued_timeout``), read once when it starts."""

    parallelism: int = 256
    catalog: str = ""
    default_resource: str = ""
    airflow_pools: bool = True
    job_retention_days: float = 7.0
    replan_slack: float = REPLAN_SLACK
    replan_min_late_s: float = 5.0
    run_shrink_k: float = RUN_SHRINK_K
    task_environment: tuple[str, ...] = ()  # names (shell patterns) of variables passed on to every task
    lifecycle: LifecycleConfig = field(default_factory=LifecycleConfig)

    @classmethod
    def from_settings(cls, task_queued_timeout_s: float) -> ExecutorConfig:
        return cls(
            parallelism=max(1, int(settings.get_float("parallelism"))),
            catalog=settings.get("catalog"),
            default_resource=settings.get("default_resource"),
            airflow_pools=settings.get_bool("airflow_pools"),
            job_retention_days=settings.get_float("job_retention_days"),
            replan_slack=settings.get_float("replan_slack"),
            replan_min_late_s=settings.get_float("replan_min_late_s"),
            run_shrink_k=settings.get_float("run_shrink_k"),
            task_environment=tuple(n.strip() for n in settings.get("task_environment").split(",") if n.strip()),
            lifecycle=LifecycleConfig(
                submit_retries=int(settings.get_float("submit_retries")),
                backoff_max_s=settings.get_float("backoff_max_s"),
                backend_outage_s=settings.get_float("backend_outage_s"),
                backend_queue_timeout_s=settings.get_float("backend_queue_timeout_s"),
                token_refresh_s=settings.get_float("token_refresh_s"),
                task_queued_timeout_s=task_queued_timeout_s,
                machine_hold_s=settings.get_float("machine_hold_s"),
            ),
        )


def clock_now() -> Now:
    """This moment on the executor's monotonic clock and on the wall clock."""
    return Now(time.monotonic(), datetime.now(UTC))

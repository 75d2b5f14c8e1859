"""Every key of the ``[agora]`` section of Airflow's config, with its default and meaning.

This table is the one place a key is declared: code reads keys through :func:`get`,
which refuses undeclared ones, and the configuration reference in the docs is generated
from :data:`SETTINGS`. As with any Airflow option, ``AIRFLOW__AGORA__<KEY>`` in the
environment overrides ``airflow.cfg``. Airflow is imported only when a value is read.
:func:`in_effect` reads a value the way Airflow does (environment, ``airflow.cfg``, default) without
importing Airflow (a second or more), for the commands that only read: ``agora config show``, ``runs``.
``[agora] catalog`` is read as a catalog in one place, :func:`configured_catalog`.
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from agora_optimizer.errors import AgoraError

if TYPE_CHECKING:
    from agora_optimizer.model.catalog import Catalog


@dataclass(frozen=True)
class Setting:
    key: str
    default: str
    description: str
    sensitive: bool = False  # may hold a secret: Airflow also reads it from ..._CMD and ..._SECRET, and masks it
    when_empty: str = ""  # what an empty value means, "{agora}" standing for $AIRFLOW_HOME/agora

    @property
    def value_type(self) -> str:
        """Airflow's name of the value's type, read off the default: boolean, integer, float or string."""
        if self.default in ("True", "False"):
            return "boolean"
        for kind, parse in (("integer", int), ("float", float)):
            try:
                parse(self.default)
            except ValueError:
                continue
            return "float" if self.key.endswith("_s") else kind  # seconds may have fractions
        return "string"


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "trace_store_url",
        "",
        "SQLAlchemy URL of the trace store; empty: sqlite:///$AIRFLOW_HOME/agora/traces.db. "
        "Use postgresql+psycopg://... in production (it may hold a password: AIRFLOW__AGORA__TRACE_STORE_URL_CMD "
        "and _SECRET work too).",
        sensitive=True,
        when_empty="sqlite:///{agora}/traces.db",
    ),
    Setting(
        "catalog",
        "",
        "Comma-separated catalog files (YAML or JSON) that name every resource the executor may "
        "run tasks on, with its backend (local, slurm, aws, celery).",
    ),
    Setting(
        "default_resource",
        "",
        "Catalog resource for tasks routed to agora that have no plan (a new task, a DAG never "
        "optimized). Empty: such tasks are left on Airflow's default executor.",
    ),
    Setting(
        "default_map_width",
        "4",
        "How many instances the planner expects of a mapped task (.expand(), or a task of a mapped task "
        "group) whose width neither the trace store (past runs' map indexes) nor a literal list at parse "
        "time tells.",
    ),
    Setting(
        "plan_dir",
        "",
        "Where each DAG's current plan and plan history live; empty: $AIRFLOW_HOME/agora/plans.",
        when_empty="{agora}/plans",
    ),
    Setting(
        "plan_history_max",
        "100",
        "History entries kept per DAG; agora_reoptimize drops older ones no run names (0: all).",
    ),
    Setting(
        "state_dir",
        "",
        "Where the executor keeps one directory per task attempt (workload, worker log, result); "
        "empty: $AIRFLOW_HOME/agora/jobs. SLURM nodes must see the same path (a shared file system).",
        when_empty="{agora}/jobs",
    ),
    Setting(
        "job_retention_days",
        "7",
        "The executor deletes a job directory in state_dir this many days after its job ended and was traced "
        "(and a SLURM pilot's directory once its tasks are gone); 0 keeps them all.",
    ),
    Setting(
        "apply_plans",
        "True",
        "The cluster policy routes each task of a DAG with a current plan to the AgoraExecutor and "
        "the planned resource. False: plans are computed and shown but not applied.",
    ),
    Setting(
        "executor",
        "agora",
        "The name under which [core] executor lists the AgoraExecutor (its alias, or its module path).",
    ),
    Setting(
        "celery_executor",
        "CeleryExecutor",
        "The name under which [core] executor lists Airflow's CeleryExecutor. The cluster policy gives a task "
        "planned on a resource with backend celery to it, on the Celery queue named after the resource; with "
        "this name not in [core] executor, such a task is left as written (one log line per DAG parse).",
    ),
    Setting(
        "airflow_pools",
        "False",
        "Also put each task in the Airflow pool agora_<resource> with its planned cores as pool_slots; "
        "the executor creates missing pools (one slot per core of the resource).",
    ),
    Setting(
        "parallelism",
        "256",
        "How many task attempts the AgoraExecutor holds at once, running or waiting in a backend's queue "
        "(a local pool's, SLURM's, Batch's). The backends' capacity decides how many run; [core] "
        "parallelism does not limit this executor, so that a pool starts its next task the moment one ends.",
    ),
    Setting("submit_retries", "5", "Attempts to submit a job after a transient backend error before the task fails."),
    Setting("backoff_max_s", "60", "Cap of the exponential backoff between submit attempts and status polls."),
    Setting(
        "backend_outage_s",
        "600",
        "How long a backend may fail to report a job's status before the task fails with the reason.",
    ),
    Setting(
        "backend_queue_timeout_s",
        "86400",
        "How long a job may wait in its backend's queue (a SLURM partition, a Batch queue, a full local "
        "pool) before agora cancels it and fails the task with the backend's reason. While a job waits, "
        "Airflow's [scheduler] task_queued_timeout does not revoke it (it would lose its place).",
    ),
    Setting(
        "machine_hold_s",
        "600",
        "A task the plan put on a machine waits for its turn there (the planned order) at most this long, "
        "then starts all the same: a plan never stops a DAG from running.",
    ),
    Setting(
        "replan_slack",
        "0.2",
        "The AgoraExecutor repairs a run that drifts from its plan: when a planned task ends later than "
        "planned by more than this fraction of its planned duration, fails, or is OOM-killed, the run's "
        "tasks not yet queued are re-planned around what has run (docs/running-plans.md, Repair). 0 or "
        "less turns repair off.",
    ),
    Setting(
        "replan_min_late_s",
        "5",
        "A task that ends late is a drift only when it is also this many seconds late: below it is the "
        "platform's jitter (a 5 s task that starts 2 s late has not drifted), and re-planning for it moves "
        "tasks for nothing.",
    ),
    Setting(
        "run_shrink_k",
        "3",
        "How far a category with no task ended yet in its run follows the run's runtime factor: weight "
        "c / (c + k) over the c categories seen (docs/running-plans.md).",
    ),
    Setting(
        "token_refresh_s",
        "120",
        "While a job waits in a backend's queue, its Execution API token is renewed this often, so a "
        "long SLURM queue wait does not outlive the token ([scheduler] task_queued_timeout).",
    ),
    Setting(
        "slurm_pilot_max_tasks", "0", "SLURM pilot jobs: pack up to this many short tasks into one allocation (0: off)."
    ),
    Setting("slurm_pilot_window_s", "5", "SLURM pilot jobs: how long to gather short tasks before submitting."),
    Setting(
        "task_environment",
        "",
        "Comma-separated names of environment variables (shell patterns allowed, e.g. MYDAGS_*) the executor "
        "passes from the scheduler to every task it runs, on every backend, beside Airflow's own settings: "
        "what a DAG file reads when it is parsed must reach the task process, or the task finds no DAG "
        "(a SLURM or Batch job does not inherit the scheduler's environment). Airflow's secrets never pass.",
    ),
    Setting(
        "slurm_record_queue_waits",
        "True",
        "The SLURM backend records the queue each of its jobs met (one squeue per recorded job, at most one "
        "job a second) and, from accounting, how long it waited: the training data of 'agora queue train'.",
    ),
    Setting(
        "queue_wait_store_url",
        "",
        "SQLAlchemy URL of the queue-wait store (recorded SLURM submissions and their waits); empty: "
        "sqlite:///$AIRFLOW_HOME/agora/queue_waits.db.",
        sensitive=True,
        when_empty="sqlite:///{agora}/queue_waits.db",
    ),
    Setting(
        "model_dir",
        "",
        "Where the rerun DAG writes the retrained predictor; empty: $AIRFLOW_HOME/agora/models/predictor.",
        when_empty="{agora}/models/predictor",
    ),
    Setting("reoptimize_schedule", "@daily", "Schedule of the agora_reoptimize DAG (a cron expression or preset)."),
    Setting("reoptimize_tag", "agora", "DAGs with this tag opt in to being re-planned by agora_reoptimize."),
    Setting("objective", "balanced", "What re-planning minimises: time, cost or balanced."),
    Setting("plan_time_limit_s", "60", "Wall-time limit of one DAG's re-planning."),
    Setting(
        "runtime_quantile",
        "auto",
        "Predicted runtimes' quantile for re-planning: p50, p90 or auto (p90 with a deadline).",
    ),
    Setting(
        "deadlines",
        "",
        "Comma-separated dag_id=DURATION (e.g. etl=6h, report=90m; DURATION as 90m, 6h, 1d, 3600s or "
        "seconds): the deadline of each run of that DAG, counted from when the scheduler starts it, that "
        "'agora optimize --window' plans for. It wins over the DAG's own DeadlineAlert.",
    ),
    Setting(
        "ui_pareto_time_limit_s",
        "10",
        "Wall-time limit of the cost/makespan Pareto front that the agora view computes for a DAG's "
        "current plan, in the background on first view; kept until the plan changes.",
    ),
    Setting(
        "ui_recent_runs",
        "10",
        "How many of a DAG's most recent runs the agora view compares with the plan "
        "(predicted against actual runtime and memory per task).",
    ),
    Setting("aws_conn_id", "aws_default", "Airflow connection with the AWS credentials, region and endpoint."),
    Setting(
        "aws_job_definition",
        "agora-worker",
        "AWS Batch job definition whose container has agora and Airflow installed.",
    ),
    Setting(
        "aws_s3_prefix",
        "",
        "S3 URL (s3://bucket/path/) where each AWS Batch job gets its workload and returns its result, "
        "in <prefix>/<job key>/; required for tasks on AWS resources (a Batch container cannot see "
        "state_dir). The AWS connection and the job definition's job role need s3:GetObject and "
        "s3:PutObject there. The workloads hold Execution API tokens: keep the bucket private.",
    ),
    Setting(
        "aws_subnets",
        "",
        "Comma-separated subnet ids for the compute environments agora creates on demand: a planned "
        "machine runs on a job queue of exactly its instance type (agora-<type>), and with "
        "aws_subnets, aws_security_group_ids and aws_instance_role set, a type that has no such queue "
        "gets one (a managed EC2 compute environment, maxvCpus = the type's catalog count x its vCPUs). "
        "Empty: a planned machine whose type has no queue is re-placed onto its resource's queue, "
        "and the run record says why.",
    ),
    Setting(
        "aws_security_group_ids",
        "",
        "Comma-separated security group ids of those compute environments (see aws_subnets).",
    ),
    Setting(
        "aws_instance_role",
        "",
        "The ECS instance profile (name or ARN) of those compute environments' instances (see aws_subnets).",
    ),
    Setting(
        "aws_service_role",
        "",
        "The service role of those compute environments; empty: AWS Batch's service-linked role.",
    ),
    Setting(
        "aws_spot_fleet_role",
        "",
        "The Spot Fleet IAM role (ARN) given to the SPOT compute environments of spot types "
        "(spotIamFleetRole), for accounts that require one; empty: none (with the "
        "SPOT_PRICE_CAPACITY_OPTIMIZED strategy agora uses, Batch launches Spot capacity through EC2 Fleet).",
    ),
)

_BY_KEY = {setting.key: setting for setting in SETTINGS}


class UnknownSettingError(AgoraError):
    """Code asked for an ``[agora]`` key that :data:`SETTINGS` does not declare."""


def get(key: str) -> str:
    """The value of ``[agora] key`` (environment, then airflow.cfg, then the declared default)."""
    setting = _BY_KEY.get(key)
    if setting is None:
        raise UnknownSettingError(f"[agora] {key} is not a setting; known: {', '.join(sorted(_BY_KEY))}")
    from airflow.configuration import conf

    return str(conf.get("agora", key, fallback=setting.default)).strip()  # a _CMD's output ends in a newline


def get_bool(key: str) -> bool:
    value = get(key).strip().lower()
    if value in {"true", "1", "yes", "on"}:
        return True
    if value in {"false", "0", "no", "off", ""}:
        return False
    raise AgoraError(f"[agora] {key} must be true or false, got {value!r}")


def get_float(key: str) -> float:
    value = get(key)
    try:
        return float(value)
    except ValueError:
        raise AgoraError(f"[agora] {key} must be a number, got {value!r}") from None


def configured_catalog(*, required: bool = False) -> Catalog:
    """Every resource of ``[agora] catalog``, its comma-separated files merged into one catalog
    (:func:`~agora_optimizer.io.catalog_file.merged_catalog`), read once per value of the setting;
    empty when the setting is, unless ``required``: then it raises, saying what to set."""
    catalogs = get("catalog")
    if required and not catalogs.strip(" ,"):
        raise AgoraError("[agora] catalog is empty: name the catalog files of your resources")
    return _merged_catalog(catalogs)


@cache
def _merged_catalog(catalogs: str) -> Catalog:
    from agora_optimizer.io.catalog_file import merged_catalog

    return merged_catalog(catalogs)


def agora_home() -> Path:
    """``$AIRFLOW_HOME/agora``, created."""
    from airflow.configuration import AIRFLOW_HOME

    home = Path(AIRFLOW_HOME).expanduser() / "agora"
    home.mkdir(parents=True, exist_ok=True)
    return home


def directory(key: str, default_name: str, mode: int = 0o777, *, create: bool = True) -> Path:
    """A directory setting: its value, or ``$AIRFLOW_HOME/agora/<default_name>``; created unless not
    ``create`` (with ``mode`` less the umask, when it did not exist)."""
    value = get(key)
    path = Path(value).expanduser() if value else agora_home() / default_name
    if create:
        path.mkdir(mode=mode, parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class InEffect:
    """A setting's value as Airflow reads it, and where it came from (``source``: ``default``, the
    ``airflow.cfg`` file, or the environment variable); for an empty value with a meaning
    (:attr:`Setting.when_empty`), that meaning with ``$AIRFLOW_HOME`` filled in."""

    value: str
    source: str
    meant: bool = False  # the value is what the empty setting means (Setting.when_empty)


def airflow_home() -> Path:
    """``$AIRFLOW_HOME`` (default ``~/airflow``) as Airflow expands it, without importing Airflow; not created."""
    return Path(_expanded(os.environ.get("AIRFLOW_HOME", "~/airflow")))


def airflow_config_file() -> Path:
    """The ``airflow.cfg`` Airflow reads: ``$AIRFLOW_CONFIG``, else ``$AIRFLOW_HOME/airflow.cfg``."""
    named = os.environ.get("AIRFLOW_CONFIG")
    return Path(_expanded(named)) if named is not None else airflow_home() / "airflow.cfg"


def in_effect(key: str) -> InEffect:
    """``[agora] key`` in Airflow's order (``AIRFLOW__AGORA__KEY``, then ``airflow.cfg``, then the
    default) read with ``configparser``, so that Airflow is not imported. A secret given as a command
    or a secrets-backend path (``_CMD``, ``_SECRET``) is left to Airflow, which alone runs or fetches it."""
    setting = _BY_KEY.get(key)
    if setting is None:
        raise UnknownSettingError(f"[agora] {key} is not a setting; known: {', '.join(sorted(_BY_KEY))}")
    variable = f"AIRFLOW__AGORA__{key.upper()}"
    section = _config_file_section(airflow_config_file())
    if variable in os.environ:
        found = InEffect(_expanded(os.environ[variable]).strip(), f"environment {variable}")
    elif setting.sensitive and (indirect := _indirect(variable, section, key)):
        found = InEffect(get(key), f"{indirect} (read by Airflow)")
    elif key in section:
        found = InEffect(_expanded(section[key]).strip(), "airflow.cfg")
    else:
        found = InEffect(setting.default, "default")
    if found.value or not setting.when_empty:
        return found
    return InEffect(setting.when_empty.format(agora=airflow_home() / "agora"), found.source, meant=True)


def _indirect(variable: str, section: dict[str, str], key: str) -> str:
    """The ``_CMD``/``_SECRET`` form of a sensitive key that Airflow would read, or ``""``: in the
    environment before the file's plain value (Airflow's order), in the file only after it."""
    for suffix in ("_CMD", "_SECRET"):
        if variable + suffix in os.environ:
            return variable + suffix
    if key in section:
        return ""
    for suffix in ("_cmd", "_secret"):
        if key + suffix in section:
            return f"{key}{suffix} in airflow.cfg"
    return ""


def _config_file_section(path: Path) -> dict[str, str]:
    """The ``[agora]`` options of the ``airflow.cfg`` at ``path`` (none if there is no such file), read
    as Airflow reads it: ``%`` interpolation, names kept in their case."""
    parser = configparser.ConfigParser()
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # Airflow keeps the case of names
    try:
        parser.read(path, encoding="utf-8")
        return dict(parser["agora"]) if parser.has_section("agora") else {}
    except (configparser.Error, OSError, UnicodeDecodeError) as exc:
        raise AgoraError(f"{path}: not a readable airflow.cfg ({str(exc).splitlines()[0]})") from None


def _expanded(text: str) -> str:
    """``text`` with environment variables and ``~`` expanded until nothing changes (Airflow's ``expand_env_var``)."""
    while True:
        expanded = os.path.expanduser(os.path.expandvars(text))
        if expanded == text:
            return expanded
        text = expanded

"""What the commands that plan share: the workflow they plan (a WfFormat file or ``airflow:DAG_ID``), the
quiet they keep while Airflow loads, the one line of what they assumed, and the workflow a plan names.

``agora optimize`` and ``agora pareto`` plan either kind of input through :func:`load_plan_input`; ``agora
validate``, ``gantt`` and ``simulate`` find the workflow a plan was made from with :func:`plan_workflow`
(the plan's ``workflow_source``, recorded by the commands that write plans). By default a command prints
its results and one line of what it assumed; ``-v`` adds the details (each type's platform latency,
Airflow's own log lines while it parses the DAG folder).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agora_optimizer.cli.common import ranged, say
from agora_optimizer.errors import FieldError
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.catalog import GIB

if TYPE_CHECKING:
    from agora_optimizer.model.catalog import Catalog
    from agora_optimizer.model.plan import Plan
    from agora_optimizer.model.workflow import Workflow
    from agora_optimizer.predict.latency import PlatformLatency, Statistic

DAG_PREFIX = "airflow:"
_AIRFLOW_LEVEL = "AIRFLOW__LOGGING__LOGGING_LEVEL"  # [logging] logging_level, read when Airflow is first imported
PlanInputArg = Annotated[
    Path,
    typer.Argument(
        help="A WfFormat 1.4/1.5 workflow instance (JSON), or airflow:DAG_ID for a DAG of the DAG folder "
        "(its tasks get predicted runtimes and memory)."
    ),
]
DagFolderOpt = Annotated[
    Path | None, typer.Option(help="For airflow:DAG_ID: the DAG folder (default: [core] dags_folder).")
]
ModelOpt = Annotated[
    Path | None, typer.Option(help="For airflow:DAG_ID with an empty trace store: a trained predictor dir.")
]
MemoryOpt = Annotated[
    float, typer.Option(help=ranged("--default-memory-gib", "Memory reserved for tasks whose source records none."))
]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="Also print the details: each type's platform latency where one is added, and Airflow's own log "
        "lines while it parses the DAG folder.",
    ),
]


def dag_id_of(workflow: Path | str) -> str | None:
    """The DAG id of ``airflow:DAG_ID``; None for a workflow file."""
    text = str(workflow)
    return text.removeprefix(DAG_PREFIX) if text.startswith(DAG_PREFIX) else None


@contextmanager
def quiet_logs(verbose: bool, *, warnings: bool = False) -> Iterator[None]:
    """Meanwhile, every log record below ERROR is dropped (below WARNING with ``warnings``), unless ``verbose``.

    A command that only plans has nothing to say about Airflow's DAG parsing, nor about plans not being
    applied; one that puts a plan in force (``--apply``) keeps the warnings. The standard library's
    records (agora's own, and the cluster policy's) are dropped with :func:`logging.disable`, which
    Airflow's logging configuration leaves alone; Airflow's own structlog loggers filter by the level
    it reads from its configuration when first imported (inside this block), so the level is set
    there, through the environment, if Airflow is not imported yet.
    """
    if verbose:
        yield
        return
    previous = logging.root.manager.disable
    logging.disable(logging.INFO if warnings else logging.WARNING)
    saved = os.environ.get(_AIRFLOW_LEVEL)
    if "airflow" not in sys.modules:
        os.environ[_AIRFLOW_LEVEL] = "WARNING" if warnings else "ERROR"
    try:
        yield
    finally:
        logging.disable(previous)
        if saved is None:
            os.environ.pop(_AIRFLOW_LEVEL, None)
        else:
            os.environ[_AIRFLOW_LEVEL] = saved


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to standard output (file descriptor 1, so loggers that hold the stream
    too) to standard error meanwhile: ``--json`` output must be JSON alone."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@dataclass(frozen=True)
class PlanInput:
    """The workflow to plan and how its runtimes were got."""

    workflow: Workflow
    runtimes: str  # for people: "as FILE records them (not predicted)", "predicted, at p50, auto: no deadline"
    quantile: float | None  # the predicted runtimes' quantile; None: a file's own runtimes
    source: str  # what the plan records as its workflow_source: the file as given, or airflow:DAG_ID


def load_plan_input(
    workflow: Path,
    catalog: Catalog,
    *,
    default_memory_gib: float = 1.0,
    dag_folder: Path | None = None,
    store: str | None = None,
    model: Path | None = None,
    quantile_choice: str | float = "auto",
    has_deadline: bool = False,
) -> PlanInput:
    """A WfFormat file as it records itself, or ``airflow:DAG_ID`` with predicted runtimes and memory (where
    the predictions came from is one line on stderr). Call it inside :func:`quiet_logs`."""
    dag_id = dag_id_of(workflow)
    if dag_id is None:
        loaded = load_workflow(workflow, default_memory_bytes=int(default_memory_gib * GIB))
        return PlanInput(loaded, f"as {workflow} records them (not predicted)", None, str(workflow))
    from agora_optimizer.integration.airflow_dag import predicted_dag_workflow
    from agora_optimizer.predict.quantile_choice import quantile_reason, resolve_quantile

    quantile = resolve_quantile(quantile_choice, has_deadline=has_deadline)
    with stdout_to_stderr():  # Airflow logs to stdout while it parses: stdout is the command's output
        predicted, origin = predicted_dag_workflow(dag_id, catalog, dag_folder, store, model, quantile)
    say(f"agora: predictions: {origin}", err=True)
    runtimes = f"predicted, at {quantile_reason(quantile_choice, has_deadline)}"
    return PlanInput(predicted, runtimes, quantile, f"{DAG_PREFIX}{dag_id}")


def assumed_line(latency: PlatformLatency, catalog: Catalog, statistic: Statistic, why_none: str) -> str:
    """One line of the platform latency the plan assumed: added seconds per task and where they came from
    (each type's numbers are the ``-v`` lines of :func:`latency_lines`); ``why_none`` says why there is none."""
    if statistic == "none":
        return f"no platform latency ({why_none})"
    per_type = [latency.for_resource(r) for r in catalog.resources]
    if not per_type:
        return "no platform latency (no resource type)"
    added = sorted({round(t.added_s(statistic), 2) for t in per_type})
    seconds = f"+{added[0]:.2f} s" if len(added) == 1 else f"+{added[0]:.2f} to {added[-1]:.2f} s"
    learned = sum(1 for t in per_type if t.start or t.end)
    origins = [f"{learned} learned from the trace store"] if learned else []
    if learned < len(per_type):
        origins.append(f"{len(per_type) - learned} from the measured defaults")
    return f"platform latency {seconds} per task ({statistic}; types: {', '.join(origins)}; -v for each)"


def latency_lines(latency: PlatformLatency, catalog: Catalog, statistic: Statistic) -> list[str]:
    """Each type's platform latency, one line each (``-v``); none where none is added (the one line says so)."""
    if statistic == "none":
        return []
    return [f"platform latency: {latency.for_resource(r).describe(statistic)}" for r in catalog.resources]


def plan_workflow(
    plan_path: Path, plan: Plan, given: Path | None, option: str = "--workflow", *, none_for_a_dag: bool = False
) -> Path | None:
    """``given``, else the workflow file the plan was made from (its ``workflow_source``, from the working
    directory or else from the plan's directory); None when the plan records none (``none_for_a_dag``: nor
    a file, being a DAG's plan; else that is an error saying what to pass)."""
    if given is not None:
        return given
    source = plan.workflow_source
    if source is None or (none_for_a_dag and dag_id_of(source) is not None):
        return None
    if dag_id_of(source) is not None:
        raise FieldError(
            str(plan_path),
            "workflow_source",
            f"the plan was made from {source}'s predicted runtimes, not a file: pass {option} WORKFLOW.json",
        )
    named = Path(source)
    for candidate in (named, plan_path.parent / named):
        if candidate.is_file():
            return candidate
    raise FieldError(
        str(plan_path), "workflow_source", f"{source!r} is not a file here or beside the plan: pass {option}"
    )


def required_plan_workflow(plan_path: Path, plan: Plan, given: Path | None, option: str = "--workflow") -> Path:
    """:func:`plan_workflow`, or a one-line error saying what to pass when the plan names none."""
    found = plan_workflow(plan_path, plan, given, option)
    if found is None:
        raise FieldError(
            str(plan_path), "workflow_source", f"the plan does not name the workflow it was made from: pass {option}"
        )
    return found

"""Retrain the predictor on the traces and re-plan the DAGs that opted in (the rerun DAG's work).

``dags/agora_reoptimize.py`` calls these on a schedule (``[agora] reoptimize_schedule``):

1. :func:`retrain` fits the predictor on every attempt of the trace store (but the rerun DAG's
   own) and saves it to ``[agora] model_dir`` with its metadata, unless the store holds no
   attempt the last model has not seen;
2. :func:`opted_in_dags` lists the DAGs of the DAG folder that carry ``[agora] reoptimize_tag``;
3. :func:`replan` predicts each one's tasks (the store's history first, then the model,
   the DAG's hints, the defaults), optimizes it on ``[agora] catalog`` and puts the plan in
   force through the plan store, which keeps the earlier plans in its history: a re-plan identical
   to the plan in force adds no entry, and the oldest entries past ``[agora] plan_history_max`` go,
   except those the DAG's recorded runs (or its traced attempts, of runs still going) name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import OBJECTIVE_KINDS, Objective
from agora_optimizer.plans.store import PlanStore, StoredPlan

if TYPE_CHECKING:
    from agora_optimizer.traces.records import TaskAttempt

RERUN_DAG_ID = "agora_reoptimize"  # dags/agora_reoptimize.py (the UI names it too: ui/rerun.py)


@dataclass(frozen=True)
class RetrainResult:
    trained: bool
    attempts: int
    model_dir: Path
    reason: str


def model_dir() -> Path:
    configured = settings.get("model_dir")
    return Path(configured).expanduser() if configured else settings.agora_home() / "models" / "predictor"


def retrain(store_url: str, directory: Path, catalog: Catalog | None = None) -> RetrainResult:
    """Fit the predictor on the store's attempts and save it, unless nothing new was recorded.

    The rerun DAG's own attempts are left out: under a scheduler its tasks are traced as any DAG's are,
    and they say nothing of the DAGs it plans; counted, every rerun would find the last one's attempts
    new and train again.
    """
    from agora_optimizer.predict.errors import EmptyHistoryError
    from agora_optimizer.predict.model_store import read_metadata, save_predictor
    from agora_optimizer.predict.predictor import Predictor
    from agora_optimizer.traces.store import TraceStore

    with TraceStore(store_url) as store:
        attempts = [a for a in store.attempts() if a.dag_id != RERUN_DAG_ID]
    source = f"store: {len(attempts)} attempts, fingerprint {_fingerprint(attempts)}"
    if not attempts:
        return RetrainResult(False, 0, directory, "the trace store is empty")
    if (directory / "metadata.json").exists():
        try:
            if source in read_metadata(directory).get("training_data", {}).get("sources", []):
                return RetrainResult(False, len(attempts), directory, "no new attempts since the last training")
        except AgoraError:
            pass  # an unreadable model is replaced
    try:
        predictor = Predictor().fit(attempts, catalog)
    except EmptyHistoryError as exc:  # the model in place (or the shipped one) keeps answering
        return RetrainResult(False, len(attempts), directory, f"nothing to learn from: {exc}")
    save_predictor(predictor, directory, sources=[source])
    return RetrainResult(True, len(attempts), directory, f"trained on {len(attempts)} attempts")


def _fingerprint(attempts: Sequence[TaskAttempt]) -> str:
    """A digest of what the predictor learns from: a changed or added attempt changes it."""
    digest = hashlib.sha256()
    for a in sorted(attempts, key=lambda a: a.key):
        digest.update(repr((a.key, a.resource_type, a.runtime_s, a.peak_rss_bytes, a.state)).encode())
    return digest.hexdigest()[:16]


def opted_in_dags(folder: str | Path, tag: str) -> list[str]:
    """The DAG ids of ``folder`` that carry ``tag``, sorted."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(folder), safe_mode=False, load_op_links=False)
    return sorted(dag_id for dag_id, dag in bag.dags.items() if tag in (dag.tags or set()))


def replan(
    dag_id: str,
    catalog: Catalog,
    plans: PlanStore,
    *,
    store_url: str,
    models: Path,
    folder: str | Path | None = None,
    objective: str = "balanced",
    time_limit_s: float = 60.0,
    platform_latency: str = "median",
    runtime_quantile: str | None = None,
) -> StoredPlan:
    """Predict, optimize and put in force a new plan for ``dag_id``; the old one stays in the history
    (``unchanged`` when the new plan is the one in force; ``pruned``: the history entries past the plan
    store's limit that no run named, removed).

    ``platform_latency`` (median, p90 or none): what each task's duration gains for the platform's
    latency, learned from the same trace store with the DAG's edges and those of the folder's other DAGs
    (as ``agora optimize`` does).
    ``runtime_quantile`` (p50, p90, auto, a number; default ``[agora] runtime_quantile``): the
    predicted runtimes' quantile the plan is made from, which the plan records.
    """
    from agora_optimizer.integration.airflow_dag import learned_platform_latency, predicted_dag_workflow
    from agora_optimizer.optimize.optimize import optimize
    from agora_optimizer.predict.latency import statistic_of, with_platform_latency
    from agora_optimizer.predict.quantile_choice import parse_quantile, quantile_label, resolve_quantile

    kind = next((k for k in OBJECTIVE_KINDS if k == objective), None)
    if kind is None:
        raise AgoraError(f"[agora] objective must be one of {', '.join(OBJECTIVE_KINDS)}, got {objective!r}")
    model = models if (models / "metadata.json").exists() else None
    statistic = statistic_of(platform_latency)
    goal = Objective(kind=kind)
    choice = parse_quantile(runtime_quantile or settings.get("runtime_quantile"), "[agora] runtime_quantile")
    quantile = resolve_quantile(choice, has_deadline=goal.deadline_s is not None)
    workflow, _origin = predicted_dag_workflow(dag_id, catalog, folder, store_url, model, quantile)
    edges = {dag_id: [(e.parent, e.child) for e in workflow.edges]}
    latency = learned_platform_latency(store_url, edges, statistic, folder)
    planned = with_platform_latency(catalog, latency, statistic)
    plan = optimize(workflow, planned, goal, catalog.source, time_limit_s)
    in_use = None
    if plans.history_max:
        from agora_optimizer.runs.store import RunStore

        with RunStore(store_url) as runs:
            in_use = runs.plan_versions(dag_id)
    return plans.save(dag_id, replace(plan, runtime_quantile=quantile_label(quantile)), workflow, in_use=in_use)

"""The "Plan vs actual" page's data: a DAG's run records (:mod:`agora_optimizer.runs`) against its plans.

Each DAG run that ended has a :class:`~agora_optimizer.runs.record.RunRecord` in the trace store's
database. The page shows the last N of them (planned against actual makespan and cost, ratios
further than :data:`OFF_THRESHOLD` from 1 flagged), one run in detail, and the *realised* saving:
the median of the successful planned runs against the median of the successful unplanned runs
(default placement) of the same DAG, beside the saving the plan *predicted* against its one-type
default (:mod:`agora_optimizer.ui.baseline`). Failed runs are listed but left out of the medians:
a run that stopped early would look cheap. Without unplanned runs there is nothing measured to
compare with, and the answer says so instead of showing a number.

Callers authorize first; these functions only read. A store that cannot be read is a 503.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from typing import TypeVar

from fastapi import HTTPException, status

from agora_optimizer.errors import AgoraError
from agora_optimizer.plans.store import plan_version
from agora_optimizer.runs.record import RunRecord
from agora_optimizer.runs.store import RunStore
from agora_optimizer.traces.store import TraceStoreError, default_store_url
from agora_optimizer.ui import schemas
from agora_optimizer.ui.baseline import comparison
from agora_optimizer.ui.plans import PlanFile, plan_reader
from agora_optimizer.ui.queries import savings

log = logging.getLogger(__name__)

OFF_THRESHOLD = 0.10
DEFAULT_RUNS = 20
MAX_RUNS = 200
T = TypeVar("T")


@dataclass(frozen=True)
class RunView:
    """The DAG's last runs, newest first, and the one shown in detail (None when there is none)."""

    dag_id: str
    limit: int
    records: tuple[RunRecord, ...]
    selected: RunRecord | None


@cache
def _store(url: str) -> RunStore:
    return RunStore(url)


def _read(what: Callable[[RunStore], T]) -> T:
    """``what`` on the run store of ``[agora] trace_store_url``; 503 when the store cannot be read."""
    try:
        return what(_store(default_store_url()))
    except TraceStoreError as exc:
        log.warning("agora: %s", exc)
        raise HTTPException(
            status.HTTP_503_SERVICE_UNAVAILABLE, "the trace store cannot be read, so neither can the run records"
        ) from None


def load(dag_id: str, limit: int, run_id: str | None = None) -> RunView:
    """The last ``limit`` runs of the DAG and the run ``run_id`` (default the newest).

    404 for a DAG agora has never heard of (no run, no plan, not in Airflow), or a run it has not recorded.
    """
    records = tuple(_read(lambda store: store.list(dag_id, limit)))
    if not records and not known_dag(dag_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no DAG {dag_id}: not in Airflow, no plan, no recorded run")
    selected = records[0] if records else None
    if run_id:
        selected = next((r for r in records if r.run_id == run_id), None)
        if selected is None:
            selected = _read(lambda store: store.current(dag_id, run_id))  # a run still going too
        if selected is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"DAG {dag_id} has no recorded run {run_id}")
    return RunView(dag_id, limit, records, selected)


def known_dag(dag_id: str) -> bool:
    """The DAG has a plan (current or past) or is in Airflow's database."""
    store = plan_reader().store
    return store.current_path(dag_id).exists() or bool(store.history(dag_id)) or in_airflow(dag_id)


def in_airflow(dag_id: str) -> bool:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(DagModel.dag_id).where(DagModel.dag_id == dag_id)) is not None


def page(view: RunView) -> schemas.RunPage:
    selected = None
    if view.selected is not None:
        record = view.selected
        machines = {t.planned_machine for t in record.tasks if t.planned_machine}
        machines |= {t.actual_machine for t in record.tasks if t.actual_machine}
        selected = schemas.RunDetail(
            run=row(record),
            tasks=len(record.tasks),
            machines=len(machines),
            notes=list(record.notes),
            repairs=[
                schemas.RunRepairRow(at_s=r.at_s, reason=r.reason, tasks=list(r.tasks), detail=r.detail)
                for r in record.repairs
            ],
            forecast=None if record.forecast is None else schemas.RunForecast(**asdict(record.forecast)),
        )
    return schemas.RunPage(
        dag_id=view.dag_id,
        limit=view.limit,
        off_threshold=OFF_THRESHOLD,
        runs=[row(r) for r in view.records],
        saving=realised_saving(view.dag_id, view.records),
        selected=selected,
    )


def is_off(ratio: float | None) -> bool:
    """More than :data:`OFF_THRESHOLD` away from the plan, either way (a run much faster is news too)."""
    return ratio is not None and abs(ratio - 1.0) > OFF_THRESHOLD + 1e-12


def row(record: RunRecord) -> schemas.RunRow:
    return schemas.RunRow(
        run_id=record.run_id,
        state=record.state,
        planned=record.planned,
        plan_version=record.plan_version,
        started_at=record.started_at,
        planned_makespan_s=record.planned_makespan_s,
        actual_makespan_s=record.actual_makespan_s,
        makespan_ratio=record.makespan_ratio,
        makespan_off=is_off(record.makespan_ratio),
        planned_cost_usd=record.planned_cost_usd,
        planned_expected_cost_usd=record.planned_expected_cost_usd,
        actual_cost_usd=record.actual_cost_usd,
        cost_ratio=record.cost_ratio,
        cost_off=is_off(record.cost_ratio),
        repairs=len(record.repairs),
    )


def realised_saving(dag_id: str, records: Sequence[RunRecord]) -> schemas.RealisedSaving:
    """Median planned against median unplanned (successful runs among ``records``), and the predicted saving."""
    done = [r for r in records if r.state == "success"]
    planned = [r for r in done if r.planned]
    unplanned = [r for r in done if not r.planned]
    version, predicted = predicted_saving(dag_id, [r for r in records if r.planned])
    answer = schemas.RealisedSaving(
        available=False,
        planned_runs=len(planned),
        unplanned_runs=len(unplanned),
        planned_median_makespan_s=_median([r.actual_makespan_s for r in planned]),
        planned_median_cost_usd=_median([r.actual_cost_usd for r in planned]),
        unplanned_median_makespan_s=_median([r.actual_makespan_s for r in unplanned]),
        unplanned_median_cost_usd=_median([r.actual_cost_usd for r in unplanned]),
        predicted_plan_version=version,
        predicted=predicted,
    )
    if not unplanned:
        answer.reason = (
            f"no unplanned run of {dag_id} among the {len(records)} shown, so no measured default to compare "
            "with: a run without a plan in force (before the first plan, or with the plan removed) is one"
        )
    elif not planned:
        answer.reason = f"no successful planned run of {dag_id} among the {len(records)} shown"
    else:
        answer.available = True
        answer.makespan_saving = _saving(answer.planned_median_makespan_s, answer.unplanned_median_makespan_s)
        answer.cost_saving = _saving(answer.planned_median_cost_usd, answer.unplanned_median_cost_usd)
    return answer


def predicted_saving(dag_id: str, planned: Sequence[RunRecord]) -> tuple[str, schemas.Savings | None]:
    """The plan of the newest planned run (else the plan in force) against its one-type default."""
    try:
        entry = _plan_of(dag_id, planned[0].plan_version) if planned else None
        entry = entry or plan_reader().current(dag_id)
    except AgoraError as exc:
        log.warning("agora: %s", exc)
        return "", schemas.Savings(available=False, reason=str(exc))
    if entry is None:
        return "", None
    version = entry.version.removeprefix("plan-") if entry.version.startswith("plan-") else _version(entry)
    return version, savings(entry.plan, comparison(entry))


def _plan_of(dag_id: str, version: str) -> PlanFile | None:
    """The stored plan of that version, keyed by it (a plan's version is the hash of its bytes)."""
    found = plan_reader().store.find(dag_id, version)
    return None if found is None else PlanFile(dag_id, found.path, f"plan-{version}", found.plan)


def _version(entry: PlanFile) -> str:
    try:
        return plan_version(entry.path.read_bytes())
    except OSError:
        return ""


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _saving(planned: float | None, default: float | None) -> float | None:
    if planned is None or default is None or default <= 0:
        return None
    return 1.0 - planned / default

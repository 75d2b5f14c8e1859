"""A run record: what one DAG run did against the plan that placed it (no Airflow here).

A :class:`RunRecord` is built once a DAG run has ended (:func:`agora_optimizer.runs.build.build_run_record`)
and kept in the trace store's database (:class:`agora_optimizer.runs.store.RunStore`). It answers
"did the plan hold?": planned against actual makespan and cost, task by task, machine by machine,
and what the executor had to repair on the way. Every time of a task or lease is in seconds from
the DAG run's start, the same origin as a plan's times, so the two can be drawn on one axis.
What the record could not know is said in ``notes`` rather than guessed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

DEFAULT_LIST_LIMIT = 50  # the runs a listing shows unless told otherwise


@dataclass(frozen=True)
class RunTask:
    """One task instance of the run: where the plan put it and where (and when) its last try ran.

    ``state`` is the last try's state (``success``, ``failed``, ``oom_killed``...); for a planned task
    that never started, Airflow's word for it (``skipped``, ``upstream_failed``...), ``not in run``
    (a mapped task's planned instance beyond the run's width) or, with no word, ``not run``. A task
    instance is ``task[i]`` (:attr:`key`) for a mapped task. Planned fields are None or
    "" where the plan did not name the task; actual fields where it did not run.
    """

    task_id: str
    map_index: int = -1
    try_number: int = 0
    state: str = "not run"
    planned_resource: str = ""
    planned_machine: str = ""
    planned_start_s: float | None = None
    planned_end_s: float | None = None
    actual_resource: str = ""
    actual_machine: str = ""
    actual_start_s: float | None = None
    actual_end_s: float | None = None

    @property
    def key(self) -> str:
        return f"{self.task_id}[{self.map_index}]" if self.map_index >= 0 else self.task_id


@dataclass(frozen=True)
class RunLease:
    """A machine (or a lone attempt) the run held, priced with its resource's billing rule.

    ``source`` says where its times come from: a backend's report (``slurm accounting``, ...,
    from a :class:`~agora_optimizer.runs.lease_record.LeaseRecord`), ``task times`` (a planned
    machine no backend reported: its tasks' first start to last end) or ``attempt`` (an attempt on
    no machine: its own start to end).
    """

    machine: str  # "" for an attempt on no machine
    resource: str
    start_s: float
    end_s: float
    cost_usd: float
    source: str
    external_id: str = ""

    @property
    def seconds(self) -> float:
        return max(0.0, self.end_s - self.start_s)


@dataclass(frozen=True)
class Repair:
    """Something the executor changed during the run: at ``at_s`` (from the run's start), why, which tasks.

    A re-plan also says what the run is expected to be from then on, its *forecast*: when it ends on the run's
    plan clock (``forecast_end_s``) and on the wall clock (``forecast_end_at``), and what it costs in all
    (``forecast_cost_usd``, the leases paid included); None where the repair re-planned nothing.
    """

    at_s: float
    reason: str
    tasks: tuple[str, ...] = ()
    detail: str = ""
    forecast_end_s: float | None = None
    forecast_cost_usd: float | None = None
    forecast_end_at: datetime | None = None


@dataclass(frozen=True)
class Forecast:
    """What a run is expected to be, as its last re-plan saw it (at ``at_s``): its end on the plan clock and the
    wall clock, and its whole cost."""

    at_s: float
    end_s: float
    cost_usd: float
    end_at: datetime | None = None

    def text(self) -> str:
        """``ends at 130.0 s (2026-12-05 04:12:00 UTC), costs 0.0123 USD (forecast at 40.0 s)``."""
        wall = f" ({self.end_at:%Y-%m-%d %H:%M:%S %Z})" if self.end_at is not None else ""
        return f"ends at {self.end_s:,.1f} s{wall}, costs {self.cost_usd:.4f} USD (forecast at {self.at_s:,.1f} s)"


def forecast_of(repairs: tuple[Repair, ...] | list[Repair]) -> Forecast | None:
    """The run's forecast: its last re-plan's (None before any)."""
    for repair in reversed(repairs):
        if repair.forecast_end_s is not None and repair.forecast_cost_usd is not None:
            return Forecast(repair.at_s, repair.forecast_end_s, repair.forecast_cost_usd, repair.forecast_end_at)
    return None


@dataclass(frozen=True)
class RunRecord:
    """One DAG run, planned against actual. ``planned_*`` are None for an unplanned run.

    ``actual_makespan_s`` is the last task end minus the DAG run's start (None if no task ran);
    ``actual_cost_usd`` is the sum of ``leases``' costs (see ``docs/runs.md``).
    ``planned_expected_cost_usd`` is the plan's expected cost with its spot tasks' interruptions
    (``docs/spot.md``; None for a plan without spot tasks): a run without an interruption costs about
    ``planned_cost_usd``, one with an interruption more, and many runs on average about this.
    """

    dag_id: str
    run_id: str
    state: str  # the DAG run's state in Airflow (success, failed)
    planned: bool
    plan_version: str  # "" when no plan placed the run
    started_at: datetime | None
    ended_at: datetime | None
    planned_makespan_s: float | None
    actual_makespan_s: float | None
    planned_cost_usd: float | None
    actual_cost_usd: float
    tasks: tuple[RunTask, ...] = ()
    leases: tuple[RunLease, ...] = ()
    repairs: tuple[Repair, ...] = ()
    notes: tuple[str, ...] = ()
    planned_expected_cost_usd: float | None = None

    @property
    def makespan_ratio(self) -> float | None:
        """Actual over planned makespan (1.2 = 20 % longer than planned); None if either is missing or 0."""
        return ratio(self.actual_makespan_s, self.planned_makespan_s)

    @property
    def forecast(self) -> Forecast | None:
        """What the run was expected to be at its last re-plan (:func:`forecast_of`)."""
        return forecast_of(self.repairs)

    @property
    def cost_ratio(self) -> float | None:
        """Actual over planned cost; None if either is missing or the plan cost nothing."""
        return ratio(self.actual_cost_usd, self.planned_cost_usd)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (times as ISO 8601, the ratios included), for ``--json`` and the UI."""
        data = asdict(self)
        for name in ("started_at", "ended_at"):
            value = data[name]
            data[name] = value.isoformat() if value is not None else None
        for repair in data["repairs"]:
            repair["forecast_end_at"] = _iso(repair["forecast_end_at"])
        data["makespan_ratio"] = self.makespan_ratio
        data["cost_ratio"] = self.cost_ratio
        forecast = self.forecast
        data["forecast"] = None if forecast is None else {**asdict(forecast), "end_at": _iso(forecast.end_at)}
        return dict(json.loads(json.dumps(data)))  # tuples as lists: what a JSON reader gets back


RUNNING = "running"  # the state of a run not recorded yet (:func:`in_progress`)


def in_progress(dag_id: str, run_id: str, repairs: tuple[Repair, ...]) -> RunRecord:
    """What is known of a run not recorded yet (it has not ended, or not been recorded since): its repairs and the
    forecast they carry, state ``running``; nothing planned or actual is guessed."""
    note = "not recorded yet: the run has not ended (or not been recorded); its repairs and forecast so far"
    return RunRecord(
        dag_id, run_id, RUNNING, True, "", None, None, None, None, None, 0.0, repairs=repairs, notes=(note,)
    )


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def ratio(actual: float | None, planned: float | None) -> float | None:
    if actual is None or planned is None or planned <= 0:
        return None
    return actual / planned

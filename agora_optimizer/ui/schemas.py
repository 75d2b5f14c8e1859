"""The JSON API's documents, as they appear in the app's OpenAPI schema (``/agora/openapi.json``).

Times are in seconds, money in US dollars, memory in bytes. A saving is a fraction of the
one-type default: ``0.25`` means the plan needs a quarter less than the default.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Savings(BaseModel):
    """The plan against the one-type default (every task on the cheapest type that fits them all)."""

    available: bool
    reason: str = Field(default="", description="Why there is no default to compare with.")
    default_resource: str | None = None
    default_makespan_s: float | None = None
    default_cost_usd: float | None = None
    makespan_saving: float | None = Field(default=None, description="1 - plan makespan / default makespan.")
    cost_saving: float | None = Field(default=None, description="1 - plan cost / default cost.")


class DagSummary(BaseModel):
    """A DAG's current plan in one row."""

    dag_id: str
    plan_created_at: str
    objective: str
    method: str
    solver_status: str
    tasks: int
    machines: int
    makespan_s: float
    cost_usd: float
    tasks_per_resource: dict[str, int]
    savings: Savings
    can_reoptimize: bool = Field(description="The user may edit this DAG, so may queue its re-optimization.")


class DagList(BaseModel):
    total: int
    dags: list[DagSummary]


class TaskRow(BaseModel):
    """One task: where and when the plan runs it, what it predicted, what recent runs did."""

    task: str
    resource: str
    machine: str
    start_s: float
    end_s: float
    cores: int
    predicted_runtime_s: float
    predicted_memory_bytes: int
    runs: int = Field(description="Successful attempts in the recent runs.")
    failed: int = Field(description="Other attempts in the recent runs.")
    actual_mean_runtime_s: float | None
    actual_max_runtime_s: float | None
    actual_max_peak_rss_bytes: int | None
    ran_on: list[str]


class TaskPage(BaseModel):
    dag_id: str
    recent_runs: list[str] = Field(description="The runs compared with the plan, newest first.")
    offset: int
    limit: int
    total: int
    tasks: list[TaskRow]
    trace_store_error: str = ""


class HistoryEntry(BaseModel):
    created_at: str
    applied_at: str | None = Field(None, description="When the plan was put in force (UTC); null for old entries.")
    objective: str
    method: str
    solver_status: str
    tasks: int
    makespan_s: float
    cost_usd: float
    current: bool


class History(BaseModel):
    dag_id: str
    offset: int
    limit: int
    total: int
    plans: list[HistoryEntry]


class FrontPoint(BaseModel):
    makespan_s: float
    cost_usd: float
    label: str
    index: int | None = Field(
        default=None, description="A point of the front: POST .../pareto/{index}/apply puts it in force."
    )


class Pareto(BaseModel):
    """The cost/makespan front of the plan's workflow, computed in the background on first request."""

    dag_id: str
    status: Literal["computing", "ready", "unavailable"]
    reason: str = ""
    time_limit_s: float
    plan_version: str = Field(description="The version of the current plan the front belongs to.")
    chosen: FrontPoint
    points: list[FrontPoint] = []
    candidates: int = 0
    default: FrontPoint | None = None
    lower_bound: FrontPoint | None = None


class TraceRow(BaseModel):
    dag_id: str
    task_id: str
    run_id: str
    map_index: int
    try_number: int
    state: str
    resource_type: str
    backend: str
    host: str
    operator: str
    started_at: datetime | None
    ended_at: datetime | None
    runtime_s: float | None
    peak_rss_bytes: int | None
    cpu_time_s: float | None
    error_text: str


class TracePage(BaseModel):
    offset: int
    limit: int
    total: int
    attempts: list[TraceRow]


class ReoptimizeRequest(BaseModel):
    """No fields: the DAG is in the path. A JSON body is required, so that no HTML form can post it."""

    model_config = ConfigDict(extra="forbid")


class ApplyPointRequest(BaseModel):
    """Which front the point is of: the ``plan_version`` of the Pareto answer it was read from."""

    model_config = ConfigDict(extra="forbid")
    plan_version: str = Field(max_length=100)


class ApplyPointResponse(BaseModel):
    dag_id: str
    index: int
    plan_version: str = Field(description="The version of the new current plan.")
    objective: str
    makespan_s: float
    cost_usd: float
    tasks: int


class ReoptimizeResponse(BaseModel):
    dag_id: str
    rerun_dag_id: str
    run_id: str
    state: str
    already_queued: bool = Field(description="A re-optimization of this DAG was already waiting or running.")


class RunRow(BaseModel):
    """One recorded run of the DAG, planned against actual (see docs/runs.md)."""

    run_id: str
    state: str = Field(description="The DAG run's state in Airflow (success, failed).")
    planned: bool = Field(description="A plan placed the run; false: default placement.")
    plan_version: str = Field(description="The plan that placed the run ('' when unplanned).")
    started_at: datetime | None
    planned_makespan_s: float | None
    actual_makespan_s: float | None
    makespan_ratio: float | None = Field(description="Actual / planned makespan.")
    makespan_off: bool = Field(description="The makespan ratio is more than the threshold off 1.")
    planned_cost_usd: float | None
    planned_expected_cost_usd: float | None = Field(
        default=None, description="The plan's expected cost with its spot tasks' interruptions (docs/spot.md)."
    )
    actual_cost_usd: float
    cost_ratio: float | None = Field(description="Actual / planned cost.")
    cost_off: bool = Field(description="The cost ratio is more than the threshold off 1.")
    repairs: int


class RealisedSaving(BaseModel):
    """Planned runs against unplanned runs of the same DAG (medians of the shown successful runs),
    beside the saving the plan predicted against its one-type default."""

    available: bool
    reason: str = Field(default="", description="Why there is no realised saving to show.")
    planned_runs: int = Field(description="Successful planned runs among those shown.")
    unplanned_runs: int = Field(description="Successful unplanned runs among those shown.")
    planned_median_makespan_s: float | None = None
    planned_median_cost_usd: float | None = None
    unplanned_median_makespan_s: float | None = None
    unplanned_median_cost_usd: float | None = None
    makespan_saving: float | None = Field(default=None, description="1 - planned median / unplanned median.")
    cost_saving: float | None = Field(default=None, description="1 - planned median / unplanned median.")
    predicted_plan_version: str = Field(default="", description="The plan whose predicted saving is shown.")
    predicted: Savings | None = Field(default=None, description="That plan against its one-type default.")


class RunRepairRow(BaseModel):
    at_s: float = Field(description="Seconds from the DAG run's start.")
    reason: str
    tasks: list[str]
    detail: str


class RunForecast(BaseModel):
    """What the run was expected to be at its last re-plan (learning during the run, docs/running-plans.md)."""

    at_s: float = Field(description="When the forecast was made, in seconds from the DAG run's start.")
    end_s: float = Field(description="The run's expected end, in seconds from its start.")
    end_at: datetime | None = Field(description="The same on the wall clock.")
    cost_usd: float = Field(description="The run's expected whole cost, the leases already paid included.")


class RunDetail(BaseModel):
    """The selected run: its row, notes, repairs and forecast (its chart is ``run-gantt.svg?run_id=``)."""

    run: RunRow
    tasks: int
    machines: int
    notes: list[str]
    repairs: list[RunRepairRow]
    forecast: RunForecast | None = Field(default=None, description="Null for a run never re-planned.")


class RunPage(BaseModel):
    """The DAG's last recorded runs, newest first, with the realised saving and one run in detail."""

    dag_id: str
    limit: int
    off_threshold: float = Field(description="A ratio further than this from 1 is highlighted (0.1 = 10 %).")
    runs: list[RunRow]
    saving: RealisedSaving
    selected: RunDetail | None = Field(description="The run asked for (default the newest); null without runs.")


class WindowRun(BaseModel):
    """One DAG run of the window in force."""

    run: str
    dag_id: str
    run_after: str
    offset_s: float = Field(description="When the run starts, in seconds after the window's start.")
    deadline_s: float | None = Field(default=None, description="Seconds after the run's start; none declared: null.")
    deadline_source: str = ""
    makespan_s: float
    cost_usd: float
    on_time: bool


class WindowWay(BaseModel):
    """One way of planning the window: its cost, its late runs, the types it needs more of at once than their count."""

    cost_usd: float
    late_runs: list[str]
    over_counts: dict[str, int] = Field(description="Type -> the most machines leased at once, above its count.")


class PlatformWindow(BaseModel):
    """The last window of many DAG runs put in force (``agora optimize --dags ... --apply``): the runs of the
    DAGs you may read, and what planning them together saved against planning each alone."""

    created_at: str
    start: str
    length_s: float
    catalog: str
    runs: list[WindowRun]
    hidden_runs: int = Field(description="Runs of DAGs you may not read (not shown).")
    machines: int = Field(description="Machine rows of the platform's chart (for the DAGs you may read).")
    cost_lower_bound_usd: float
    ways: dict[str, WindowWay]

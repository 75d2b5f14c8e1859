"""The learning loop without Airflow: predict a workflow never seen, plan it under a deadline, run it on the truth.

For one held-out WfFormat instance and a predictor trained without it (:func:`simulate_run`):

1. predict every task from the instance's shape alone (names, categories, file sizes; its runtimes
   and memory are not read);
2. plan the predicted workflow for time; the deadline is ``deadline_factor`` (1.5) times that plan's
   makespan; plan it again for ``objective`` (cost) under that deadline: the plan the run follows;
3. run that plan on the true runtimes and peaks with the executor's repairs
   (:func:`~agora_optimizer.predict.repair_replay.replay_with_repairs`: a task over its reservation is
   killed and retried; each category's memory and runtime learned), and note what the run forecast for itself
   once ``forecast_share`` (a quarter) of it had run;
4. beside it, the plan made from the truth under the same deadline (its cost is the floor the issue's
   "actual cost at most 1.15x the truth plan's" compares with; None where the truth cannot meet the
   deadline), and the one-type default (made from the same predictions), run as Airflow without agora
   would run it: no repair (a task killed for memory is still retried with more, as any retry would be).

Each run is one JSON object with the fields of ``bench/run_learning_loop.py``'s real mode, marked
``"simulated": true``. :func:`simulate_instances` leaves each instance of a family out in turn and
trains on every other instance of the set (:func:`held_out_instances`). The numbers and the table
are in :mod:`agora_optimizer.predict.learning_loop_report`.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agora_optimizer.errors import AgoraError, InfeasibleObjectiveError
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Assignment, Objective, ObjectiveKind, Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.optimize.optimize import default_plan, optimize
from agora_optimizer.planning.deadline_aim import DEADLINE_MARGIN
from agora_optimizer.predict.evaluation import rounded, runtime_scores
from agora_optimizer.predict.predictor import Predictor
from agora_optimizer.predict.repair_replay import (
    MAX_REPAIRS,
    REPLAN_SLACK,
    RepairedRun,
    RepairStep,
    forecast,
    replay_with_repairs,
)
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.wfformat_import import attempts_from_wfformat, read_workflow_shape

DEADLINE_FACTOR = 1.5
DEADLINE_TOLERANCE = 1e-9  # relative: a run that ends at its deadline to the float kept it
FORECAST_SHARE = 0.25


@dataclass(frozen=True)
class LoopSettings:
    """How each held-out instance is planned and run (the defaults are the issue's benchmark)."""

    deadline_factor: float = DEADLINE_FACTOR
    objective: ObjectiveKind = "cost"
    time_limit_s: float = 5.0  # per plan
    slack: float = REPLAN_SLACK
    min_late_s: float = 0.0
    interval_s: float = 0.0
    max_repairs: int = MAX_REPAIRS
    forecast_share: float = FORECAST_SHARE
    deadline_margin: float = DEADLINE_MARGIN  # both plans aim this share of the deadline early (deadline_aim.py)
    run_shrink_k: float | None = None  # the run's factor's k, [agora] run_shrink_k (None: RUN_SHRINK_K)


@dataclass(frozen=True)
class Scale:
    """What a replay in Airflow makes of a recorded task (``dags/agora_wfinstance.py``): runtime times
    ``time_s`` clamped into [``min_runtime_s``, ``max_runtime_s``]; memory times ``memory`` capped at
    ``max_memory_bytes``, plus ``process_bytes`` (what the task process itself peaks at: its measured
    footprint, not the allowance a reservation adds over it). The identity by default.

    Training and truth are scaled alike, so that a simulated run is the run the replay DAG makes.
    """

    time_s: float = 1.0
    min_runtime_s: float = 0.0
    max_runtime_s: float = math.inf
    memory: float = 1.0
    max_memory_bytes: float = math.inf
    process_bytes: int = 0

    def runtime_s(self, runtime_s: float) -> float:
        return min(max(runtime_s * self.time_s, self.min_runtime_s), self.max_runtime_s)

    def clamped(self, runtime_s: float) -> bool:
        """A recorded runtime the replay clamps to a bound: predicted and true alike there, it scores nothing."""
        return not self.min_runtime_s < runtime_s * self.time_s < self.max_runtime_s

    def memory_bytes(self, memory_bytes: int) -> int:
        return int(min(round(memory_bytes * self.memory), self.max_memory_bytes)) + self.process_bytes

    def attempt(self, attempt: TaskAttempt) -> TaskAttempt:
        runtime_s, peak = attempt.runtime_s, attempt.peak_rss_bytes
        return replace(
            attempt,
            runtime_s=None if runtime_s is None else self.runtime_s(runtime_s),
            peak_rss_bytes=None if peak is None else self.memory_bytes(peak),
        )

    def workflow(self, workflow: Workflow) -> Workflow:
        if self == Scale():
            return workflow
        recorded = [
            replace(
                t,
                runtime_s=self.runtime_s(t.runtime_s),
                memory_bytes=self.memory_bytes(t.memory_bytes) if t.memory_source == "recorded" else t.memory_bytes,
            )
            for t in workflow.tasks
        ]
        return Workflow.create(workflow.name, recorded, list(workflow.edges), source=workflow.source)


@dataclass(frozen=True)
class LoopPlan:
    """One held-out instance planned: from predictions under the deadline, from the truth, and the default."""

    predicted: Workflow
    actual: Workflow
    deadline_s: float
    plan: Plan
    truth: Plan | None
    default: Plan | None
    runtime_sources: dict[str, int]
    scored: frozenset[str] | None = None  # the tasks whose runtime the scale does not clamp (None: every task)


def kept_deadline(makespan_s: float, deadline_s: float) -> bool:
    """Whether a run of ``makespan_s`` kept ``deadline_s``: how every figure of the loop counts it."""
    return makespan_s <= deadline_s * (1 + DEADLINE_TOLERANCE)


def family_of(path: Path) -> str:
    """A WfInstances file's family: its name up to the first ``-`` (``blast-chameleon-small-001`` -> ``blast``)."""
    return path.stem.split("-", 1)[0]


def held_out_instances(files: Sequence[Path], names: Sequence[str] = ()) -> list[Path]:
    """The instances to leave out: ``names`` (stems of ``files``), else every instance of a family with two or more."""
    by_stem = {path.stem: path for path in files}
    if names:
        missing = [name for name in names if name not in by_stem]
        if missing:
            raise AgoraError(f"no instance {', '.join(missing)} among the {len(files)} training files")
        return [by_stem[name] for name in names]
    families: dict[str, list[Path]] = defaultdict(list)
    for path in files:
        families[family_of(path)].append(path)
    return [path for path in sorted(files) if len(families[family_of(path)]) >= 2]


def plan_instance(
    predictor: Predictor,
    held_out: Path,
    catalog: Catalog,
    catalog_label: str,
    settings: LoopSettings = LoopSettings(),
    scale: Scale = Scale(),
) -> LoopPlan:
    """Steps 1, 2 and 4 of the module docstring: the plan the run of ``held_out`` follows, and its yardsticks."""
    recorded = load_workflow(held_out)
    actual = scale.workflow(recorded)
    shape = read_workflow_shape(held_out)
    prediction = predictor.predict(shape, catalog)
    predicted = predictor.predicted_workflow(shape, catalog, prediction=prediction)
    limit_s = settings.time_limit_s
    fastest = optimize(predicted, catalog, Objective("time"), catalog_label, limit_s)
    deadline_s = settings.deadline_factor * fastest.makespan_s
    plan = _under_deadline(predicted, catalog, catalog_label, settings, deadline_s) or fastest
    return LoopPlan(
        predicted=predicted,
        actual=actual,
        deadline_s=deadline_s,
        plan=plan,
        truth=_under_deadline(actual, catalog, catalog_label, settings, deadline_s),
        default=default_plan(predicted, catalog, catalog_label),
        runtime_sources=prediction.sources()["runtime"],
        scored=frozenset(t.id for t in recorded.tasks if not scale.clamped(t.runtime_s)),
    )


def simulate_run(
    predictor: Predictor,
    held_out: Path,
    catalog: Catalog,
    catalog_label: str,
    settings: LoopSettings = LoopSettings(),
    repair: RepairStep | None = None,
    scale: Scale = Scale(),
) -> dict[str, Any]:
    """One held-out instance through the loop: the run's JSON object (see the module's docstring)."""
    started = time.perf_counter()
    planned = plan_instance(predictor, held_out, catalog, catalog_label, settings, scale)
    predicted, actual, plan, default = planned.predicted, planned.actual, planned.plan, planned.default
    run = repaired_run(plan, predicted, actual, catalog, settings, repair)
    made = run.replay
    forecast_at_s = settings.forecast_share * made.makespan_s
    try:
        foreseen = forecast(run, predicted, catalog, forecast_at_s, repair) if made.assignments else None
    except AgoraError:  # a re-plan that fails there (the executor's would too): no forecast
        foreseen = None
    unrepaired = replace(settings, slack=0.0)  # the default: what a run without agora's repairs gives
    default_run = repaired_run(default, predicted, actual, catalog, unrepaired, repair) if default is not None else None
    result: dict[str, Any] = {
        **plan_fields(held_out, planned, settings),
        "simulated": True,
        "actual_makespan_s": made.makespan_s,
        "deadline_met": kept_deadline(made.makespan_s, planned.deadline_s),
        "actual_cost_usd": made.cost_usd,
        "repairs": len(run.repairs),
        "repair_failures": len(run.failures),
        "repairs_at_time_limit": sum(1 for event in run.repairs if event.reached_limit()),
        "first_repair_failure": run.failures[0] if run.failures else None,
        "forecast_at_s": forecast_at_s,
        "forecast_makespan_s": None if foreseen is None else foreseen.makespan_s,
        "default_actual_makespan_s": None if default_run is None else default_run.replay.makespan_s,
        "default_actual_cost_usd": None if default_run is None else default_run.replay.cost_usd,
        "default_repairs": None if default_run is None else len(default_run.repairs),
        **memory_over_reservation(made.assignments, actual, run.killed),
        "wall_s": time.perf_counter() - started,
    }
    return result


def plan_fields(held_out: Path, planned: LoopPlan, settings: LoopSettings) -> dict[str, Any]:
    """The run's JSON fields known before it runs: its plans, the deadline, how well its runtimes were predicted."""
    truth, default = planned.truth, planned.default
    predicted_s = {t.id: t.runtime_s for t in planned.predicted.tasks}
    tasks = planned.actual.tasks
    scored = [t for t in tasks if planned.scored is None or t.id in planned.scored]
    scores = runtime_scores([predicted_s[t.id] for t in scored], [t.runtime_s for t in scored])
    return {
        "workflow": planned.actual.name,
        "family": family_of(held_out),
        "tasks": len(tasks),
        "objective": planned.plan.objective.kind,
        "deadline_s": planned.deadline_s,
        "planned_makespan_s": planned.plan.makespan_s,
        "planned_cost_usd": planned.plan.cost_usd,
        "truth_plan_cost_usd": None if truth is None else truth.cost_usd,
        "truth_plan_makespan_s": None if truth is None else truth.makespan_s,
        "truth_meets_deadline": truth is not None,
        "default_planned_makespan_s": None if default is None else default.makespan_s,
        "default_planned_cost_usd": None if default is None else default.cost_usd,
        "runtime_mdape": scores["mdape"],
        "runtime_sources": planned.runtime_sources,
    }


def trained_without(
    attempts: Mapping[Path, Sequence[TaskAttempt]], held_out: Path, scale: Scale = Scale()
) -> Predictor:
    """A predictor trained on every instance of ``attempts`` but ``held_out`` (by file name), scaled by ``scale``."""
    rows = [scale.attempt(a) for path, found in attempts.items() if path.stem != held_out.stem for a in found]
    return Predictor().fit(rows)


def memory_over_reservation(
    ran: Sequence[Assignment], actual: Workflow, killed: Sequence[Assignment] = ()
) -> dict[str, Any]:
    """Over the tasks with a recorded peak: how many peaked above what their first attempt reserved (the
    executor kills those: ``killed`` are the attempts killed, ``ran`` each task's last attempt), how many
    retries the kills cost, and the median of the last attempt's reservation over the peak (1.0: not a
    byte bought for nothing)."""
    recorded = {t.id for t in actual.tasks if t.memory_source == "recorded" and t.memory_bytes > 0}
    pairs = [(a.task, a.memory_bytes, actual.by_id[a.task].memory_bytes) for a in ran if a.task in recorded]
    over = {a.task for a in killed if a.task in recorded} | {task for task, reserved, peak in pairs if peak > reserved}
    return {
        "memory_tasks": len(pairs),
        "tasks_over_reservation": len(over),
        "memory_retries": sum(1 for a in killed if a.task in recorded),
        "median_reservation_over_peak": statistics.median(r / p for _, r, p in pairs) if pairs else None,
    }


def simulate_instances(
    files: Sequence[Path],
    held_out: Sequence[Path],
    catalog: Catalog,
    catalog_label: str,
    settings: LoopSettings = LoopSettings(),
    repair: RepairStep | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    scale: Scale = Scale(),
) -> list[dict[str, Any]]:
    """Each of ``held_out`` through :func:`simulate_run`, predicted by a model trained on every one of ``files``
    but it (by file name).

    A run that cannot be planned (e.g. a predicted task larger than any machine) is kept as
    ``{"workflow", "family", "simulated", "error"}``, not dropped.
    """
    attempts: dict[Path, list[TaskAttempt]] = {path: attempts_from_wfformat(path) for path in files}
    runs = []
    for path in held_out:
        try:
            predictor = trained_without(attempts, path, scale)
            result = simulate_run(predictor, path, catalog, catalog_label, settings, repair, scale)
        except AgoraError as exc:
            result = {"workflow": path.stem, "family": family_of(path), "simulated": True, "error": str(exc)}
        result = rounded(result, 6)
        runs.append(result)
        if progress is not None:
            progress(result)
    return runs


def _under_deadline(
    workflow: Workflow, catalog: Catalog, label: str, settings: LoopSettings, deadline_s: float
) -> Plan | None:
    """The best plan for the settings' objective that meets ``deadline_s`` (aimed the settings' margin early),
    or None where none is found."""
    objective = Objective(settings.objective, deadline_s=deadline_s)
    try:
        return optimize(
            workflow, catalog, objective, label, settings.time_limit_s, deadline_margin=settings.deadline_margin
        )
    except InfeasibleObjectiveError:
        return None


def repaired_run(
    plan: Plan,
    predicted: Workflow,
    actual: Workflow,
    catalog: Catalog,
    settings: LoopSettings,
    repair: RepairStep | None = None,
) -> RepairedRun:
    """``plan`` run on ``actual`` with the executor's repairs, under ``settings``' slack, interval, cap and k."""
    return replay_with_repairs(
        plan,
        predicted,
        actual,
        catalog,
        slack=settings.slack,
        min_late_s=settings.min_late_s,
        interval_s=settings.interval_s,
        max_repairs=settings.max_repairs,
        repair=repair,
        run_k=settings.run_shrink_k,
    )

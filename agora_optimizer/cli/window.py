"""``agora optimize --dags SELECTOR... --window 24h``: every DAG run of a time window, planned together.

The runs come from the DAGs' own schedules (:mod:`agora_optimizer.integration.window_runs`), each
DAG's tasks with predicted runtimes and memory (as ``agora optimize airflow:DAG_ID``; runtimes at
``--runtime-quantile``, auto: p90 for a DAG whose runs have a deadline, else p50), each run's
deadline from ``[agora] deadlines`` or the DAG's ``DeadlineAlert``. They are planned together on the
catalog, whose counts they share (:func:`agora_optimizer.optimize.window.plan_jointly`), and, for
the report, each alone: in the order they start on what the ones before left, and each on the
whole catalog as if it were alone (which may exceed the counts together).

Written to ``--out DIR``: one plan of the spec per run (``DAG_ID@RUN_AFTER.plan.json``, times from
the run's start, the cost objective under the run's deadline) and ``window.json`` (the runs, the
ways side by side, the cost lower bound); with ``--gantt FILE``, the platform's window as one
chart of machines. ``--apply`` keeps each run's plan in the plan store as that run's own (by its
``run_after``: the executor runs the run's tasks at its placements, :mod:`agora_optimizer.executor.runs.plans`),
and puts each DAG's first run's plan in force as the DAG's current plan (the cluster policy's, at parse time).
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agora_optimizer.cli.common import json_ready, say
from agora_optimizer.cli.progress import progress_line, window_text
from agora_optimizer.errors import AgoraError
from agora_optimizer.io.documents import write_text_atomically
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Assignment, Objective, Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.optimize.window import RunPlan, UnplannableWindowError, WindowProgress, WindowRun, WindowSchedule
from agora_optimizer.predict.latency import PlatformLatency

if TYPE_CHECKING:
    from agora_optimizer.integration.window_runs import ScheduledRun
    from agora_optimizer.plans.store import PlanStore

JOINT_SHARE = 0.6  # of the time limit; the rest plans each run alone, for the report


class WindowPlanError(AgoraError):
    """The window's plans were written, but not every run meets its deadline."""


def parse_start(text: str | None) -> datetime:
    """``--window-start``: an ISO 8601 instant (UTC where no offset is given); now when not given."""
    if text is None:
        return datetime.now(UTC).replace(microsecond=0)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise AgoraError(
            f"--window-start: expected an ISO 8601 time such as 2026-12-03T00:00:00Z, got {text!r}"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def plan_window(
    selectors: list[str],
    window: str,
    start_text: str | None,
    catalog: Catalog,
    catalog_label: str,
    out_dir: Path,
    time_limit_s: float,
    *,
    dag_folder: Path | None = None,
    store: str | None = None,
    model: Path | None = None,
    apply: bool = False,
    plan_dir: Path | None = None,
    gantt: Path | None = None,
    platform_latency: str = "median",
    runtime_quantile: str | float = "auto",
    started: float | None = None,
    quiet: bool = False,
    deadline_margin: float = 0.0,
) -> dict[str, Any]:
    """Plan the window, write its plans and summary; the summary. Raises :class:`WindowPlanError`
    (after writing everything) when a run misses its deadline. ``started``: the ``time.perf_counter()``
    from which ``time_limit_s`` counts (default: now). Progress is shown on a terminal unless ``quiet``."""
    from agora_optimizer.integration.airflow_dag import predicted_dag_workflow
    from agora_optimizer.integration.window_runs import (
        check_window,
        dags_without_runs,
        parse_window,
        runs_in_window,
        select_dags,
    )
    from agora_optimizer.optimize.window import (
        aimed_runs,
        cost_lower_bound,
        plan_each_alone,
        plan_first_come,
        plan_jointly,
        with_runs,
    )
    from agora_optimizer.planning.bounds import makespan_lower_bound_s
    from agora_optimizer.predict.latency import statistic_of, with_platform_latency
    from agora_optimizer.predict.quantile_choice import quantile_label, quantile_reason, resolve_quantile

    started = time.perf_counter() if started is None else started
    statistic = statistic_of(platform_latency)
    window_s = parse_window(window)
    start = parse_start(start_text)
    check_window(start, window_s)  # before the DAG folder is parsed
    if gantt is not None:
        from agora_optimizer.gantt import check_chart_path

        check_chart_path(gantt)
    dags = select_dags(selectors, dag_folder)
    scheduled = runs_in_window(dags, start, window_s)
    idle = dags_without_runs(dags, scheduled, start, window_s)
    for dag_id, why in sorted(idle.items()):
        say(f"agora: DAG {dag_id} has no run in the window: {why}", err=True)
    if not scheduled:
        raise AgoraError(f"no DAG run in the window {start.isoformat()} + {window} ({', '.join(sorted(idle))})")
    workflows: dict[str, Workflow] = {}
    quantiles: dict[str, str] = {}  # each DAG's: p90 where its runs have a deadline (auto)
    for dag_id in sorted({r.dag_id for r in scheduled}):
        has_deadline = any(r.deadline_s is not None for r in scheduled if r.dag_id == dag_id)
        quantile = resolve_quantile(runtime_quantile, has_deadline)
        quantiles[dag_id] = quantile_label(quantile)
        workflows[dag_id], origin = predicted_dag_workflow(dag_id, catalog, dag_folder, store, model, quantile)
        say(f"agora: {dag_id}: predictions: {origin}", err=True)
        say(f"agora: {dag_id}: runtimes: predicted, at {quantile_reason(runtime_quantile, has_deadline)}", err=True)
    latency = _platform_latency(statistic, store, workflows, dag_folder)
    file_catalog, catalog = catalog, with_platform_latency(catalog, latency, statistic)  # each task's hold longer
    runs: list[WindowRun] = []
    by_name = {}  # each run's name: its scheduled run
    for item in scheduled:
        name = f"{item.dag_id}@{item.run_after.isoformat()}"
        if item.deadline_s is None and item.deadline_source:
            say(f"agora: {name}: no deadline: {item.deadline_source}", err=True)
        runs.append(WindowRun(name, workflows[item.dag_id], item.offset_s, item.deadline_s))
        by_name[name] = item
    past = [f"{r.name} ({by_name[r.name].deadline_source}: {r.deadline_s:+.0f} s)" for r in runs if _past(r.deadline_s)]
    if past:  # no plan meets it, and a plan's deadline is > 0: said before anything is planned or written
        raise AgoraError(
            f"{len(past)} DAG run(s) whose deadline is at or before their start: {'; '.join(past)}; "
            "give their DAGs a deadline in [agora] deadlines (dag_id=DURATION) or leave them out of --dags"
        )
    bounds = {r.name: makespan_lower_bound_s(r.workflow, catalog) for r in runs}
    impossible = {r.name for r in runs if r.deadline_s is not None and r.deadline_s < bounds[r.name] - 1e-6}
    cost_bound_usd = cost_lower_bound(runs, catalog)
    spent_s = time.perf_counter() - started
    if spent_s >= time_limit_s:  # said, not hidden: the planner gets a second for the runs' first schedules
        say(f"agora: {spent_s:.1f} s of --time-limit-s {time_limit_s:g} went before planning (start-up, the DAG "
            f"folder, predictions, bounds): the planner gets 1 s more; a limit above {spent_s + 1:.0f} s leaves it "
            "time", err=True)  # fmt: skip
    left = max(time_limit_s - spent_s, 1.0)
    aimed = aimed_runs(runs, catalog, deadline_margin, bounds)  # all three ways aim early; the plans keep the deadlines
    if any(a.deadline_s != r.deadline_s for a, r in zip(aimed, runs, strict=True)):
        say(f"agora: deadlines: aimed {deadline_margin:.0%} early (--deadline-margin), not before a run's bound",
            err=True)  # fmt: skip
    with progress_line(f"planning {len(runs)} runs", quiet=quiet) as show:
        joint = plan_jointly(
            aimed, catalog, left * JOINT_SHARE, progress=lambda s: show(window_text(s, cost_bound_usd))
        )
        joint = with_runs(joint, runs)
        best = WindowProgress("for the report: first come", joint.cost_usd, len(joint.late_runs))
        show(window_text(best, cost_bound_usd))
        first_come = with_runs(plan_first_come(aimed, catalog, left * (1 - JOINT_SHARE) / 4), runs)
        show(window_text(replace(best, stage="for the report: each alone"), cost_bound_usd))
        try:  # the report's third way; none where a run's deadline cannot be met even alone
            each = None if impossible else plan_each_alone(aimed, catalog, left * (1 - JOINT_SHARE) * 3 / 4)
            alone = None if each is None else with_runs(each, runs)
        except UnplannableWindowError:
            alone = None
    out_dir.mkdir(parents=True, exist_ok=True)
    from agora_optimizer.io.plan_file import write_plan

    rows: list[dict[str, Any]] = []
    documents = {
        plan.run.name: replace(
            _plan_document(plan, catalog, catalog_label, started),
            runtime_quantile=quantiles[by_name[plan.run.name].dag_id],
            workflow_source=f"airflow:{by_name[plan.run.name].dag_id}",
        )
        for plan in joint.plans
    }
    for plan in joint.plans:
        path = out_dir / f"{_file_name(plan.run.name)}.plan.json"
        write_plan(documents[plan.run.name], path)
        item = by_name[plan.run.name]
        rows.append(
            {
                "run": plan.run.name,
                "dag_id": item.dag_id,
                "run_after": item.run_after.isoformat(),
                "offset_s": item.offset_s,
                "deadline_s": item.deadline_s,
                "deadline_source": item.deadline_source,
                "runtime_quantile": quantiles[item.dag_id],
                "makespan_s": plan.makespan_s,
                "cost_usd": plan.cost_usd,
                "on_time": plan.on_time,
                "late_because": None if plan.on_time else _why_late(plan.run.name, bounds, impossible),
                "plan": str(path),
            }
        )
    summary: dict[str, Any] = {
        "window": {"start": start.isoformat(), "length_s": window_s},
        "catalog": catalog_label,
        "runs": rows,
        "dags_without_runs": idle,
        "cost_lower_bound_usd": cost_bound_usd,
        "ways": {way.method: way_summary(way, catalog) for way in (joint, first_come, alone) if way is not None},
        "platform_latency": latency.summary(file_catalog, statistic),
    }
    summary = json_ready(summary)  # strict JSON: a number that is not finite is null (n/a), never Infinity
    write_text_atomically(out_dir / "window.json", json.dumps(summary, indent=1, allow_nan=False) + "\n")
    # Each side effect is said as it is done: a failure after it (a plan store that cannot be written) never hides it.
    say(f"agora: {len(rows)} plan(s) and window.json written to {out_dir}", err=True)
    if gantt is not None or apply:  # the platform's machines: drawn, and kept for the agora view
        picture, dag_of = platform_plan(joint, catalog, catalog_label, started)
    if gantt is not None:
        from agora_optimizer.gantt import draw_gantt

        draw_gantt(picture, gantt, dag_of)
        say(f"agora: chart written to {gantt}", err=True)
    late = [r for r in summary["runs"] if not r["on_time"]]
    if late:  # the same reasons as window.json's late_because
        reasons = [
            f"{row['run']} (deadline {row['deadline_s']:.1f} s, best {row['makespan_s']:.1f} s: {row['late_because']})"
            for row in late
        ]
        raise WindowPlanError(
            f"{len(late)} DAG run(s) miss their deadline in the best plans found (written to {out_dir}): "
            + "; ".join(reasons)
        )
    if apply:
        from agora_optimizer.cli.plans import plan_store

        store_ = plan_store(plan_dir)
        kept = store_.save_window(window_document(summary, picture, dag_of))
        say(f"agora: window kept for the agora view in {kept}", err=True)
        apply_runs(store_, [(by_name[p.run.name], documents[p.run.name]) for p in joint.plans], workflows)
    return summary


def apply_runs(store: PlanStore, runs: list[tuple[ScheduledRun, Plan]], workflows: dict[str, Workflow]) -> None:
    """Keep each run's plan as its run plan (the executor runs its tasks so), and make each DAG's first run's
    plan the DAG's current plan (the policy routes its tasks from it when it parses the DAG)."""
    first: set[str] = set()
    for item, plan in sorted(runs, key=lambda pair: pair[0].run_after):
        workflow = workflows[item.dag_id]
        kept = store.save_run(item.dag_id, item.run_after, plan, workflow=workflow)
        if item.dag_id not in first:
            first.add(item.dag_id)
            stored = store.save(item.dag_id, plan, workflow=workflow)
            already = " already: no history entry added" if stored.unchanged else ""
            say(f"agora: plan in force for {stored.dag_id}{already} ({stored.path})", err=True)
        say(f"agora: run {item.dag_id}@{item.run_after.isoformat()} follows {kept.path}", err=True)


def window_document(summary: dict[str, Any], picture: Plan, dag_of: dict[str, str]) -> dict[str, Any]:
    """What the agora view shows of a window in force: its runs, the ways' costs, the platform's machines."""
    from agora_optimizer.plans.store import WINDOW_FORMAT

    machines = [
        {
            "dag_id": dag_of[a.task],
            "run": a.task.rsplit("/", 1)[0],
            "task": a.task.rsplit("/", 1)[1],
            "resource": a.resource,
            "machine": a.machine,
            "start_s": a.start_s,
            "end_s": a.end_s,
            "cores": a.cores,
            "memory_bytes": a.memory_bytes,
        }
        for a in picture.assignments
    ]
    created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"format": WINDOW_FORMAT, "created_at": created, **summary, "machines": machines}


def way_summary(schedule: WindowSchedule, catalog: Catalog) -> dict[str, Any]:
    from agora_optimizer.optimize.window import over_counts

    over = over_counts(schedule.plans, catalog)
    return {
        "cost_usd": schedule.cost_usd,
        "late_runs": schedule.late_runs,
        "over_counts": {name: {"peak": peak, "at_s": at} for name, (peak, at) in over.items()},
    }


def _plan_document(plan: RunPlan, catalog: Catalog, catalog_label: str, started: float) -> Plan:
    """A run's plan of the spec: the platform's latency planned in, each task's own duration written."""
    from agora_optimizer.optimize.optimize import build_plan
    from agora_optimizer.planning.problem import written_assignments

    objective = Objective(kind="cost", deadline_s=plan.run.deadline_s)
    written = written_assignments(plan.assignments, plan.run.workflow, catalog)
    return build_plan(plan.run.workflow, catalog, objective, catalog_label, written, "window:joint", started)


def _platform_latency(
    statistic: str, store: str | None, workflows: dict[str, Workflow], folder: Path | None
) -> PlatformLatency:
    """The latency each resource adds, learned from the trace store with every DAG's edges (the window's, and
    those of ``folder``'s other DAGs the store has traces of; the measured defaults where a type has too few
    samples)."""
    from agora_optimizer.integration.airflow_dag import learned_platform_latency

    edges = {dag_id: [(e.parent, e.child) for e in wf.edges] for dag_id, wf in workflows.items()}
    return learned_platform_latency(store, edges, statistic, folder)


def _why_late(run: str, bounds: dict[str, float], impossible: set[str]) -> str:
    """Why a run misses its deadline in the plans written: it cannot meet it even alone, or not beside the others."""
    if run in impossible:
        return f"even alone it needs at least {bounds[run]:.1f} s"
    return "the catalog's counts cannot hold it beside the others"


def _past(deadline_s: float | None) -> bool:
    """Whether a run's deadline is at or before its start (a ``FIXED_DATETIME`` alert's, for a late run)."""
    return deadline_s is not None and deadline_s <= 0


def _file_name(run: str) -> str:
    return "".join(c if c.isalnum() or c in "._-@" else "_" for c in run)


def platform_plan(
    schedule: WindowSchedule, catalog: Catalog, catalog_label: str, started: float
) -> tuple[Plan, dict[str, str]]:
    """The window as one plan of the platform's machines: every run's tasks at their time in the window,
    each lease on the first machine ``TYPE#N`` free over it (so at most ``count`` rows per type), and each
    task's category its DAG (the chart's colours). Not a plan to run: a picture of the window."""
    from agora_optimizer.optimize.optimize import build_plan
    from agora_optimizer.planning.leases import leases

    rows: dict[str, list[float]] = {}  # per type, when each machine row falls free
    moved: list[Assignment] = []
    categories: dict[str, str] = {}
    spans = [(lease, plan) for plan in schedule.plans for lease in leases(plan.assignments, catalog)]
    for lease, plan in sorted(spans, key=lambda item: item[0].start_s + item[1].run.offset_s):
        shift = plan.run.offset_s
        free = rows.setdefault(lease.resource.name, [])
        slot = next((i for i, end in enumerate(free) if end <= lease.start_s + shift + 1e-6), len(free))
        if slot == len(free):
            free.append(0.0)
        free[slot] = lease.end_s + shift
        for a in plan.assignments:
            if a.machine == lease.machine:
                task = f"{plan.run.name}/{a.task}"
                categories[task] = plan.run.name.split("@", 1)[0]
                start, end = a.start_s + shift, a.end_s + shift
                moved.append(
                    Assignment(task, a.resource, f"{a.resource}#{slot}", start, end, a.cores, a.memory_bytes, a.gpus)
                )
    nothing = Workflow.create("window", [], [])  # the picture names no workflow of its own
    picture = build_plan(nothing, catalog, Objective(kind="cost"), catalog_label, moved, "window:joint", started)
    return replace(picture, cost_usd=schedule.cost_usd), categories  # the runs' own leases, not the rows' spans

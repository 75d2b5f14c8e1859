"""``agora optimize``, ``validate`` and ``gantt``: make plans, check them against the model, draw them.

``agora pareto`` is :mod:`agora_optimizer.cli.pareto`; what both plan from is
:mod:`agora_optimizer.cli.plan_input`.

:func:`register` adds them to the ``agora`` app. Errors that are the input's fault are one line
on stderr and exit code 2 (:func:`agora_optimizer.cli.common.user_errors`); ``agora validate``
exits 1 when the plan breaks a rule.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agora_optimizer.cli.clock import command_started
from agora_optimizer.cli.common import (
    CatalogOpt,
    PlanCatalogOpt,
    check_option,
    out_console,
    plan_catalog,
    ranged,
    ratio_text,
    say,
    user_errors,
)
from agora_optimizer.cli.optimize_summary import deadline_aim, plan_summary, print_summary, spot_line
from agora_optimizer.cli.plan_input import (
    DagFolderOpt,
    MemoryOpt,
    ModelOpt,
    PlanInputArg,
    VerboseOpt,
    assumed_line,
    dag_id_of,
    latency_lines,
    load_plan_input,
    plan_workflow,
    quiet_logs,
    required_plan_workflow,
    stdout_to_stderr,
)
from agora_optimizer.cli.progress import planning_progress
from agora_optimizer.errors import AgoraError
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.plan_file import load_plan, write_plan
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Objective
from agora_optimizer.planning.deadline_aim import DEADLINE_MARGIN

if TYPE_CHECKING:
    from agora_optimizer.model.workflow import Workflow
    from agora_optimizer.predict.latency import PlatformLatency


class ObjectiveKind(StrEnum):
    time = "time"
    cost = "cost"
    balanced = "balanced"


class PlatformLatencyKind(StrEnum):
    median = "median"
    p90 = "p90"
    none = "none"


_TIME_LIMIT_HELP = "Wall-clock limit for the whole command: loading, bounding, planning and writing."
# Time kept back from the engines for writing the plan: measured 21 us a task (a 30,000-task plan in 0.63 s).
_WRITING_S_PER_TASK = 30e-6


def planning_time_s(time_limit_s: float, tasks: int) -> float:
    """The part of ``--time-limit-s`` (counted from the command's start) that may go before the plan is
    written: the limit less the time kept back for writing a plan of ``tasks`` tasks."""
    return time_limit_s - _WRITING_S_PER_TASK * tasks


def time_limit_line(time_limit_s: float, spent_s: float, tasks: int, method: str, predicted: bool = False) -> str:
    """The stderr line of a plan whose time limit left the engines no room: what went before planning
    (``spent_s``), what the plan is, and the least limit that would have left them some."""
    from agora_optimizer.optimize.portfolio import TIME_LIMIT_FALLBACK  # the engines' modules: not at start-up

    before = "start-up, loading, " + ("predicting, " if predicted else "") + "bounds, the one-type default"
    left_s = planning_time_s(time_limit_s, tasks) - spent_s
    if method == TIME_LIMIT_FALLBACK and left_s > 0:  # the engines had time, too little for one list schedule
        return (f"agora: the first list schedule did not finish in the {left_s:.1f} s that --time-limit-s "
                f"{time_limit_s:g} left after {spent_s:.1f} s of {before}: the plan is the one-type default; "
                "a longer limit gives a list schedule")  # fmt: skip
    what = "the first schedule found"
    if method == TIME_LIMIT_FALLBACK:
        what = "the one-type default (the first list schedule did not fit in the time left)"
    floor_s = spent_s + _WRITING_S_PER_TASK * tasks
    return (f"agora: {spent_s:.1f} s of --time-limit-s {time_limit_s:g} went before planning ({before}): the plan "
            f"is {what}; a limit above {floor_s:.1f} s leaves the engines time")  # fmt: skip


PlanWorkflowOpt = Annotated[
    Path | None,
    typer.Option("--workflow", "-w", help="The workflow the plan is for (default: the one the plan names)."),
]


def optimize(
    catalog: CatalogOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the plan (JSON); with --dags, a directory.")],
    workflow: PlanInputArg = None,  # type: ignore[assignment]  # required unless --dags is given
    objective: Annotated[ObjectiveKind, typer.Option(help="What to minimise.")] = ObjectiveKind.balanced,
    alpha: Annotated[float, typer.Option(help=ranged("--alpha", "Weight of time in 'balanced'."))] = 0.5,
    deadline_s: Annotated[float | None, typer.Option(help=ranged("--deadline-s", "Makespan limit in seconds."))] = None,
    deadline_margin: Annotated[
        float,
        typer.Option(
            help=ranged(
                "--deadline-margin",
                "With --deadline-s, or each run's deadline with --dags: aim this share of it early, as repairs "
                "during a run do, for the platform's delays; where no plan ends by then, the earliest found.",
            )
        ),
    ] = DEADLINE_MARGIN,
    budget_usd: Annotated[float | None, typer.Option(help=ranged("--budget-usd", "Cost limit in USD."))] = None,
    time_limit_s: Annotated[float, typer.Option(help=ranged("--time-limit-s", _TIME_LIMIT_HELP))] = 60.0,
    default_memory_gib: MemoryOpt = 1.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON summary instead of a table.")] = False,
    queue_wait_model: Annotated[
        Path | None,
        typer.Option(
            help="A queue-wait model dir (agora queue train): no lease of a SLURM type begins before its "
            "predicted queue wait (a release time; the wait is not billed)."
        ),
    ] = None,
    queue_time_limit_s: Annotated[
        float,
        typer.Option(
            help=ranged(
                "--queue-time-limit-s", "Time limit a SLURM allocation would ask for, when predicting its wait."
            )
        ),
    ] = 3600.0,
    dag_folder: DagFolderOpt = None,
    store: Annotated[
        str | None,
        typer.Option(
            help="For airflow:DAG_ID: the trace store URL (default: [agora] trace_store_url). Also where the "
            "platform latency is learned (for a WfFormat WORKFLOW only when given)."
        ),
    ] = None,
    platform_latency: Annotated[
        PlatformLatencyKind,
        typer.Option(
            help="Add each resource's platform latency (task ready to running, plus done to slot free) to "
            "every task's duration: its median, p90, or none. Learned from the trace store, else the "
            "measured defaults; for airflow:DAG_ID, --dags, or a WfFormat WORKFLOW with --store (else none)."
        ),
    ] = PlatformLatencyKind.median,
    model: ModelOpt = None,
    runtime_quantile: Annotated[
        str,
        typer.Option(
            help="For predicted runtimes (airflow:DAG_ID, --dags): plan from their p50, p90, another quantile in "
            "[0.5, 1), or auto: p90 where a deadline is set (9 tasks in 10 end in time), else p50."
        ),
    ] = "auto",
    apply: Annotated[
        bool, typer.Option("--apply", help="For airflow:DAG_ID: also put the plan in force (agora plans apply).")
    ] = False,
    plan_dir: Annotated[
        Path | None, typer.Option(help="With --apply: the plan store [default: [agora] plan_dir].")
    ] = None,
    dags: Annotated[
        list[str] | None,
        typer.Option(
            "--dags",
            help="Instead of WORKFLOW: every run that these DAGs' schedules put in --window, planned together "
            "on the catalog's shared counts (tag:NAME or a DAG id; repeat or separate with commas).",
        ),
    ] = None,
    window: Annotated[str, typer.Option(help="With --dags: the window's length (24h, 90m, 3600s, 1d).")] = "24h",
    window_start: Annotated[
        str | None, typer.Option(help="With --dags: the window's start, ISO 8601 (UTC if no offset) [default: now].")
    ] = None,
    gantt: Annotated[
        Path | None, typer.Option(help="With --dags: draw the platform's window as one chart of machines.")
    ] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Plan WORKFLOW on CATALOG and write the plan to --out; or, with --dags, every run of a window."""
    from agora_optimizer.optimize.optimize import (
        aimed_problem,
        default_plan_of,
        one_type_default_assignments,
        optimize_problem,
    )
    from agora_optimizer.optimize.portfolio import TIME_LIMIT_FALLBACK
    from agora_optimizer.planning.problem import Problem, lower_bounds
    from agora_optimizer.predict.latency import statistic_of, with_platform_latency
    from agora_optimizer.predict.quantile_choice import AUTO, parse_quantile, quantile_label

    started = command_started()  # the time limit counts the whole command: loading, bounds, planning, writing
    with user_errors():
        quantile_choice = parse_quantile(runtime_quantile)
    if dags:
        _optimize_window(dags, window, window_start, catalog, out, time_limit_s, dag_folder, store, model, apply,
                         plan_dir, gantt, as_json, platform_latency.value, quantile_choice, verbose,
                         deadline_margin)  # fmt: skip
        return
    dag_id = None if workflow is None else dag_id_of(workflow)
    with user_errors(), quiet_logs(verbose, warnings=apply):
        if workflow is None:
            raise AgoraError("give a WORKFLOW (a WfFormat file or airflow:DAG_ID), or --dags with --window")
        if apply and dag_id is None:  # before anything is planned or written
            raise AgoraError("--apply puts a plan in force for an Airflow DAG: give WORKFLOW as airflow:DAG_ID")
        if quantile_choice != AUTO and dag_id is None:
            raise AgoraError(
                f"--runtime-quantile is for predicted runtimes (airflow:DAG_ID or --dags): {workflow} records its own"
            )
        for option, value in (
            ("--alpha", alpha),
            ("--deadline-margin", deadline_margin),
            ("--deadline-s", deadline_s),
            ("--budget-usd", budget_usd),
            ("--time-limit-s", time_limit_s),
            ("--default-memory-gib", default_memory_gib),
            ("--queue-time-limit-s", queue_time_limit_s),
        ):
            check_option(option, value)
        cat = load_catalog(catalog)
        if queue_wait_model is not None:
            cat = _with_predicted_queue_waits(cat, queue_wait_model, queue_time_limit_s)
        given = load_plan_input(workflow, cat, default_memory_gib=default_memory_gib, dag_folder=dag_folder,
                                store=store, model=model, quantile_choice=quantile_choice,
                                has_deadline=deadline_s is not None)  # fmt: skip
        wf = given.workflow
        goal = Objective(kind=objective.value, alpha=alpha, deadline_s=deadline_s, budget_usd=budget_usd)
        statistic = statistic_of(platform_latency.value)
        why_none = "--platform-latency none"
        if store is None and dag_id is None:
            statistic = "none"  # a WfFormat file planned offline: no Airflow run of it to learn from
            why_none = "a workflow file planned without --store"
        latency = _platform_latency(statistic, str(workflow), wf, store, dag_folder)
        planned = with_platform_latency(cat, latency, statistic)  # the file's catalog, each task's hold longer
        problem = Problem.create(wf, planned, goal)
        # Before the engines, whose time is what is left: the one-type default and the bounds of the file's catalog
        # (a written plan, each task's own duration and its latency only in the gaps, may lease a little less
        # than the planned holds, whose bounds the engines used).
        default_started = time.perf_counter()
        default = one_type_default_assignments(wf, planned) if wf.tasks else None
        baseline = None if default is None else default_plan_of(default, wf, planned, str(catalog), default_started)
        bounds = problem.bounds if planned is cat else lower_bounds(wf, cat, deadline_s)
        planning_s = planning_time_s(time_limit_s, len(wf.tasks))
        spent_s = time.perf_counter() - started
        with planning_progress(f"planning {len(wf.tasks)} tasks", goal, quiet=as_json) as progress:
            plan = optimize_problem(problem, str(catalog), planning_s, progress=progress, started=started,
                                    fallback=default, deadline_margin=deadline_margin)  # fmt: skip
        if wf.tasks and (spent_s >= planning_s or plan.solver.method == TIME_LIMIT_FALLBACK):  # said, not hidden
            say(time_limit_line(time_limit_s, spent_s, len(wf.tasks), plan.solver.method, predicted=bool(dag_id)),
                err=True)  # fmt: skip
        plan = replace(plan, workflow_source=given.source)  # validate, gantt and simulate read it from here
        if given.quantile is not None:  # the plan says which runtimes it was made from
            plan = replace(plan, runtime_quantile=quantile_label(given.quantile))
        summary = plan_summary(plan, baseline, bounds.makespan_s, bounds.cost_usd, out)
        summary["runtimes"] = given.runtimes
        if deadline_s is not None and wf.tasks:
            summary["deadline_aim"] = deadline_aim(plan, aimed_problem(problem, deadline_margin), deadline_margin)
        write_plan(plan, out)  # the summary's last line says so; the store below may fail, so it is said first
        if apply:
            from agora_optimizer.cli.plans import plan_store

            say(f"agora: plan written to {out}", err=True)

            stored = plan_store(plan_dir).save(str(dag_id), plan, workflow=wf)
            already = " already: no history entry added" if stored.unchanged else ""
            say(f"agora: plan in force for {stored.dag_id}{already} ({stored.path})", err=True)
    releases = {r.name: r.release_s for r in cat.resources if r.release_s > 0}
    if releases:  # the predicted queue waits: when each type's first lease may begin
        summary["release_s"] = releases
    summary["platform_latency"] = latency.summary(cat, statistic)
    summary["assumed"] = assumed_line(latency, cat, statistic, why_none)
    summary["details"] = latency_lines(latency, cat, statistic) if verbose else []
    if as_json:  # the lines are for people: the JSON has the numbers under "platform_latency"
        out_console.print_json(json.dumps({k: v for k, v in summary.items() if k != "details"}))
    else:
        print_summary(summary)


def _optimize_window(
    dags: list[str],
    window: str,
    window_start: str | None,
    catalog: Path,
    out: Path,
    time_limit_s: float,
    dag_folder: Path | None,
    store: str | None,
    model: Path | None,
    apply: bool,
    plan_dir: Path | None,
    gantt: Path | None,
    as_json: bool,
    platform_latency: str,
    runtime_quantile: str | float,
    verbose: bool,
    deadline_margin: float,
) -> None:
    """``--dags``: plan every run of the window together (:mod:`agora_optimizer.cli.window`)."""
    from agora_optimizer.cli.window import plan_window

    with user_errors(), quiet_logs(verbose, warnings=apply):
        check_option("--time-limit-s", time_limit_s)
        check_option("--deadline-margin", deadline_margin)
        cat = load_catalog(catalog)
        selectors = [part.strip() for item in dags for part in item.split(",") if part.strip()]
        with stdout_to_stderr():  # Airflow logs to stdout while it parses: stdout is the command's output
            summary = plan_window(selectors, window, window_start, cat, str(catalog), out, time_limit_s,
                                  dag_folder=dag_folder, store=store, model=model, apply=apply, plan_dir=plan_dir,
                                  gantt=gantt, platform_latency=platform_latency,
                                  runtime_quantile=runtime_quantile, started=command_started(),
                                  quiet=as_json, deadline_margin=deadline_margin)  # fmt: skip
    if as_json:
        out_console.print_json(json.dumps(summary))
        return
    bound = summary["cost_lower_bound_usd"]
    for row in summary["runs"]:
        deadline = "none" if row["deadline_s"] is None else f"{row['deadline_s']:.0f} s"
        say(f"{row['run']}: +{row['offset_s']:.0f} s, deadline {deadline}, makespan {row['makespan_s']:.0f} s, "
            f"cost {row['cost_usd']:.4f} USD")  # fmt: skip
    for way, numbers in summary["ways"].items():
        over = ", ".join(f"{k} {v['peak']} at once" for k, v in numbers["over_counts"].items())
        say(f"{way}: {numbers['cost_usd']:.4f} USD, cost / lower bound {ratio_text(numbers['cost_usd'], bound)}"
            f"{'; over the counts: ' + over if over else ''}")  # fmt: skip
    say(f"plans and window.json in {out}")


def _platform_latency(
    statistic: str, workflow: str, wf: Workflow, store: str | None, folder: Path | None
) -> PlatformLatency:
    """The latency each resource adds, learned from the trace store (an Airflow DAG's, or ``--store``), with the
    DAG's own edges and those of every other DAG of the DAG folder the store has traces of (for a WfFormat file,
    only of a ``--dag-folder`` given: planning a file reads no Airflow configuration); the measured defaults
    answer for types with too few samples, and for a WfFormat file without a store."""
    from agora_optimizer.predict.latency import PlatformLatency

    dag = workflow.startswith("airflow:")
    if store is None and not dag:
        return PlatformLatency({})  # a WfFormat file and no store: nothing to learn from
    from agora_optimizer.integration.airflow_dag import learned_platform_latency

    edges = {wf.name: [(e.parent, e.child) for e in wf.edges]} if dag else {}
    return learned_platform_latency(store, edges, statistic, folder, read_folder=dag or folder is not None)


def _with_predicted_queue_waits(catalog: Catalog, model_dir: Path, time_limit_s: float) -> Catalog:
    """The catalog with each SLURM type's predicted queue wait (read from the live queue) as its release time.

    The plan still names, and is billed by, the catalog file: ``boot_s`` is unchanged, and the wait
    only keeps the type's leases from beginning before it.
    """
    from agora_optimizer.queue_wait.catalog_delay import predict_catalog_waits, with_queue_wait
    from agora_optimizer.queue_wait.model_file import load_model
    from agora_optimizer.slurm.queue import read_snapshot

    waits = predict_catalog_waits(load_model(model_dir), catalog, read_snapshot(), time_limit_s)
    for name, wait_s in sorted(waits.items()):
        say(
            f"agora: predicted queue wait of {name}: {wait_s:.0f} s "
            "(a release time: no lease of it begins sooner; the wait is not billed)",
            err=True,
        )
    return with_queue_wait(catalog, waits)


def validate(
    plan: Annotated[Path, typer.Argument(help="A plan file (JSON).")],
    workflow: PlanWorkflowOpt = None,
    catalog: PlanCatalogOpt = None,
) -> None:
    """Check PLAN against every rule of the agora model; exit 1 on any violation."""
    from agora_optimizer.planning.validate import ensure_plan_matches, validate_plan

    with user_errors():
        loaded = load_plan(plan)
        # filled-in memory is the plan's to reserve: only recorded peaks bind
        wf = load_workflow(required_plan_workflow(plan, loaded, workflow))
        cat = plan_catalog(plan, loaded, catalog)
        ensure_plan_matches(loaded, wf)
        violations = validate_plan(loaded, wf, cat)
    for violation in violations:
        say(str(violation))
    if violations:
        say(f"{plan}: {len(violations)} violation(s)", err=True)
        raise typer.Exit(1)
    say(
        f"{plan}: valid ({len(loaded.assignments)} tasks, makespan {loaded.makespan_s:.3f} s, "
        f"cost {loaded.cost_usd:.6f} USD)"
    )
    if loaded.spot is not None:  # recomputed by the checker: within 0.5 % of these
        say(spot_line(loaded.spot))


def gantt(
    plan: Annotated[Path, typer.Argument(help="A plan file (JSON).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The chart to write (.png, .svg or .pdf).")],
    workflow: Annotated[
        Path | None,
        typer.Option(
            "--workflow",
            "-w",
            help="Colour by the workflow's categories (default: the one the plan names, if a file).",
        ),
    ] = None,
) -> None:
    """Draw PLAN as a Gantt chart: one row per machine, tasks coloured by category."""
    from agora_optimizer.gantt import draw_gantt

    with user_errors():
        loaded = load_plan(plan)
        categories = None
        made_from = plan_workflow(plan, loaded, workflow, none_for_a_dag=True)
        if made_from is not None:  # else one colour (a DAG's plan does not hold its tasks' categories)
            categories = {t.id: t.category for t in load_workflow(made_from).tasks}
        draw_gantt(loaded, out, categories)
    say(f"chart written to {out}")


def register(app: typer.Typer) -> None:
    """Add ``optimize``, ``validate`` and ``gantt`` to ``app``."""
    app.command()(optimize)
    app.command()(validate)
    app.command()(gantt)

"""``agora pareto``: the cost/makespan Pareto front of a workflow file or an Airflow DAG on a catalog.

The workflow is read as ``agora optimize`` reads it (:func:`agora_optimizer.cli.plan_input.load_plan_input`),
and ``--time-limit-s`` is the whole command's, as there. :func:`register` adds it to the ``agora`` app.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from agora_optimizer.cli.clock import command_started
from agora_optimizer.cli.common import CatalogOpt, check_option, data_table, out_console, ranged, say, user_errors
from agora_optimizer.cli.plan_input import (
    DagFolderOpt,
    MemoryOpt,
    ModelOpt,
    PlanInputArg,
    VerboseOpt,
    load_plan_input,
    quiet_logs,
)
from agora_optimizer.cli.progress import progress_line, sweep_text
from agora_optimizer.errors import AgoraError
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.plan_file import write_plan
from agora_optimizer.model.plan import Plan


def pareto(
    workflow: PlanInputArg,
    catalog: CatalogOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the front (JSON).")],
    plot: Annotated[Path | None, typer.Option(help="Also draw the front (.png, .svg or .pdf).")] = None,
    deadlines: Annotated[int, typer.Option(min=1, max=100, help="Deadlines tried between fastest and cheapest.")] = 8,
    time_limit_s: Annotated[
        float,
        typer.Option(help=ranged("--time-limit-s", "Wall-clock limit for the whole command, the front and its files.")),
    ] = 60.0,
    default_memory_gib: MemoryOpt = 1.0,
    save_plans: Annotated[
        Path | None,
        typer.Option(help="Also write every point of the front as a plan file into this directory (made if missing)."),
    ] = None,
    dag_folder: DagFolderOpt = None,
    store: Annotated[
        str | None, typer.Option(help="For airflow:DAG_ID: the trace store URL (default: [agora] trace_store_url).")
    ] = None,
    model: ModelOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Trace the cost/makespan Pareto front of WORKFLOW on CATALOG."""
    from agora_optimizer.optimize.pareto import front_plans, pareto_front, plot_front, write_front
    from agora_optimizer.optimize.portfolio import TIME_LIMIT_FALLBACK

    started = command_started()  # the time limit counts the whole command
    with user_errors(), quiet_logs(verbose):
        check_option("--time-limit-s", time_limit_s)
        check_option("--default-memory-gib", default_memory_gib)
        cat = load_catalog(catalog)
        given = load_plan_input(
            workflow, cat, default_memory_gib=default_memory_gib, dag_folder=dag_folder, store=store, model=model
        )
        wf = given.workflow
        if save_plans is not None:
            _make_plan_directory(save_plans)  # before the front's minute, not after
        if plot is not None:  # a bad file name fails now; and loading matplotlib (0.6 s) is counted before the sweep
            from agora_optimizer.gantt import check_chart_path

            check_chart_path(plot)
        with progress_line(f"pareto front of {len(wf.tasks)} tasks") as show:
            front = pareto_front(wf, cat, str(catalog), deadlines=deadlines, time_limit_s=time_limit_s,
                                 started=started, progress=lambda state: show(sweep_text(state)))  # fmt: skip
        if front.candidates and all(p.method == TIME_LIMIT_FALLBACK for p in front.candidates):  # said, not hidden
            say(f"agora: --time-limit-s {time_limit_s:g} left the sweep no time for a schedule (loading, bounds and "
                "the one-type default went first): the front is the one-type default", err=True)  # fmt: skip
        if plot is not None:
            plot_front(front, plot)
        plan_files = None
        if save_plans is not None:
            plans = [replace(plan, workflow_source=given.source) for plan in front_plans(front, wf, cat)]
            plan_files = _save_front_plans(plans, save_plans)
        write_front(front, out, plan_files)
    title = f"{front.workflow}: {len(front.points)} plans on the front ({len(front.candidates)} tried)"
    rows = [
        [f"{point.makespan_s:,.1f}", f"{point.cost_usd:.4f}", point.method, *((plan_files[i],) if plan_files else ())]
        for i, point in enumerate(front.points)
    ]
    columns = ("makespan (s)", "cost (USD)", "method", *(("plan",) if plan_files else ()))
    out_console.print(data_table(title, columns, rows))
    say(f"assumed: no platform latency (the front plans each task's own duration); runtimes: {given.runtimes}")
    say(f"front written to {out}" + (f", chart to {plot}" if plot else ""))
    if save_plans is not None:
        say(f"{len(front.points)} plans written to {save_plans}")


def _make_plan_directory(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AgoraError(f"--save-plans {directory}: cannot make the directory ({exc.strerror or exc})") from None


def _save_front_plans(plans: list[Plan], directory: Path) -> list[str]:
    """Each plan as ``pareto-NN.json`` in ``directory`` (by increasing makespan); the file names.

    A file of an earlier front with the same name is replaced (each write is atomic).
    """
    names = []
    for i, plan in enumerate(plans, start=1):
        name = f"pareto-{i:02d}.json"
        write_plan(plan, directory / name)
        names.append(name)
    return names


def register(app: typer.Typer) -> None:
    """Add ``pareto`` to ``app``."""
    app.command()(pareto)

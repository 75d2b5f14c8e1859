"""The predictor's commands: ``agora train``, ``agora predict`` and ``agora simulate``.

:func:`register` adds them to a Typer app (the ``agora`` app does so); errors go through
:func:`agora_optimizer.cli.common.user_errors`: one line on stderr, exit code 2.
"""

from __future__ import annotations

import json
import logging
import statistics
from pathlib import Path
from typing import Annotated, Any

import typer

from agora_optimizer.cli.common import (
    CatalogOpt,
    PlanCatalogOpt,
    data_table,
    out_console,
    plan_catalog,
    say,
    user_errors,
)
from agora_optimizer.cli.plan_input import plan_workflow
from agora_optimizer.cli.progress import count_text, progress_line
from agora_optimizer.errors import InputFileError

log = logging.getLogger(__name__)


def _wfinstance_files(paths: list[Path]) -> list[Path]:
    """The JSON files named, and those directly inside the directories named, sorted."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(path.glob("*.json")))
        elif path.is_file():
            files.append(path)
        else:
            raise InputFileError(path, "no such file or directory")
    if not files:
        raise InputFileError(", ".join(map(str, paths)), "holds no WfFormat instance (*.json)")
    return files


def train(
    wfinstances: Annotated[
        list[Path] | None,
        typer.Option("--wfinstances", "-w", help="WfFormat instances to learn from: files or directories (repeat)."),
    ] = None,
    store: Annotated[
        str | None, typer.Option("--store", help="A trace store URL to learn from (see `traces`).")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Model directory to write.")] = None,
    catalog: Annotated[
        Path | None, typer.Option("--catalog", "-c", help="Catalog naming the types the traces ran on.")
    ] = None,
) -> None:
    """Train the runtime and memory predictor on past task attempts and save it to --out."""
    from agora_optimizer.io.catalog_file import load_catalog
    from agora_optimizer.predict.evaluation import group_cv_metrics
    from agora_optimizer.predict.model_store import default_model_dir, save_predictor
    from agora_optimizer.predict.predictor import Predictor
    from agora_optimizer.traces.records import TaskAttempt
    from agora_optimizer.traces.wfformat_import import import_wfformat

    with user_errors(), progress_line("train") as show:
        if not wfinstances and not store:
            raise InputFileError("agora train", "give --wfinstances FILES/DIRS and/or --store URL")
        attempts: list[TaskAttempt] = []
        sources: list[str] = []
        skipped = 0
        files = _wfinstance_files(wfinstances) if wfinstances else []
        for done, path in enumerate(files):
            show(count_text(done, len(files), "files read", rows=len(attempts)))
            result = import_wfformat(path)
            attempts.extend(result.attempts)
            skipped += len(result.skipped)
            sources.append(path.name)
        if store:
            from agora_optimizer.traces.store import TraceStore  # the trace store's own module

            show(f"reading the trace store ({len(attempts):,} rows from files)")
            with TraceStore(store) as traces:
                stored = traces.attempts()
            attempts.extend(stored)
            sources.append(f"store: {len(stored)} attempts")
        cat = load_catalog(catalog) if catalog else None
        show(f"fitting the predictor on {len(attempts):,} attempts")
        predictor = Predictor().fit(attempts, cat)

        def on_fold(fold: int, folds: int) -> None:
            show(f"scoring on held-out runs: the predictor of fold {fold + 1}/{folds}")

        metrics = group_cv_metrics(attempts, cat, on_fold=on_fold)
        directory = out or default_model_dir()
        save_predictor(predictor, directory, metrics=metrics, sources=sources)
    if skipped:
        say(f"skipped {skipped} task record(s) with bad values")
    say(
        f"trained on {predictor.training_rows['runtime']} attempts ({predictor.training_rows['memory']} with "
        f"memory) from {predictor.training_rows['runs']} runs; model written to {directory}"
    )
    quantiles = predictor.runtime_quantiles.summary()
    say(
        f"runtime quantiles: p50 {quantiles['pooled_p50']:.2f}x, p90 {quantiles['pooled_p90']:.2f}x the point "
        f"prediction (pooled over {quantiles['residuals']} errors on held-out runs; "
        f"{quantiles['categories_with_own_factors']} categories have their own)"
    )


def predict(
    workflow: Annotated[Path, typer.Argument(help="A WfFormat 1.4/1.5 workflow; runtimes and memory may be absent.")],
    catalog: CatalogOpt,
    model: Annotated[Path | None, typer.Option("--model", "-m", help="Model directory (default: packaged).")] = None,
    resource: Annotated[
        list[str] | None, typer.Option("--type", "-t", help="Only these resource types of the catalog (repeat).")
    ] = None,
    hints: Annotated[
        bool, typer.Option("--hints/--no-hints", help="Use runtimes and memory the file records as declared hints.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Predict each task's runtime on every resource type of the catalog, and its memory quantile."""
    from agora_optimizer.io.catalog_file import load_catalog
    from agora_optimizer.predict.model_store import default_model_dir, load_predictor
    from agora_optimizer.traces.wfformat_import import read_workflow_shape

    with user_errors():
        directory = model or default_model_dir()
        predictor = load_predictor(directory)
        shape = read_workflow_shape(workflow, hints=hints)
        cat = load_catalog(catalog)
        prediction = predictor.predict(shape, cat, resource)
    document: dict[str, Any] = {
        "workflow": prediction.workflow,
        "model": str(directory),
        "catalog": str(catalog),
        "resources": list(prediction.resources),
        "sources": prediction.sources(),
        "runtime_quantiles": predictor.has_runtime_quantiles,  # false: a model saved before them (p50 = p90)
        "tasks": [
            {
                "id": t.task_id,
                "category": t.category,
                "runtime_s": dict(t.runtime_s),
                "runtime_s_p50": t.runtime_s_p50,
                "runtime_s_p90": t.runtime_s_p90,
                "reference_runtime_s": t.reference_runtime_s,
                "memory_bytes": t.memory_bytes,
                "runtime_source": t.runtime_source,
                "runtime_model": t.runtime_model,  # per category: "trees" or "scaling" ("" for a hint)
                "memory_source": t.memory_source,
            }
            for t in prediction.tasks
        ],
    }
    if as_json:
        out_console.print_json(json.dumps(document))
        return
    rows = [
        [
            t.task_id,
            t.category,
            _span(t.runtime_s_p50),
            _span(t.runtime_s_p90),
            f"{t.memory_bytes / 2**20:,.1f}",
            f"{t.runtime_source}{f' ({t.runtime_model})' if t.runtime_model else ''}/{t.memory_source}",
        ]
        for t in prediction.tasks
    ]
    title = f"{prediction.workflow}: {len(prediction.tasks)} tasks, model {directory}"
    columns = ("task", "category", "p50 runtime (s)", "p90 runtime (s)", "memory (MiB)", "sources")
    out_console.print(data_table(title, columns, rows))
    say("runtimes: fastest..slowest type; p90: 9 runs in 10 take no longer (a declared hint is as declared)")


def _span(runtimes: dict[str, float]) -> str:
    """``fastest..slowest`` of a task's runtimes over the types."""
    times = list(runtimes.values())
    return f"{min(times):,.2f}..{max(times):,.2f}" if times else "-"


def simulate(
    plan: Annotated[Path, typer.Argument(help="A plan file (JSON), e.g. made from predictions.")],
    actual: Annotated[Path, typer.Option("--actual", "-a", help="The workflow with its true runtimes and memory.")],
    catalog: PlanCatalogOpt = None,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair", help="Re-plan the tasks not started yet whenever one ends late, as the executor does."
        ),
    ] = False,
    planned: Annotated[
        Path | None,
        typer.Option(
            "--planned",
            help="With --repair: the workflow the plan was made from (default: the file the plan names, else "
            "read from the plan's own durations).",
        ),
    ] = None,
    slack: Annotated[
        float, typer.Option("--slack", min=0.0, help="With --repair: late by more than this share of its duration.")
    ] = 0.2,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Replay PLAN with the actual runtimes and memory: makespan, cost, and tasks that would run out of memory."""
    from agora_optimizer.io.plan_file import load_plan
    from agora_optimizer.io.wfformat import load_workflow
    from agora_optimizer.predict.repair_replay import assumed_workflow, replay_with_repairs
    from agora_optimizer.predict.replay import replay

    repairs: list[dict[str, Any]] = []
    killed: list[str] = []  # with --repair: the attempts killed for memory (a task, once per kill)
    with user_errors():
        loaded = load_plan(plan)
        truth = load_workflow(actual)
        cat = plan_catalog(plan, loaded, catalog)
        if repair:
            planned = plan_workflow(plan, loaded, planned, "--planned", none_for_a_dag=True)
            made_from = load_workflow(planned) if planned else assumed_workflow(loaded, truth, cat)
            run = replay_with_repairs(loaded, made_from, truth, cat, slack=slack)
            result = run.replay
            repairs = [
                {"at_s": e.at_s, "late_task": e.late_task, "cause": e.cause, "moved_tasks": e.moved_tasks,
                 "forecast_makespan_s": e.forecast_makespan_s, "forecast_cost_usd": e.forecast_cost_usd}
                for e in run.repairs
            ]  # fmt: skip
            killed = [a.task for a in run.killed]
        else:
            result = replay(loaded, truth, cat)
    summary = result.summary()
    if repair:
        summary["repairs"] = repairs
        summary["killed_for_memory"] = killed
    if as_json:
        out_console.print_json(json.dumps(summary))
        return
    lines = [
        f"{result.workflow}: planned makespan {result.planned_makespan_s:,.1f} s, "
        f"cost {result.planned_cost_usd:.4f} USD",
        f"actual (replayed{', repaired' if repair else ''}): makespan {result.makespan_s:,.1f} s, "
        f"cost {result.cost_usd:.4f} USD",
    ]
    if repair:
        first = repairs[0] if repairs else None
        when = f", the first at {first['at_s']:,.1f} s ({first['late_task']} {first['cause']})" if first else ""
        lines.append(f"{len(repairs)} repair(s){when}")
        if killed:
            lines.append(
                f"{len(set(killed))} task(s) killed for memory and retried ({len(killed)} retries), their time counted"
            )
    if result.oom_tasks:
        worst = statistics.median(t.actual_bytes / max(t.reserved_bytes, 1) for t in result.oom_tasks)
        lines.append(
            f"{len(result.oom_tasks)} task(s) need more memory than the plan reserved and would be killed "
            f"(median need {worst:.2f}x the reservation); the times above assume they ran"
        )
    if result.unknown_memory_tasks:
        lines.append(f"{result.unknown_memory_tasks} task(s) have no recorded peak: their memory was not checked")
    for line in lines:
        say(line)


def register(app: typer.Typer) -> None:
    """Add ``train``, ``predict`` and ``simulate`` to ``app``."""
    app.command("train")(train)
    app.command("predict")(predict)
    app.command("simulate")(simulate)

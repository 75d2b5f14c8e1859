"""``agora runs``: record finished DAG runs, list the records, show one (with a planned-against-actual chart).

The store is ``--store URL`` or else ``[agora] trace_store_url`` (the trace store's database).
``--json`` prints JSON only on stdout. Errors are one line on stderr and exit code 2, as
everywhere in ``agora``. ``list`` and ``show`` only read: they import neither Airflow nor the
database layer until a store is there to read, and an SQLite store that does not exist yet is
reported in one line ("no runs recorded"), never created.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agora_optimizer.cli.common import (
    DagOpt,
    JsonOpt,
    command_group,
    data_table,
    number,
    out_console,
    ratio_text,
    say,
    user_errors,
)
from agora_optimizer.cli.traces import StoreOpt, store_to_read, store_url
from agora_optimizer.errors import AgoraError
from agora_optimizer.runs.record import DEFAULT_LIST_LIMIT, RUNNING, RunRecord

if TYPE_CHECKING:
    from agora_optimizer.runs.store import RunStore

runs_app = command_group("Run records: each DAG run's planned against actual makespan and cost.")


class RunNotFoundError(AgoraError):
    """No record of that DAG or run."""


@runs_app.command("record")
def record(
    dag: DagOpt = None,
    store: StoreOpt = None,
    plan_dir: Annotated[
        Path | None, typer.Option("--plan-dir", help="The plan store [default: [agora] plan_dir].")
    ] = None,
) -> None:
    """(Re)record every finished DAG run of Airflow's metadata database (idempotent: a record is replaced)."""
    from agora_optimizer import settings
    from agora_optimizer.plans.store import PlanStore, default_plan_store
    from agora_optimizer.runs.recorder import record_finished_runs
    from agora_optimizer.runs.store import RunStore

    with user_errors(), RunStore(store_url(store)) as run_store:
        plans = PlanStore(plan_dir) if plan_dir is not None else default_plan_store()
        records = record_finished_runs(run_store, plans, settings.configured_catalog().by_name, dag_id=dag)
        where = run_store.masked_url
    planned = sum(1 for r in records if r.planned)
    say(f"recorded {len(records)} finished run(s) ({planned} planned) in {where}")


@runs_app.command("list")
def list_runs(
    dag: DagOpt = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many runs.")] = DEFAULT_LIST_LIMIT,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The recorded runs, newest first: planned against actual makespan and cost, repairs."""
    with user_errors():
        url, run_store = _existing_store(store)
        if run_store is None:
            records: list[RunRecord] = []
            where = url
        else:
            with run_store:
                records = run_store.list(dag_id=dag, limit=limit)
                where = run_store.masked_url
        if dag is not None and not records:
            raise RunNotFoundError(f"no recorded run of DAG {dag!r} in {where}")
    if as_json:
        typer.echo(json.dumps([_summary(r) for r in records]))
        return
    if not records:
        say(f"no runs recorded in {where}")
        return
    columns = ("dag", "run", "state", "plan", "makespan plan (s)", "makespan (s)", "makespan ratio",
               "cost plan (USD)", "cost (USD)", "cost ratio", "repairs")  # fmt: skip
    rows = [
        [
            r.dag_id,
            r.run_id,
            r.state,
            r.plan_version or "-" if r.planned else "none",
            number(r.planned_makespan_s, "{:,.1f}"),
            number(r.actual_makespan_s, "{:,.1f}"),
            ratio_text(r.actual_makespan_s, r.planned_makespan_s, "{:.2f}"),
            number(r.planned_cost_usd, "{:.4f}"),
            number(r.actual_cost_usd, "{:.4f}"),
            ratio_text(r.actual_cost_usd, r.planned_cost_usd, "{:.2f}"),
            str(len(r.repairs)),
        ]
        for r in records
    ]
    right = [c for c in columns if "(" in c or "ratio" in c or c == "repairs"]
    # At 80 columns, the figures against the plan before the plan's own and the run's state.
    drop = ("makespan plan (s)", "cost plan (USD)", "plan", "repairs", "state")
    table = data_table(f"{len(records)} run(s)", columns, rows, right=right, drop=drop, fold=("dag", "run"))
    out_console.print(table)


@runs_app.command("show")
def show(
    dag_id: Annotated[str, typer.Argument(help="The DAG.")],
    run_id: Annotated[str, typer.Argument(help="The DAG run's id.")],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    chart: Annotated[
        Path | None, typer.Option("--chart", help="Also draw planned against actual (.png, .svg or .pdf).")
    ] = None,
) -> None:
    """One run's record, task by task, with its forecast (expected end and cost at its last re-plan); a run still
    going shows its repairs and forecast so far. ``--chart FILE`` draws the planned bars over the actual ones."""

    with user_errors():
        if chart is not None:
            from agora_optimizer.gantt import check_chart_path

            check_chart_path(chart)  # a bad suffix fails before the store is opened
        url, run_store = _existing_store(store)
        if run_store is None:
            raise RunNotFoundError(f"no record of DAG {dag_id!r} in {url} (no runs recorded)")
        with run_store:
            found = run_store.current(dag_id, run_id)  # a run still going: its repairs and forecast so far
            if found is None:
                known = run_store.list(dag_id=dag_id, limit=1)
                what = f"run {run_id!r} of DAG {dag_id!r}" if known else f"DAG {dag_id!r}"
                raise RunNotFoundError(f"no record of {what} in {run_store.masked_url}")
        if chart is not None:
            from agora_optimizer.runs.chart import draw_run_gantt

            draw_run_gantt(found, chart)
    if as_json:
        typer.echo(json.dumps(found.to_json()))
    else:
        _print_record(found)
    if chart is not None:
        say(f"chart written to {chart}", err=True)


def _existing_store(store: str | None) -> tuple[str, RunStore | None]:
    """The URL of the store to read and the store opened; None when there is no store there yet."""
    url, there = store_to_read(store)
    if not there:
        return url, None
    from agora_optimizer.runs.store import RunStore

    return url, RunStore(url)


def _print_record(r: RunRecord) -> None:
    if r.state == RUNNING:
        _print_in_progress(r)
        return
    planned = f"plan {r.plan_version}" if r.planned else "unplanned"
    expected = r.planned_expected_cost_usd
    say(f"{r.dag_id} {r.run_id}: {r.state}, {planned}")
    say(
        f"makespan {number(r.actual_makespan_s, '{:,.1f}')} s (planned {number(r.planned_makespan_s, '{:,.1f}')}, "
        f"ratio {ratio_text(r.actual_makespan_s, r.planned_makespan_s, '{:.2f}')})"
    )
    say(
        f"cost {r.actual_cost_usd:.4f} USD (planned {number(r.planned_cost_usd, '{:.4f}')}, "
        f"ratio {ratio_text(r.actual_cost_usd, r.planned_cost_usd, '{:.2f}')}"
        + (f"; expected with spot interruptions {expected:.4f}" if expected is not None else "")
        + ")"
    )
    columns = ("task", "try", "state", "planned machine", "planned (s)", "actual machine", "actual (s)", "late (s)")
    rows = []
    for t in r.tasks:
        late = None if t.actual_start_s is None or t.planned_start_s is None else t.actual_start_s - t.planned_start_s
        rows.append(
            [
                t.key,
                str(t.try_number or "-"),
                t.state,
                t.planned_machine or t.planned_resource or "-",
                _span(t.planned_start_s, t.planned_end_s),
                t.actual_machine or t.actual_resource or "-",
                _span(t.actual_start_s, t.actual_end_s),
                number(late, "{:+,.1f}"),
            ]
        )
    right = [c for c in columns if "(" in c or c == "try"]
    drop = ("try", "planned machine", "late (s)", "state")  # at 80 columns: where and when it ran, first
    fold = ("task", "actual machine", "planned machine")
    out_console.print(data_table(f"{len(r.tasks)} task(s)", columns, rows, right=right, drop=drop, fold=fold))
    for lease in r.leases:
        say(
            f"lease {lease.machine or '(attempt)'} on {lease.resource or '?'}: "
            f"{_span(lease.start_s, lease.end_s)} s, {lease.cost_usd:.4f} USD ({lease.source})"
        )
    _print_repairs(r)


def _print_in_progress(r: RunRecord) -> None:
    """A run not recorded yet: what its repairs said so far."""
    say(f"{r.dag_id} {r.run_id}: running, not recorded yet; {len(r.repairs)} repair(s) so far")
    _print_repairs(r)


def _print_repairs(r: RunRecord) -> None:
    forecast = r.forecast
    if forecast is not None:
        say(f"forecast: {forecast.text()}")
    for repair in r.repairs:
        tasks = ", ".join(repair.tasks) or "-"
        say(f"repair at {repair.at_s:,.1f} s: {repair.reason} ({tasks}) {repair.detail}")
    for note in r.notes:
        say(f"note: {note}")


def _summary(r: RunRecord) -> dict[str, Any]:
    """A record without its task table and leases (``list --json``)."""
    data = r.to_json()
    for name in ("tasks", "leases"):
        data.pop(name)
    return data


def _span(start: float | None, end: float | None) -> str:
    return "-" if start is None or end is None else f"{start:,.1f}-{end:,.1f}"

"""``agora traces``: fill the trace store from Airflow, list what it holds, summarise it per task.

The store is ``--store URL`` or else ``[agora] trace_store_url`` from Airflow's config
(``sqlite:///$AIRFLOW_HOME/agora/traces.db`` by default). Errors are one line on
stderr and exit code 2, as everywhere in ``agora``. ``agora runs`` shares the store option.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from agora_optimizer.cli.common import DagOpt, JsonOpt, command_group, data_table, number, out_console, say, user_errors
from agora_optimizer.cli.progress import count_text, progress_line
from agora_optimizer.traces.records import ATTEMPT_STATES, TaskAttempt

traces_app = command_group("Task-attempt traces: import them from Airflow, list them, summarise them.")

StoreOpt = Annotated[
    str | None,
    typer.Option("--store", help="Trace store URL (default: [agora] trace_store_url, or SQLite in $AIRFLOW_HOME)."),
]
MAX_SKIPS_SHOWN = 10


@traces_app.command("import-airflow")
def import_airflow(
    api_url: Annotated[str, typer.Option("--api-url", help="Airflow's API server, e.g. http://localhost:8080.")],
    user: Annotated[str | None, typer.Option("--user", help="User name for POST /auth/token.")] = None,
    password: Annotated[
        str | None, typer.Option("--password", envvar="AGORA_AIRFLOW_PASSWORD", help="Password (or the env var).")
    ] = None,
    dag: DagOpt = None,
    store: StoreOpt = None,
) -> None:
    """Import every ended try of every task instance from a running Airflow's REST API."""
    from agora_optimizer.traces.airflow_import import import_airflow_history
    from agora_optimizer.traces.store import TraceStore

    with user_errors(), progress_line("traces import-airflow") as show:
        show(f"reading the task instances of {api_url}")
        found = import_airflow_history(api_url, user, password, dag_id=dag)
        show(f"{found.task_instances:,} task instances read; writing {len(found.attempts):,} rows")
        with TraceStore(store_url(store)) as trace_store:
            report = trace_store.add(found.attempts)
            where = trace_store.masked_url
    for problem in [*found.skipped, *report.skipped][:MAX_SKIPS_SHOWN]:
        say(f"agora: skipped: {problem}", err=True)
    skipped = len(found.skipped) + report.skipped_count
    if not found.attempts and not found.skipped:
        say(
            f"agora: warning: {found.api_url} lists no ended task instance ({found.task_instances} listed); "
            "nothing imported",
            err=True,
        )
    say(
        f"imported {report.written} attempt(s) from {found.task_instances} task instance(s) of {found.api_url} "
        f"into {where}; {skipped} skipped as bad, {found.not_ended} not ended"
    )


@traces_app.command("import")
def import_files(
    files: Annotated[list[Path], typer.Argument(help="WfFormat 1.4/1.5 instances (JSON) with recorded executions.")],
    store: StoreOpt = None,
) -> None:
    """Import the recorded task executions of WfFormat files (e.g. WfCommons WfInstances), one DAG per file."""
    from agora_optimizer.traces.store import TraceStore
    from agora_optimizer.traces.wfformat_import import ImportResult, import_wfformat

    with user_errors(), progress_line("traces import") as show:
        found: list[ImportResult] = []
        for done, path in enumerate(files):  # every file read before anything is written
            show(count_text(done, len(files), "files read", rows=sum(len(result.attempts) for result in found)))
            found.append(import_wfformat(path))
        attempts = [a for result in found for a in result.attempts]
        show(f"{len(files)}/{len(files)} files read; writing {len(attempts):,} rows")
        with TraceStore(store_url(store)) as trace_store:
            report = trace_store.add(attempts)
            where = trace_store.masked_url
    problems = [*(p for result in found for p in result.skipped), *report.skipped]
    for problem in problems[:MAX_SKIPS_SHOWN]:
        say(f"agora: skipped: {problem}", err=True)
    say(f"imported {report.written} attempt(s) from {len(files)} file(s) into {where}; {len(problems)} skipped as bad")


@traces_app.command("list")
def list_attempts(
    dag: DagOpt = None,
    task: Annotated[str | None, typer.Option("--task", help="Only this task id.")] = None,
    state: Annotated[str | None, typer.Option("--state", help=f"Only one state: {', '.join(ATTEMPT_STATES)}.")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the stored attempts, oldest first."""
    from agora_optimizer.errors import FieldError

    with user_errors():
        if state is not None and state not in ATTEMPT_STATES:
            raise FieldError("--state", "state", f"must be one of {', '.join(ATTEMPT_STATES)}, got {state!r}")
        url, there = store_to_read(store)
        attempts = []
        if there:
            from agora_optimizer.traces.store import TraceStore

            with TraceStore(url) as trace_store:
                attempts, url = trace_store.attempts(dag_id=dag, task_id=task, state=state), trace_store.masked_url
    if as_json:
        out_console.print_json(json.dumps([_jsonable(a) for a in attempts]))
        return
    if not attempts:
        say(f"no attempts recorded in {url}" + ("" if all(x is None for x in (dag, task, state)) else " that match"))
        return
    columns = ("attempt", "state", "resource", "host", "runtime (s)", "peak RSS (MiB)", "CPU (s)")
    rows = [
        [
            a.key,
            a.state,
            a.resource_type or "-",
            a.host or "-",
            number(a.runtime_s, "{:,.2f}"),
            number(None if a.peak_rss_bytes is None else a.peak_rss_bytes / 2**20, "{:,.1f}"),
            number(a.cpu_time_s, "{:,.2f}"),
        ]
        for a in attempts
    ]
    right = [c for c in columns if "(" in c]
    drop, fold = ("host", "CPU (s)", "peak RSS (MiB)"), ("attempt",)  # at 80 columns: what ran where, for how long
    out_console.print(data_table(f"{len(attempts)} attempt(s)", columns, rows, right=right, drop=drop, fold=fold))


@traces_app.command("stats")
def stats(dag: DagOpt = None, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """Per task: attempts, failures, mean runtime, largest peak RSS, mean CPU time."""
    with user_errors():
        url, there = store_to_read(store)
        rows, total = [], 0
        if there:
            from agora_optimizer.traces.store import TraceStore

            with TraceStore(url) as trace_store:
                rows, total, url = trace_store.stats(dag_id=dag), trace_store.count(), trace_store.masked_url
    if as_json:
        out_console.print_json(json.dumps({"attempts": total, "tasks": [asdict(r) for r in rows]}))
        return
    if not rows:
        say(f"no attempts recorded in {url}" + ("" if dag is None else f" of DAG {dag!r}"))
        return
    columns = ("dag", "task", "attempts", "failed", "mean runtime (s)", "max peak RSS (MiB)", "mean CPU (s)")
    cells = [
        [
            r.dag_id,
            r.task_id,
            str(r.attempts),
            str(r.failed),
            number(r.mean_runtime_s, "{:,.2f}"),
            number(None if r.max_peak_rss_bytes is None else r.max_peak_rss_bytes / 2**20, "{:,.1f}"),
            number(r.mean_cpu_time_s, "{:,.2f}"),
        ]
        for r in rows
    ]
    title = f"{total} attempt(s) of {len(rows)} task(s)"
    table = data_table(title, columns, cells, right=columns[2:], drop=("mean CPU (s)",), fold=("dag", "task"))
    out_console.print(table)


def store_url(explicit: str | None) -> str:
    """``--store`` if given, else the configured trace store (``agora runs`` uses the same)."""
    if explicit:
        return explicit
    from agora_optimizer.traces.store import default_store_url

    return default_store_url()


def store_to_read(explicit: str | None) -> tuple[str, bool]:
    """The URL of the store a command that only reads opens (``--store``, else the trace store in effect,
    read without importing Airflow), and whether there is one: False for an SQLite file that does not
    exist, which such a command reports as empty instead of creating it (``agora runs`` uses the same)."""
    from agora_optimizer import settings

    found = settings.in_effect("trace_store_url") if explicit is None else settings.InEffect(explicit, "--store")
    if found.meant:  # sqlite:///$AIRFLOW_HOME/agora/traces.db: no URL parser (SQLAlchemy) needed for its file
        path: Path | None = Path(found.value.removeprefix("sqlite:///"))
    else:
        from agora_optimizer.database import sqlite_file

        path = sqlite_file(found.value)
    return found.value, path is None or path.is_file()


def _jsonable(attempt: TaskAttempt) -> dict[str, Any]:
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in asdict(attempt).items()}

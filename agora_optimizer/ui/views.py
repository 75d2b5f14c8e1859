"""The HTML pages and charts of the agora view (not in the OpenAPI schema: the JSON API is).

``/`` lists the plans, ``/dags/{dag_id}`` shows one (Gantt chart, Pareto front, tasks
predicted against actual, plan history, re-optimize button), ``/dags/{dag_id}/runs`` its recorded
runs planned against actual ("Plan vs actual"), ``/traces`` is the trace table, ``/platform`` the last
window of many DAG runs in force (``agora optimize --dags ... --apply``) as one chart of machines.
The pages are rendered on the server from the same data as the API (:mod:`.queries`);
long tables and the Gantt chart's machines come a page at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Query, Request, Response, status
from fastapi.responses import HTMLResponse

from agora_optimizer.traces.records import ATTEMPT_STATES
from agora_optimizer.ui import queries, run_records
from agora_optimizer.ui.api import Limit, Offset, RunCount, RunId, Text, TraceFilterDep
from agora_optimizer.ui.assets import SCRIPT, STYLE
from agora_optimizer.ui.auth import ReadableDag, User, UserDep, authorized_dag_ids, csrf_token, is_authorized_dag
from agora_optimizer.ui.pages import render, trusted_svg
from agora_optimizer.ui.plans import PlanFile, plan_reader
from agora_optimizer.ui.svg import PlotPoint, esc, gantt_svg, pareto_svg, run_gantt_svg

MachinePage = Annotated[int, Query(ge=0, le=1_000_000, description="Page of the Gantt chart's machines.")]
SVG = "image/svg+xml"

router = APIRouter(include_in_schema=False)


def base_path(request: Request) -> str:
    """Where the app is mounted (``/agora``, behind Airflow's base path if any)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def common(request: Request, user: User) -> dict[str, Any]:
    return {"base": base_path(request), "csrf": csrf_token(user), "user_name": str(user.get_name())}


def url_maker(path: str, **fixed: Any) -> Callable[..., str]:
    """``make(offset=50)``: ``path`` with the fixed query parameters and these, empty ones left out."""

    def make(offset: int | None = None, **changed: Any) -> str:
        params = {**fixed, **changed, **({} if offset is None else {"offset": offset})}
        query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
        return f"{path}?{query}" if query else path

    return make


@router.get("/", response_class=HTMLResponse)
def index(request: Request, user: UserDep) -> HTMLResponse:
    dags = queries.dag_list(user).dags
    return HTMLResponse(render("index.html", **common(request, user), dags=dags))


@router.get("/dags/{dag_id}", response_class=HTMLResponse)
def dag_page(
    request: Request,
    dag_id: ReadableDag,
    user: UserDep,
    offset: Offset = 0,
    limit: Limit = 50,
    task: Text = None,
    machine_page: MachinePage = 0,
) -> HTMLResponse:
    entry = plan_reader().current(dag_id)
    path = f"{base_path(request)}/dags/{dag_id}"
    context: dict[str, Any] = {
        **common(request, user),
        "dag_id": dag_id,
        "can_reoptimize": is_authorized_dag(user, dag_id, "PUT"),
        "summary": None,
        "history": queries.history(dag_id, 0, 10),
        "task_filter": task,
        "dag_url": url_maker(path, task=task, offset=offset, limit=limit),
        "tasks_url": url_maker(path, task=task, limit=limit, machine_page=machine_page),
    }
    if entry is not None:
        gantt = gantt_svg(entry.plan.assignments, machine_page)
        context |= {
            "summary": queries.summary(entry, context["can_reoptimize"]),
            "gantt": gantt,
            "gantt_svg": trusted_svg(gantt.svg),
            "pareto_svg": _ready_pareto(entry),
            "tasks": queries.task_page(entry, offset, limit, task),
        }
    return HTMLResponse(render("dag.html", **context))


def _ready_pareto(entry: PlanFile) -> Any:
    answer = queries.pareto(entry)
    return trusted_svg(_pareto_chart(entry.dag_id, answer)) if answer.status == "ready" else None


def _pareto_chart(dag_id: str, answer: Any) -> str:
    def point(p: Any) -> PlotPoint:
        return PlotPoint(p.makespan_s, p.cost_usd, p.label)

    return pareto_svg(
        [point(p) for p in answer.points],
        point(answer.chosen),
        point(answer.default) if answer.default else None,
        point(answer.lower_bound) if answer.lower_bound else None,
        title=dag_id,
    )


@router.get("/dags/{dag_id}/gantt.svg")
def gantt(dag_id: ReadableDag, machine_page: MachinePage = 0) -> Response:
    return Response(gantt_svg(queries.current_plan(dag_id).plan.assignments, machine_page).svg, media_type=SVG)


@router.get("/dags/{dag_id}/pareto.svg")
def pareto(dag_id: ReadableDag) -> Response:
    """The front when ready (200); while it is computed (202) or when there is none (404), a note."""
    answer = queries.pareto(queries.current_plan(dag_id))
    if answer.status == "ready":
        return Response(_pareto_chart(dag_id, answer), media_type=SVG)
    code = status.HTTP_202_ACCEPTED if answer.status == "computing" else status.HTTP_404_NOT_FOUND
    note = "computing the front..." if answer.status == "computing" else f"no front: {answer.reason}"
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="640" height="40" font-family="sans-serif" font-size="12">'
        f'<text x="8" y="24">{esc(note)}</text></svg>'
    )
    return Response(svg, status_code=code, media_type=SVG)


@router.get("/dags/{dag_id}/runs", response_class=HTMLResponse)
def runs_page(
    request: Request,
    dag_id: ReadableDag,
    user: UserDep,
    limit: RunCount = run_records.DEFAULT_RUNS,
    run_id: RunId = None,
    machine_page: MachinePage = 0,
) -> HTMLResponse:
    view = run_records.load(dag_id, limit, run_id)
    path = f"{base_path(request)}/dags/{dag_id}/runs"
    context: dict[str, Any] = {
        **common(request, user),
        "dag_id": dag_id,
        "page": run_records.page(view),
        "runs_url": url_maker(path, limit=limit),
        "run_url": url_maker(path, limit=limit, run_id=run_id),
        "gantt": None,
    }
    if view.selected is not None:
        gantt = run_gantt_svg(view.selected, machine_page)
        context |= {"gantt": gantt, "gantt_svg": trusted_svg(gantt.svg)}
    return HTMLResponse(render("runs.html", **context))


@router.get("/dags/{dag_id}/run-gantt.svg")
def run_gantt(dag_id: ReadableDag, run_id: RunId = None, machine_page: MachinePage = 0) -> Response:
    """Planned over actual bars per machine of the run ``run_id`` (default the newest); 404 without runs."""
    view = run_records.load(dag_id, 1, run_id)
    if view.selected is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"DAG {dag_id} has no recorded runs yet")
    return Response(run_gantt_svg(view.selected, machine_page).svg, media_type=SVG)


@router.get("/platform", response_class=HTMLResponse)
def platform_page(request: Request, user: UserDep, machine_page: MachinePage = 0) -> HTMLResponse:
    """The last window of many DAG runs in force: the platform's machines as one chart, and its runs."""
    window, bars = queries.platform_window(user)
    chart = gantt_svg(bars, machine_page)
    path = f"{base_path(request)}/platform"
    return HTMLResponse(
        render(
            "platform.html",
            **common(request, user),
            window=window,
            gantt=chart,
            gantt_svg=trusted_svg(chart.svg),
            page_url=url_maker(path),
        )
    )


@router.get("/platform/gantt.svg")
def platform_gantt(user: UserDep, machine_page: MachinePage = 0) -> Response:
    return Response(gantt_svg(queries.platform_window(user)[1], machine_page).svg, media_type=SVG)


@router.get("/traces", response_class=HTMLResponse)
def traces(
    request: Request,
    user: UserDep,
    where: TraceFilterDep,
    offset: Offset = 0,
    limit: Limit = 50,
) -> HTMLResponse:
    page = queries.trace_page(user, where, offset, limit)
    page_url = url_maker(f"{base_path(request)}/traces", **vars(where), limit=limit)
    context = {
        **common(request, user),
        "page": page,
        "filters": where,
        "page_url": page_url,
        "dag_ids": sorted(authorized_dag_ids(user, "GET")),
        "states": ATTEMPT_STATES,
    }
    return HTMLResponse(render("traces.html", **context))


@router.get("/assets/agora.js")
def script() -> Response:
    return Response(SCRIPT, media_type="text/javascript")


@router.get("/assets/agora.css")
def style() -> Response:
    return Response(STYLE, media_type="text/css")

"""The JSON API under ``/agora/api``, described in the app's OpenAPI schema; the pages' script uses it.

Every route needs a logged-in user (the app's dependency, :func:`~agora_optimizer.ui.auth.current_user`),
read rights on the DAG it is about (``ReadableDag``), and edit rights to re-optimize or to put a point
of the Pareto front in force.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, status
from pydantic import BaseModel, ValidationError

from agora_optimizer.ui import queries, run_records, schemas
from agora_optimizer.ui.apply import apply_front_point
from agora_optimizer.ui.auth import EditableDag, ReadableDag, UserDep, check_csrf, is_authorized_dag
from agora_optimizer.ui.rerun import RERUN_DAG_ID, RerunError, queue_reoptimization
from agora_optimizer.ui.traces import TraceFilter

MAX_PAGE = 500

Offset = Annotated[int, Query(ge=0, le=100_000_000, description="Rows to skip.")]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"Rows to return (at most {MAX_PAGE}).")]
Text = Annotated[str | None, Query(max_length=250)]
RunCount = Annotated[
    int,
    Query(ge=1, le=run_records.MAX_RUNS, description=f"Recorded runs to show (at most {run_records.MAX_RUNS})."),
]
RunId = Annotated[str | None, Query(max_length=250, description="The run shown in detail; default the newest.")]


def trace_filter(
    dag_id: Text = None, task_id: Text = None, state: Text = None, resource_type: Text = None
) -> TraceFilter:
    """The trace table's filters from the query string (an empty field filters nothing); pages and API share it."""
    return TraceFilter(dag_id or None, task_id or None, state or None, resource_type or None)


TraceFilterDep = Annotated[TraceFilter, Depends(trace_filter)]

router = APIRouter(prefix="/api", tags=["agora"])
Body = TypeVar("Body", bound=BaseModel)


@router.get("/dags", summary="DAGs with a plan that you may read")
def list_dags(user: UserDep) -> schemas.DagList:
    return queries.dag_list(user)


@router.get("/dags/{dag_id}", summary="A DAG's current plan in one row, with its savings")
def get_dag(dag_id: ReadableDag, user: UserDep) -> schemas.DagSummary:
    return queries.summary(queries.current_plan(dag_id), is_authorized_dag(user, dag_id, "PUT"))


@router.get("/dags/{dag_id}/tasks", summary="A page of the plan's tasks, predicted against actual")
def get_tasks(dag_id: ReadableDag, offset: Offset = 0, limit: Limit = 50, task: Text = None) -> schemas.TaskPage:
    return queries.task_page(queries.current_plan(dag_id), offset, limit, task)


@router.get("/dags/{dag_id}/history", summary="The DAG's plans, newest first")
def get_history(dag_id: ReadableDag, offset: Offset = 0, limit: Limit = 50) -> schemas.History:
    return queries.history(dag_id, offset, limit)


@router.get("/dags/{dag_id}/pareto", summary="The cost/makespan front of the plan (computed on first request)")
def get_pareto(dag_id: ReadableDag) -> schemas.Pareto:
    return queries.pareto(queries.current_plan(dag_id))


@router.get("/dags/{dag_id}/runs", summary="The DAG's last recorded runs, planned against actual; the realised saving")
def get_runs(dag_id: ReadableDag, limit: RunCount = run_records.DEFAULT_RUNS, run_id: RunId = None) -> schemas.RunPage:
    return run_records.page(run_records.load(dag_id, limit, run_id))


@router.get("/platform", summary="The last window of many DAG runs in force: its runs, against each planned alone")
def get_platform(user: UserDep) -> schemas.PlatformWindow:
    return queries.platform_window(user)[0]


@router.get("/traces", summary="A page of task attempts of the DAGs you may read, newest first")
def get_traces(user: UserDep, where: TraceFilterDep, offset: Offset = 0, limit: Limit = 50) -> schemas.TracePage:
    return queries.trace_page(user, where, offset, limit)


async def json_body(request: Request, model: type[Body]) -> Body:
    """The request's JSON body as ``model`` (415 when it is not JSON: an HTML form cannot send JSON)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, "send a JSON body as application/json")
    try:
        return model.model_validate_json(await request.body() or b"{}")
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"body{'.' + where if where else ''}: {error['msg']}"
        ) from None


async def reoptimize_body(request: Request) -> schemas.ReoptimizeRequest:
    return await json_body(request, schemas.ReoptimizeRequest)


async def apply_body(request: Request) -> schemas.ApplyPointRequest:
    return await json_body(request, schemas.ApplyPointRequest)


def body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI entry of a JSON body read by :func:`json_body` (FastAPI cannot see it in a dependency)."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


@router.post(
    "/dags/{dag_id}/reoptimize",
    status_code=status.HTTP_202_ACCEPTED,
    summary=f"Queue a run of {RERUN_DAG_ID} that re-plans this DAG (needs edit rights on it)",
    openapi_extra=body_schema(schemas.ReoptimizeRequest),
)
def reoptimize(
    dag_id: EditableDag,
    request: Request,
    user: UserDep,
    _body: Annotated[schemas.ReoptimizeRequest, Depends(reoptimize_body)],
) -> schemas.ReoptimizeResponse:
    check_csrf(request, user)
    try:
        run = queue_reoptimization(dag_id, str(user.get_name()))
    except RerunError as exc:
        raise HTTPException(exc.status_code, str(exc)) from None
    return schemas.ReoptimizeResponse(
        dag_id=dag_id,
        rerun_dag_id=RERUN_DAG_ID,
        run_id=run.run_id,
        state=run.state,
        already_queued=run.already_queued,
    )


@router.post(
    "/dags/{dag_id}/pareto/{index}/apply",
    summary="Put point INDEX of the plan's Pareto front in force as the DAG's plan (needs edit rights on it)",
    openapi_extra=body_schema(schemas.ApplyPointRequest),
)
def apply_point(
    dag_id: EditableDag,
    index: Annotated[int, Path(ge=0, le=1000, description="The point's index in the Pareto answer's points.")],
    request: Request,
    user: UserDep,
    body: Annotated[schemas.ApplyPointRequest, Depends(apply_body)],
) -> schemas.ApplyPointResponse:
    check_csrf(request, user)
    return apply_front_point(dag_id, index, body.plan_version, str(user.get_name()))

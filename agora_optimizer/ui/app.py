"""The agora FastAPI app: the pages, the JSON API and its OpenAPI schema, all behind Airflow's login.

:func:`current_user` is a dependency of the whole app, so every route (and any route added
later) answers 401 to a request without a valid Airflow token before anything else runs.
The OpenAPI schema is served at ``openapi.json`` behind the same login; FastAPI's own
unauthenticated ``/openapi.json``, ``/docs`` and ``/redoc`` are turned off. Every answer
carries a Content-Security-Policy that allows scripts and styles from this app alone and
framing by Airflow's UI (same origin), and is not cached.

Every error is an answer with a message, as JSON (``{"detail": ...}``) or, for a browser asking
for HTML, a short page: an ``AgoraError`` (a corrupt plan file, say) is a 422 with its message,
a DAG id Airflow would refuse a 404, and anything else a 500 whose traceback goes to the
api-server's log only.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

import agora_optimizer
from agora_optimizer.errors import AgoraError
from agora_optimizer.plans.store import InvalidDagIdError
from agora_optimizer.ui import api, views
from agora_optimizer.ui.auth import current_user
from agora_optimizer.ui.pages import render

log = logging.getLogger(__name__)

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "SAMEORIGIN",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def create_app() -> FastAPI:
    app = FastAPI(
        title="agora",
        version=agora_optimizer.__version__,
        description=(
            "Plans, Gantt charts, Pareto fronts, savings and traces of agora, the cost-performance optimizer "
            "for Airflow. Authenticate as for Airflow's REST API: a JWT from POST /auth/token as a Bearer "
            "header (or the _token cookie of Airflow's UI). DAG data needs read rights on the DAG; "
            "re-optimizing needs edit rights."
        ),
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        dependencies=[Depends(current_user)],
    )
    app.include_router(api.router)
    app.include_router(views.router)
    app.add_api_route("/openapi.json", _openapi_route(app), methods=["GET"], include_in_schema=False)
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(AgoraError, _agora_error)  # type: ignore[arg-type]
    app.middleware("http")(_security_headers)
    return app


def _openapi_route(app: FastAPI) -> Callable[[Request], dict[str, Any]]:
    def openapi(request: Request) -> dict[str, Any]:
        """The JSON API's OpenAPI schema, its paths relative to where the app is mounted."""
        return {**app.openapi(), "servers": [{"url": views.base_path(request) or "/"}]}

    return openapi


async def _security_headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    try:
        response = await call_next(request)
    except Exception as exc:  # a bug: a 500 that says so, the traceback in the api-server's log only
        log.exception("agora: %s %s failed", request.method, request.url.path)
        response = _error_response(
            request, 500, f"agora failed to answer ({type(exc).__name__}); the api-server log has the details"
        )
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def _wants_html(request: Request) -> bool:
    path = request.url.path
    return "text/html" in request.headers.get("accept", "") and "/api/" not in path and not path.endswith(".svg")


def _login_url() -> str:
    try:
        from airflow.api_fastapi.app import get_auth_manager

        return str(get_auth_manager().get_url_login())
    except Exception:  # no auth manager: the page still says what is wrong
        log.debug("agora: no login URL", exc_info=True)
        return ""


def _error_response(request: Request, status_code: int, detail: Any, headers: dict[str, str] | None = None) -> Response:
    """JSON ``{"detail": ...}`` as FastAPI answers; a short page for a browser asking for HTML."""
    if not _wants_html(request):
        return JSONResponse({"detail": detail}, status_code=status_code, headers=headers)
    login_url = _login_url() if status_code == 401 else ""
    page = render("error.html", status_code=status_code, detail=str(detail), login_url=login_url)
    return HTMLResponse(page, status_code=status_code, headers=headers)


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    return _error_response(request, exc.status_code, exc.detail, dict(exc.headers or {}))


async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    """422 with FastAPI's list of errors as JSON; on a page, each as ``where: what``."""
    if not _wants_html(request):
        return await request_validation_exception_handler(request, exc)
    errors = exc.errors()
    shown = "; ".join(f"{'.'.join(str(part) for part in e.get('loc', ()))}: {e.get('msg', '')}" for e in errors)
    return _error_response(request, 422, shown or "invalid request")


async def _agora_error(request: Request, exc: AgoraError) -> Response:
    """An error agora raised on purpose, with its message: 404 for a DAG id Airflow would refuse, else 422."""
    status_code = 404 if isinstance(exc, InvalidDagIdError) else 422
    log.warning("agora: %s %s: %s", request.method, request.url.path, exc)
    return _error_response(request, status_code, str(exc))

"""The agora FastAPI app: the pages, the JSON API and its OpenAPI schema, all behind Airflow's login.

:func:`current_user` is a dependency of the whole app, so every route (and any route added
later) answers 401 to a request without a valid Airflow token before anything else runs.
The OpenAPI schema is served at ``openapi.json`` behind the same login; FastAPI's own
unauthenticated ``/openapi.json``, ``/docs`` and ``/redoc`` are turned off. Every answer
carries a Content-Security-Policy that allows scripts and styles from this app alone and
framing by Airflow's UI (same origin), and is not cached.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse

import agora_optimizer
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
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    app.middleware("http")(_security_headers)
    return app


def _openapi_route(app: FastAPI) -> Callable[[Request], dict[str, Any]]:
    def openapi(request: Request) -> dict[str, Any]:
        """The JSON API's OpenAPI schema, its paths relative to where the app is mounted."""
        return {**app.openapi(), "servers": [{"url": views.base_path(request) or "/"}]}

    return openapi


async def _security_headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    response = await call_next(request)
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


async def _http_error(request: Request, exc: HTTPException) -> Response:
    """JSON ``{"detail": ...}`` as FastAPI answers; a short page for a browser asking for HTML."""
    headers = dict(exc.headers or {})
    if not _wants_html(request):
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)
    login_url = _login_url() if exc.status_code == 401 else ""
    page = render("error.html", status_code=exc.status_code, detail=str(exc.detail), login_url=login_url)
    return HTMLResponse(page, status_code=exc.status_code, headers=headers)

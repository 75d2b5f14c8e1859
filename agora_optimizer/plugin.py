"""The agora Airflow plugin, registered through the ``airflow.plugins`` entry point.

Airflow discovers it at start-up (``airflow plugins`` lists it). It registers:

- the trace listener, which writes one row per task attempt from the task process;
- the run listener, which records each DAG run when it ends (:mod:`agora_optimizer.runs.recorder`);
- the agora view: a FastAPI app mounted at ``/agora`` in Airflow's api-server
  (:mod:`agora_optimizer.ui`), shown in Airflow's UI as an "agora" entry of the navigation
  and as an "agora plan" tab of every DAG. Every route of it requires Airflow's own login
  and the auth manager's rights on the DAG it shows (see :mod:`agora_optimizer.ui.auth`).

Every process that loads plugins (each task, for the listener) imports this module, so
the app is built on its first request, in the api-server only: the other processes never
import FastAPI for it. It stands in the top layer, with the command line: the two entry points,
above the listeners (``integration``, ``runs``) and the view (``ui``) they register.
"""

from __future__ import annotations

import threading
from typing import Any

from airflow.plugins_manager import AirflowPlugin

import agora_optimizer
from agora_optimizer.integration.trace_listener import trace_listener
from agora_optimizer.runs.recorder import run_listener

URL_PREFIX = "/agora"


class LazyAgoraApp:
    """An ASGI app that builds :func:`agora_optimizer.ui.app.create_app` on its first call."""

    def __init__(self) -> None:
        self._app: Any = None
        self._lock = threading.Lock()

    def app(self) -> Any:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    from agora_optimizer.ui.app import create_app

                    self._app = create_app()
        return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app()(scope, receive, send)


class AgoraPlugin(AirflowPlugin):
    name = "agora"
    version = agora_optimizer.__version__
    # AirflowPlugin declares plain lists, hence the class-level mutables.
    # One trace row per task attempt, written from the task process; one run record per ended DAG run.
    listeners: list[object] = [trace_listener, run_listener]  # noqa: RUF012
    fastapi_apps: list[dict[str, Any]] = [  # noqa: RUF012
        {"app": LazyAgoraApp(), "url_prefix": URL_PREFIX, "name": "agora"},
    ]
    # Relative hrefs: Airflow's UI frames them against its <base href>, the configured [api] base_url,
    # so the views work when Airflow is served under a sub-path; "/agora/" would leave it.
    external_views: list[dict[str, Any]] = [  # noqa: RUF012
        {
            "name": "agora",
            "href": f"{URL_PREFIX[1:]}/",
            "url_route": "agora",
            "destination": "nav",
            "nav_top_level": True,
        },
        {
            "name": "agora plan",
            "href": f"{URL_PREFIX[1:]}/dags/{{DAG_ID}}",
            "url_route": "agora-plan",
            "destination": "dag",
        },
    ]

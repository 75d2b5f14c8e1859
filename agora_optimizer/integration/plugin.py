"""The agora Airflow plugin, registered through the ``airflow.plugins`` entry point.

Airflow discovers it at start-up (``airflow plugins`` lists it). It registers the trace
listener, which writes one row per task attempt from the task process. The executor and
the UI views register here as they are built; until then the plugin adds nothing to
Airflow's web server, so it opens no unauthenticated route.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

import agora_optimizer
from agora_optimizer.traces.listener import trace_listener


class AgoraPlugin(AirflowPlugin):
    name = "agora"
    version = agora_optimizer.__version__
    # One trace row per task attempt, written from the task process (AirflowPlugin declares a plain list).
    listeners: list[object] = [trace_listener]  # noqa: RUF012

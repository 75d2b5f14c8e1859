"""The agora Airflow plugin, registered through the ``airflow.plugins`` entry point.

Airflow discovers it at start-up (``airflow plugins`` lists it). The executor, the
cluster policy and the UI views register here as they are built; until then the
plugin adds nothing to Airflow's web server, so it opens no unauthenticated route.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

import agora_optimizer


class AgoraPlugin(AirflowPlugin):
    name = "agora"
    version = agora_optimizer.__version__

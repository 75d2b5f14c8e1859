"""agora as an Airflow provider, for one thing only: Airflow's configuration knows the ``[agora]`` section.

Registered through the ``apache_airflow_provider`` entry point, so that Airflow loads every
key of :data:`agora_optimizer.settings.SETTINGS` with its default and description:
``airflow config get-value agora objective`` and ``airflow config list`` show them, and a
sensitive key may come from ``AIRFLOW__AGORA__<KEY>_CMD`` or ``_SECRET`` as Airflow's own do.
"""

from __future__ import annotations

from typing import Any

from agora_optimizer import __version__
from agora_optimizer.settings import SETTINGS


def get_provider_info() -> dict[str, Any]:
    options = {
        setting.key: {
            "description": setting.description,
            "version_added": None,
            "type": setting.value_type,
            "example": None,
            "default": setting.default,
            **({"sensitive": True} if setting.sensitive else {}),
        }
        for setting in SETTINGS
    }
    return {
        "package-name": "agora-optimizer",
        "name": "agora",
        "description": "Runs each task of a DAG on the right resource, fast, cheap and within memory.",
        "versions": [__version__],
        "config": {"agora": {"description": "The agora optimizer, executor and view.", "options": options}},
    }

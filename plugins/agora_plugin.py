"""Entry for an Airflow ``plugins/`` folder, for deployments that do not pip-install agora's
entry points: copy this file into ``$AIRFLOW_HOME/plugins``. Where agora is installed as a
package, Airflow already loads the same plugin from the ``airflow.plugins`` entry point.
"""

from agora_optimizer.plugin import AgoraPlugin

__all__ = ["AgoraPlugin"]

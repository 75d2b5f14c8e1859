"""A throwaway Airflow home for tests that import Airflow in the pytest process itself."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile


def private_airflow_home(prefix: str) -> None:
    """Unless ``AIRFLOW_HOME`` is set, point it at a new folder removed at exit (one per session, per xdist
    worker: nothing left in /tmp), and load no example DAGs. Call it before the first import of airflow:
    Airflow reads its configuration then."""
    if "AIRFLOW_HOME" not in os.environ:
        home = tempfile.mkdtemp(prefix=prefix)
        atexit.register(shutil.rmtree, home, ignore_errors=True)
        os.environ["AIRFLOW_HOME"] = home
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

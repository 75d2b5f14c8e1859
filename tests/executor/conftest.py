"""Airflow in this process (the executor tests build AgoraExecutor itself): configured before its first import."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if "AIRFLOW_HOME" not in os.environ:
    _home = tempfile.mkdtemp(prefix="agora-executor-tests-")
    atexit.register(shutil.rmtree, _home, ignore_errors=True)  # one per session (per xdist worker): not left in /tmp
    os.environ["AIRFLOW_HOME"] = _home
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault(
    "AIRFLOW__API_AUTH__JWT_SECRET", "agora-executor-tests-secret-of-at-least-64-bytes-for-hs512-0123456789abcdef"
)

"""Airflow in this process (the executor tests build AgoraExecutor itself): configured before its first import."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="agora-executor-tests-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault(
    "AIRFLOW__API_AUTH__JWT_SECRET", "agora-executor-tests-secret-of-at-least-64-bytes-for-hs512-0123456789abcdef"
)

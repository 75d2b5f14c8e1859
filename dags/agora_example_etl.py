"""An example ETL DAG for agora: extract, three transforms of different weight, load.

Each task says what it needs in ``executor_config["agora"]`` (cores, memory, a runtime
guess); agora's predictor replaces the guesses with what the traces of earlier runs say.
Plan it without a running Airflow: ``agora optimize airflow:agora_example_etl --catalog catalogs/local.yaml``.
"""

from __future__ import annotations

import time
from datetime import datetime

from airflow.sdk import DAG, task


def _work(seconds: float, megabytes: int) -> int:
    """Hold ``megabytes`` of memory and burn CPU for about ``seconds``."""
    block = bytearray(megabytes * 2**20)
    deadline = time.monotonic() + seconds
    total = 0
    while time.monotonic() < deadline:
        total += sum(range(10_000))
    return len(block) + total % 7


with DAG(
    dag_id="agora_example_etl",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["agora", "example"],
):

    @task(executor_config={"agora": {"cores": 1, "memory_gib": 0.25, "runtime_s": 2}})
    def extract() -> int:
        return _work(1.0, 64)

    @task(executor_config={"agora": {"cores": 1, "memory_gib": 0.5, "runtime_s": 3}})
    def clean(rows: int) -> int:
        return _work(1.5, 128) + rows

    @task(executor_config={"agora": {"cores": 1, "memory_gib": 1, "runtime_s": 5}})
    def aggregate(rows: int) -> int:
        return _work(2.5, 256) + rows

    @task(executor_config={"agora": {"cores": 1, "memory_gib": 0.25, "runtime_s": 1}})
    def profile(rows: int) -> int:
        return _work(0.5, 32) + rows

    @task(executor_config={"agora": {"cores": 1, "memory_gib": 0.25, "runtime_s": 1}})
    def load(a: int, b: int, c: int) -> None:
        _work(0.5, 32)

    rows = extract()
    load(clean(rows), aggregate(rows), profile(rows))

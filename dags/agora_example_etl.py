"""An example data pipeline for agora whose tasks need really different resources.

``extract`` writes rows to a scratch file (light I/O), ``clean`` is CPU-bound (pure
Python arithmetic), ``aggregate`` is memory-heavy (holds about 600 MiB), ``profile`` is
light, and ``load`` reads everything back (I/O). Scaled to run in seconds.

Each task says what it needs in ``executor_config["agora"]`` (cores, memory, a runtime
guess); agora's predictor replaces the guesses with what the traces of earlier runs say.
The memory hints include the Python task process itself (about 200 MiB with Airflow loaded).
Plan it and put the plan in force::

    agora optimize airflow:agora_example_etl --catalog catalogs/local.yaml -o plan.json --apply

Each task returns where it ran (host, CPUs it may use, SLURM job and partition if any);
with ``{"report_dir": DIR}`` in the run's conf it also writes that to ``DIR/<task>.json``.
``extract`` hands its rows to ``profile`` and ``load`` through a scratch file: when the tasks run
on different machines (SLURM nodes of their own, as in docker/compose.yaml), give
``{"scratch_dir": DIR}``, a folder all of them see.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, get_current_context, task

ROWS = 200_000


def _where(task_id: str, **facts: Any) -> dict[str, Any]:
    """Where this task ran, as the operating system and SLURM tell it; also written to the run's report_dir."""
    report = {
        "task_id": task_id,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "cpus": sorted(os.sched_getaffinity(0)),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID", ""),
        "slurm_partition": os.environ.get("SLURM_JOB_PARTITION", ""),
        **facts,
    }
    report_dir = (get_current_context()["dag_run"].conf or {}).get("report_dir")
    if report_dir:
        Path(report_dir).mkdir(parents=True, exist_ok=True)
        (Path(report_dir) / f"{task_id}.json").write_text(json.dumps(report))
    return report


def _scratch() -> Path:
    """The run's scratch folder: under the conf's ``scratch_dir`` if given (a folder every node sees,
    when tasks run on several machines), else under this machine's temporary folder."""
    context = get_current_context()
    safe = "".join(c if c.isalnum() else "_" for c in context["run_id"])
    scratch_dir = (context["dag_run"].conf or {}).get("scratch_dir")
    path = Path(scratch_dir or tempfile.gettempdir()) / "agora_example_etl" / safe
    path.mkdir(parents=True, exist_ok=True)
    return path


with DAG(
    dag_id="agora_example_etl",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["agora", "example"],
):

    @task(executor_config={"agora": {"cores": 1, "memory_gib": 0.5, "runtime_s": 2}})
    def extract() -> dict[str, Any]:
        """Light I/O: write ROWS rows of CSV to the scratch directory."""
        path = _scratch() / "rows.csv"
        with path.open("w") as out:
            for row in range(ROWS):
                out.write(f"{row},{row % 97},{row * 31 % 1009}\n")
        return _where("extract", bytes_written=path.stat().st_size)

    @task(executor_config={"agora": {"cores": 1, "memory_gib": 0.5, "runtime_s": 3}})
    def clean(upstream: dict[str, Any]) -> dict[str, Any]:
        """CPU-bound: about 2 s of pure Python arithmetic."""
        deadline = time.monotonic() + 2.0
        total = 0
        while time.monotonic() < deadline:
            total += sum(i * i % 7 for i in range(20_000))
        return _where("clean", checksum=total % 1_000_003)

    @task(executor_config={"agora": {"cores": 1, "memory_gib": 1, "runtime_s": 5}})
    def aggregate(upstream: dict[str, Any]) -> dict[str, Any]:
        """Memory-heavy: hold about 600 MiB (touched, so resident) for a second."""
        block = bytearray(600 * 2**20)
        for offset in range(0, len(block), 4096):
            block[offset] = 1
        time.sleep(1.0)
        return _where("aggregate", held_bytes=len(block))

    @task(executor_config={"agora": {"cores": 1, "memory_gib": 0.5, "runtime_s": 1}})
    def profile(upstream: dict[str, Any]) -> dict[str, Any]:
        """Light: count the lines of the extract."""
        with (_scratch() / "rows.csv").open() as rows:
            count = sum(1 for _ in rows)
        return _where("profile", rows=count)

    @task(executor_config={"agora": {"cores": 1, "memory_gib": 0.5, "runtime_s": 1}})
    def load(a: dict[str, Any], b: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
        """I/O: read the extract back and write a summary."""
        data = (_scratch() / "rows.csv").read_bytes()
        (_scratch() / "summary.json").write_text(json.dumps({"bytes": len(data), "inputs": [a, b, c]}))
        return _where("load", bytes_read=len(data))

    rows = extract()
    load(clean(rows), aggregate(rows), profile(rows))

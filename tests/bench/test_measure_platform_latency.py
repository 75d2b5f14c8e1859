"""``bench/measure_platform_latency.py``: the latency a trace store teaches, with a replayed workflow's edges."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore
from tests.conftest import REPO

T0 = datetime(2026, 12, 2, tzinfo=UTC)
DAG = "agora_wfinstance_bacass-dirt02-001"


def _attempt(task: str, run: str, started_s: float, ended_s: float) -> TaskAttempt:
    return TaskAttempt.create(
        dag_id=DAG, task_id=f"NFCORE_BACASS.BACASS.{task}", run_id=run, resource_type="slurm-debug", backend="slurm",
        queued_at=T0, started_at=T0 + timedelta(seconds=started_s), ended_at=T0 + timedelta(seconds=ended_s),
        machine="slurm-debug#0",
    )  # fmt: skip


@pytest.mark.slow  # runs the script in a Python that imports Airflow
def test_a_child_counts_from_its_parents_end_and_a_machines_next_task_from_the_one_before(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    with TraceStore(url) as store:
        for run in ("r1", "r2", "r3"):
            # SKEWER_1 (a root, queued at 0) then its child UNICYCLER_5, 3 s after it, on the same machine
            store.add([_attempt("SKEWER_1", run, 1.0, 6.0), _attempt("UNICYCLER_5", run, 9.0, 20.0)])
    command = [sys.executable, str(REPO / "bench" / "measure_platform_latency.py"), "--store", url,
               "--workflows-dir", str(REPO / "workflows"), "--workflows", "bacass-dirt02-001"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "6 attempts",
        "slurm slurm-debug start: median 2.00 s, p90 3.00 s, 6 samples",  # three 1 s (roots), three 3 s (children)
        "slurm (all types) start: median 2.00 s, p90 3.00 s, 6 samples",
    ]

"""``bench/collect_queue_waits.py`` stops the SLURM daemons it started, and leaves a cluster it found running.

The benchmark takes a quarter of an hour; with ``--jobs 0`` it starts the cluster, submits nothing and
ends at once (too few waits to evaluate), which is all the cluster's lifecycle needs. It runs on a
second loopback cluster (tests/slurm_fixtures.py), not the session's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness import loopback_slurm
from tests.conftest import REPO
from tests.slurm_fixtures import cluster_daemons

pytestmark = pytest.mark.slow


def _collect_nothing(tmp_path: Path) -> None:
    command = [sys.executable, str(REPO / "bench" / "collect_queue_waits.py"), "--jobs", "0"]
    command += ["--store", f"sqlite:///{tmp_path / 'waits.db'}", "--out", str(tmp_path / "queue-wait.md")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 1 and "only 0 waits recorded" in done.stderr, (done.stdout + done.stderr)[-3000:]
    assert "submitting up to 0 jobs to SLURM" in done.stdout


def test_the_benchmark_stops_the_cluster_it_started_and_leaves_one_it_found_running(
    second_cluster: Path, tmp_path: Path
) -> None:
    _collect_nothing(tmp_path)
    assert cluster_daemons(second_cluster) == []
    start = loopback_slurm.start(second_cluster)
    running = cluster_daemons(second_cluster)
    assert {"mariadbd", "slurmdbd", "slurmctld", "slurmd"} <= {line.split()[0] for line in running}
    _collect_nothing(tmp_path)
    assert cluster_daemons(second_cluster) == running
    loopback_slurm.stop(start)

"""Fixtures the command tests share with the tests of what the commands drive: the session's SLURM
cluster and its recorded jobs (tests/slurm), and a real HTTP server standing in for Airflow's API
(tests/traces)."""

from tests.slurm.conftest import recorded_run, slurm_cluster
from tests.traces.conftest import http_server

__all__ = ["http_server", "recorded_run", "slurm_cluster"]

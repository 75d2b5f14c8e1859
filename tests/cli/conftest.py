"""Fixtures the command tests share with the tests of what the commands drive: a real HTTP server
standing in for Airflow's API (tests/traces). The SLURM cluster's fixtures come from
``tests/slurm_fixtures.py``, a plugin of ``tests/conftest.py``."""

from tests.traces.conftest import http_server

__all__ = ["http_server"]

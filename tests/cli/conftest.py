"""Fixtures the command tests share with the tests of what the commands drive: a real HTTP server
standing in for Airflow's API (tests/traces), and a moto server standing in for AWS with the
network an account has before agora sets up Batch (tests/executor/backends/aws). The SLURM cluster's fixtures come from
``tests/slurm_fixtures.py``, a plugin of ``tests/conftest.py``."""

from tests.executor.backends.aws.conftest import moto, network, no_host_aws_settings
from tests.traces.conftest import http_server

__all__ = ["http_server", "moto", "network", "no_host_aws_settings"]

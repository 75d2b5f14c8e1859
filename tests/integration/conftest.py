"""The session's real PostgreSQL server (from tests/traces), for the compatibility suite's Airflow metadata."""

from tests.traces.conftest import postgres_server, postgres_url

__all__ = ["postgres_server", "postgres_url"]

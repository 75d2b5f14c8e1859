"""Run-record fixtures: the trace store's databases (SQLite and a real PostgreSQL) from tests/traces."""

from tests.traces.conftest import fresh_postgres_url, postgres_server, postgres_url, store_url

__all__ = ["fresh_postgres_url", "postgres_server", "postgres_url", "store_url"]

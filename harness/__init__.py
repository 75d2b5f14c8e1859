"""The demo and test harness: a local Airflow deployment for tests, benchmarks and the demo (not part of
the installed package)."""

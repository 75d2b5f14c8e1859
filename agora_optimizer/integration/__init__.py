"""Airflow integration. The only part of agora that imports Airflow."""

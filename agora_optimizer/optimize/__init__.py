"""Optimizing: the drivers above the engines. ``optimize`` (one workflow, one objective), ``pareto`` (the
cost/makespan front), ``window`` (many DAG runs on one platform) and the ``portfolio`` they run the engines
through."""

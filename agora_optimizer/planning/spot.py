"""Spot capacity: what an interruptible type's task is expected to cost and how long it may take.

A spot type ``k`` (``docs/spot.md``) declares ``interruption_rate_per_hour`` ``lambda``: its
interruptions arrive as a Poisson process, so the time ``T`` from a task's start to the first one is
exponential with rate ``mu = lambda / 3600`` per second. A task of duration ``d`` on ``k`` is
interrupted with probability ``p = 1 - exp(-mu d)``; the attempt then holds the machine for
``min(T, d)``, whose mean is ``(1 - exp(-mu d)) / mu`` (``d`` when ``lambda = 0``). An interrupted task
re-runs once, on a new machine of the spot type's ``fallback`` (on-demand: never interrupted), booted
for it: ``boot_f + d_f`` seconds, ``d_f`` its duration there, billed as a lease of its own.

For one task alone on its machine (billing steps of the spot attempt ignored):

- expected time to completion: ``E[min(T, d)] + p (boot_f + d_f)``;
- expected cost: ``price_k / 3600 (boot_k + E[min(T, d)]) + p cost_f(boot_f + d_f)``, with
  ``cost_f`` the fallback's lease cost (its billing steps and minimum).

A plan's expected cost (:func:`expected_cost_usd`) is its cost as leased (the spec's, spot types at
their spot price) plus, for each task on a spot type, ``p`` times its re-run's lease cost: a spot
machine is leased as planned (the tasks after an interrupted one still run on it), so an
interruption adds the re-run, and takes nothing off the machine's lease except where the
interrupted task was its last (neglected: the figure errs high by at most that).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.planning.leases import cost_usd


def rate_per_s(resource: Resource) -> float:
    """The type's interruptions per second of running (0 for on-demand capacity)."""
    if not resource.spot or not resource.interruption_rate_per_hour:
        return 0.0
    return resource.interruption_rate_per_hour / 3600.0


def interruption_probability(duration_s: float, rate_per_hour: float) -> float:
    """The chance that a task of ``duration_s`` is interrupted at least once: ``1 - exp(-lambda d / 3600)``."""
    return -math.expm1(-rate_per_hour * max(duration_s, 0.0) / 3600.0)


def expected_attempt_s(duration_s: float, rate_per_hour: float) -> float:
    """The mean time a spot attempt holds its machine, ``E[min(T, d)] = (1 - exp(-mu d)) / mu``."""
    mu = rate_per_hour / 3600.0
    if mu * duration_s < 1e-12:
        return max(duration_s, 0.0)
    return -math.expm1(-mu * duration_s) / mu


def fallback_s(task: Task, resource: Resource, catalog: Catalog) -> float:
    """How long a re-run of ``task`` (interrupted on spot type ``resource``) holds its new fallback
    machine: the fallback's boot and the task's duration there."""
    fallback = catalog.fallback_of(resource)
    return fallback.boot_s + fallback.runtime_s(task)


def rerun_cost_usd(task: Task, resource: Resource, catalog: Catalog) -> float:
    """The lease cost of one re-run of ``task`` on a new machine of ``resource``'s fallback."""
    return catalog.fallback_of(resource).lease_cost_usd(fallback_s(task, resource, catalog))


def expected_rerun_cost_usd(task: Task, resource: Resource, catalog: Catalog, duration_s: float | None = None) -> float:
    """``p`` times the re-run's cost: what placing ``task`` on ``resource`` adds in expectation beyond
    its lease (0 on an on-demand type). ``duration_s``: the attempt's, default ``resource.runtime_s``."""
    if not resource.spot or not resource.interruption_rate_per_hour:
        return 0.0
    duration = resource.runtime_s(task) if duration_s is None else duration_s
    probability = interruption_probability(duration, resource.interruption_rate_per_hour)
    return probability * rerun_cost_usd(task, resource, catalog)


def expected_task_s(task: Task, resource: Resource, catalog: Catalog) -> float:
    """Expected time from the task's start on ``resource`` to its completion (alone on its machine)."""
    duration = resource.runtime_s(task)
    if not resource.spot:
        return duration
    rate = resource.interruption_rate_per_hour or 0.0
    attempt = expected_attempt_s(duration, rate)
    return attempt + interruption_probability(duration, rate) * fallback_s(task, resource, catalog)


def expected_task_cost_usd(task: Task, resource: Resource, catalog: Catalog) -> float:
    """Expected cost of ``task`` alone on a machine of ``resource``, booted for it (the module's formula;
    the spot attempt billed by the second without minimum, the re-run with its fallback's billing).
    For an on-demand type: its lease cost."""
    duration = resource.runtime_s(task)
    if not resource.spot:
        return resource.lease_cost_usd(resource.boot_s + duration)
    rate = resource.interruption_rate_per_hour or 0.0
    attempt_usd = resource.price_per_hour_usd / 3600.0 * (resource.boot_s + expected_attempt_s(duration, rate))
    return attempt_usd + expected_rerun_cost_usd(task, resource, catalog, duration)


def expected_reruns(assignments: Iterable[Assignment], catalog: Catalog) -> float:
    """The expected number of re-runs of the plan's tasks (each task re-runs at most once)."""
    total = 0.0
    for a in assignments:
        resource = catalog.by_name.get(a.resource)
        if resource is not None and resource.spot and resource.interruption_rate_per_hour:
            total += interruption_probability(a.end_s - a.start_s, resource.interruption_rate_per_hour)
    return total


def expected_cost_usd(assignments: Iterable[Assignment], workflow: Workflow, catalog: Catalog) -> float:
    """The plan's expected cost: its leases (the spec's cost) plus each spot task's ``p`` times its re-run."""
    items = list(assignments)
    total = cost_usd(items, catalog)
    by_name, tasks = catalog.by_name, workflow.by_id
    for a in items:
        resource = by_name.get(a.resource)
        if resource is not None and resource.spot and a.task in tasks:
            total += expected_rerun_cost_usd(tasks[a.task], resource, catalog, a.end_s - a.start_s)
    return total

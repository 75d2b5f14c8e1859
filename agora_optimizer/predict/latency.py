"""The platform's latency: the time a task spends neither waiting for its parents nor running.

A plan says a task runs for ``runtime_s / speed`` as soon as its parents are done. A real run
adds two waits that no task's runtime shows:

- the **start latency**, from the task being *ready* (its last parent done in the same DAG
  run) to its process *running* (Airflow's scheduler loop, the executor's submission, the
  worker and Airflow's task supervisor starting);
- the **end latency**, from the task being *done* to its *slot being free* (the supervisor
  and the worker exiting), during which the next task of that machine cannot start.

:func:`learn_latency` measures both per ``(backend, resource_type)`` from the trace store's
attempts (median, p90, sample count). A type with fewer than ``min_samples`` samples of a
kind gets that kind from :data:`MEASURED_DEFAULTS`, measured on the development machine (local
pools and the loopback SLURM cluster).
:func:`with_platform_latency` hands the result to the planner as each type's
``added_latency_s`` (start + end), which every engine sees through ``Resource.runtime_s``.

Pure: no Airflow, no database; the caller reads the attempts (and, where it has them, the
times the slots were freed) and passes them in.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal, get_args

from agora_optimizer.errors import AgoraError
from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.instances import instance_id
from agora_optimizer.traces.records import TaskAttempt

Statistic = Literal["median", "p90", "none"]
STATISTICS: tuple[Statistic, ...] = get_args(Statistic)
MIN_SAMPLES = 5  # fewer samples of a kind than this, and the type gets the measured default
CLOCK_SKEW_S = 1.0  # a sample this far below 0 is two clocks disagreeing, not a latency: dropped


class PlatformLatencyError(AgoraError):
    """A latency option or input that cannot be used (unknown statistic, bad minimum)."""


@dataclass(frozen=True)
class Measured:
    """One kind of latency (start or end) of one resource type: median and p90 of its samples."""

    median_s: float
    p90_s: float
    samples: int

    def value_s(self, statistic: Statistic) -> float:
        return {"median": self.median_s, "p90": self.p90_s, "none": 0.0}[statistic]


@dataclass(frozen=True)
class DefaultLatency:
    """The latencies measured on one machine, and how (a person can run the command again)."""

    start: Measured
    end: Measured
    measured: str  # the command and the date


# Measured 2026-12-01 on the development machine (2 cores, Airflow 3.3 on SQLite, the local pools
# of catalogs/local.yaml, the executor as committed at 3e2e74b: pools free a slot at the task's end),
# one run of the example DAG:
#     OUT=/tmp/demo-out TIME_LIMIT_S=3 bash scripts/demo.sh
# then learn_latency's samples over its 5 trace rows, with the DAG's edges and each slot's release
# (the ``task-ended`` mark the worker writes in the job's directory when the task process exits).
# Start: 0.19 to 0.90 s once Airflow is warm; 4.30 s for the first task, counted from its queued
# time (the worker and Airflow's supervisor start cold). End: 0.07 to 0.13 s from the task's end to
# its slot's release (before pools freed at the mark, the slot waited 5.1 to 5.2 s for the worker's
# exit). Backends never measured (AWS Batch) get these numbers; their own waits are the queue wait
# (release_s) and boot_s.
_LOCAL_END = Measured(median_s=0.11, p90_s=0.12, samples=5)
# SLURM: measured 2026-12-02 on the same machine's loopback cluster (scripts/start_slurm.sh), the 500
# trace rows of 22 runs of the plans-come-true benchmark (tasks that sleep, so that the host's two
# cores do not slow them; executor as committed at 376a7e1):
#     python bench/run_plans_come_true.py --workflows-dir ../shared/data/wfinstances --backend slurm \
#         --task-load sleep --workflows bacass-dirt02-001,... (docs/results.md) --out ...
#     python bench/measure_platform_latency.py --store sqlite:///<its root>/traces.db --workflows ...
# Start: median 3.48 s, p90 4.40 s from ready to running inside the machine's allocation (Airflow's
# scheduler loop, the allocation's driver looking for task files every 0.5 s, the worker and
# Airflow's supervisor starting on the node), 5 times the local pools'. End: the rows hold no slot
# release; the worker's task-ended mark frees a SLURM machine as it does a local pool.
MEASURED_DEFAULTS: dict[str, DefaultLatency] = {
    "local": DefaultLatency(
        start=Measured(median_s=0.66, p90_s=2.94, samples=5),
        end=_LOCAL_END,
        measured="example DAG on catalogs/local.yaml, 2026-12-01",
    ),
    "slurm": DefaultLatency(
        start=Measured(median_s=3.48, p90_s=4.40, samples=500),
        end=_LOCAL_END,
        measured="plans-come-true benchmark on the loopback SLURM cluster, 2026-12-02",
    ),
}
FALLBACK_BACKEND = "local"


def default_latency(backend: str) -> DefaultLatency:
    """The measured defaults of ``backend`` (those of local pools for a backend never measured)."""
    return MEASURED_DEFAULTS.get(backend, MEASURED_DEFAULTS[FALLBACK_BACKEND])


@dataclass(frozen=True)
class ResourceLatency:
    """What a resource type adds to each of its tasks; ``None`` kinds were not learned (too few samples)."""

    resource: str
    backend: str
    start: Measured | None
    end: Measured | None
    default: DefaultLatency

    @property
    def start_used(self) -> Measured:
        return self.start or self.default.start

    @property
    def end_used(self) -> Measured:
        return self.end or self.default.end

    def added_s(self, statistic: Statistic) -> float:
        """Start plus end latency: how much longer a task holds its machine than it runs."""
        return self.start_used.value_s(statistic) + self.end_used.value_s(statistic)

    def describe(self, statistic: Statistic) -> str:
        """One line for people: the added seconds, where each part came from."""
        if statistic == "none":
            return f"{self.resource}: no platform latency added (--platform-latency none)"

        start, end = self.start_used, self.end_used
        origins = []
        for name, learned in (("start", self.start), ("end", self.end)):
            origins.append(f"{name} {learned.samples} samples" if learned else f"{name} default")
        measured = f" (measured: {self.default.measured})" if not (self.start and self.end) else ""
        return (
            f"{self.resource}: +{self.added_s(statistic):.2f} s per task ({statistic}); median/p90 start "
            f"{start.median_s:.2f}/{start.p90_s:.2f} s, end {end.median_s:.2f}/{end.p90_s:.2f} s; "
            f"{', '.join(origins)}{measured}"
        )

    def as_dict(self, statistic: Statistic) -> dict[str, object]:
        def kind(learned: Measured | None, used: Measured) -> dict[str, object]:
            return {
                "median_s": used.median_s,
                "p90_s": used.p90_s,
                "samples": learned.samples if learned else 0,
                "source": "learned" if learned else "default",
            }

        return {
            "backend": self.backend,
            "added_s": self.added_s(statistic),
            "start": kind(self.start, self.start_used),
            "end": kind(self.end, self.end_used),
            "default_measured": self.default.measured,
        }


@dataclass(frozen=True)
class PlatformLatency:
    """Every resource type's latencies, as learned; types never seen get the measured defaults."""

    learned: Mapping[tuple[str, str], tuple[Measured | None, Measured | None]]  # (backend, type) -> (start, end)

    def for_resource(self, resource: Resource) -> ResourceLatency:
        start, end = self.learned.get((resource.backend, resource.name), (None, None))
        return ResourceLatency(resource.name, resource.backend, start, end, default_latency(resource.backend))

    def summary(self, catalog: Catalog, statistic: Statistic) -> dict[str, object]:
        """What a plan's summary states of the latency used: the statistic and each type's numbers."""
        return {
            "statistic": statistic,
            "resources": {r.name: self.for_resource(r).as_dict(statistic) for r in catalog.resources},
        }


def statistic_of(value: str) -> Statistic:
    """``value`` as a :data:`Statistic`, or an error naming the option."""
    for known in STATISTICS:
        if known == value:
            return known
    raise PlatformLatencyError(f"--platform-latency must be one of {', '.join(STATISTICS)}, got {value!r}")


def summarize(samples: list[float]) -> Measured:
    """Median and p90 (linear between the closest ranks) of at least one sample."""
    ordered = sorted(samples)
    p90 = ordered[0] if len(ordered) == 1 else statistics.quantiles(ordered, n=10, method="inclusive")[8]
    return Measured(median_s=statistics.median(ordered), p90_s=p90, samples=len(ordered))


def latency_samples(
    attempts: Iterable[TaskAttempt],
    edges: Mapping[str, Iterable[tuple[str, str]]] | None = None,
    slot_free_at: Mapping[str, datetime] | None = None,
    freed_at_end: bool = False,
) -> dict[tuple[str, str], tuple[list[float], list[float]]]:
    """Per ``(backend, resource_type)``: the start and the end latencies, in seconds, of ``attempts``.

    ``edges[dag_id]``: that DAG's ``(parent, child)`` task ids. A child attempt's ready time is
    then its parents' last end in the same DAG run (a root's, or any task's of a DAG whose edges
    are not given, is its ``queued_at``, the best the trace row knows). A mapped task's instance
    is named as plans name it (``task[i]``) or, where the edges name the task alone (as a DAG
    folder does), by its task id; a parent named by the task id of a mapped task ended when its
    last instance did. ``slot_free_at[key]``:
    when the slot of the attempt of that :attr:`TaskAttempt.key` was free again (its worker
    exited); only those attempts give an end latency. ``freed_at_end``: a slot whose release is not
    given was free when its task ended (the executor frees a machine at the worker's ``task-ended``
    mark, on local pools and SLURM alike), so the next task of the machine counts from there; the
    tail from the task's end to its process's exit, tenths of a second, is then in the start latency.

    A sample is left out when the row cannot say what the platform added: a retry (its wait is
    the retry delay), a parent that never ended, a row without its times or its type, a machine
    that ran an earlier task of the run whose slot release is not known (the wait may have been
    for the machine), or a value more than :data:`CLOCK_SKEW_S` below 0.
    """
    rows = [a for a in attempts if a.resource_type and a.started_at is not None]
    free = slot_free_at or {}
    ended: dict[tuple[str, str, str], datetime] = {}  # (dag, run, task) -> its last successful end
    for a in rows:
        if a.state == "success" and a.ended_at is not None:
            names = {instance_id(a.task_id, a.map_index), a.task_id}  # a mapped task's instance, and the task
            for here in ((a.dag_id, a.run_id, name) for name in names):
                ended[here] = max(ended.get(here, a.ended_at), a.ended_at)
    parents: dict[str, dict[str, list[str]]] = {}
    for dag_id, pairs in (edges or {}).items():
        of_dag: dict[str, list[str]] = defaultdict(list)
        for parent, child in pairs:
            of_dag[child].append(parent)
        parents[dag_id] = of_dag
    by_machine: dict[tuple[str, str, str], list[TaskAttempt]] = defaultdict(list)
    for a in rows:
        if a.machine:
            by_machine[(a.dag_id, a.run_id, a.machine)].append(a)
    out: dict[tuple[str, str], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for a in rows:
        starts, ends = out[(a.backend, a.resource_type)]
        if a.ended_at is not None and a.key in free:
            _keep(ends, (free[a.key] - a.ended_at).total_seconds())
        if a.try_number != 1:
            continue
        ready = _ready(a, parents.get(a.dag_id), ended)
        if ready is None:
            continue
        for before in by_machine.get((a.dag_id, a.run_id, a.machine), []) if a.machine else []:
            assert before.started_at is not None and a.started_at is not None  # rows have started_at
            if before is a or before.started_at >= a.started_at:
                continue
            released = free.get(before.key) or (before.ended_at if freed_at_end else None)
            if released is None:
                ready = None  # the wait may have been for this machine, and no row says when it freed
                break
            ready = max(ready, released)
        if ready is not None:
            assert a.started_at is not None
            _keep(starts, (a.started_at - ready).total_seconds())
    return {key: value for key, value in out.items() if value[0] or value[1]}


def _ready(
    attempt: TaskAttempt, parents: Mapping[str, list[str]] | None, ended: Mapping[tuple[str, str, str], datetime]
) -> datetime | None:
    """When ``attempt``'s task could start: its parents' last end, or (root, no edges) its queued time.
    Edges name a mapped task's instances as plans do (``task[i]``), or the task alone as a DAG folder does."""
    named = instance_id(attempt.task_id, attempt.map_index)
    above = (parents.get(named) or parents.get(attempt.task_id, [])) if parents is not None else []
    if not above:
        return attempt.queued_at
    ends = [ended.get((attempt.dag_id, attempt.run_id, p)) for p in above]
    if any(end is None for end in ends):
        return None
    return max(end for end in ends if end is not None)


def _keep(samples: list[float], value_s: float) -> None:
    if value_s >= -CLOCK_SKEW_S:
        samples.append(max(value_s, 0.0))


def learn_latency(
    attempts: Iterable[TaskAttempt],
    edges: Mapping[str, Iterable[tuple[str, str]]] | None = None,
    slot_free_at: Mapping[str, datetime] | None = None,
    min_samples: int = MIN_SAMPLES,
    freed_at_end: bool = False,
) -> PlatformLatency:
    """Each type's start and end latency (see :func:`latency_samples`), when it has ``min_samples`` of a kind."""
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 1:
        raise PlatformLatencyError(f"min_samples must be an integer >= 1, got {min_samples!r}")
    learned: dict[tuple[str, str], tuple[Measured | None, Measured | None]] = {}
    for key, (starts, ends) in latency_samples(attempts, edges, slot_free_at, freed_at_end).items():
        learned[key] = (
            summarize(starts) if len(starts) >= min_samples else None,
            summarize(ends) if len(ends) >= min_samples else None,
        )
    return PlatformLatency(learned)


def with_platform_latency(catalog: Catalog, latency: PlatformLatency, statistic: Statistic) -> Catalog:
    """``catalog`` whose types carry their start + end latency as ``added_latency_s`` (unchanged for ``none``).

    Like a queue wait's ``release_s``, it is a planning input: the catalog file does not hold it,
    and a plan made with it names, and is checked against, the catalog file as it is.
    """
    if statistic == "none":
        return catalog
    resources = tuple(replace(r, added_latency_s=latency.for_resource(r).added_s(statistic)) for r in catalog.resources)
    return Catalog(resources=resources, bandwidth_bytes_per_s=catalog.bandwidth_bytes_per_s, source=catalog.source)

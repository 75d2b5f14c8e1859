"""The run machine's vocabulary (:mod:`~agora_optimizer.executor.runs.machine`): the events the executor feeds it,
and the actions it returns for the executor to carry out. Plain frozen dataclasses, no behaviour."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeAlias

from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import JobStatus, MachineLease
from agora_optimizer.executor.lifecycle import Event, Log
from agora_optimizer.executor.runs.machine_order import MachineOrder, MachinePlan, RunBook
from agora_optimizer.executor.runs.repair import Drift, Repaired, RunRepair
from agora_optimizer.model.placement import Placement
from agora_optimizer.model.plan import Assignment
from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.runs.record import Repair

Run: TypeAlias = tuple[str, str]  # (dag_id, run_id)
Instance: TypeAlias = tuple[str, str, str, int]  # (dag_id, task_id, run_id, map_index): a task of a run, any try


@dataclass(frozen=True)
class HeldJob:
    """What the run machine knows of a held job: its key and record, whether it runs in a lease, since when it waits."""

    key: Hashable
    record: JobRecord
    on_machine: bool
    held_since_s: float | None


# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeaseWanted:
    """A task the plan put on a machine (``placement.machine``) becomes a job (built, or adopted): it runs inside
    its machine's lease. ``order`` is its run's machine order (its book's, or its plan's as read), ``backend`` the
    backend of the task's resource (the machine's type's, where the catalog has it, comes first)."""

    run: Run
    task: str
    placement: Placement
    order: MachineOrder
    backend: str


@dataclass(frozen=True)
class LeaseOpened:
    """The backend holds the lease now. ``ahead_s``: it was asked for that long ahead of its machine's planned
    start (None: for the task that wanted it)."""

    run: Run
    lease: MachineLease
    backend: str
    order: MachineOrder
    plan_version: str
    ahead_s: float | None = None


@dataclass(frozen=True)
class LeaseRefused:
    """The backend cannot give the machine (``reason``: its words); its tasks run on their pool without it."""

    run: Run
    machine: MachinePlan
    plan_version: str
    reason: str


@dataclass(frozen=True)
class AskAheadDue:
    """The executor's sync: a machine whose backend predicts a wait for it (``lead_s`` by resource, from the
    backends) is asked for that long before its planned start."""

    lead_s: Mapping[str, float]


@dataclass(frozen=True)
class LeasesDue:
    """The executor's sync: a lease whose machine's tasks are over, and that no job holds (``in_use``: the lease
    keys of the executor's jobs), closes."""

    in_use: frozenset[str]


@dataclass(frozen=True)
class StatusRead:
    """A poll answered for a job (``on_machine``: it runs in a lease): its task process may have ended."""

    record: JobRecord
    on_machine: bool
    status: JobStatus


@dataclass(frozen=True)
class JobLeft:
    """A job that had left its hold left the executor's table (reported, or revoked) without a status."""

    record: JobRecord
    on_machine: bool


@dataclass(frozen=True)
class StatesDue:
    """The executor's sync: the runs of the held jobs (``runs``), and of the open leases, may be due for a read
    of Airflow's task states."""

    runs: frozenset[Run]


@dataclass(frozen=True)
class StatesRead:
    """Airflow's task states of one run, by plan name (``task[i]`` for a mapped task's instance)."""

    run: Run
    states: Mapping[str, str]


@dataclass(frozen=True)
class HeldWaiting:
    """The executor's sync: a held job waits for its machine's turn (fed earliest planned first:
    :meth:`RunMachine.release_order`)."""

    job: HeldJob


@dataclass(frozen=True)
class RepairsDue:
    """The executor's sync: a run with drifts waiting may be due for a re-plan."""


@dataclass(frozen=True)
class Replanned:
    """The re-planner's answer for a run (:class:`~agora_optimizer.executor.runs.replanner.Replanner`)."""

    run: Run
    repaired: Repaired


@dataclass(frozen=True)
class ReplanFailed:
    """The re-plan of a run for ``drifts`` raised ``error``: the run goes on as planned."""

    run: Run
    drifts: tuple[Drift, ...]
    error: str


@dataclass(frozen=True)
class Interrupted:
    """A job's capacity was taken back under it (``status.interrupted``). ``ti_id``: its try's id in Airflow;
    None for an adopted job, whose workload is no longer the executor's."""

    record: JobRecord
    status: JobStatus
    ti_id: Any


@dataclass(frozen=True)
class Requeued:
    """Airflow's answer to putting an interrupted try back in its queue: ``why_not`` is '' when it did."""

    record: JobRecord
    status: JobStatus
    fallback: str
    why_not: str


@dataclass(frozen=True)
class TryEnded:
    """A job's try ended for good, and is reported to Airflow now."""

    record: JobRecord
    status: JobStatus


@dataclass(frozen=True)
class PollUnanswered:
    """A backend did not answer the poll of ``jobs`` (their keys): ``error`` says why."""

    backend: str
    jobs: tuple[Hashable, ...]
    error: str


@dataclass(frozen=True)
class PollAnswered:
    """A backend answered a poll: an outage of it is over."""

    backend: str


@dataclass(frozen=True)
class AdoptedOnMachine:
    """An adopted job runs in its machine's lease: its task started at ``started_at`` (Airflow's start date;
    None if unknown). ``new_book``: its run's book was made for it, and takes the plan clock the earlier
    scheduler had."""

    run: Run
    task: str
    started_at: datetime | None
    new_book: bool


RunEvent: TypeAlias = (
    LeaseWanted
    | LeaseOpened
    | LeaseRefused
    | AskAheadDue
    | LeasesDue
    | StatusRead
    | JobLeft
    | StatesDue
    | StatesRead
    | HeldWaiting
    | RepairsDue
    | Replanned
    | ReplanFailed
    | Interrupted
    | Requeued
    | TryEnded
    | PollUnanswered
    | PollAnswered
    | AdoptedOnMachine
)


# -- actions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpenLease:
    """Ask ``backend`` for the lease; feed back :class:`LeaseOpened`, or :class:`LeaseRefused` if it raises."""

    run: Run
    machine: MachinePlan
    lease: MachineLease
    backend: str
    order: MachineOrder
    plan_version: str
    ahead_s: float | None = None


@dataclass(frozen=True)
class CloseLease:
    """Release the lease with its backend (which never raises)."""

    lease: MachineLease
    backend: str


@dataclass(frozen=True)
class LeaseGranted:
    """The task that wanted a lease runs inside this one (its caller reads it)."""

    lease: MachineLease


@dataclass(frozen=True)
class ReadStates:
    """Read Airflow's task states of the run; feed back :class:`StatesRead`."""

    run: Run


@dataclass(frozen=True)
class FeedJob:
    """Feed the job of ``key`` (if the executor still has it) this event of its own lifecycle."""

    key: Hashable
    event: Event


@dataclass(frozen=True)
class Replan:
    """Re-plan the run (its ``book`` and ``repair`` state, at the monotonic ``now_s``, for ``drifts``), each task of
    ``runtime_factors`` lasting that many times its planned runtime and each of ``memory_factors`` reserving that
    many times its predicted memory (learned during the run); feed back :class:`Replanned`, or
    :class:`ReplanFailed` when it raises."""

    run: Run
    book: RunBook
    repair: RunRepair
    now_s: float
    drifts: tuple[Drift, ...]
    runtime_factors: Mapping[str, float] = field(default_factory=dict)
    memory_factors: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class MoveHeld:
    """Move each held job of the run whose task ``overrides`` puts on another machine (``reason`` for the log)."""

    run: Run
    overrides: Mapping[str, Assignment]
    reason: str


@dataclass(frozen=True)
class Reprioritize:
    """Give the run's tasks Airflow has not queued yet their repaired order's priority weights (``weights``: task
    id -> (weight now, new weight); :func:`~agora_optimizer.executor.airflow_db.reprioritize`)."""

    run: Run
    weights: Mapping[str, tuple[int, int]]


@dataclass(frozen=True)
class RecordRepair:
    """Add ``repair`` to the run's record."""

    run: Run
    repair: Repair


@dataclass(frozen=True)
class RecordLeases:
    """Add the leases to their runs' records."""

    leases: tuple[LeaseRecord, ...]


@dataclass(frozen=True)
class Requeue:
    """Put the interrupted try (``ti_id``, ``record.try_number``) back in Airflow's queue; feed back
    :class:`Requeued`."""

    record: JobRecord
    status: JobStatus
    fallback: str
    ti_id: Any


@dataclass(frozen=True)
class RerunOnFallback:
    """Re-run the try on ``fallback`` (its caller does: the same try, a new job); without it the try is reported."""

    record: JobRecord
    fallback: str


RunAction: TypeAlias = (
    OpenLease
    | CloseLease
    | LeaseGranted
    | ReadStates
    | FeedJob
    | Replan
    | MoveHeld
    | Reprioritize
    | RecordRepair
    | RecordLeases
    | Requeue
    | RerunOnFallback
    | Log
)

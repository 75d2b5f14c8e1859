"""The DAG runs the AgoraExecutor runs, as one state machine (no I/O, no Airflow): books, repairs, fallbacks, outages.

Why one module of some 570 lines: it is one state (the runs' books, repairs, leases, fallbacks, outages)
and the handlers that change it, each a few lines, with the table of handlers at its end; split by
topic, one event's effect on the books and on the repairs would be read in two files. Its vocabulary,
the events and actions, is :mod:`~agora_optimizer.executor.runs.events`.

A job's own life is :mod:`~agora_optimizer.executor.lifecycle`'s. What spans jobs lives here, in a
:class:`RunMachine`: each planned run's book (:class:`~agora_optimizer.executor.runs.machine_order.RunBook`:
which of its tasks started and ended on their planned machines, and its plan clock), its repair state
(:class:`~agora_optimizer.executor.runs.repair.RunRepairs`: drifts, re-planned placements, retries to come),
what it learned of its categories' runtimes (:class:`~agora_optimizer.executor.runs.learning.RunLearning`),
the leases open for its machines (:class:`~agora_optimizer.executor.runs.leases.OpenLeases`), the task
instances an interruption moved off spot (their fallback, :mod:`~agora_optimizer.executor.runs.interruptions`),
and each backend's outage. The executor feeds it events through one entry point, :meth:`RunMachine.handle`,
and carries out the actions it returns (both in :mod:`~agora_optimizer.executor.runs.events`): the machine
decides, the executor does every bit of I/O (the backends, Airflow's database, the run store, the jobs' own
machine). The whole machine, at a glance::

    event            from                                 state it changes               actions it returns
    LeaseWanted      a job built or adopted on a machine  the run's book (made)          LeaseGranted | OpenLease | Log
    LeaseOpened      the backend held the lease           open leases, the run's book    LeaseGranted | Log
    LeaseRefused     the backend refused it               replaced machines              RecordRepair, Log
    AskAheadDue      sync: predicted waits by resource    -                              OpenLease (ahead)
    LeasesDue        sync: the lease keys jobs hold       open leases                    CloseLease, Log
    StatusRead       a poll's answer for a job            the book, drifts, retries,     -
                                                          the run's learned runtimes
    JobLeft          a job left the table                 the book                       -
    StatesDue        sync: the runs of held jobs          when states were read          ReadStates
    StatesRead       Airflow's task states of a run       the book, drifts, retries      -
    HeldWaiting      sync: a held job, earliest first     the book (task started)        FeedJob(Released | Heartbeat)
    RepairsDue       sync                                 drifts taken                   Replan
    Replanned        the re-planner's answer              the book's order, overrides    MoveHeld, Reprioritize,
                                                                                         RecordRepair, Log
    ReplanFailed     the re-planner raised                -                              Log
    Interrupted      a spot job's capacity taken back     the task's fallback            Requeue | RecordRepair, Log
    Requeued         Airflow's answer to the requeue      -                              RecordRepair, RecordLeases,
                                                                                         RerunOnFallback | Log
    TryEnded         a try reported to Airflow            fallback done, the book        -
    PollUnanswered   a backend did not answer a poll      its outage                     Log, FeedJob(PollFailed)
    PollAnswered     it answered                          its outage over                -
    AdoptedOnMachine an adopted job in its lease          the book (its clock, a start)  -

Times are the executor's monotonic clock (:class:`~agora_optimizer.executor.lifecycle.Now`, passed with every
event; the machine reads no clock), plan clocks a run book's. The executor's docs name the rules:
docs/running-plans.md (machine order, leases, repairs) and docs/spot.md (interruptions).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeAlias

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.config import OOM_RETRY_GROWTH, ExecutorConfig
from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import JobStatus, lease_key
from agora_optimizer.executor.lifecycle import Heartbeat, Log, Now, PollFailed, Released
from agora_optimizer.executor.runs.events import (
    AdoptedOnMachine,
    AskAheadDue,
    CloseLease,
    FeedJob,
    HeldJob,
    HeldWaiting,
    Instance,
    Interrupted,
    JobLeft,
    LeaseGranted,
    LeaseOpened,
    LeaseRefused,
    LeasesDue,
    LeaseWanted,
    MoveHeld,
    OpenLease,
    PollAnswered,
    PollUnanswered,
    ReadStates,
    RecordLeases,
    RecordRepair,
    RepairsDue,
    Replan,
    ReplanFailed,
    Replanned,
    Reprioritize,
    Requeue,
    Requeued,
    RerunOnFallback,
    Run,
    RunAction,
    RunEvent,
    StatesDue,
    StatesRead,
    StatusRead,
    TryEnded,
)
from agora_optimizer.executor.runs.interruptions import (
    fallback_for,
    instance_of,
    interrupted_lease,
    interruption_repair,
    on_fallback,
)
from agora_optimizer.executor.runs.learning import RunLearning
from agora_optimizer.executor.runs.leases import OpenLeases, machine_lease, replaced_repair
from agora_optimizer.executor.runs.machine_order import MachineOrder, MachinePlan, ReplacedMachine, RunBook, may_start
from agora_optimizer.executor.runs.repair import RunRepair, RunRepairs, clock_at, on_the_wall
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.placement import Placement

STATES_INTERVAL_S = 5.0  # how often, per DAG run with held tasks or open leases, Airflow's task states are read
RUNS_MAX = 1024  # DAG runs whose machine book is kept
FALLBACKS_MAX = 4096  # task instances an interruption moved off spot, kept until their fallback's job ends


class RunMachineError(AgoraError):
    """An event the run machine has no handler for (a bug in the executor, not in the input)."""


# -- the machine -----------------------------------------------------------------------------


class RunMachine:
    """The runs' books, repairs, leases, fallbacks and the backends' outages; changed only by :meth:`handle`.

    ``config`` is the executor's (``machine_hold_s``, ``backend_outage_s``, ``replan_slack``,
    ``replan_min_late_s``, ``run_shrink_k``), ``resources`` its catalog's, by name.
    """

    def __init__(self, config: ExecutorConfig, resources: Mapping[str, Resource]) -> None:
        self._resources = resources
        self._books: BoundedDict[Run, RunBook] = BoundedDict(RUNS_MAX)
        self._repairs = RunRepairs()
        self._learning = RunLearning(run_k=config.run_shrink_k)
        self._leases = OpenLeases()
        self._fallbacks: BoundedDict[Instance, str] = BoundedDict(FALLBACKS_MAX)
        self._outage_since: dict[str, float] = {}  # backend -> when its polls began to fail
        self._states_at: dict[Run, float] = {}  # when each run's Airflow task states were last read
        self.config = config

    @property
    def config(self) -> ExecutorConfig:
        return self._config

    @config.setter
    def config(self, config: ExecutorConfig) -> None:
        self._config = config
        self._repairs.slack = config.replan_slack
        self._repairs.min_late_s = config.replan_min_late_s

    def handle(self, event: RunEvent, now: Now) -> list[RunAction]:
        """The one way the machine changes: ``event`` at ``now``; returns what the executor must do, in order."""
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise RunMachineError(f"the run machine has no handler for {type(event).__name__}")
        return handler(self, event, now)

    # -- what the executor asks --------------------------------------------------------------

    def book(self, run: Run) -> RunBook | None:
        """The run's machine book, None for a run with no task on a planned machine yet."""
        return self._books.get(run)

    def repair_state(self, run: Run) -> RunRepair:
        """The run's repair state (drifts waiting, re-planned placements, repairs made), empty at first."""
        return self._repairs.run(*run)

    def runtime_factors(self, run: Run) -> dict[str, float]:
        """What the run taught of its runtimes: each task to come whose category's factor is not 1."""
        book = self._books.get(run)
        return {} if book is None else self._learning.factors(run, book)

    @property
    def on_fallback(self) -> Mapping[Instance, str]:
        """The task instances an interruption moved off spot, and their fallback, until its job ends."""
        return dict(self._fallbacks)

    @property
    def replaced(self) -> list[ReplacedMachine]:
        """The planned machines whose backend refused them, whose tasks ran on their pool instead."""
        return self._leases.replaced

    def order_of(self, run: Run, plan_version: str) -> MachineOrder | None:
        """The run's machine order (since its last repair) if its book follows ``plan_version``; else None (the
        plan's own order is then read)."""
        book = self._books.get(run)
        return book.order if book is not None and book.plan_version == plan_version else None

    def repaired_placement(self, run: Run, task: str, placement: Placement) -> Placement:
        """The placement a repair of the task's run gave it (same plan version), else ``placement``."""
        if placement.source != "plan":
            return placement
        assignment = self._repairs.override(*run, task)
        book = self._books.get(run)
        if assignment is None or book is None or book.plan_version != placement.plan_version:
            return placement
        return replace(
            placement,
            resource=assignment.resource,
            machine=assignment.machine,
            cores=assignment.cores,
            memory_bytes=assignment.memory_bytes,
            planned_start_s=assignment.start_s,
        )

    def fallback_placement(self, instance: Instance, placement: Placement) -> Placement:
        """The fallback's placement of a task instance an interruption moved off spot, else ``placement``."""
        fallback = self._fallbacks.get(instance)
        if fallback is None or fallback == placement.resource:
            return placement
        return on_fallback(placement, fallback)

    def release_order(self, held: Iterable[HeldJob]) -> list[HeldJob]:
        """The held jobs in the order their turn is decided: earliest planned start (on its run's clock) first."""

        def planned_start(job: HeldJob) -> float:
            book = self._book_of(job.record, job.on_machine)
            task = None if book is None else book.order.by_task.get(job.record.plan_task)
            return (book.origin_s if book else 0.0) + (task.start_s if task else 0.0)

        return sorted(held, key=planned_start)

    def unused_machine_resources(self) -> set[str]:
        """The resources of the planned machines no task has used yet (whose backends' waits :class:`AskAheadDue`
        wants)."""
        return {
            machine.resource
            for book in self._books.values()
            for machine in book.order.machines.values()
            if machine.resource in self._resources and not _used(book, machine)
        }

    # -- leases ------------------------------------------------------------------------------

    def _lease_wanted(self, event: LeaseWanted, now: Now) -> list[RunAction]:
        run, placement, order = event.run, event.placement, event.order
        machine = order.machines.get(placement.machine)
        if machine is None or event.task not in order.by_task:
            return []
        if placement.cores > machine.cores or placement.memory_bytes > machine.memory_bytes:
            return [
                Log(
                    "warning",
                    f"agora: {run[0]}.{event.task} reserves {placement.cores} cores and {placement.memory_bytes} "
                    f"bytes, more than its machine {machine.machine} has; it runs beside it",
                )
            ]
        resource = self._resources.get(machine.resource)
        backend = resource.backend if resource is not None else event.backend
        key = lease_key(*run, machine.machine)
        if self._leases.is_replaced(key):
            return []
        lease = self._leases.get(key)
        if lease is not None:
            self._follow(run, order, placement.plan_version, now)
            return [LeaseGranted(lease)]
        return [OpenLease(run, machine, machine_lease(run, machine), backend, order, placement.plan_version)]

    def _lease_opened(self, event: LeaseOpened, now: Now) -> list[RunAction]:
        self._leases.opened(event.lease, event.backend)
        if event.ahead_s is not None:
            dag_id, run_id = event.run
            return [
                Log(
                    "info",
                    f"agora: asked for machine {event.lease.machine} of {dag_id} run {run_id} {event.ahead_s:.1f} s "
                    "ahead of its planned start (its wait)",
                )
            ]
        self._follow(event.run, event.order, event.plan_version, now)
        return [LeaseGranted(event.lease)]

    def _lease_refused(self, event: LeaseRefused, now: Now) -> list[RunAction]:
        (dag_id, run_id), machine = event.run, event.machine
        replaced = ReplacedMachine(dag_id, run_id, machine.machine, machine.resource, event.reason)
        self._leases.refused(lease_key(dag_id, run_id, machine.machine), replaced)
        book = self._books.get(event.run)
        at_s = book.clock_s(now.monotonic_s) if book is not None and book.plan_version == event.plan_version else 0.0
        return [
            RecordRepair(event.run, replaced_repair(machine, event.reason, at_s)),
            Log(
                "warning",
                f"agora: machine {machine.machine} of {dag_id} run {run_id} cannot be had ({event.reason}); "
                f"its tasks run on {machine.resource}'s pool without it",
            ),
        ]

    def _ask_ahead_due(self, event: AskAheadDue, now: Now) -> list[RunAction]:
        """A machine is asked for at its planned start less its backend's predicted wait, on the run's plan
        clock; one whose tasks never come is released as any other."""
        actions: list[RunAction] = []
        for run, book in list(self._books.items()):
            for machine in book.order.machines.values():
                # The cheap tests first: this runs at every sync over every run kept, most of them long over.
                if _used(book, machine):
                    continue  # the machine has been used (its lease since released) or its tasks are not coming
                resource = self._resources.get(machine.resource)
                if resource is None:
                    continue
                lead_s = event.lead_s.get(machine.resource, 0.0)
                if lead_s <= 0 or book.clock_s(now.monotonic_s) < machine.planned_start_s - lead_s:
                    continue
                key = lease_key(*run, machine.machine)
                if self._leases.is_known(key) or book.machine_ended(machine.machine):
                    continue
                lease = machine_lease(run, machine)
                actions.append(OpenLease(run, machine, lease, resource.backend, book.order, book.plan_version, lead_s))
        return actions

    def _leases_due(self, event: LeasesDue, now: Now) -> list[RunAction]:
        actions: list[RunAction] = []
        for lease, backend in self._leases.close_ended(self._books, event.in_use):
            actions.append(CloseLease(lease, backend))
            actions.append(Log("info", f"agora: released machine {lease.machine} of {lease.dag_id} run {lease.run_id}"))
        return actions

    def _follow(self, run: Run, order: MachineOrder, plan_version: str, now: Now) -> None:
        """The run's book follows ``plan_version`` from now: made (its plan clock starting now) when the run has
        none, or one of another plan."""
        book = self._books.get(run)
        if book is None or book.plan_version != plan_version:
            self._books[run] = RunBook(order, origin_s=now.monotonic_s, plan_version=plan_version)

    # -- tasks on their machines -------------------------------------------------------------

    def _status_read(self, event: StatusRead, now: Now) -> list[RunAction]:
        return self._task_ended(event.record, event.on_machine, event.status, now)

    def _job_left(self, event: JobLeft, now: Now) -> list[RunAction]:
        return self._task_ended(event.record, event.on_machine, None, now)

    def _task_ended(self, record: JobRecord, on_machine: bool, status: JobStatus | None, now: Now) -> list[RunAction]:
        """The job's task process ended (its worker's mark, or the job's end): its machine has room again.
        With the job's status, a late end or a failure is a drift its run's next repair answers."""
        book = self._book_of(record, on_machine)
        if book is None or not (
            status is None or status.task_ended_at is not None or status.phase in ("finished", "lost")
        ):
            return []
        task_id, dag_id, run_id = record.plan_task, record.dag_id, record.run_id
        ended_at = None if status is None else status.task_ended_at or status.ended_at
        end_s = clock_at(book, now.monotonic_s, now.wall, ended_at)
        if book.end(task_id, end_s) and status is not None:
            self._repairs.ended(book, dag_id, run_id, task_id, end_s)
            self._learning.ended(book, record, status, end_s, now, self._repairs)  # its category's runtimes
        if status is not None:
            self._learning.finished(book, record, status, self._repairs)  # its category's memory
        if status is not None and status.phase in ("finished", "lost") and not status.succeeded:
            retry_bytes = math.ceil(record.memory_bytes * OOM_RETRY_GROWTH)
            self._repairs.failed(book, dag_id, run_id, task_id, status, retry_bytes)
        return []

    def _states_due(self, event: StatesDue, now: Now) -> list[RunAction]:
        """Airflow's task states of the runs with held jobs or open leases are read (each at most every
        :data:`STATES_INTERVAL_S`, or at each sync while a lease waits to hear that no retry will come): a task
        that will never come no longer holds its machine, nor a task that ended for good its lease."""
        actions: list[RunAction] = []
        for run in event.runs | self._leases.runs():
            book = self._books.get(run)
            if book is None:
                continue
            due = now.monotonic_s - self._states_at.get(run, -math.inf) >= STATES_INTERVAL_S
            if not due and not book.awaits_word():  # a machine whose lease waits for the word is asked at once
                continue
            self._states_at[run] = now.monotonic_s
            actions.append(ReadStates(run))
        return actions

    def _states_read(self, event: StatesRead, now: Now) -> list[RunAction]:
        book = self._books.get(event.run)
        if book is not None:
            book.settle(event.states)
            self._repairs.settled(book, *event.run, event.states)
        return []

    def _held_waiting(self, event: HeldWaiting, now: Now) -> list[RunAction]:
        """A held job goes when its machine's order lets it (:func:`~.machine_order.may_start`), or when its run's
        plan is no longer known; else it waits, heartbeating."""
        job = event.job
        book = self._book_of(job.record, job.on_machine)
        held_s = now.monotonic_s - (job.held_since_s if job.held_since_s is not None else now.monotonic_s)
        task_id = job.record.plan_task
        if book is None:
            start, reason = True, "its run's plan is no longer known"
        else:
            decision = may_start(book, task_id, now.monotonic_s, held_s, self._config.lifecycle.machine_hold_s)
            start, reason = decision.start, decision.reason
        if not start:
            return [FeedJob(job.key, Heartbeat())]
        if book is not None:
            book.start(task_id, book.clock_s(now.monotonic_s))
            self._repairs.run(job.record.dag_id, job.record.run_id).started(task_id)
        return [FeedJob(job.key, Released(reason))]

    def _adopted_on_machine(self, event: AdoptedOnMachine, now: Now) -> list[RunAction]:
        book = self._books.get(event.run)
        if book is None:
            return []
        planned = book.order.by_task.get(event.task)
        if event.new_book and planned is not None and event.started_at is not None:
            # The run's plan clock as the earlier scheduler had it, near enough: the task began at its planned start.
            book.origin_s = now.monotonic_s - (now.wall - event.started_at).total_seconds() - planned.start_s
        book.start(event.task, clock_at(book, now.monotonic_s, now.wall, event.started_at))
        return []

    # -- repairs -----------------------------------------------------------------------------

    def _repairs_due(self, event: RepairsDue, now: Now) -> list[RunAction]:
        """Each run with drifts waiting is re-planned (at most once per run per few seconds)."""
        if not self._repairs.on:
            return []
        actions: list[RunAction] = []
        for run, repair in list(self._repairs.runs.items()):
            if not repair.due(now.monotonic_s):
                continue
            drifts, repair.drifts, repair.last_s = repair.drifts, [], now.monotonic_s
            book = self._books.get(run)
            if book is not None:
                factors = self.runtime_factors(run)
                memory = self._learning.memory_factors(run, book, repair.retries)
                actions.append(Replan(run, book, repair, now.monotonic_s, tuple(drifts), factors, memory))
        return actions

    def _replanned(self, event: Replanned, now: Now) -> list[RunAction]:
        """The run's new order and overrides; each held job whose task moved goes to its new machine."""
        book, repair = self._books.get(event.run), self._repairs.runs.get(event.run)
        if book is None or repair is None:
            return []
        fixed = event.repaired
        weights = book.reordered(fixed.order)
        repair.overrides.update(fixed.overrides)
        repair.repairs += 1
        self._learning.applied(event.run, book, fixed.runtime_factors, fixed.memory_factors, repair.retries)
        dag_id, run_id = event.run
        return [
            MoveHeld(event.run, fixed.overrides, f"repair at {fixed.repair.at_s:.1f} s"),
            *([Reprioritize(event.run, weights)] if weights else []),
            RecordRepair(event.run, on_the_wall(fixed.repair, book.clock_s(now.monotonic_s), now.wall)),
            Log(
                "warning",
                f"agora: repaired {dag_id} run {run_id} at {fixed.repair.at_s:.1f} s: {fixed.repair.reason}; "
                f"{fixed.repair.detail}",
            ),
        ]

    def _replan_failed(self, event: ReplanFailed, now: Now) -> list[RunAction]:
        """A repair never stops a run: it goes on as planned, with one log line."""
        reasons = "; ".join(drift.reason for drift in event.drifts)
        dag_id, run_id = event.run
        return [
            Log(
                "warning",
                f"agora: cannot repair {dag_id} run {run_id} after {reasons} ({event.error}); it goes on as planned",
            )
        ]

    # -- spot capacity -----------------------------------------------------------------------

    def _interrupted(self, event: Interrupted, now: Now) -> list[RunAction]:
        """An interrupted job of a spot type re-runs its try on the type's fallback, once per task instance and
        run; any other is reported to Airflow as any failure (no action)."""
        record = event.record
        fallback = fallback_for(self._resources.get(record.resource), self._resources)
        instance = instance_of(record)
        if fallback is None or instance in self._fallbacks:
            return []  # not spot capacity, or already its re-run: a failure as any other
        self._fallbacks[instance] = fallback.name  # this try's re-run, or Airflow's next try, runs there
        if event.ti_id is None:
            why_not = "it was adopted, and its workload is no longer the executor's"
            return self._not_rerun(record, event.status, fallback.name, why_not, now)
        return [Requeue(record, event.status, fallback.name, event.ti_id)]

    def _requeued(self, event: Requeued, now: Now) -> list[RunAction]:
        record, status = event.record, event.status
        if event.why_not:
            return self._not_rerun(record, status, event.fallback, event.why_not, now)
        run = (record.dag_id, record.run_id)
        actions: list[RunAction] = [
            RecordRepair(run, interruption_repair(record, status, event.fallback, self._at_s(run, now), True))
        ]
        if (lease := interrupted_lease(record, status)) is not None:
            actions.append(RecordLeases((lease,)))  # the re-run's row replaces the try's: the spot time is counted here
        return [*actions, RerunOnFallback(record, event.fallback)]

    def _not_rerun(
        self, record: JobRecord, status: JobStatus, fallback: str, why_not: str, now: Now
    ) -> list[RunAction]:
        run = (record.dag_id, record.run_id)
        return [
            RecordRepair(run, interruption_repair(record, status, fallback, self._at_s(run, now), False)),
            Log(
                "warning",
                f"agora: {record.label} was interrupted on spot {record.resource} "
                f"({status.reason or 'capacity taken back'}); not re-run on {fallback} now ({why_not}): "
                "Airflow's next try runs there",
            ),
        ]

    def _try_ended(self, event: TryEnded, now: Now) -> list[RunAction]:
        """A job of the task instance ended for good; if it was the fallback's, later runs of the task follow their
        plan again, and a planned run's book and repair state learn when the re-run ended (the re-run has no
        planned machine, whose end would tell them)."""
        record = event.record
        instance = instance_of(record)
        if record.resource != self._fallbacks.get(instance):
            return []
        del self._fallbacks[instance]
        run = (record.dag_id, record.run_id)
        repair = self._repairs.runs.get(run)
        if repair is not None:
            repair.started(record.plan_task)  # no longer a retry to come for the re-planner
        book = self._books.get(run)
        if book is not None:
            book.ended_again(record.plan_task, clock_at(book, now.monotonic_s, now.wall, event.status.ended_at))
        return []

    # -- backends' outages -------------------------------------------------------------------

    def _poll_unanswered(self, event: PollUnanswered, now: Now) -> list[RunAction]:
        """The jobs of a backend that does not answer hear how long it has been down (their lifecycle decides when
        they are lost); past ``backend_outage_s`` the next outage starts anew."""
        since = self._outage_since.setdefault(event.backend, now.monotonic_s)
        down_s = now.monotonic_s - since
        if down_s > self._config.lifecycle.backend_outage_s:  # its jobs are lost: the next outage starts anew
            self._outage_since.pop(event.backend, None)
        return [
            Log(
                "warning",
                f"Cannot poll {event.backend} for {len(event.jobs)} jobs ({event.error}); down for {down_s:.0f} s",
            ),
            *(FeedJob(key, PollFailed(event.error, down_s)) for key in event.jobs),
        ]

    def _poll_answered(self, event: PollAnswered, now: Now) -> list[RunAction]:
        self._outage_since.pop(event.backend, None)
        return []

    # -- helpers -----------------------------------------------------------------------------

    def _book_of(self, record: JobRecord, on_machine: bool) -> RunBook | None:
        return self._books.get((record.dag_id, record.run_id)) if on_machine else None

    def _at_s(self, run: Run, now: Now) -> float:
        """Now on the run's plan clock (0 for a run without a machine book)."""
        book = self._books.get(run)
        return 0.0 if book is None else book.clock_s(now.monotonic_s)


def _used(book: RunBook, machine: MachinePlan) -> bool:
    """A task of the machine has started or will never come: its lease is not to be asked for ahead."""
    return any(t.task_id in book.started or t.task_id in book.gone for t in machine.tasks)


Handler: TypeAlias = Callable[[RunMachine, Any, Now], list[RunAction]]

_HANDLERS: dict[type[Any], Handler] = {
    LeaseWanted: RunMachine._lease_wanted,
    LeaseOpened: RunMachine._lease_opened,
    LeaseRefused: RunMachine._lease_refused,
    AskAheadDue: RunMachine._ask_ahead_due,
    LeasesDue: RunMachine._leases_due,
    StatusRead: RunMachine._status_read,
    JobLeft: RunMachine._job_left,
    StatesDue: RunMachine._states_due,
    StatesRead: RunMachine._states_read,
    HeldWaiting: RunMachine._held_waiting,
    RepairsDue: RunMachine._repairs_due,
    Replanned: RunMachine._replanned,
    ReplanFailed: RunMachine._replan_failed,
    Interrupted: RunMachine._interrupted,
    Requeued: RunMachine._requeued,
    TryEnded: RunMachine._try_ended,
    PollUnanswered: RunMachine._poll_unanswered,
    PollAnswered: RunMachine._poll_answered,
    AdoptedOnMachine: RunMachine._adopted_on_machine,
}

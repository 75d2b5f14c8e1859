"""Planned machines at run time: each plan's machine order, each run's book, held jobs released, repairs applied.

A task the plan put on a machine (``placement.machine``, ``TYPE#N``) runs as planned: its job carries
a :class:`~agora_optimizer.executor.jobs.spec.MachineLease` sized as the machine's type
(:mod:`~agora_optimizer.executor.runs.leases`), and the job is ``held`` until the machine's order lets it
start (:mod:`~agora_optimizer.executor.runs.machine_order`; docs/running-plans.md). The lease is opened
with the backend when the machine's first task arrives (or ahead of it by the backend's predicted
wait) and closed when its last planned task has ended (or will never come). A machine the backend
cannot give (``open_lease`` raises) has its tasks run without it, on their resource's pool, with one
log line and a :class:`~agora_optimizer.executor.runs.machine_order.ReplacedMachine` in
``AgoraExecutor.replaced_machines``. A run that drifts from its plan is repaired
(:mod:`~agora_optimizer.executor.runs.repair`); held jobs whose task moved follow it.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.executor_base import OOM_RETRY_GROWTH, ExecutorBase, clock_now, plan_task
from agora_optimizer.executor.jobs.placement import Placement
from agora_optimizer.executor.jobs.spec import JobStatus, MachineLease
from agora_optimizer.executor.lifecycle import Heartbeat, Job, JobState, Moved, Released
from agora_optimizer.executor.runs.machine_order import MachineOrder, RunBook, may_start
from agora_optimizer.executor.runs.repair import Repaired, RunRepair, clock_at
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.instances import instance_id

if TYPE_CHECKING:
    pass


STATES_INTERVAL_S = 5.0  # how often, per DAG run with held tasks or open leases, Airflow's task states are read
NO_STATE = "none"  # a task instance Airflow has not scheduled yet (its state is NULL)


class PlannedRuns(ExecutorBase):
    """Keeps each run's machine book, releases held jobs in their machine's order, and repairs runs."""

    def _order(self, dag_id: str, version: str) -> MachineOrder | None:
        """The machine order of the DAG's plan of ``version``, read once per (dag_id, version)."""
        if (dag_id, version) not in self._orders:
            order: MachineOrder | None = None
            try:
                from agora_optimizer.plans.store import default_plan_store

                stored = default_plan_store().find(dag_id, version)
                if stored is None:
                    self.log.warning("agora: plan %s of DAG %s not found; its tasks run unordered", version, dag_id)
                else:
                    order = MachineOrder.from_plan(stored.plan, self._resources)
            except AgoraError as exc:
                self.log.warning(
                    "agora: plan %s of DAG %s unreadable (%s); its tasks run unordered", version, dag_id, exc
                )
            self._orders[(dag_id, version)] = order
        return self._orders[(dag_id, version)]

    def _lease_for(self, ti: Any, placement: Placement, resource: Resource) -> MachineLease | None:
        """The planned machine a task runs on (its lease open with the backend), or None: it runs as any task."""
        if not placement.machine or placement.source != "plan":
            return None
        run = (ti.dag_id, ti.run_id)
        book = self._books.get(run)
        if book is not None and book.plan_version == placement.plan_version:
            order: MachineOrder | None = book.order  # the plan's, or the run's since its last repair
        else:
            book, order = None, self._order(ti.dag_id, placement.plan_version)
        machine = None if order is None else order.machines.get(placement.machine)
        if order is None or machine is None or plan_task(ti) not in order.by_task:
            return None
        if placement.cores > machine.cores or placement.memory_bytes > machine.memory_bytes:
            self.log.warning(
                "agora: %s.%s reserves %d cores and %d bytes, more than its machine %s has; it runs beside it",
                ti.dag_id, plan_task(ti), placement.cores, placement.memory_bytes, machine.machine,
            )  # fmt: skip
            return None
        backend = self._resources[machine.resource].backend if machine.resource in self._resources else resource.backend
        lease = self._leases.lease_for(run, machine, backend, book)
        if lease is not None and book is None:
            self._books[run] = RunBook(order, origin_s=time.monotonic(), plan_version=placement.plan_version)
        return lease

    def _repaired_placement(self, ti: Any, placement: Placement) -> Placement:
        """The placement a repair of the task's run gave it (same plan version), else ``placement``."""
        if placement.source != "plan":
            return placement
        assignment = self._repairer.override(ti.dag_id, ti.run_id, plan_task(ti))
        book = self._books.get((ti.dag_id, ti.run_id))
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

    def _book(self, job: Job) -> RunBook | None:
        return self._books.get((job.record.dag_id, job.record.run_id)) if job.spec.lease is not None else None

    def _release_held(self) -> None:
        """Let go each held job whose machine's order allows it (earliest planned first), heartbeat the rest."""
        now = time.monotonic()
        held = [job for job in self._jobs.values() if job.state == JobState.HELD]
        self._settle_runs({(job.record.dag_id, job.record.run_id) for job in held}, now)

        def planned_start(job: Job) -> float:
            book = self._book(job)
            task = None if book is None else book.order.by_task.get(job.record.plan_task)
            return (book.origin_s if book else 0.0) + (task.start_s if task else 0.0)

        for job in sorted(held, key=planned_start):
            book = self._book(job)
            held_s = now - (job.held_since_s if job.held_since_s is not None else now)
            if book is None:
                decision_start, reason = True, "its run's plan is no longer known"
            else:
                decision = may_start(book, job.record.plan_task, now, held_s, self.config.lifecycle.machine_hold_s)
                decision_start, reason = decision.start, decision.reason
            if decision_start:
                if book is not None:
                    book.start(job.record.plan_task, book.clock_s(now))
                    self._repairer.run(job.record.dag_id, job.record.run_id).started(job.record.plan_task)
                self._feed(job, Released(reason))
            else:
                self._feed(job, Heartbeat())

    def _settle_runs(self, runs: set[tuple[str, str]], now: float) -> None:
        """Read Airflow's task states of the runs with held jobs or open leases (each at most every
        :data:`STATES_INTERVAL_S`, or at each sync while a lease waits to hear that no retry will come): a
        task that will never come no longer holds its machine, nor a task that ended for good its lease."""
        runs |= self._leases.runs()
        for run in runs:
            book = self._books.get(run)
            if book is None:
                continue
            due = now - self._states_at.get(run, -math.inf) >= STATES_INTERVAL_S
            if not due and not book.awaits_word():  # a machine whose lease waits for the word is asked at once
                continue
            self._states_at[run] = now
            try:
                states = _airflow_states(*run)
            except Exception as exc:  # the metadata database is the scheduler's; a hiccup only delays the order
                self.log.warning("agora: cannot read the task states of %s run %s: %s", run[0], run[1], exc)
                continue
            book.settle(states)
            self._repairer.settled(book, *run, states)

    def _machine_ended(self, job: Job, status: JobStatus | None = None) -> None:
        """The job's task process ended (its worker's mark, or the job's end): its machine has room again.
        With the job's status, a late end or a failure is a drift its run's next repair answers."""
        book = self._book(job)
        if book is None or not (
            status is None or status.task_ended_at is not None or status.phase in ("finished", "lost")
        ):
            return
        now = clock_now()
        task_id, dag_id, run_id = job.record.plan_task, job.record.dag_id, job.record.run_id
        ended_at = None if status is None else status.task_ended_at or status.ended_at
        end_s = clock_at(book, now.monotonic_s, now.wall, ended_at)
        if book.end(task_id, end_s) and status is not None:
            self._repairer.ended(book, dag_id, run_id, task_id, end_s)
        if status is not None and status.phase in ("finished", "lost") and not status.succeeded:
            retry_bytes = math.ceil(job.record.memory_bytes * OOM_RETRY_GROWTH)
            self._repairer.failed(book, dag_id, run_id, task_id, status, retry_bytes)

    def _repair_runs(self) -> None:
        """Re-plan each run with drifts waiting (at most once per run per few seconds) and apply the answer.
        Any error leaves the run as planned, with one log line: a plan never stops a DAG."""
        if not self._repairer.on:
            return
        now = time.monotonic()
        for key, run in list(self._repairer.runs.items()):
            if not run.due(now):
                continue
            drifts, run.drifts, run.last_s = run.drifts, [], now
            book = self._books.get(key)
            if book is None:
                continue
            try:
                self._apply_repair(book, run, self._repairer.replan(book, run, now, drifts))
            except Exception as exc:
                reasons = "; ".join(drift.reason for drift in drifts)
                self.log.warning(
                    "agora: cannot repair %s run %s after %s (%s); it goes on as planned", *key, reasons, exc
                )

    def _apply_repair(self, book: RunBook, run: RunRepair, fixed: Repaired) -> None:
        """The run's new order and overrides; each held job whose task moved goes to its new machine."""
        book.order = fixed.order
        run.overrides.update(fixed.overrides)
        run.repairs += 1
        for job in list(self._jobs.values()):
            record = job.record
            if job.state != JobState.HELD or (record.dag_id, record.run_id) != (run.dag_id, run.run_id):
                continue
            new = fixed.overrides.get(record.plan_task)
            lease = job.spec.lease
            if new is None or job.workload is None or (lease is not None and lease.machine == new.machine):
                continue
            moved = self._job_for(job.workload, write=False)
            self._feed(job, Moved(moved.spec, moved.record, f"repair at {fixed.repair.at_s:.1f} s"))
        self._reports.add_repair(run.dag_id, run.run_id, fixed.repair)
        self.log.warning(
            "agora: repaired %s run %s at %.1f s: %s; %s",
            run.dag_id, run.run_id, fixed.repair.at_s, fixed.repair.reason, fixed.repair.detail,
        )  # fmt: skip


def _airflow_states(dag_id: str, run_id: str) -> dict[str, str]:
    """The state of each task instance of a DAG run, from Airflow's metadata database, by its plan
    name (``task[i]`` for a mapped task's instance; a mapped task not expanded yet is its one instance
    of map index -1, by its task id).

    A task with no state yet (its upstream tasks still run) is in it too, as :data:`NO_STATE`: the run
    has it, and it is still to come (left out, the machine order took it for a task the run lacks).

    A session of its own, read only and never committed: the scheduler's thread-local session
    (``create_session``) commits on exit, which Airflow forbids inside the scheduler's loop (its
    HA locks), and sharing it would mix this read into the scheduler's transaction.
    """
    from airflow import settings as airflow_settings
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    if airflow_settings.Session is None:
        return {}
    with airflow_settings.Session.session_factory() as session:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state).where(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id
            )
        ).all()
    return {
        instance_id(str(task_id), int(index)): str(state) if state is not None else NO_STATE
        for task_id, index, state in rows
    }

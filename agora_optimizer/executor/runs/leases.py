"""The leases of planned machines: one per machine of a run's plan, held with the machine's backend.

A task the plan put on a machine (``TYPE#N``) runs inside that machine's lease
(:class:`~agora_optimizer.executor.jobs.spec.MachineLease`, sized as the machine's type). :class:`Leases`
keeps the open ones and decides when each opens and closes:

- it opens when the machine's first task is submitted (:meth:`Leases.lease_for`) or, for a backend
  that predicts a wait for it (a SLURM allocation's queue wait), that long before the machine's
  planned start on the run's plan clock (:meth:`Leases.open_due`), so that it is held when its
  first task is ready;
- a machine its backend cannot give (``open_lease`` raises) is *replaced*: its tasks run on their
  type's pool without it, with one log line, and the run record gets a repair saying why;
- it closes once every planned task of the machine has ended for good or will never come, and no
  job of it is left in the executor's table (a supervisor still reporting runs inside its
  allocation) (:meth:`Leases.close_ended`); the backends' released leases, with their real start
  and end, go to the run record.

No Airflow: the executor passes the runs' books and asks.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.backends.base import Backend
from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.jobs.spec import BackendError, MachineLease, lease_key
from agora_optimizer.executor.runs.machine_order import MachinePlan, ReplacedMachine, RunBook
from agora_optimizer.executor.runs.repair import RunReports
from agora_optimizer.model.catalog import Resource
from agora_optimizer.runs.lease_record import LeaseRecord
from agora_optimizer.runs.record import Repair

RUNS_MAX = 1024  # replaced machines remembered (one per run at most, mostly)
LEASE_RECORDS_MAX = 10_000  # released leases kept for the run record

Run = tuple[str, str]  # (dag_id, run_id)

log = logging.getLogger(__name__)


class Leases:
    """The open leases of planned machines, by lease key, and the machines their backend refused."""

    def __init__(self, backend: Callable[[str], Backend], reports: RunReports) -> None:
        self._backend = backend
        self._reports = reports
        self._open: dict[str, tuple[MachineLease, str]] = {}  # lease key -> (lease, backend name)
        self._replaced: BoundedDict[str, ReplacedMachine] = BoundedDict(RUNS_MAX)
        self.records: list[LeaseRecord] = []  # the backends' released leases, for the run record

    @property
    def replaced(self) -> list[ReplacedMachine]:
        return list(self._replaced.values())

    def runs(self) -> set[Run]:
        """The runs with a lease open now."""
        return {(lease.dag_id, lease.run_id) for lease, _ in self._open.values()}

    def lease_for(self, run: Run, machine: MachinePlan, backend: str, book: RunBook | None) -> MachineLease | None:
        """The machine's lease, opened now if it is not yet; None if its backend refused it (now or before)."""
        key = lease_key(run[0], run[1], machine.machine)
        if key in self._replaced:
            return None
        held = self._open.get(key)
        return held[0] if held is not None else self._open_machine(run, machine, backend, book)

    def open_due(self, books: Iterable[tuple[Run, RunBook]], resources: Mapping[str, Resource]) -> None:
        """Ask ahead for each planned machine whose backend predicts a wait for it: at its planned start less
        that wait on the run's plan clock. A machine whose tasks never come is released as any other."""
        now = time.monotonic()
        for run, book in books:
            for machine in book.order.machines.values():
                # The cheap tests first: this runs at every sync over every run kept, most of them long over.
                if any(t.task_id in book.started or t.task_id in book.gone for t in machine.tasks):
                    continue  # the machine has been used (its lease since released) or its tasks are not coming
                resource = resources.get(machine.resource)
                if resource is None:
                    continue
                lead_s = self._backend(resource.backend).lease_lead_s(machine.resource)
                if lead_s <= 0 or book.clock_s(now) < machine.planned_start_s - lead_s:
                    continue
                key = lease_key(run[0], run[1], machine.machine)
                if key in self._open or key in self._replaced or book.machine_ended(machine.machine):
                    continue
                if self._open_machine(run, machine, resource.backend, book) is not None:
                    log.info(
                        "agora: asked for machine %s of %s run %s %.1f s ahead of its planned start (its wait)",
                        machine.machine, run[0], run[1], lead_s,
                    )  # fmt: skip

    def close_ended(self, books: Mapping[Run, RunBook], in_use: Collection[str], backends: Iterable[Backend]) -> None:
        """Release each lease whose machine's planned tasks have all ended (or will never come) and whose key
        no job in ``in_use`` holds; the leases the backends report released go to :attr:`records` and the
        run reports."""
        for key, (lease, backend_name) in list(self._open.items()):
            book = books.get((lease.dag_id, lease.run_id))
            if key in in_use or (book is not None and not book.machine_ended(lease.machine)):
                continue
            del self._open[key]
            with contextlib.suppress(Exception):  # close_lease never raises; a backend that does must not stop sync
                self._backend(backend_name).close_lease(lease)
            log.info("agora: released machine %s of %s run %s", lease.machine, lease.dag_id, lease.run_id)
        for backend in backends:
            with contextlib.suppress(Exception):
                finished = backend.finished_leases()
                self.records.extend(finished)
                self._reports.add_leases(finished)
        del self.records[:-LEASE_RECORDS_MAX]

    def _open_machine(self, run: Run, machine: MachinePlan, backend: str, book: RunBook | None) -> MachineLease | None:
        """Open the lease of a run's planned machine with its backend; None (the machine re-placed, and
        recorded as a repair) when the backend cannot give it."""
        dag_id, run_id = run
        key = lease_key(dag_id, run_id, machine.machine)
        lease = MachineLease(
            key=key,
            dag_id=dag_id,
            run_id=run_id,
            machine=machine.machine,
            resource=machine.resource,
            cores=machine.cores,
            memory_bytes=machine.memory_bytes,
            tasks=len(machine.tasks),
            planned_start_s=machine.planned_start_s,
            planned_end_s=machine.planned_end_s,
            gpus=machine.gpus,
        )
        try:
            self._backend(backend).open_lease(lease)
        except AgoraError as exc:  # BackendError: the machine cannot be had; its tasks are re-placed
            reason = exc.reason if isinstance(exc, BackendError) else str(exc)
            self._replaced[key] = ReplacedMachine(dag_id, run_id, machine.machine, machine.resource, reason)
            at_s = 0.0 if book is None else book.clock_s(time.monotonic())
            self._reports.add_repair(dag_id, run_id, replaced_repair(machine, reason, at_s))
            log.warning(
                "agora: machine %s of %s run %s cannot be had (%s); its tasks run on %s's pool without it",
                machine.machine, dag_id, run_id, reason, machine.resource,
            )  # fmt: skip
            return None
        self._open[key] = (lease, backend)
        return lease


def replaced_repair(machine: MachinePlan, reason: str, at_s: float) -> Repair:
    """The run record's entry for a planned machine the backend could not give."""
    tasks = tuple(task.task_id for task in machine.tasks)
    return Repair(
        round(at_s, 3),
        f"machine {machine.machine} could not be had: {reason}",
        tasks,
        f"its {len(tasks)} tasks run on {machine.resource}'s pool without a lease, unordered",
    )

"""The leases of planned machines: which are open now, and which machines their backend refused (pure: no I/O).

The executor's words, one set: a *machine* is a plan's ``TYPE#N``
(:class:`~agora_optimizer.executor.runs.machine_order.MachinePlan`: its type's capacity and its tasks in the
planned order); a *lease* is the allocation that holds one machine of one DAG run for its tasks
(:class:`~agora_optimizer.executor.jobs.spec.MachineLease`, sized as the machine's type, keyed by
:func:`~agora_optimizer.executor.jobs.spec.lease_key`), asked of the machine's backend; a *lease record* is a
lease as it really ran, released, with its real start and end (:class:`~agora_optimizer.runs.lease_record.LeaseRecord`,
for the run record); a *replaced machine* is a machine whose lease its backend refused
(:class:`~agora_optimizer.executor.runs.machine_order.ReplacedMachine`): its tasks run on their type's pool
without it.

:class:`OpenLeases` is the table of the open leases and the replaced machines; the run machine
(:mod:`~agora_optimizer.executor.runs.machine`) decides when a lease opens and closes and keeps this table,
and the executor asks the backends.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.jobs.spec import MachineLease, lease_key
from agora_optimizer.executor.runs.machine_order import MachinePlan, ReplacedMachine, RunBook
from agora_optimizer.runs.record import Repair

RUNS_MAX = 1024  # replaced machines remembered (one per run at most, mostly)

Run = tuple[str, str]  # (dag_id, run_id)


def machine_lease(run: Run, machine: MachinePlan) -> MachineLease:
    """The lease of ``machine`` for the DAG run ``run``: sized as the machine's type, for its planned tasks."""
    dag_id, run_id = run
    return MachineLease(
        key=lease_key(dag_id, run_id, machine.machine),
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


class OpenLeases:
    """The open leases of planned machines, by lease key (each with its backend's name), and the machines
    whose backend refused their lease."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[MachineLease, str]] = {}  # lease key -> (lease, backend name)
        self._replaced: BoundedDict[str, ReplacedMachine] = BoundedDict(RUNS_MAX)

    @property
    def replaced(self) -> list[ReplacedMachine]:
        return list(self._replaced.values())

    def runs(self) -> set[Run]:
        """The runs with a lease open now."""
        return {(lease.dag_id, lease.run_id) for lease, _ in self._open.values()}

    def get(self, key: str) -> MachineLease | None:
        held = self._open.get(key)
        return None if held is None else held[0]

    def is_known(self, key: str) -> bool:
        """The lease is open, or its machine was replaced: either way it is not to be asked for again."""
        return key in self._open or key in self._replaced

    def is_replaced(self, key: str) -> bool:
        return key in self._replaced

    def opened(self, lease: MachineLease, backend: str) -> None:
        self._open[lease.key] = (lease, backend)

    def refused(self, key: str, replaced: ReplacedMachine) -> None:
        self._replaced[key] = replaced

    def close_ended(self, books: Mapping[Run, RunBook], in_use: Collection[str]) -> list[tuple[MachineLease, str]]:
        """Take out (and return, with their backends) the leases whose machine's planned tasks have all ended
        (or will never come) and whose key no job in ``in_use`` holds."""
        closing = []
        for key, (lease, backend) in list(self._open.items()):
            book = books.get((lease.dag_id, lease.run_id))
            if key in in_use or (book is not None and not book.machine_ended(lease.machine)):
                continue
            del self._open[key]
            closing.append((lease, backend))
        return closing


def replaced_repair(machine: MachinePlan, reason: str, at_s: float) -> Repair:
    """The run record's entry for a planned machine the backend could not give."""
    tasks = tuple(task.task_id for task in machine.tasks)
    return Repair(
        round(at_s, 3),
        f"machine {machine.machine} could not be had: {reason}",
        tasks,
        f"its {len(tasks)} tasks run on {machine.resource}'s pool without a lease, unordered",
    )

"""Machines of one DAG run each, with every type's ``count`` shared by all runs at every instant.

Many DAG runs on one platform (:mod:`agora_optimizer.optimize.window`): each run leases machines
of its own (the executor opens a run's leases for that run), and a type's ``count`` bounds the
machines leased at once over all runs, as section 3 of the spec says of one plan. The list
scheduler of :mod:`agora_optimizer.planning.list_schedule` asks :class:`RunPools` where a task may
go: its own run's machines of the type (never another run's), or a new machine whose lease, from
its boot to the task's end, fits under the count beside every lease already placed (the new
machine waits for one to end, where none is free). A machine whose lease would grow over an
instant where the count is reached is not a candidate. No lease of a run begins before its run
does.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping

from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.limits import TIME_TOLERANCE_S
from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.planning.list_schedule import IdlePool, PlannedMachine, TypePools

SEPARATOR = "/"  # RUN/TASK in the window's workflow, RUN/TYPE#N in the ledger
_NO_MACHINES = IdlePool()  # a run's machines of a type before its first (never added to)


class _Profile:
    """How many leases of one type run at each instant: a step function, ``counts[i]`` over
    ``[times[i], times[i + 1])`` (0 before the first time and after the last)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.counts: list[int] = []

    def copy(self) -> _Profile:
        twin = _Profile()
        twin.times, twin.counts = list(self.times), list(self.counts)
        return twin

    def _split(self, time_s: float) -> int:
        """The index of the step that begins at ``time_s`` (made if missing)."""
        i = bisect_left(self.times, time_s)
        if i < len(self.times) and self.times[i] == time_s:
            return i
        self.times.insert(i, time_s)
        self.counts.insert(i, self.counts[i - 1] if i > 0 else 0)
        return i

    def add(self, start_s: float, end_s: float, step: int) -> None:
        if end_s <= start_s:
            return
        first = self._split(start_s)
        last = self._split(end_s)
        for i in range(first, last):
            self.counts[i] += step

    def peak(self, start_s: float, end_s: float) -> int:
        """The most leases at one instant of [start_s, end_s)."""
        if end_s - start_s <= TIME_TOLERANCE_S:
            return 0
        i = max(bisect_right(self.times, start_s + TIME_TOLERANCE_S) - 1, 0)
        peak = 0
        while i < len(self.times) and self.times[i] < end_s - TIME_TOLERANCE_S:
            peak = max(peak, self.counts[i])
            i += 1
        return peak

    def earliest(self, start_s: float, length_s: float, limit: int) -> float:
        """The earliest instant from ``start_s`` with fewer than ``limit`` leases for ``length_s``."""
        candidate = start_s
        i = max(bisect_right(self.times, start_s + TIME_TOLERANCE_S) - 1, 0)
        while i < len(self.times) and self.times[i] < candidate + length_s - TIME_TOLERANCE_S:
            if self.counts[i] >= limit:
                candidate = self.times[i + 1]  # full here: try again from where it ends (the last step is 0)
            i += 1
        return candidate


class CountLedger:
    """Every lease placed so far, per type: whether another fits under the type's ``count``."""

    def __init__(self, catalog: Catalog) -> None:
        self.count = {r.name: r.count for r in catalog.resources}
        self.profiles = {r.name: _Profile() for r in catalog.resources}
        self.spans: dict[str, tuple[float, float]] = {}  # each machine's lease, by its name in the ledger

    def copy(self) -> CountLedger:
        twin = CountLedger.__new__(CountLedger)
        twin.count = self.count
        twin.profiles = {name: profile.copy() for name, profile in self.profiles.items()}
        twin.spans = dict(self.spans)
        return twin

    def fits(self, resource: str, start_s: float, end_s: float, machine: str = "") -> bool:
        """Whether a lease of ``resource`` over [start_s, end_s) keeps the count: a new one, or
        ``machine``'s grown to it (it covers its lease as placed, so only the new part is checked)."""
        limit = self.count[resource]
        if limit is None:
            return True
        profile = self.profiles[resource]
        held = self.spans.get(machine)
        if held is None:
            return profile.peak(start_s, end_s) < limit
        return profile.peak(start_s, held[0]) < limit and profile.peak(held[1], end_s) < limit

    def earliest_start(self, resource: str, start_s: float, length_s: float) -> float:
        """The earliest instant from ``start_s`` at which a new lease of ``length_s`` fits."""
        limit = self.count[resource]
        return start_s if limit is None else self.profiles[resource].earliest(start_s, length_s, limit)

    def place(self, resource: str, machine: str, start_s: float, end_s: float) -> None:
        """Record ``machine``'s lease as [start_s, end_s) (it replaces the one placed before)."""
        profile = self.profiles[resource]
        held = self.spans.get(machine)
        if held is not None:
            profile.add(held[0], held[1], -1)
        profile.add(start_s, end_s, 1)
        self.spans[machine] = (start_s, end_s)


class RunPools(TypePools):
    """Candidates for the list scheduler: the task's own run's machines, and a new one under the shared counts.

    ``run_of`` maps each task to its run; ``run_start_s`` each run to its start (no lease before
    it). Machine ids are ``TYPE#N``, numbered over all runs (a run's plan renumbers its own).
    ``machines_per_type``: of a run's machines of a type, only those that hold the task's parents
    and the this-many that fall idle first (all when ``None``), as :class:`TypePools` does.

    One run alone is one DAG whose type counts hold at every instant rather than over the whole
    schedule (:meth:`one_run`): a machine whose lease has ended leaves room for a new one of its
    type, so a dear type can be leased for each burst of work instead of for the span between them.
    """

    @classmethod
    def one_run(cls, workflow: Workflow, catalog: Catalog, machines_per_type: int | None = None) -> RunPools:
        """Pools for one DAG alone, from time 0, with the counts held at every instant."""
        run_of = dict.fromkeys((t.id for t in workflow.tasks), "")
        memory = min(t.memory_bytes for t in workflow.tasks)
        return cls(catalog, run_of, {"": 0.0}, CountLedger(catalog), memory, machines_per_type)

    def __init__(
        self,
        catalog: Catalog,
        run_of: Mapping[str, str],
        run_start_s: Mapping[str, float],
        ledger: CountLedger,
        min_task_memory_bytes: int,
        machines_per_type: int | None = None,
    ) -> None:
        super().__init__(catalog, machines_per_type, min_task_memory_bytes)
        self.run_of = run_of
        self.run_start_s = run_start_s
        self.ledger = ledger
        self.by_run: dict[tuple[str, str], IdlePool] = {}
        self.made = dict.fromkeys(self.machines, 0)

    def candidates(
        self, task: Task, resource: Resource, parent_machines: dict[int, PlannedMachine]
    ) -> list[PlannedMachine]:
        own = self.by_run.get((self.run_of[task.id], resource.name), _NO_MACHINES)
        chosen = self.idle_first(own, resource, parent_machines)
        if resource.count == 0:
            return chosen
        return [*chosen, self.new_machine(resource, f"{resource.name}#{self.made[resource.name]}")]

    def start_on(self, machine: PlannedMachine, task: Task, ready_s: float, duration_s: float) -> float | None:
        resource = machine.resource
        ready = max(ready_s, self.run_start_s[self.run_of[task.id]] + resource.boot_s)
        start = super().start_on(machine, task, ready, duration_s)
        assert start is not None
        if machine.lease_start_s is None:  # a new machine: it waits for the count, from its boot
            lease_start = self.ledger.earliest_start(
                resource.name, start - resource.boot_s, duration_s + resource.boot_s
            )
            return lease_start + resource.boot_s
        first, last = machine.lease_after(start, start + duration_s)
        return start if self.ledger.fits(resource.name, first, last, self.key(task, machine)) else None

    def place(self, machine: PlannedMachine, task: Task, start_s: float, end_s: float) -> None:
        made, old_end = machine.lease_start_s is None, machine.lease_end_s
        super().place(machine, task, start_s, end_s)
        assert machine.lease_start_s is not None
        own = self.by_run.setdefault((self.run_of[task.id], machine.resource.name), IdlePool())
        if made:
            own.add(machine)
            self.made[machine.resource.name] += 1
        else:
            own.moved(machine, old_end)
        self.ledger.place(machine.resource.name, self.key(task, machine), machine.lease_start_s, machine.lease_end_s)

    def key(self, task: Task, machine: PlannedMachine) -> str:
        """The machine's name in the ledger: ``RUN/TYPE#N`` (a ledger may hold other pools' runs)."""
        return f"{self.run_of[task.id]}{SEPARATOR}{machine.id}"

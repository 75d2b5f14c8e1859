"""Local search that improves any schedule by moving work between machines and reordering it.

Four neighbourhoods, each move re-timed with :func:`agora_optimizer.planning.retime.retime`
and kept only when the schedule ranks better (within the limits first, then by score):

- merge: every task of one machine onto another machine that can hold each of them
  (fewer leases: less boot time, fewer billing minimums, less idle time);
- retype: one machine becomes another type that fits all its tasks (cheaper or faster);
- relocate: one task onto another existing machine or a new one where ``count`` allows,
  trying first the tasks that end last (they decide the makespan);
- reorder: two tasks of one machine swap places in the order that re-timing follows (when
  the swap keeps parents before children), so that the machine packs its tasks tighter: with
  the mapping fixed, which task takes the first free cores decides when the machine is done
  and so how long it is leased. Tried last, from the tasks that end last.

Moves are tried in a seeded random order (first improvement) until a pass finds no
improvement or the time budget runs out. It never makes a schedule worse and keeps
every rule of the model: the number of machines of a type never exceeds its ``count``, or, where
the schedule it starts from leases more machines of a type one after another (deadline-aware list
scheduling with counts held at every instant), no move is kept that leases more at once.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator, Sequence

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment, machine_type, tasks_by_machine, unused_machine_id
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.retime import retime, start_order
from agora_optimizer.planning.time_budget import TimeBudget
from agora_optimizer.planning.validate import count_violations

Mapping_ = dict[str, str]  # task -> machine id
Move = tuple[Mapping_, list[str] | None]  # a mapping, and the re-timing order (None: by start time)


class LocalSearchEngine(Engine):
    name = "local-search"

    def __init__(self, seed: int = 7, max_tasks: int = 3000) -> None:
        self.seed = seed
        self.max_tasks = max_tasks

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        if warm_start is None or len(problem.workflow.tasks) > self.max_tasks:
            return None
        search = _Search(problem, list(warm_start.assignments), TimeBudget(time_limit_s), random.Random(self.seed))
        improved = search.run()
        if not improved:
            return None
        method = (
            warm_start.method if warm_start.method.endswith(f"+{self.name}") else f"{warm_start.method}+{self.name}"
        )
        return EngineResult(tuple(search.assignments), method)


def _leases_by_burst(assignments: Sequence[Assignment], catalog: Catalog) -> bool:
    """Whether the schedule has more machines of some type than its ``count`` (leased one after another,
    as deadline-aware list scheduling may plan them): a retimed move could make them overlap, so each
    improving move is checked against the counts at every instant."""
    machines: dict[str, set[str]] = defaultdict(set)
    for a in assignments:
        machines[a.resource].add(a.machine)
    return any((catalog.by_name[name].count or len(ids)) < len(ids) for name, ids in machines.items())


class _Search:
    def __init__(self, problem: Problem, assignments: list[Assignment], budget: TimeBudget, rng: random.Random):
        self.problem = problem
        self.budget = budget
        self.rng = rng
        self.assignments = assignments
        self.key = problem.rank(*problem.evaluate(assignments))
        self.check_counts = _leases_by_burst(assignments, problem.catalog)

    def run(self) -> bool:
        improved_any = False
        improved = True
        while improved and not self.budget.expired():
            improved = False
            for neighbourhood in (self._merges, self._retypes, self._relocations, self._reorders):
                for mapping, order in neighbourhood():
                    if not self.budget.affords():
                        return improved_any
                    if self._try(mapping, order):
                        improved = improved_any = True
                        break
                if improved:
                    break
        return improved_any

    def _try(self, machine_of: Mapping_, order: list[str] | None = None) -> bool:
        with self.budget:
            if order is None:
                order = start_order(self.assignments, self.problem.workflow)
            candidate = retime(self.problem.workflow, self.problem.catalog, machine_of, order)
            key = self.problem.rank(*self.problem.evaluate(candidate))
        if key < self.key and not (self.check_counts and count_violations(candidate, self.problem.catalog)):
            self.assignments, self.key = candidate, key
            return True
        return False

    # -- state -------------------------------------------------------------------------

    def _mapping(self) -> Mapping_:
        return {a.task: a.machine for a in self.assignments}

    def _moved(self, tasks: list[str], machine: str) -> Mapping_:
        """The current mapping with ``tasks`` moved onto ``machine``."""
        return {**self._mapping(), **dict.fromkeys(tasks, machine)}

    def _machines(self) -> dict[str, list[str]]:
        return tasks_by_machine((a.task, a.machine) for a in self.assignments)

    def _fits_all(self, resource: Resource, tasks: list[str]) -> bool:
        by_id = self.problem.workflow.by_id
        return all(resource.fits(by_id[t]) for t in tasks)

    def _new_machine(self, resource: Resource, machines: dict[str, list[str]]) -> str | None:
        """An unused id of this type, if ``count`` allows one more machine of it."""
        used = {m for m in machines if machine_type(m) == resource.name}
        if resource.count is not None and len(used) >= resource.count:
            return None
        return unused_machine_id(resource.name, used)

    # -- neighbourhoods ----------------------------------------------------------------

    def _merges(self) -> Iterator[Move]:
        machines = self._machines()
        catalog = self.problem.catalog
        by_load = sorted(machines, key=lambda m: len(machines[m]))
        for source in by_load:
            targets = [m for m in machines if m != source]
            self.rng.shuffle(targets)
            for target in targets:
                if self._fits_all(catalog.by_name[machine_type(target)], machines[source]):
                    yield self._moved(machines[source], target), None

    def _retypes(self) -> Iterator[Move]:
        machines = self._machines()
        names = list(machines)
        self.rng.shuffle(names)
        for machine in names:
            for resource in self.problem.catalog.resources:
                if resource.name == machine_type(machine) or not self._fits_all(resource, machines[machine]):
                    continue
                new = self._new_machine(resource, machines)
                if new is None:
                    continue
                yield self._moved(machines[machine], new), None

    def _relocations(self) -> Iterator[Move]:
        machines = self._machines()
        latest = sorted(self.assignments, key=lambda a: -a.end_s)
        head, tail = latest[: max(10, len(latest) // 10)], latest[max(10, len(latest) // 10) :]
        self.rng.shuffle(tail)
        for a in head + tail:
            task = self.problem.workflow.by_id[a.task]
            targets = [
                m for m in machines if m != a.machine and self.problem.catalog.by_name[machine_type(m)].fits(task)
            ]
            for resource in self.problem.options[a.task]:
                new = self._new_machine(resource, machines)
                if new is not None:
                    targets.append(new)
            self.rng.shuffle(targets)
            for target in targets:
                mapping = self._mapping()
                mapping[a.task] = target
                yield mapping, None

    def _reorders(self) -> Iterator[Move]:
        """Swap a late task with an earlier one of its machine in the re-timing order."""
        order = start_order(self.assignments, self.problem.workflow)
        position = {task: i for i, task in enumerate(order)}
        machine_of = self._mapping()
        on_machine = tasks_by_machine((task, machine_of[task]) for task in order)
        latest = sorted(self.assignments, key=lambda a: -a.end_s)
        for a in latest:
            earlier = [t for t in on_machine[a.machine] if position[t] < position[a.task]]
            self.rng.shuffle(earlier)
            for other in earlier:
                if self._swappable(order, position[other], position[a.task]):
                    swapped = list(order)
                    swapped[position[other]], swapped[position[a.task]] = a.task, other
                    yield machine_of, swapped

    def _swappable(self, order: list[str], i: int, j: int) -> bool:
        """Whether ``order[j]`` may move to ``i`` and ``order[i]`` to ``j`` (``i < j``), parents first."""
        between = set(order[i:j])
        if any(edge.parent in between for edge in self.problem.workflow.parents[order[j]]):
            return False
        later = set(order[i + 1 : j + 1])
        return not any(edge.child in later for edge in self.problem.workflow.children[order[i]])

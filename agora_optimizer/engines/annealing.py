"""Simulated annealing over the machines of a schedule: the moves that need a worse step first.

Lease filling and local search keep a move only when the plan ranks better at once. Some of the
best plans are out of their reach: five tasks that must leave the dearest type together, each of
which alone makes the plan worse (its data now crosses the network), or two tasks that must move
onto a new machine together. Annealing takes such steps: a move that makes the plan worse by a
factor ``q`` is kept with probability ``exp(-ln q / T)``, ``T`` falling from :data:`T_START` to
:data:`T_END` over a cycle; each cycle starts again from the best plan seen, and the search stops
after :data:`PATIENCE` cycles without a better one, or at its time limit.

The moves (each mapping timed three ways, :meth:`_Annealing._timed`: by
:func:`~agora_optimizer.planning.retime.retime` with each lease packed toward its end, and by its
mirror :func:`~agora_optimizer.planning.retime.retime_late` packed toward each lease's start, so
every plan it sees is valid by construction):

- relocate: one task onto another machine that fits it, or onto a new machine of a type that
  fits it;
- swap: two tasks on different machines trade places;
- split: some of one machine's tasks (or all of them) onto another machine that fits them all, or a
  new one of any type that does (a split, a merge, a retype);
- reorder: two neighbours in the re-timing order (no edge between them) trade places.

What a plan weighs is its rank's score times one plus :data:`LATE_WEIGHT` times its excess over the
deadline and budget (:meth:`Problem.excess`): a plan 1 % late weighs twice its score, so the search
may pass through late plans but does not settle among them (at ten times, a cost plan 9x cheaper
and 20 % late outweighed every plan on time, and the search stayed there). The best plan kept is
the best by :meth:`Problem.rank`, as in every engine. A machine id past its type's ``count`` is a
re-lease: a candidate that leases more machines of a type at once than its ``count`` is refused.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from collections.abc import Sequence

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.plan import Assignment, machine_type, tasks_by_machine, unused_machine_id
from agora_optimizer.planning.lease_packing import pack_earlier, pack_later
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.retime import retime, retime_late, start_order
from agora_optimizer.planning.time_budget import TimeBudget
from agora_optimizer.planning.validate import count_violations

T_START = 0.3  # a plan 30 % worse is kept with probability 1/e at a cycle's start
T_END = 0.002
PATIENCE = 4  # cycles in a row without a better plan end the search
STEPS_PER_TASK = 60  # a cycle's length, in moves per task (at least MIN_STEPS, at most a third of what fits)
MIN_STEPS = 20
LATE_WEIGHT = 100.0
# A re-timing's cost per task, on the high side (1.95 s for genome's 30,000 tasks on one type, few machines):
# the search starts only when FIRST_STEPS of them fit, so that its first step does not overrun the limit.
RETIME_S_PER_TASK = 2e-4  # two re-timings a step, and two packings
FIRST_STEPS = 3

Mapping_ = dict[str, str]  # task -> machine id


class AnnealingEngine(Engine):
    name = "annealing"

    def __init__(self, seed: int = 11) -> None:
        self.seed = seed

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        if warm_start is None or not problem.workflow.tasks:
            return None
        if len(problem.workflow.tasks) * RETIME_S_PER_TASK * FIRST_STEPS > time_limit_s:
            return None
        search = _Annealing(problem, warm_start.assignments, TimeBudget(time_limit_s), random.Random(self.seed))
        if not search.run():
            return None
        method = (
            warm_start.method if warm_start.method.endswith(f"+{self.name}") else f"{warm_start.method}+{self.name}"
        )
        return EngineResult(tuple(search.best), method)


class _Annealing:
    def __init__(
        self, problem: Problem, assignments: Sequence[Assignment], budget: TimeBudget, rng: random.Random
    ) -> None:
        self.problem = problem
        self.budget = budget
        self.rng = rng
        self.tasks = [t.id for t in problem.workflow.tasks]
        self.best = list(assignments)
        self.best_rank = problem.rank(*problem.evaluate(self.best))
        self.timed_s, self.timed_steps = 0.0, 0  # the moves timed so far, for a cycle's length

    def run(self) -> bool:
        """Cycles of annealing from the best plan; whether any plan ranked better than the one given."""
        improved_any = False
        idle = 0
        while idle < PATIENCE and not self.budget.expired():
            improved = self._cycle()
            improved_any |= improved
            idle = 0 if improved else idle + 1
        return improved_any

    def _cycle(self) -> bool:
        current = self.best
        machine_of = {a.task: a.machine for a in current}
        order = start_order(current, self.problem.workflow)
        weight = self._weight(self.best_rank)
        steps = self._steps()
        improved = False
        for step in range(steps):
            if not self.budget.affords():
                break
            temperature = T_START * (T_END / T_START) ** (step / max(steps - 1, 1))
            move = self._move(machine_of, order)
            if move is None:
                continue
            started = time.perf_counter()
            with self.budget:
                candidate, rank = self._timed(*move)
            self.timed_s += time.perf_counter() - started
            self.timed_steps += 1
            if not self._within_counts(move[0], candidate):
                continue
            new_weight = self._weight(rank)
            if new_weight > weight and self.rng.random() >= math.exp(-math.log(new_weight / weight) / temperature):
                continue
            (machine_of, order), weight = move, new_weight
            if rank < self.best_rank:
                self.best, self.best_rank, improved = candidate, rank, True
        return improved

    def _timed(self, machine_of: Mapping_, order: list[str]) -> tuple[list[Assignment], tuple[float, float, float]]:
        """The best of three timings of a mapping: the earliest-start schedule, it with every lease packed
        toward its end, and its mirror (each task as late as the first's makespan lets it end) packed toward
        each lease's start (planning/lease_packing.py)."""
        workflow, catalog = self.problem.workflow, self.problem.catalog
        early = retime(workflow, catalog, machine_of, order)
        late = retime_late(workflow, catalog, machine_of, order, max(a.end_s for a in early))
        candidates = [early, pack_later(workflow, catalog, early)]
        if late is not None:
            candidates.append(pack_earlier(workflow, catalog, late))
        ranked = [(self.problem.rank(*self.problem.evaluate(c)), i) for i, c in enumerate(candidates)]
        rank, best = min(ranked)
        return candidates[best], rank

    def _steps(self) -> int:
        """A cycle's length: :data:`STEPS_PER_TASK` per task, but no more than a third of the moves that
        fit in the time left (so that a large workflow still cools within its limit)."""
        steps = max(MIN_STEPS, STEPS_PER_TASK * len(self.tasks))
        if self.timed_s > 0:  # by the mean step: one step slowed by a busy machine must not shorten every cycle
            step_s = self.timed_s / self.timed_steps
            steps = min(steps, max(MIN_STEPS, int(self.budget.remaining_s() / step_s / 3)))
        return steps

    def _weight(self, rank: tuple[float, float, float]) -> float:
        excess, score, _ = rank
        return max(score, 1e-12) * (1 + LATE_WEIGHT * excess)

    # -- moves -------------------------------------------------------------------------

    def _move(self, machine_of: Mapping_, order: list[str]) -> tuple[Mapping_, list[str]] | None:
        kind = self.rng.random()
        if kind < 0.45:
            mapping = self._relocate(machine_of)
        elif kind < 0.65:
            mapping = self._swap(machine_of)
        elif kind < 0.85:
            mapping = self._split(machine_of)
        else:
            return self._reorder(machine_of, order)
        return None if mapping is None else (mapping, order)

    def _new_machine(self, resource: Resource, machines: dict[str, list[str]]) -> str:
        """The first unused id of this type: past its ``count``, a machine leased after another is released
        (:meth:`_within_counts` refuses one leased beside them)."""
        return unused_machine_id(resource.name, machines)

    def _within_counts(self, machine_of: Mapping_, candidate: list[Assignment]) -> bool:
        """Whether the candidate leases no more machines of a type at once than its ``count``; checked only
        where it has more machines of a type than that, one after another."""
        ids: dict[str, set[str]] = defaultdict(set)
        for machine in machine_of.values():
            ids[machine_type(machine)].add(machine)
        by_name = self.problem.catalog.by_name
        if all(by_name[name].count is None or len(found) <= (by_name[name].count or 0) for name, found in ids.items()):
            return True
        return not count_violations(candidate, self.problem.catalog)

    def _fits(self, machine: str, task: str) -> bool:
        return self.problem.catalog.by_name[machine_type(machine)].fits(self.problem.workflow.by_id[task])

    def _relocate(self, machine_of: Mapping_) -> Mapping_ | None:
        task = self.rng.choice(self.tasks)
        machines = tasks_by_machine(machine_of.items())
        targets = [m for m in machines if m != machine_of[task] and self._fits(m, task)]
        targets += [self._new_machine(r, machines) for r in self.problem.options[task]]
        if not targets:
            return None
        return {**machine_of, task: self.rng.choice(targets)}

    def _swap(self, machine_of: Mapping_) -> Mapping_ | None:
        first, second = self.rng.choice(self.tasks), self.rng.choice(self.tasks)
        a, b = machine_of[first], machine_of[second]
        if a == b or not (self._fits(b, first) and self._fits(a, second)):
            return None
        return {**machine_of, first: b, second: a}

    def _split(self, machine_of: Mapping_) -> Mapping_ | None:
        """Some of one machine's tasks (each with even odds; all, when none drew) onto another machine that holds
        each of them, or a new one: a split, a merge or a retype."""
        machines = tasks_by_machine(machine_of.items())
        source = self.rng.choice(list(machines))
        on_source = machines[source]
        moving = [t for t in on_source if self.rng.random() < 0.5] or on_source
        by_id = self.problem.workflow.by_id
        catalog = self.problem.catalog
        targets = [
            m for m in machines if m != source and all(catalog.by_name[machine_type(m)].fits(by_id[t]) for t in moving)
        ]
        targets += [self._new_machine(r, machines) for r in catalog.resources if all(r.fits(by_id[t]) for t in moving)]
        targets = [m for m in targets if m != source]
        if not targets:
            return None
        return {**machine_of, **dict.fromkeys(moving, self.rng.choice(targets))}

    def _reorder(self, machine_of: Mapping_, order: list[str]) -> tuple[Mapping_, list[str]] | None:
        if len(order) < 2:
            return None
        i = self.rng.randrange(len(order) - 1)
        first, second = order[i], order[i + 1]
        if any(edge.child == second for edge in self.problem.workflow.children[first]):
            return None
        swapped = list(order)
        swapped[i], swapped[i + 1] = second, first
        return machine_of, swapped

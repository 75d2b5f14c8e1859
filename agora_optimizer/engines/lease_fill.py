"""Lease filling: make the best plan so far cheaper by moving work into leases already paid for.

A lease runs from its machine's first task's start (less ``boot_s``) to its last task's end, and is
paid for whole, however idle its cores are in between (section 3 of the spec). A plan made at scale
by list scheduling, HEFT or PEFT often leaves such idle cores on one machine while another machine
is leased for a few small tasks, or a dear machine for one that a cheap type runs in time. This pass
takes the plan as it is and moves, keeping every other task where it is:

- one task at an edge of its machine's lease (its first or last; on a small machine, any) to its own
  machine, as early as it can start there; to an existing lease, where it fits beside the tasks there
  for its whole run; or to a new machine where its type's ``count`` allows one more at every instant;
- every task of a small machine at once, in the order they start, onto another existing machine or
  onto a new machine of another type (a retype);
- every task of a machine as late as it can run, children first, the lease's end kept: a first task
  with slack runs beside the last ones, and the lease starts later.

A moved task starts at the earliest instant its parents' data reaches the new place and the cores,
memory and GPUs are free there, inside the target's lease when it can. Its children (and theirs)
are re-timed on their own machines: later where its data now comes too late, earlier where they
waited past it and the cores are free; at most :data:`MAX_PUSHED` of them per move. A move is kept
only when the plan then ranks better (:meth:`Problem.rank`: cheaper under a deadline; for a balanced
plan, cheaper or faster as its weights say), no task ends after the horizon (the deadline; a time
plan's or a late plan's makespan), and no type has more machines leased at once than its ``count``.
Leases left empty are dropped; the rest shrink with their tasks. Moves are tried over the machines
by lease cost (dearest first) until a round finds none or the time limit passes; the plan returned
ranks better than the one given, else None.

Built for the portfolio's stages at scale, where no exact engine and no local search runs; it makes the
adversarial search's worst cases at scale optimal (``tests/engines/adversarial/scale-vs-optimum*.json``).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.limits import TIME_TOLERANCE_S
from agora_optimizer.model.plan import Assignment, machine_type, unused_machine_id
from agora_optimizer.model.workflow import Task
from agora_optimizer.planning.leases import makespan_s
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.shared_counts import CountLedger
from agora_optimizer.planning.time_budget import TimeBudget
from agora_optimizer.planning.timeline import MachineTimeline

MAX_PUSHED = 64  # descendants one move may re-time; a move that needs more is not tried further
MAX_GROUP = 64  # a machine with at most this many tasks may be moved whole
MAX_SHIFTED = 256  # a machine with at most this many tasks may have them all started later
MAX_EXISTING_TARGETS = 16  # existing machines tried per move (cheapest per hour first)
BUILD_S_PER_TASK = 1e-4  # the state of a 30,000-task plan takes 1.5 to 2.5 s to build and read back, on 2 busy cores
RANK_TOLERANCE = 1e-9  # a move is kept when it lowers the plan's rank by more than this, relative

Placement = tuple[str, float, float]  # machine, start, end
Span = tuple[float, float] | None  # a lease's start and end; None: the machine has none


class LeaseFillEngine(Engine):
    name = "lease-fill"

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        if warm_start is None or not warm_start.assignments or problem.catalog.has_spot:
            return None  # spot plans are priced by their expected re-runs, which this pass does not weigh
        suffix = f"+{self.name}"
        if warm_start.method.endswith(suffix):
            return None  # filled already (the portfolio runs the pass again only for a later stage's plan)
        if time_limit_s < BUILD_S_PER_TASK * len(problem.workflow.tasks):
            return None  # too short a share to build the plan's state in, let alone to move anything
        before = problem.rank(*problem.evaluate(warm_start.assignments))
        fill = _LeaseFill(problem, warm_start.assignments, before[0] > 0)
        if not fill.run(TimeBudget(time_limit_s)):
            return None
        assignments = tuple(fill.assignments(warm_start.assignments))
        if problem.rank(*problem.evaluate(assignments)) >= before:
            return None
        return EngineResult(assignments, warm_start.method + suffix)


class _LeaseFill:
    """The plan as a set of placements with each machine's usage, changed one move at a time; a move is
    a transaction: :meth:`_begin`, placements changed, then kept or undone (:meth:`_undo`)."""

    def __init__(self, problem: Problem, assignments: Iterable[Assignment], late: bool) -> None:
        self.problem = problem
        self.workflow = problem.workflow
        self.catalog = problem.catalog
        items = list(assignments)
        makespan, deadline = makespan_s(items), problem.objective.deadline_s
        if problem.objective.kind == "time" or late:
            self.horizon_s = makespan  # a time plan never gets slower; a late plan no later
        else:
            self.horizon_s = math.inf if deadline is None else max(makespan, deadline)
        self.position = {task: i for i, task in enumerate(self.workflow.topological_order)}
        self.placed: dict[str, Placement] = {}
        self.tasks_on: dict[str, set[str]] = defaultdict(set)
        self.starts: dict[str, list[tuple[float, str]]] = defaultdict(list)  # each machine's (start, task), sorted
        self.ends: dict[str, list[tuple[float, str]]] = defaultdict(list)  # and (end, task)
        self.all_ends: list[float] = []  # every task's end, sorted: the makespan is the last
        self.timelines: dict[str, MachineTimeline] = {}
        self.resource_of: dict[str, Resource] = {}
        self.ledger = CountLedger(self.catalog)
        # Each task as its assignment reserves it (a re-plan may reserve more memory than the task's own).
        self.need = {
            a.task: replace(self.workflow.by_id[a.task], cores=a.cores, memory_bytes=a.memory_bytes, gpus=a.gpus)
            for a in items
        }
        for a in items:
            self._place(a.task, a.machine, a.start_s, a.end_s)
        for machine in self.tasks_on:
            self.ledger.place(machine_type(machine), machine, *self._span(machine))
        self.cost_usd = sum(self._lease_cost(m, self._span(m)) for m in self.tasks_on)
        self.key = problem.rank(makespan, self.cost_usd)  # the plan's now; a move is kept when it lowers it
        self.saving_usd = 0.0  # what the move under way saves
        self.names_used = set(self.tasks_on)
        self.journal: dict[str, Placement | None] = {}  # task -> its placement before the move (None: unplaced)
        self.spans_before: dict[str, Span] = {}  # machine -> its lease before the move (None: no lease)
        self.spans_after: dict[str, Span] = {}  # and after
        self.budget = TimeBudget(None)

    # -- placements ----------------------------------------------------------------------

    def assignments(self, original: Iterable[Assignment]) -> list[Assignment]:
        """The plan now, in the order of ``original``'s tasks."""
        result = []
        for a in original:
            machine, start, end = self.placed[a.task]
            if (machine, start, end) == (a.machine, a.start_s, a.end_s):
                result.append(a)
                continue
            task = self.need[a.task]
            resource = self.resource_of[machine]
            result.append(
                Assignment(a.task, resource.name, machine, start, end, task.cores, task.memory_bytes, task.gpus)
            )
        return result

    def _timeline(self, machine: str) -> MachineTimeline:
        timeline = self.timelines.get(machine)
        if timeline is None:
            resource = self.catalog.by_name[machine_type(machine)]
            self.resource_of[machine] = resource
            timeline = MachineTimeline(resource.vcpus, resource.memory_bytes, gpus=resource.gpus)
            self.timelines[machine] = timeline
        return timeline

    def _touch(self, task: str, machine: str) -> None:
        if task not in self.journal:
            self.journal[task] = self.placed.get(task)
        self._touch_machine(machine)

    def _touch_machine(self, machine: str) -> None:
        if machine not in self.spans_before:
            self.spans_before[machine] = self._span(machine) if self.tasks_on.get(machine) else None

    def _place(self, task_id: str, machine: str, start_s: float, end_s: float) -> None:
        task = self.need[task_id]
        self._timeline(machine).add(start_s, end_s, task.cores, task.memory_bytes, task.gpus)
        self.placed[task_id] = (machine, start_s, end_s)
        self.tasks_on[machine].add(task_id)
        insort(self.starts[machine], (start_s, task_id))
        insort(self.ends[machine], (end_s, task_id))
        insort(self.all_ends, end_s)

    def _unplace(self, task_id: str) -> None:
        task = self.need[task_id]
        machine, start_s, end_s = self.placed.pop(task_id)
        self.timelines[machine].add(start_s, end_s, -task.cores, -task.memory_bytes, -task.gpus)
        self.tasks_on[machine].discard(task_id)
        for times, time_s in ((self.starts[machine], start_s), (self.ends[machine], end_s)):
            del times[bisect_left(times, (time_s, task_id))]
        del self.all_ends[bisect_left(self.all_ends, end_s)]

    def _span(self, machine: str) -> tuple[float, float]:
        """The machine's lease (it has a task): its first task's start less boot, its last task's end."""
        return self.starts[machine][0][0] - self.resource_of[machine].boot_s, self.ends[machine][-1][0]

    def _lease_cost(self, machine: str, span: Span) -> float:
        return 0.0 if span is None else self.resource_of[machine].lease_cost_usd(span[1] - span[0])

    def _ready(self, task_id: str, machine: str) -> float:
        """When ``task_id`` may start on ``machine``: its type's release and boot, its parents' data there."""
        ready = self.resource_of[machine].earliest_start_of(self.need[task_id])
        for edge in self.workflow.parents[task_id]:
            parent = self.placed.get(edge.parent)
            if parent is None:
                continue  # moved with this one, placed later
            arrival = parent[2] if parent[0] == machine else parent[2] + self.catalog.transfer_s(edge.bytes)
            ready = max(ready, arrival)
        return ready

    # -- one move --------------------------------------------------------------------------

    def _begin(self) -> None:
        self.journal, self.spans_before = {}, {}

    def _undo(self) -> None:
        for task in self.journal:
            if task in self.placed:
                self._unplace(task)
        for task, placement in self.journal.items():
            if placement is not None:
                self._place(task, *placement)
        self._begin()

    def _record_lease(self, machine: str, span: Span) -> None:
        """The machine's lease in the count ledger; None: it has none (an empty machine holds no count)."""
        name = machine_type(machine)
        if span is not None:
            self.ledger.place(name, machine, *span)
        elif machine in self.ledger.spans:
            held = self.ledger.spans[machine]
            self.ledger.place(name, machine, held[0], held[0])
            del self.ledger.spans[machine]

    def _move(self, tasks: list[str], target: str, inside: bool = True) -> tuple[float, float, float] | None:
        """Move ``tasks`` (parents first) onto ``target`` and start their descendants later where they
        must; the plan's rank after it (None: it ranks no better, or breaks the horizon, the push limit or a count).
        The move stays made: the caller keeps it or undoes it (:meth:`_undo`)."""
        self._begin()
        self._timeline(target)
        for moved in tasks:
            self._touch(moved, self.placed[moved][0])
            self._unplace(moved)
        self._touch_machine(target)
        pushed = 0
        for task_id in tasks:
            task = self.need[task_id]
            start = self._start_on(task, target, inside)
            end = start + self.resource_of[target].runtime_s(task)
            if end > self.horizon_s + TIME_TOLERANCE_S:
                return None
            self._place(task_id, target, start, end)
            settled = self._retime_children(task_id, MAX_PUSHED - pushed)
            if settled is None:
                return None
            pushed += settled
        return self._verdict()

    def _start_on(self, task: Task, machine: str, inside: bool = True) -> float:
        """The earliest start on ``machine`` from its parents' data; ``inside``: inside the machine's lease where it
        fits there, as a start before the lease's first task would lengthen it."""
        timeline, ready = self.timelines[machine], self._ready(task.id, machine)
        duration = self.resource_of[machine].runtime_s(task)
        earliest = timeline.earliest_start(ready, duration, task.cores, task.memory_bytes, task.gpus)
        if not inside or not self.tasks_on[machine]:
            return earliest
        first, last = self.starts[machine][0][0], self.ends[machine][-1][0]
        if earliest >= first:
            return earliest
        within = timeline.earliest_start(first, duration, task.cores, task.memory_bytes, task.gpus)
        return within if within + duration <= last + TIME_TOLERANCE_S else earliest

    def _retime_children(self, task_id: str, limit: int) -> int | None:
        """Re-time the descendants of ``task_id`` on their machines: later where its data now comes too late,
        earlier where they waited past it and the cores are free; how many moved (None: more than ``limit``, or
        one past the horizon)."""
        queue = [(self.position[e.child], e.child) for e in self.workflow.children[task_id]]
        heapq.heapify(queue)
        moved = 0
        while queue:
            _, child = heapq.heappop(queue)
            placement = self.placed.get(child)
            if placement is None:
                continue  # moved with this one, placed later
            machine, start, end = placement
            ready = self._ready(child, machine)
            late, waiting = start < ready - TIME_TOLERANCE_S, start > ready + TIME_TOLERANCE_S
            if not late and not waiting:
                continue
            task = self.need[child]
            self._touch(child, machine)
            self._unplace(child)
            duration = end - start
            new_start = self.timelines[machine].earliest_start(
                ready, duration, task.cores, task.memory_bytes, task.gpus
            )
            if not late and new_start >= start - TIME_TOLERANCE_S:
                self._place(child, machine, start, end)  # held where it is by the machine's cores or memory
                continue
            moved += 1
            if moved > limit or new_start + duration > self.horizon_s + TIME_TOLERANCE_S:
                return None
            self._place(child, machine, new_start, new_start + duration)
            for edge in self.workflow.children[child]:
                heapq.heappush(queue, (self.position[edge.child], edge.child))
        return moved

    def _verdict(self) -> tuple[float, float, float] | None:
        """The plan's rank after the move, when the touched leases cost less than before and it ranks better;
        None when not, or when a type's ``count`` breaks."""
        before = after = 0.0
        spans = {}
        for machine, span in self.spans_before.items():
            spans[machine] = self._span(machine) if self.tasks_on[machine] else None
            before += self._lease_cost(machine, span)
            after += self._lease_cost(machine, spans[machine])
        key = self.problem.rank(self.all_ends[-1], self.cost_usd - (before - after))
        if not _better(key, self.key) or not self._counts_hold(spans):
            return None
        self.saving_usd, self.spans_after = before - after, spans
        return key

    def _keep(self, key: tuple[float, float, float]) -> None:
        """Keep the move just made (its :meth:`_verdict` was ``key``): its leases go into the count ledger."""
        self.cost_usd -= self.saving_usd
        self.key = key
        for machine, span in self.spans_after.items():
            if self.ledger.count[machine_type(machine)] is not None:
                self._record_lease(machine, span)
        self._begin()

    def _counts_hold(self, spans: dict[str, Span]) -> bool:
        """Whether the touched leases keep every type's ``count`` at every instant. A lease that grows alone of
        its type's touched ones is checked against the ledger as it is; where several of a type changed (a task
        moved to a new machine of its own type), they are recorded, shrunk ones first, checked, and restored."""
        ledger = self.ledger
        limited = [m for m in spans if ledger.count[machine_type(m)] is not None]
        growing = [m for m in limited if not self._within(spans[m], self.spans_before[m])]
        names = [machine_type(m) for m in limited]
        if all(names.count(machine_type(m)) == 1 for m in growing):
            return all(self._fits(m, spans[m]) for m in growing)
        recorded: list[str] = []
        holds = True
        for machine in sorted(limited, key=lambda m: m in growing):
            span = spans[machine]
            if machine in growing and not self._fits(machine, span):
                holds = False
                break
            self._record_lease(machine, span)
            recorded.append(machine)
        for machine in reversed(recorded):
            self._record_lease(machine, self.spans_before[machine])
        return holds

    def _fits(self, machine: str, span: Span) -> bool:
        return span is None or self.ledger.fits(machine_type(machine), span[0], span[1], machine)

    @staticmethod
    def _within(span: Span, held: Span) -> bool:
        if span is None:
            return True
        return held is not None and span[0] >= held[0] - TIME_TOLERANCE_S and span[1] <= held[1] + TIME_TOLERANCE_S

    # -- where to try ----------------------------------------------------------------------

    def run(self, budget: TimeBudget) -> bool:
        self.budget = budget
        improved_any = False
        improved = True
        while improved and not budget.expired():
            improved = False
            for machine in self._by_cost():
                if budget.expired():
                    break
                if self._improve_machine(machine, budget):
                    improved = improved_any = True
        return improved_any

    def _by_cost(self) -> list[str]:
        machines = [m for m, tasks in self.tasks_on.items() if tasks]
        return sorted(machines, key=lambda m: (-self._lease_cost(m, self._span(m)), m))

    def _improve_machine(self, machine: str, budget: TimeBudget) -> bool:
        improved = False
        tasks = self.tasks_on[machine]
        if 0 < len(tasks) <= MAX_GROUP:
            group = sorted(tasks, key=lambda t: (self.placed[t][1], self.position[t]))  # as they run now
            improved = self._best_move(group, self._targets(group, machine, single=False))
        for _ in range(2 * MAX_GROUP):  # the tasks at the lease's edges (a small machine's: all), while that saves
            if budget.expired() or not self.tasks_on[machine]:
                break
            edges = self._edge_tasks(machine)
            if len(self.tasks_on[machine]) <= MAX_GROUP:
                edges += sorted(self.tasks_on[machine].difference(edges), key=lambda t: (self.placed[t][1], t))
            if not any(self._best_move([t], self._targets([t], machine, single=True)) for t in edges):
                break
            improved = True
        if 0 < len(self.tasks_on[machine]) <= MAX_SHIFTED and not budget.expired():
            key = self._shift_later(machine)
            if key is None:
                self._undo()
            else:
                self._keep(key)
                improved = True
        return improved

    def _shift_later(self, machine: str) -> tuple[float, float, float] | None:
        """Every task of ``machine`` as late as it can run, children first, its lease's end kept: the lease
        starts later (a task its children or the cores hold where it is stays). The plan's rank after it, as
        :meth:`_move` says it."""
        self._begin()
        timeline, lease_end = self.timelines[machine], self.ends[machine][-1][0]
        for task_id in sorted(self.tasks_on[machine], key=lambda t: -self.position[t]):
            task = self.need[task_id]
            _, start, end = self.placed[task_id]
            self._touch(task_id, machine)
            self._unplace(task_id)
            latest_end = min(lease_end, self.horizon_s)
            for edge in self.workflow.children[task_id]:
                child_machine, child_start, _ = self.placed[edge.child]
                gap = 0.0 if child_machine == machine else self.catalog.transfer_s(edge.bytes)
                latest_end = min(latest_end, child_start - gap)
            ready = self._ready(task_id, machine)
            new_start = timeline.latest_start(ready, latest_end, end - start, task.cores, task.memory_bytes, task.gpus)
            if new_start is None:
                return None
            self._place(task_id, machine, new_start, new_start + end - start)
        return self._verdict()

    def _edge_tasks(self, machine: str) -> list[str]:
        last, first = self.ends[machine][-1][1], self.starts[machine][0][1]
        return [last] if first == last else [last, first]

    def _targets(self, tasks: list[str], source: str, single: bool) -> list[str]:
        """Its own machine for one task; existing machines that fit every task (cheapest per hour first, at most
        :data:`MAX_EXISTING_TARGETS`); a new machine of each type that fits them (another type, for a machine's)."""
        fitting = [r for r in self.catalog.resources if all(r.fits(self.need[t]) for t in tasks)]
        names = {r.name for r in fitting}
        existing = [m for m, on in self.tasks_on.items() if on and m != source and machine_type(m) in names]
        existing.sort(key=lambda m: (self.resource_of[m].price_per_hour_usd, m))
        new = [self._new_id(r.name) for r in fitting if single or r.name != machine_type(source)]
        return ([source] if single else []) + existing[:MAX_EXISTING_TARGETS] + new

    def _new_id(self, name: str) -> str:
        return unused_machine_id(name, self.names_used)

    def _best_move(self, tasks: list[str], targets: list[str]) -> bool:
        """Try ``tasks`` on every target; make the move that ranks best, if any ranks better than the plan."""
        best: tuple[tuple[float, float, float], str, bool] | None = None
        # A task with children onto an open lease: inside it, and as early as it can (its children may start sooner).
        early = len(tasks) == 1 and bool(self.workflow.children[tasks[0]])
        tries = [(t, True) for t in targets] + [(t, False) for t in targets if early and self.tasks_on[t]]
        for target, inside in tries:
            if self.budget.expired():
                break
            key = self._move(tasks, target, inside)
            if key is not None and (best is None or key < best[0]):
                best = (key, target, inside)
            self._undo()
        if best is None:
            return False
        key = self._move(tasks, best[1], best[2])
        assert key is not None  # the same move as tried
        self._keep(key)
        self.names_used.add(best[1])
        return True


def _better(key: tuple[float, float, float], than: tuple[float, float, float]) -> bool:
    """Whether rank ``key`` is lower than ``than`` by more than :data:`RANK_TOLERANCE` (so that rounding never
    keeps a move that changes nothing, and the pass ends)."""
    for value, other in zip(key, than, strict=True):
        margin = RANK_TOLERANCE * max(1.0, abs(other))
        if value < other - margin:
            return True
        if value > other + margin:
            return False
    return False

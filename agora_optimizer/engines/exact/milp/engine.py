"""The exact engine: a mixed-integer linear program of section 3 of the spec, solved by HiGHS (else CBC).

The model is a disjunctive (big-M) scheduling formulation in the line of Manne (1960)
and of the MILP models for heterogeneous DAG scheduling (e.g. Ku & Beck, Computers &
OR 2016), extended with shared machines, lease billing and per-type count limits:

- cores are modelled by *lanes*: a machine with v vcpus is v unit lanes, a task of c
  cores takes c of them, and two tasks that share a lane never overlap. This is exact:
  the greedy colouring of intervals in start order gives every task free lanes exactly
  when the cores in use never exceed v (interval graphs are perfect);
- memory is cumulative and checked at task starts (the load on a resource peaks at
  some start: Pritsker, Watters & Wolfe 1969; Artigues, Michelon & Reusser 2003);
- machines of one type are interchangeable slots, with symmetry breaking (Sherali &
  Smith 2001: fix an order of identical machines).

Data, after the safe reductions below: tasks i in topological order, types k, the types
K_i that task i fits on, durations p_ik = runtime_i / speed_k, transfers tr_ij =
bytes_ij / bandwidth on edges, slots (k, m) for m < S_k, lanes l < V_k on every slot of
k, and a horizon H that some optimal plan respects.

Variables:
- x[i,k,m] binary: task i runs on slot (k, m); u[k,m] binary: slot (k, m) is leased;
- y[i,k,m,l] binary: task i takes lane l of slot (k, m) (tasks that need lanes on k);
- s[i] continuous: start of i; e_i = s_i + sum p_ik x[i,k,m]; T: makespan;
- sm[i,j], q[i,j] in [0, 1]: i and j share a machine, a lane;
- o[i,j] binary: i starts no later than j; a[i,j] binary: i still runs at j's start;
- L[k,m], E[k,m]: lease start and end; n[k,m] integer: billing steps; G[k,m]: billed s;
- c[k,m',m] binary: the leases of slots m' < m of a count-limited type overlap.

Constraints:
- sum_{k,m} x[i,k,m] = 1; x <= u; u <= sum_i x; u[k,m+1] <= u[k,m];
- s_i >= sum max(release_k + boot_k, r_i) x[i,k,m] (a lease cannot begin before 0 nor before its
  type's release; r_i is the task's own release, e.g. after an Airflow sensor's wait); T >= e_i;
- edge i -> j: s_j >= e_i + tr_ij (1 - sm_ij), with sm_ij <= 1 - x[i,k,m] + x[j,k,m];
- lanes: sum_l y[i,k,m,l] = cores_i x[i,k,m]; q_ij >= y[i,k,m,l] + y[j,k,m,l] - 1;
  s_j >= e_i - M (1 - o_ij) - M (1 - q_ij) and s_i >= e_j - M o_ij - M (1 - q_ij);
- memory, at every task j's start: mem_j + sum_i mem_i a[i,j] <= sum mem_k x[j,k,m],
  where s_j >= e_i - M (2 + a[i,j] - sm_ij - o_ij) forces a[i,j] = 1 when i shares j's
  machine, starts no later and has not ended; o is a linear order (triangle
  inequalities), so on every set of tasks that run together the o-latest one's row
  counts them all; o_ij = 1 => s_i <= s_j, o_ij = 0 => s_j <= s_i;
- leases: L <= s_i - boot_k + M (1 - x), E >= e_i - M (1 - x), g_k n >= E - L,
  G >= g_k n, G >= minimum_k u, so that billed = max(minimum, ceil(lease / g) g);
- counts: see "slots"; deadline: T <= deadline_s; budget: C <= budget_usd;
- valid cuts (not needed for exactness): E - L >= (boot + p_ik) x[i,k,m]; E <= T;
  E - L <= H u; the work on every lane, the memory-seconds on every slot, and the work
  of every chain of a chain cover of the DAG (ancestors never overlap their
  descendants) on every slot fit in E - L - boot u.

Objective: time T / T_lb; cost C / C_lb with C = sum price_k / 3600 G[k,m]; balanced
alpha T / T_lb + (1 - alpha) C / C_lb: the first element of
:func:`agora_optimizer.planning.problem.score`, with the problem's bounds.

Reductions that cut off no optimal plan, so that "optimal" stays a true claim:
- pruning: type k' is dropped when another type k has >= vcpus, >= memory, >= speed,
  <= boot_s, <= release_s + boot_s, an unlimited count or one at least the number of tasks that fit on k, and
  (unless the objective is time without a budget) <= price, <= billing minimum and a
  granularity that divides k''s. Moving every machine of k' to a new machine of k
  with the same starts only shortens tasks: precedence, capacity, leases (they start
  later and end earlier, billing is monotone), counts, makespan and cost stay valid
  and no worse. Ties go by catalog order (a strict partial order, so every pruned type
  has a kept dominator).
- horizon: if no task, boot or outgoing transfer covers some instant after the last
  release (a type's or a task's), everything after it can move left without becoming worse, so T <= max release +
  sum_i (max boot + max duration + max outgoing transfer). With a deadline, T <= deadline_s; with a valid warm start of
  value V, T <= T_warm (time) or T <= (V - (1 - alpha)) T_lb / alpha (balanced, as
  C >= C_lb), and C <= C_warm (cost) or (V - alpha) C_lb / (1 - alpha) (balanced).
- capacity: per type and per dimension (cores, memory), a task whose need, with that
  of every not yet dropped task that may run beside it (not its ancestor or
  descendant), fits the type is dropped in turn; any set of tasks running together
  that contains a dropped task then fits (look at its first-dropped member). Only the
  others get lanes or memory rows. A task of runtime 0 occupies nothing (the checker
  ignores empty intervals); a runtime in (0, 1e-6] s is counted (stricter).
- slots: S_k = the number of tasks that fit on k, and no more than the cost cap can pay
  for at the cheapest possible lease of k. When count_k is unlimited or >= S_k, slots
  are ordered by their lowest-ranked task (task of rank r uses slots <= r; lanes
  likewise). When count_k < S_k and the objective is time without a budget, S_k =
  count_k: machines whose leases never overlap can be merged into one id (interval
  colouring) without changing a time. Otherwise a slot id is leased once (the spec
  splits a lease with a gap into two ids), slots are ordered by lease start, and at
  the start of slot m at most count_k - 1 earlier slots may still be leased
  (c[k,m',m] = 0 => E[k,m'] <= L[k,m]): exact, so no plan that re-leases machine ids
  after a gap is cut off.

Solving: HiGHS where ``highspy`` is installed (:mod:`agora_optimizer.engines.exact.milp.highs`:
in this process, with the same warm start, the bound from HiGHS itself), else CBC via
PuLP's ``COIN_CMD`` on the binary bundled with PuLP 3.3
(``PULP_CBC_CMD`` itself is deprecated there), started from the best of the given warm
start and a few list schedules (``setInitialValue`` and ``warmStart=True``), with
``timeLimit`` = what is left of ``time_limit_s`` after building, and killed (``timeout
-s KILL``, where available) if it overruns that by a quarter plus 5 s. PuLP 3.3 does not
expose CBC's best bound for ``COIN_CMD``, so it is read from CBC's log (the main
search's last "Cbc0005I Partial search ... (best possible X)", else the summary's
"Lower bound:"); when CBC proves optimality its bound is the objective value. The
better of the MILP's (repaired) schedule and the warm start is returned, "optimal" when
its value is within 1e-6 (relative) of the bound, else "feasible" with gap = (value -
bound) / value (None when no bound was read). A workflow larger than ``max_tasks`` or
whose model would exceed ``max_rows``, a deadline or budget proven infeasible (by the
lower bounds or by CBC), and a run that finds nothing in time return None.

Repair: the machines, the lanes, the orders and overlaps of tasks on a machine and the
separations of leases are read from the solution, every lease is kept within the whole
billing steps the solution pays for, and every start is recomputed as the least
solution of the difference constraints they imply (Bellman-Ford), so durations are
exactly runtime / speed and no solver noise is left; the schedule is then checked with
:func:`agora_optimizer.planning.validate.validate_plan`.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulp

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.engines.exact.milp.highs import SolverOutcome as _Outcome
from agora_optimizer.engines.exact.milp.highs import highs_available, solve_with_highs
from agora_optimizer.engines.exact.repair import DifferenceEdge, lift_pruned, to_assignments
from agora_optimizer.engines.exact.repair import least_starts as _least_starts
from agora_optimizer.model.catalog import GIB, Resource
from agora_optimizer.model.plan import Assignment, Plan, SolverInfo, SolverStatus
from agora_optimizer.model.workflow import Task
from agora_optimizer.planning.list_schedule import list_schedule
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.time_budget import Deadline, OutOfTime
from agora_optimizer.planning.validate import validate_plan

DEFAULT_MAX_TASKS = 40
DEFAULT_MAX_ROWS = 50_000
OPTIMALITY_TOLERANCE = 1e-6  # relative: the repaired schedule's value against CBC's bound
_MIN_CBC_S = 0.05
_EPS_S = 1e-9

Slot = tuple[int, int]  # (type index, slot index)
Pair = tuple[int, int]
Need = Callable[[Task], float]


def _cores(task: Task) -> float:
    return float(task.cores)


def _memory_gib(task: Task) -> float:
    return task.memory_bytes / GIB


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class _Type:
    resource: Resource
    slots: int
    by_lease: bool  # slots ordered by lease start, with the count-concurrency rows
    lane_tasks: frozenset[int]  # tasks that take lanes on this type
    memory_tasks: frozenset[int]  # tasks with a memory row on this type

    @property
    def lanes(self) -> int:
        return self.resource.vcpus if self.lane_tasks else 0


@dataclass(frozen=True)
class _Caps:
    """Upper bounds on the makespan and the cost that some optimal plan respects."""

    makespan_s: float
    cost_usd: float


@dataclass
class _Data:
    problem: Problem
    tasks: tuple[Task, ...]  # topological order
    types: tuple[_Type, ...]
    options: tuple[tuple[int, ...], ...]  # type indices per task
    rank: dict[Pair, int]  # (task, type) -> rank among the tasks that fit the type
    lane_limit: dict[Pair, int]  # (task, type) -> lanes it may use (symmetry)
    duration: dict[Pair, float]
    edges: tuple[tuple[int, int, float], ...]  # (parent, child, transfer_s)
    incomparable: tuple[frozenset[int], ...]
    head: tuple[float, ...]  # earliest start
    tail: tuple[float, ...]  # shortest time from a task's start to the workflow's end
    horizon: float
    cost_cap: float  # math.inf when nothing bounds the cost
    replacement: dict[str, Resource] = field(default_factory=dict)  # pruned type -> kept type

    def slots_of(self, i: int) -> list[Slot]:
        result = []
        for k in self.options[i]:
            kind = self.types[k]
            last = kind.slots if kind.by_lease else min(kind.slots, self.rank[i, k] + 1)
            result += [(k, m) for m in range(last)]
        return result

    def lanes_of(self, i: int, k: int) -> range:
        return range(self.lane_limit.get((i, k), 0))

    def latest_start(self, i: int) -> float:
        return max(self.head[i], self.horizon - self.tail[i])

    def latest_end(self, i: int) -> float:
        return self.latest_start(i) + max(self.duration[i, k] for k in self.options[i])

    def pairs(self, attribute: str) -> list[Pair]:
        """Incomparable pairs i < j that both need lanes (or memory rows) on some type."""
        found = set()
        for kind in self.types:
            members = sorted(getattr(kind, attribute))
            found |= {(i, j) for n, i in enumerate(members) for j in members[n + 1 :] if j in self.incomparable[i]}
        return sorted(found)

    def transfer_pairs(self) -> list[Pair]:
        shared = [(p, c) for p, c, tr in self.edges if tr > 0 and set(self.options[p]) & set(self.options[c])]
        return sorted({_pair(p, c) for p, c in shared})


def _pair(i: int, j: int) -> Pair:
    return (i, j) if i < j else (j, i)


def _fits_count(resource: Resource, machines: int) -> bool:
    return resource.count is None or resource.count >= machines


def _billing_no_worse(better: Resource, worse: Resource) -> bool:
    ratio = worse.billing.granularity_s / better.billing.granularity_s
    divides = round(ratio) >= 1 and abs(ratio - round(ratio)) <= 1e-9 * ratio
    return divides and better.billing.minimum_s <= worse.billing.minimum_s


def dominates(better: Resource, worse: Resource, fitting: int, price_matters: bool) -> bool:
    """Whether every machine of ``worse`` can become a new machine of ``better`` at no loss.

    ``fitting`` is the number of tasks that fit on ``better``: its count must allow as many
    machines. Equal types dominate each other; :func:`prune_types` breaks such ties.
    """
    weakly = (
        better.vcpus >= worse.vcpus
        and better.memory_bytes >= worse.memory_bytes
        and better.speed >= worse.speed
        and better.boot_s <= worse.boot_s
        and better.earliest_start_s <= worse.earliest_start_s
        and _fits_count(better, fitting)
    )
    if not weakly or not price_matters:
        return weakly
    return better.price_per_hour_usd <= worse.price_per_hour_usd and _billing_no_worse(better, worse)


def prune_types(problem: Problem) -> tuple[list[Resource], dict[str, Resource]]:
    """The types kept (used by some task, dominated by none), and a kept replacement for each other one."""
    objective, tasks = problem.objective, problem.workflow.tasks
    price_matters = not (objective.kind == "time" and objective.budget_usd is None)
    used = [r for r in problem.catalog.resources if any(r.fits(t) for t in tasks)]
    fitting = {r.name: sum(r.fits(t) for t in tasks) for r in used}
    position = {r.name: n for n, r in enumerate(used)}

    def beats(a: Resource, b: Resource) -> bool:
        if a.name == b.name or not dominates(a, b, fitting[a.name], price_matters):
            return False
        return not dominates(b, a, fitting[b.name], price_matters) or position[a.name] < position[b.name]

    kept = [r for r in used if not any(beats(other, r) for other in used)]
    replacement = {r.name: next(k for k in kept if beats(k, r)) for r in used if r not in kept}
    return kept, replacement


def _binding(
    tasks: Sequence[Task], members: set[int], incomparable: Sequence[frozenset[int]], need: Need, capacity: float
) -> frozenset[int]:
    """The tasks left after dropping, in turn, those that fit with every remaining neighbour."""
    active = {i for i in members if tasks[i].runtime_s > 0}
    changed = True
    while changed:
        changed = False
        for j in sorted(active):
            if need(tasks[j]) + sum(need(tasks[i]) for i in incomparable[j] & active) <= capacity:
                active.discard(j)
                changed = True
    return frozenset(active)


def _caps(problem: Problem, tasks: Sequence[Task], kinds: Sequence[Resource], warm: Sequence[Assignment]) -> _Caps:
    catalog, objective, bounds = problem.catalog, problem.objective, problem.bounds
    # no instant after the last release (a type's or a task's) idles
    total = max([0.0, *(r.release_s for r in kinds), *(t.release_s for t in tasks)])
    for task in tasks:
        fits = [r for r in kinds if r.fits(task)]
        transfers = [catalog.transfer_s(e.bytes) for e in problem.workflow.children[task.id]]
        total += max(r.boot_s for r in fits) + max(r.runtime_s(task) for r in fits) + max(transfers, default=0.0)
    makespan = total if objective.deadline_s is None else min(total, objective.deadline_s)
    cost = math.inf if objective.budget_usd is None else objective.budget_usd
    if warm:
        warm_makespan, warm_cost = problem.evaluate(warm)
        value, alpha = problem.score(warm)[0], objective.alpha
        if objective.kind == "time":
            makespan = min(makespan, warm_makespan)
        elif objective.kind == "cost":
            cost = min(cost, warm_cost)
        else:  # value >= alpha T / T_lb + (1 - alpha) C / C_lb with T >= T_lb and C >= C_lb
            if alpha > 0:
                makespan = min(makespan, (value - (1 - alpha)) * max(bounds.makespan_s, 1e-9) / alpha)
            if alpha < 1:
                cost = min(cost, (value - alpha) * max(bounds.cost_usd, 1e-12) / (1 - alpha))
    return _Caps(makespan * (1 + 1e-7) + 1e-6, cost * (1 + 1e-7) + 1e-12)


def _slot_count(problem: Problem, resource: Resource, tasks: Sequence[Task], caps: _Caps) -> tuple[int, bool]:
    """(S_k, ordered by lease start): no more machines than tasks, nor than the cost cap pays for."""
    fitting = [t for t in tasks if resource.fits(t)]
    slots = len(fitting)
    cheapest = resource.lease_cost_usd(resource.boot_s + min(resource.runtime_s(t) for t in fitting))
    if math.isfinite(caps.cost_usd) and cheapest > 0:
        slots = max(1, min(slots, math.floor(caps.cost_usd / cheapest + 1e-9)))
    if _fits_count(resource, slots):
        return slots, False
    assert resource.count is not None
    if problem.objective.kind == "time" and problem.objective.budget_usd is None:
        return resource.count, False
    return slots, True


def _types(
    problem: Problem,
    kinds: Sequence[Resource],
    tasks: Sequence[Task],
    incomparable: Sequence[frozenset[int]],
    caps: _Caps,
) -> tuple[_Type, ...]:
    result = []
    for r in kinds:
        members = {i for i, t in enumerate(tasks) if r.fits(t)}
        slots, by_lease = _slot_count(problem, r, tasks, caps)
        lanes = _binding(tasks, members, incomparable, _cores, float(r.vcpus))
        memory = _binding(tasks, members, incomparable, _memory_gib, r.memory_bytes / GIB)
        result.append(_Type(r, slots, by_lease, lanes, memory))
    return tuple(result)


def _lane_limits(tasks: Sequence[Task], types: Sequence[_Type], rank: dict[Pair, int]) -> dict[Pair, int]:
    """Lanes sorted by their lowest-ranked task: a task uses lanes < the cores of tasks ranked up to it."""
    limits: dict[Pair, int] = {}
    for k, kind in enumerate(types):
        total = 0
        for i in sorted(kind.lane_tasks, key=lambda i: rank[i, k]):
            total += tasks[i].cores
            limits[i, k] = min(total, kind.lanes)
    return limits


def _head_tail(
    n: int,
    kinds: Sequence[Resource],
    options: Sequence[tuple[int, ...]],
    duration: dict[Pair, float],
    parents: dict[int, list[int]],
    release: Sequence[float],
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    shortest = [min(duration[i, k] for k in options[i]) for i in range(n)]
    head = [0.0] * n
    for i in range(n):
        boot = max(min(kinds[k].earliest_start_s for k in options[i]), release[i])
        head[i] = max([float(boot)] + [head[p] + shortest[p] for p in parents[i]])
    children: dict[int, list[int]] = defaultdict(list)
    for c in range(n):
        for p in parents[c]:
            children[p].append(c)
    tail = [0.0] * n
    for i in reversed(range(n)):
        tail[i] = shortest[i] + max((tail[c] for c in children[i]), default=0.0)
    return tuple(head), tuple(tail)


def _incomparable(n: int, parents: dict[int, list[int]]) -> tuple[frozenset[int], ...]:
    ancestors: list[set[int]] = []
    for i in range(n):
        found: set[int] = set()
        for p in parents[i]:
            found |= ancestors[p] | {p}
        ancestors.append(found)
    return tuple(
        frozenset(i for i in range(n) if i != j and i not in ancestors[j] and j not in ancestors[i]) for j in range(n)
    )


def _build_data(problem: Problem, warm: Sequence[Assignment]) -> _Data:
    workflow, catalog = problem.workflow, problem.catalog
    kinds, replacement = prune_types(problem)
    tasks = tuple(workflow.by_id[t] for t in workflow.topological_order)
    index = {t.id: n for n, t in enumerate(tasks)}
    options = tuple(tuple(k for k, r in enumerate(kinds) if r.fits(t)) for t in tasks)
    rank = {}
    for k in range(len(kinds)):
        for r, i in enumerate(i for i in range(len(tasks)) if k in options[i]):
            rank[i, k] = r
    duration = {(i, k): kinds[k].runtime_s(t) for i, t in enumerate(tasks) for k in options[i]}
    edges = tuple((index[e.parent], index[e.child], catalog.transfer_s(e.bytes)) for e in workflow.edges)
    parents: dict[int, list[int]] = defaultdict(list)
    for p, c, _ in edges:
        parents[c].append(p)
    incomparable = _incomparable(len(tasks), parents)
    head, tail = _head_tail(len(tasks), kinds, options, duration, parents, [t.release_s for t in tasks])
    caps = _caps(problem, tasks, kinds, warm)
    types = _types(problem, kinds, tasks, incomparable, caps)
    return _Data(
        problem=problem,
        tasks=tasks,
        types=types,
        options=options,
        rank=rank,
        lane_limit=_lane_limits(tasks, types, rank),
        duration=duration,
        edges=edges,
        incomparable=incomparable,
        head=head,
        tail=tail,
        horizon=caps.makespan_s,
        cost_cap=caps.cost_usd,
        replacement=replacement,
    )


def estimated_rows(data: _Data) -> int:
    """About how many constraints the model will have (its largest families), before building it."""
    n = len(data.tasks)
    slots = {i: set(data.slots_of(i)) for i in range(n)}
    places: dict[int, set[tuple[int, int, int]]] = {}  # (type, slot, lane) a task may take
    for i in range(n):
        places[i] = {(k, m, lane) for k, m in slots[i] for lane in data.lanes_of(i, k)}
    rows = sum(5 * len(slots[i]) + len(places[i]) for i in range(n))
    rows += sum(len(places[i] & places[j]) + 2 for i, j in data.pairs("lane_tasks"))
    rows += sum(len(slots[i] & slots[j]) + 4 for i, j in data.pairs("memory_tasks"))
    return rows + sum(len(slots[p]) for p, _ in data.transfer_pairs())


# -------------------------------------------------------------------------- model


@dataclass
class _Model:
    lp: Any
    x: dict[tuple[int, int, int], Any] = field(default_factory=dict)
    y: dict[tuple[int, int, int, int], Any] = field(default_factory=dict)
    u: dict[Slot, Any] = field(default_factory=dict)
    s: list[Any] = field(default_factory=list)
    makespan: Any = None
    cost: Any = None
    sm: dict[Pair, Any] = field(default_factory=dict)
    q: dict[Pair, Any] = field(default_factory=dict)
    o: dict[Pair, Any] = field(default_factory=dict)
    a: dict[Pair, Any] = field(default_factory=dict)
    lease_start: dict[Slot, Any] = field(default_factory=dict)
    lease_end: dict[Slot, Any] = field(default_factory=dict)
    billed: dict[Slot, Any] = field(default_factory=dict)
    steps: dict[Slot, Any] = field(default_factory=dict)
    overlap: dict[tuple[int, int, int], Any] = field(default_factory=dict)
    deadline: Deadline = field(default_factory=Deadline)  # checked while building

    def var(self, name: str, low: float | None = None, up: float | None = None, cat: str = "Continuous") -> Any:
        return self.lp.add_variable(name, low, up, cat=cat)

    def add(self, expression: Any, name: str) -> None:
        self.lp.addConstraint(expression, name)

    def end(self, data: _Data, i: int) -> Any:
        return self.s[i] + pulp.lpSum(data.duration[i, k] * self.x[i, k, m] for k, m in data.slots_of(i))

    def first(self, i: int, j: int) -> Any:
        """o as seen from (i, j): 1 when i starts no later than j."""
        return self.o[i, j] if i < j else 1 - self.o[j, i]

    def solved(self) -> bool:
        return all(v.value() is not None for v in self.x.values())


def _add_variables(model: _Model, data: _Data) -> None:
    for i in range(len(data.tasks)):
        for k, m in data.slots_of(i):
            model.x[i, k, m] = model.var(f"x_{i}_{k}_{m}", cat="Binary")
            for lane in data.lanes_of(i, k):
                model.y[i, k, m, lane] = model.var(f"y_{i}_{k}_{m}_{lane}", cat="Binary")
    for k, kind in enumerate(data.types):
        for m in range(kind.slots):
            model.u[k, m] = model.var(f"u_{k}_{m}", cat="Binary")
    for i in range(len(data.tasks)):
        model.s.append(model.var(f"s_{i}", data.head[i], data.latest_start(i)))
    lowest = max((data.head[i] + data.tail[i] for i in range(len(data.tasks))), default=0.0)
    model.makespan = model.var("T", min(lowest, data.horizon), data.horizon)
    for i, j in sorted(set(data.transfer_pairs()) | set(data.pairs("memory_tasks"))):
        model.sm[i, j] = model.var(f"sm_{i}_{j}", 0, 1)
    for i, j in data.pairs("lane_tasks"):
        model.q[i, j] = model.var(f"q_{i}_{j}", 0, 1)
    for i, j in sorted(set(data.pairs("lane_tasks")) | set(data.pairs("memory_tasks"))):
        model.o[i, j] = model.var(f"o_{i}_{j}", cat="Binary")
    for i, j in data.pairs("memory_tasks"):
        model.a[i, j] = model.var(f"a_{i}_{j}", cat="Binary")
        model.a[j, i] = model.var(f"a_{j}_{i}", cat="Binary")
    _add_lease_variables(model, data)


def _add_lease_variables(model: _Model, data: _Data) -> None:
    h = data.horizon
    for k, kind in enumerate(data.types):
        granularity = kind.resource.billing.granularity_s
        for m in range(kind.slots):
            model.lease_start[k, m] = model.var(f"L_{k}_{m}", 0, h)
            model.lease_end[k, m] = model.var(f"E_{k}_{m}", 0, h)
            model.billed[k, m] = model.var(f"G_{k}_{m}", 0)
            model.steps[k, m] = model.var(f"n_{k}_{m}", 0, math.ceil(h / granularity) + 1, cat="Integer")
            count = kind.resource.count
            if kind.by_lease and count is not None and m >= count:
                for earlier in range(m):
                    model.overlap[k, earlier, m] = model.var(f"c_{k}_{earlier}_{m}", cat="Binary")


def _add_assignment(model: _Model, data: _Data) -> None:
    on_slot: dict[Slot, list[Any]] = defaultdict(list)
    for i, task in enumerate(data.tasks):
        model.add(pulp.lpSum(model.x[i, k, m] for k, m in data.slots_of(i)) == 1, f"assign_{i}")
        for k, m in data.slots_of(i):
            on_slot[k, m].append(model.x[i, k, m])
            model.add(model.x[i, k, m] <= model.u[k, m], f"used_{i}_{k}_{m}")
            lanes = [model.y[i, k, m, lane] for lane in data.lanes_of(i, k)]
            if lanes:
                model.add(pulp.lpSum(lanes) == task.cores * model.x[i, k, m], f"lanes_{i}_{k}_{m}")
    for k, kind in enumerate(data.types):
        for m in range(kind.slots):
            model.add(model.u[k, m] <= pulp.lpSum(on_slot[k, m]), f"empty_{k}_{m}")
            if m > 0:
                model.add(model.u[k, m] <= model.u[k, m - 1], f"symmetry_{k}_{m}")


def _add_timing(model: _Model, data: _Data) -> None:
    for i in range(len(data.tasks)):
        task = data.tasks[i]
        boots = [(data.types[k].resource.earliest_start_of(task), model.x[i, k, m]) for k, m in data.slots_of(i)]
        if any(b > 0 for b, _ in boots):  # the type released, then booted; the task's own release
            model.add(model.s[i] >= pulp.lpSum(b * x for b, x in boots), f"boot_{i}")
        model.add(model.makespan >= model.end(data, i), f"makespan_{i}")
    for p, c, tr in data.edges:
        if tr > 0 and _pair(p, c) in model.sm:
            same = model.sm[_pair(p, c)]
            model.add(model.s[c] >= model.end(data, p) + tr - tr * same, f"edge_{p}_{c}")
            for k, m in data.slots_of(p):
                other = model.x.get((c, k, m), 0)
                model.add(same <= 1 - model.x[p, k, m] + other, f"apart_{p}_{c}_{k}_{m}")
        else:
            model.add(model.s[c] >= model.end(data, p) + tr, f"edge_{p}_{c}")


def _add_order(model: _Model, data: _Data) -> None:
    """For memory pairs, o_ij = 1 => s_i <= s_j and o_ij = 0 => s_j <= s_i, a linear order.

    For pairs that only share lanes, o just picks which of the two goes first when they share one.
    """
    memory = data.pairs("memory_tasks")
    for i, j in memory:
        late_i, late_j = data.latest_start(i) - data.head[j], data.latest_start(j) - data.head[i]
        model.add(model.s[j] - model.s[i] >= -max(late_i, 0.0) * (1 - model.o[i, j]), f"before_{i}_{j}")
        model.add(model.s[i] - model.s[j] >= -max(late_j, 0.0) * model.o[i, j], f"after_{i}_{j}")
    linked = set(memory)
    for i, j in memory:
        for k in sorted(data.incomparable[i] & data.incomparable[j]):
            if k > j and (i, k) in linked and (j, k) in linked:
                oij, ojk, oik = model.o[i, j], model.o[j, k], model.o[i, k]
                model.add(oij + ojk - oik <= 1, f"triangle_{i}_{j}_{k}")
                model.add(oik - oij - ojk <= 0, f"triangle2_{i}_{j}_{k}")


def _add_lanes(model: _Model, data: _Data) -> None:
    """Tasks that share a lane never overlap (in the order o gives them)."""
    places: dict[int, set[tuple[int, int, int]]] = defaultdict(set)
    for key in model.y:
        places[key[0]].add(key[1:])
    for i, j in model.q:
        model.deadline.check()
        shared = model.q[i, j]
        for k, m, lane in sorted(places[i] & places[j]):
            model.add(shared >= model.y[i, k, m, lane] + model.y[j, k, m, lane] - 1, f"lane_{i}_{j}_{k}_{m}_{lane}")
        big_i = max(data.latest_end(i) - data.head[j], 0.0)
        big_j = max(data.latest_end(j) - data.head[i], 0.0)
        order = model.o[i, j]
        model.add(model.s[j] >= model.end(data, i) - big_i * (2 - order - shared), f"lanefirst_{i}_{j}")
        model.add(model.s[i] >= model.end(data, j) - big_j * (1 + order - shared), f"lanesecond_{i}_{j}")


def _add_memory(model: _Model, data: _Data) -> None:
    for i, j in data.pairs("memory_tasks"):
        for k, m in sorted(set(data.slots_of(i)) & set(data.slots_of(j))):
            model.add(model.sm[i, j] >= model.x[i, k, m] + model.x[j, k, m] - 1, f"together_{i}_{j}_{k}_{m}")
    for (i, j), active in model.a.items():
        big = max(data.latest_end(i) - data.head[j], 0.0)
        slack = 2 + active - model.sm[_pair(i, j)] - model.first(i, j)
        model.add(model.s[j] >= model.end(data, i) - big * slack, f"active_{i}_{j}")
    beside: dict[int, list[int]] = defaultdict(list)
    for i, j in model.a:
        beside[j].append(i)
    for j, others in sorted(beside.items()):
        load = _memory_gib(data.tasks[j]) + pulp.lpSum(_memory_gib(data.tasks[i]) * model.a[i, j] for i in others)
        most = _memory_gib(data.tasks[j]) + sum(_memory_gib(data.tasks[i]) for i in others)
        room = []
        for k, m in data.slots_of(j):
            kind = data.types[k]
            limit = kind.resource.memory_bytes / GIB if j in kind.memory_tasks else most
            room.append(limit * model.x[j, k, m])
        model.add(load <= pulp.lpSum(room), f"memory_{j}")


def _add_leases(model: _Model, data: _Data) -> None:
    for i in range(len(data.tasks)):
        for k, m in data.slots_of(i):
            boot, x, duration = data.types[k].resource.boot_s, model.x[i, k, m], data.duration[i, k]
            begin, finish = model.lease_start[k, m], model.lease_end[k, m]
            model.add(begin <= model.s[i] - boot + (data.horizon + boot) * (1 - x), f"lstart_{i}_{k}_{m}")
            model.add(finish >= model.s[i] + duration - data.latest_end(i) * (1 - x), f"lend_{i}_{k}_{m}")
            model.add(finish - begin >= (boot + duration) * x, f"lspan_{i}_{k}_{m}")
    for (k, m), billed in model.billed.items():
        billing = data.types[k].resource.billing
        span = model.lease_end[k, m] - model.lease_start[k, m]
        model.add(billing.granularity_s * model.steps[k, m] >= span, f"steps_{k}_{m}")
        model.add(model.lease_end[k, m] <= model.makespan, f"within_{k}_{m}")
        model.add(span <= data.horizon * model.u[k, m], f"leased_{k}_{m}")
        model.add(billed >= billing.granularity_s * model.steps[k, m], f"billed_{k}_{m}")
        if billing.minimum_s > 0:
            model.add(billed >= billing.minimum_s * model.u[k, m], f"minimum_{k}_{m}")
    model.cost = pulp.lpSum(
        data.types[k].resource.price_per_hour_usd / 3600.0 * billed for (k, _), billed in model.billed.items()
    )


def _add_energy(model: _Model, data: _Data) -> None:
    """The work on each lane, the memory-seconds on each slot and each chain's work fit in its usable lease."""
    on_lane: dict[tuple[int, int, int], list[int]] = defaultdict(list)
    for i, k, m, lane in model.y:
        on_lane[k, m, lane].append(i)
    on_slot: dict[Slot, list[int]] = defaultdict(list)
    for i, k, m in model.x:
        on_slot[k, m].append(i)
    chains = [chain for chain in _chains(data) if len(chain) > 1]
    for k, m in model.billed:
        resource = data.types[k].resource
        usable = model.lease_end[k, m] - model.lease_start[k, m] - resource.boot_s * model.u[k, m]
        for lane in range(data.types[k].lanes):
            if on_lane[k, m, lane]:
                work = pulp.lpSum(data.duration[i, k] * model.y[i, k, m, lane] for i in on_lane[k, m, lane])
                model.add(work <= usable, f"energy_{k}_{m}_{lane}")
        memory = pulp.lpSum(_memory_gib(data.tasks[i]) * data.duration[i, k] * model.x[i, k, m] for i in on_slot[k, m])
        model.add(memory <= resource.memory_bytes / GIB * usable, f"energy_memory_{k}_{m}")
        for c, chain in enumerate(chains):
            hosted = [i for i in chain if (i, k, m) in model.x]
            if len(hosted) > 1:
                work = pulp.lpSum(data.duration[i, k] * model.x[i, k, m] for i in hosted)
                model.add(work <= usable, f"energy_chain_{c}_{k}_{m}")


def _chains(data: _Data) -> list[list[int]]:
    """Chains (pairwise ancestor and descendant, so never overlapping) covering the tasks, longest first."""
    n = len(data.tasks)
    weight = [min(data.duration[i, k] for k in data.options[i]) for i in range(n)]
    left = set(range(n))
    chains = []
    while left:
        best: dict[int, tuple[float, list[int]]] = {}
        for i in sorted(left):  # topological order: a comparable j < i is an ancestor of i
            before = [best[j] for j in best if j not in data.incomparable[i]]
            length, path = max(before, default=(0.0, []))
            best[i] = (length + weight[i], [*path, i])
        chain = max(best.values())[1]
        chains.append(chain)
        left -= set(chain)
    return chains


def _add_counts(model: _Model, data: _Data) -> None:
    h = data.horizon
    for k, kind in enumerate(data.types):
        count = kind.resource.count
        if not kind.by_lease or count is None:
            continue
        for m in range(1, kind.slots):
            later = model.lease_start[k, m] + h * (1 - model.u[k, m])
            model.add(model.lease_start[k, m - 1] <= later, f"lorder_{k}_{m}")
        for m in range(count, kind.slots):
            free = 1 - model.u[k, m]
            for earlier in range(m):
                c = model.overlap[k, earlier, m]
                model.add(
                    model.lease_end[k, earlier] <= model.lease_start[k, m] + h * c + h * free,
                    f"leaseapart_{k}_{earlier}_{m}",
                )
            overlapping = pulp.lpSum(model.overlap[k, e, m] for e in range(m))
            model.add(overlapping <= count - 1 + m * free, f"count_{k}_{m}")


def _add_limits_and_objective(model: _Model, data: _Data) -> None:
    objective, bounds = data.problem.objective, data.problem.bounds
    if objective.deadline_s is not None:
        model.add(model.makespan <= objective.deadline_s, "deadline")
    if math.isfinite(data.cost_cap):
        model.add(model.cost <= data.cost_cap, "cost_cap")  # the budget, or what the warm start allows
    t = model.makespan * (1.0 / max(bounds.makespan_s, 1e-9))
    c = model.cost * (1.0 / max(bounds.cost_usd, 1e-12))
    weights = {"time": (1.0, 0.0), "cost": (0.0, 1.0), "balanced": (objective.alpha, 1 - objective.alpha)}
    w_time, w_cost = weights[objective.kind]
    model.lp.setObjective(w_time * t + w_cost * c)


def _build_model(data: _Data, deadline: Deadline | None = None) -> _Model:
    """The whole model; raises :class:`OutOfTime` (between steps and in the long ones) past ``deadline``."""
    model = _Model(pulp.LpProblem("agora_milp", pulp.LpMinimize), deadline=deadline or Deadline())
    steps = (
        _add_variables,
        _add_assignment,
        _add_timing,
        _add_order,
        _add_lanes,
        _add_memory,
        _add_leases,
        _add_energy,
        _add_counts,
        _add_limits_and_objective,
    )
    for step in steps:
        step(model, data)
        model.deadline.check()
    return model


# --------------------------------------------------------------------- warm start


@dataclass(frozen=True)
class _Schedule:
    """A complete schedule in the model's terms: slot, lanes, start and end of every task."""

    place: list[Slot]
    lanes: list[frozenset[int]]
    start: list[float]
    end: list[float]


def _canonical_slots(assignments: Sequence[Assignment], data: _Data) -> dict[str, Slot] | None:
    """Each task's slot in the model's symmetry-broken numbering, or None if the plan does not fit the model."""
    index = {t.id: n for n, t in enumerate(data.tasks)}
    type_index = {kind.resource.name: k for k, kind in enumerate(data.types)}
    machines: dict[str, list[Assignment]] = defaultdict(list)
    for a in assignments:
        machines[a.machine].append(a)
    per_type: dict[int, list[tuple[tuple[float, int], str]]] = defaultdict(list)
    for machine, items in sorted(machines.items()):
        k = type_index.get(items[0].resource)
        if k is None:
            return None
        first_rank = min(data.rank[index[a.task], k] for a in items)
        lease_start = min(a.start_s for a in items) - data.types[k].resource.boot_s
        per_type[k].append(((lease_start if data.types[k].by_lease else 0.0, first_rank), machine))
    result: dict[str, Slot] = {}
    for k, keyed in per_type.items():
        if len(keyed) > data.types[k].slots:
            return None
        for m, (_, machine) in enumerate(sorted(keyed)):
            result.update({a.task: (k, m) for a in machines[machine]})
    return result


def _colour_lanes(data: _Data, place: list[Slot], start: list[float], end: list[float]) -> list[frozenset[int]] | None:
    """Greedy lanes in start order, then renumbered by lowest-ranked task (the model's symmetry)."""
    lanes: list[frozenset[int]] = [frozenset()] * len(data.tasks)
    on_slot: dict[Slot, list[int]] = defaultdict(list)
    for i, (k, m) in enumerate(place):
        if i in data.types[k].lane_tasks:
            on_slot[k, m].append(i)
    for (k, _), items in on_slot.items():
        free_at = [-math.inf] * data.types[k].lanes
        for i in sorted(items, key=lambda i: (start[i], i)):
            free = [lane for lane, t in enumerate(free_at) if t <= start[i] + _EPS_S][: data.tasks[i].cores]
            if len(free) < data.tasks[i].cores:
                return None
            for lane in free:
                free_at[lane] = end[i]
            lanes[i] = frozenset(free)
        lowest: dict[int, int] = {}
        for i in items:
            for lane in lanes[i]:
                lowest[lane] = min(lowest.get(lane, len(data.tasks)), data.rank[i, k])
        renumber = {lane: n for n, lane in enumerate(sorted(lowest, key=lambda lane: (lowest[lane], lane)))}
        for i in items:
            lanes[i] = frozenset(renumber[lane] for lane in lanes[i])
    return lanes


def _as_schedule(assignments: Sequence[Assignment], data: _Data) -> _Schedule | None:
    lifted = lift_pruned(assignments, data.replacement, data.problem.workflow)
    slots = _canonical_slots(lifted, data)
    if slots is None:
        return None
    by_task = {a.task: a for a in lifted}
    place = [slots[t.id] for t in data.tasks]
    start = [by_task[t.id].start_s for t in data.tasks]
    end = [by_task[t.id].end_s for t in data.tasks]
    lanes = _colour_lanes(data, place, start, end)
    if lanes is None:
        return None
    return _Schedule(place, lanes, start, end)


def _set_warm_start(model: _Model, data: _Data, assignments: Sequence[Assignment]) -> bool:
    schedule = _as_schedule(assignments, data)
    if schedule is None:
        return False
    place, lanes, start, end = schedule.place, schedule.lanes, schedule.start, schedule.end
    if any((i, *slot) not in model.x for i, slot in enumerate(place)):
        return False
    if any((i, *place[i], lane) not in model.y for i in range(len(place)) for lane in lanes[i]):
        return False
    for key, var in model.x.items():
        var.setInitialValue(1 if place[key[0]] == key[1:] else 0)
    for (i, k, m, lane), var in model.y.items():
        var.setInitialValue(1 if place[i] == (k, m) and lane in lanes[i] else 0)
    for i, var in enumerate(model.s):
        var.setInitialValue(start[i])
    model.makespan.setInitialValue(max(end, default=0.0))
    for (i, j), var in model.sm.items():
        var.setInitialValue(1 if place[i] == place[j] else 0)
    for (i, j), var in model.q.items():
        var.setInitialValue(1 if place[i] == place[j] and lanes[i] & lanes[j] else 0)
    for (i, j), var in model.o.items():
        var.setInitialValue(1 if (start[i], i) <= (start[j], j) else 0)
    for (i, j), var in model.a.items():
        running = place[i] == place[j] and (start[i], i) <= (start[j], j) and start[j] < end[i] - _EPS_S
        var.setInitialValue(1 if running else 0)
    _set_lease_values(model, data, schedule)
    return True


def _set_lease_values(model: _Model, data: _Data, schedule: _Schedule) -> None:
    spans: dict[Slot, tuple[float, float]] = {}
    for i, slot in enumerate(schedule.place):
        boot = data.types[slot[0]].resource.boot_s
        first, last = spans.get(slot, (math.inf, -math.inf))
        spans[slot] = (min(first, schedule.start[i] - boot), max(last, schedule.end[i]))
    for slot, var in model.u.items():
        var.setInitialValue(1 if slot in spans else 0)
        first, last = spans.get(slot, (0.0, 0.0))
        billing = data.types[slot[0]].resource.billing
        steps = math.ceil(max(last - first, 0.0) / billing.granularity_s - 1e-9)
        model.lease_start[slot].setInitialValue(first)
        model.lease_end[slot].setInitialValue(last)
        model.steps[slot].setInitialValue(steps)
        minimum = billing.minimum_s if slot in spans else 0.0
        model.billed[slot].setInitialValue(max(minimum, steps * billing.granularity_s))
    for (k, earlier, m), var in model.overlap.items():
        before, after = spans.get((k, earlier)), spans.get((k, m))
        var.setInitialValue(1 if before is not None and after is not None and before[1] > after[0] else 0)


# -------------------------------------------------------------------------- solve


_FINAL_BOUND = re.compile(r"^Cbc0005I Partial search .*\(best possible (\S+)\)", re.MULTILINE)
_LOWER_BOUND = re.compile(r"^Lower bound:\s+(\S+)", re.MULTILINE)


def read_cbc_bound(log: str) -> float | None:
    """CBC's best bound when it stopped early, from its log.

    The last "Cbc0005I Partial search ... (best possible X)" closes the main search (sub-searches
    of heuristics end earlier) and prints 8 significant digits; the summary's "Lower bound:" only
    3 decimals, so it is the fallback.
    """
    for pattern in (_FINAL_BOUND, _LOWER_BOUND):
        for text in reversed(pattern.findall(log)):
            try:
                return float(text)
            except ValueError:
                continue
    return None


def _cbc_path(folder: Path, hard_limit_s: float) -> str | None:
    """The CBC binary bundled with PuLP 3.3, behind ``timeout -s KILL`` where there is one.

    CBC checks its own limit (``-sec``) only between steps, and can overrun it by far in the
    root node of a large model; the wrapper ends it for good.
    """
    bundled = pulp.PULP_CBC_CMD.pulp_cbc_path
    binary = bundled if Path(bundled).exists() else shutil.which("cbc")
    killer = shutil.which("timeout")
    if binary is None or killer is None or os.name == "nt":
        return binary
    wrapper = folder / "cbc"
    wrapper.write_text(f'#!/bin/sh\nexec "{killer}" -s KILL {hard_limit_s:.3f} "{binary}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def _solve(model: _Model, time_limit_s: float, warm: bool, threads: int | None, solver: str = "cbc") -> _Outcome:
    """Run the solver (HiGHS, or CBC) and read what it found."""
    if solver == "highs":
        found = solve_with_highs(model.lp, time_limit_s, warm, threads, OPTIMALITY_TOLERANCE)
        if found.status in ("optimal", "feasible") and not model.solved():
            return _Outcome("none", None, None, found.solve_s)
        return found
    return _solve_cbc(model, time_limit_s, warm, threads)


def _solve_cbc(model: _Model, time_limit_s: float, warm: bool, threads: int | None) -> _Outcome:
    """Run CBC (``COIN_CMD``: ``PULP_CBC_CMD`` is deprecated in PuLP 3.3) and read what it found."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agora-milp-") as folder:
        log_path = Path(folder) / "cbc.log"
        path = _cbc_path(Path(folder), time_limit_s * 1.1 + 1.0)
        if path is None:
            return _Outcome("none", None, None)
        solver = pulp.COIN_CMD(
            path=path, msg=False, timeLimit=time_limit_s, warmStart=warm, logPath=str(log_path), threads=threads
        )
        solver.tmpDir = folder  # PuLP's model and solution files go too, even when CBC is killed
        try:
            model.lp.solve(solver)
        except pulp.PulpSolverError:  # CBC killed at the hard limit, or exited abnormally
            return _Outcome("error", None, None, time.perf_counter() - started)
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
    elapsed = time.perf_counter() - started
    if model.lp.status == pulp.LpStatusInfeasible:
        return _Outcome("infeasible", None, None, elapsed)
    value = model.lp.objective.value() if model.lp.objective is not None else None
    if model.lp.status != pulp.LpStatusOptimal or value is None or not model.solved():
        return _Outcome("none", None, None, elapsed)
    if model.lp.sol_status == pulp.LpSolutionOptimal:  # CBC closed the gap: its bound is the value
        return _Outcome("optimal", value, value, elapsed)
    return _Outcome("feasible", value, read_cbc_bound(log), elapsed)


# ------------------------------------------------------------------------- repair


@dataclass(frozen=True)
class _Solution:
    schedule: _Schedule  # the solver's values (noisy)
    first: dict[Pair, bool]  # (i, j) -> i starts no later than j
    active: dict[Pair, bool]  # (i, j) -> i still runs at j's start (memory pairs)
    longest: dict[Slot, float]  # the longest lease billed no more than the solution's (whole steps)


def _is_set(var: Any) -> bool:
    return bool((var.value() or 0.0) > 0.5)


def _read_solution(model: _Model, data: _Data) -> _Solution:
    n = len(data.tasks)
    place = [max(data.slots_of(i), key=lambda slot: model.x[(i, *slot)].value() or 0.0) for i in range(n)]
    lanes = [
        frozenset(key[3] for key, var in model.y.items() if key[0] == i and key[1:3] == place[i] and _is_set(var))
        for i in range(n)
    ]
    start = [v.value() or 0.0 for v in model.s]
    end = [start[i] + data.duration[i, place[i][0]] for i in range(n)]
    first: dict[Pair, bool] = {}
    for (i, j), var in model.o.items():
        first[i, j] = _is_set(var)
        first[j, i] = not first[i, j]
    longest = {}
    for slot in set(place):  # billed(lease) = max(min, g ceil(lease / g)) <= max(min, g n) while lease <= g n'
        billing = data.types[slot[0]].resource.billing
        steps = max(
            round(model.steps[slot].value() or 0.0), math.floor(billing.minimum_s / billing.granularity_s + 1e-9)
        )
        longest[slot] = steps * billing.granularity_s
    active = {key: _is_set(var) for key, var in model.a.items()}
    return _Solution(_Schedule(place, lanes, start, end), first, active, longest)


def _repair_edges(data: _Data, solution: _Solution, with_leases: bool) -> list[DifferenceEdge]:
    place, lanes = solution.schedule.place, solution.schedule.lanes
    run = [data.duration[i, place[i][0]] for i in range(len(data.tasks))]
    edges = [(p, c, run[p] + (tr if place[p] != place[c] else 0.0)) for p, c, tr in data.edges]
    for i, j in data.pairs("lane_tasks"):
        if place[i] == place[j] and lanes[i] & lanes[j]:
            edges.append((i, j, run[i]) if solution.first[i, j] else (j, i, run[j]))
    for (i, j), active in solution.active.items():
        if place[i] == place[j] and solution.first[i, j]:
            edges.append((i, j, 0.0 if active else run[i]))
    on_slot: dict[Slot, list[int]] = defaultdict(list)
    for i, slot in enumerate(place):
        on_slot[slot].append(i)
    if with_leases:
        for slot, items in on_slot.items():
            boot = data.types[slot[0]].resource.boot_s
            edges += [(a, b, run[a] + boot - solution.longest[slot]) for a in items for b in items]
    return edges + _count_edges(data, solution, on_slot, run)


def _count_edges(
    data: _Data, solution: _Solution, on_slot: dict[Slot, list[int]], run: list[float]
) -> list[DifferenceEdge]:
    """Keep apart the leases of a count-limited type that the solution keeps apart."""
    tolerance = 1e-5 * max(1.0, data.horizon)
    start = solution.schedule.start
    spans = {
        slot: (
            min(start[i] for i in items) - data.types[slot[0]].resource.boot_s,
            max(start[i] + run[i] for i in items),
        )
        for slot, items in on_slot.items()
    }
    edges: list[DifferenceEdge] = []
    for before in spans:
        for after in spans:
            kind = data.types[before[0]]
            if before[0] != after[0] or before == after or not kind.by_lease:
                continue
            if spans[before][1] > spans[after][0] + tolerance:
                continue
            if spans[after][1] <= spans[before][0] + tolerance and before > after:
                continue  # each fits before the other: keep one direction
            boot = kind.resource.boot_s
            edges += [(a, b, run[a] + boot) for a in on_slot[before] for b in on_slot[after]]
    return edges


def _repair(data: _Data, solution: _Solution) -> list[Assignment] | None:
    lower = [
        float(data.types[k].resource.earliest_start_of(task))
        for task, (k, _) in zip(data.tasks, solution.schedule.place, strict=True)
    ]
    for with_leases in (True, False):
        starts = _least_starts(lower, _repair_edges(data, solution, with_leases))
        if starts is not None:
            return to_assignments(data.tasks, [t.resource for t in data.types], solution.schedule.place, starts)
    return None


# ------------------------------------------------------------------------- engine


def is_valid(problem: Problem, assignments: Sequence[Assignment]) -> bool:
    """Whether a schedule covers every task once, passes the checker, respects the releases and meets the limits."""
    tasks = [a.task for a in assignments]
    if len(tasks) != len(problem.workflow.tasks) or set(tasks) != set(problem.workflow.by_id):
        return False
    makespan, cost = problem.evaluate(assignments)
    plan = Plan(
        workflow=problem.workflow.name,
        catalog=problem.catalog.source,
        objective=problem.objective,
        makespan_s=makespan,
        cost_usd=cost,
        assignments=tuple(assignments),
        solver=SolverInfo(method=MilpEngine.name, status="feasible", gap=None, wall_s=0.0),
        created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    if validate_plan(plan, problem.workflow, problem.catalog) or problem.early_starts(assignments):
        return False
    return problem.meets_limits(assignments)


def _warm_candidates(problem: Problem, given: EngineResult | None) -> Iterable[Sequence[Assignment]]:
    if given is not None:
        yield given.assignments
    objective, bounds = problem.objective, problem.bounds
    own = {"time": 1.0, "cost": 0.0, "balanced": objective.alpha}[objective.kind]
    for alpha in dict.fromkeys((own, 1.0, 0.5, 0.0)):
        yield list_schedule(problem.workflow, problem.catalog, alpha, bounds.makespan_s, bounds.cost_usd)


def best_warm_start(
    problem: Problem, given: EngineResult | None, deadline: Deadline | None = None
) -> list[Assignment] | None:
    """The best valid schedule within the limits among ``given`` and a few list schedules.

    Past ``deadline`` no more list schedules are tried once there is a valid one.
    """
    best: tuple[tuple[float, float], list[Assignment]] | None = None
    for candidate in _warm_candidates(problem, given):
        items = list(candidate)
        if is_valid(problem, items) and (best is None or problem.score(items) < best[0]):
            best = (problem.score(items), items)
        if best is not None and deadline is not None and deadline.passed():
            break
    return None if best is None else best[1]


def _proven_infeasible(problem: Problem) -> bool:
    objective, bounds = problem.objective, problem.bounds
    if objective.deadline_s is not None and objective.deadline_s < bounds.makespan_s - 1e-6:
        return True
    return objective.budget_usd is not None and objective.budget_usd < bounds.cost_usd * (1 - 1e-9)


class MilpEngine(Engine):
    """The exact MILP of the execution model, for small workflows (see the module docstring).

    ``max_tasks``: larger workflows return None at once. ``max_rows``: so do problems whose
    model would have more constraints than that (:func:`estimated_rows`; PuLP builds about
    20,000 rows a second and CBC's root node grows with them). ``threads``: the solver's threads
    (None: its default). ``margin_s``: time kept back from ``time_limit_s`` for reading and
    repairing the solution. ``solver``: "highs", "cbc", or "auto" (HiGHS where installed).
    """

    name = "milp"

    def __init__(
        self,
        max_tasks: int = DEFAULT_MAX_TASKS,
        max_rows: int = DEFAULT_MAX_ROWS,
        threads: int | None = None,
        margin_s: float = 0.2,
        solver: str = "auto",
    ) -> None:
        if solver not in ("auto", "highs", "cbc"):
            raise ValueError(f"MilpEngine solver must be 'auto', 'highs' or 'cbc', got {solver!r}")
        self.max_tasks = max_tasks
        self.max_rows = max_rows
        self.threads = threads
        self.margin_s = margin_s
        self.solver = solver
        self.last_outcome: _Outcome | None = None

    @property
    def solver_name(self) -> str:
        """The solver that runs: HiGHS where ``highspy`` is installed (for "auto"), else CBC."""
        if self.solver == "auto":
            return "highs" if highs_available() else "cbc"
        if self.solver == "highs" and not highs_available():
            raise RuntimeError("MilpEngine(solver='highs'): highspy is not installed (pip install highspy)")
        return self.solver

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        started = time.perf_counter()
        self.last_outcome = None
        if len(problem.workflow.tasks) > self.max_tasks or time_limit_s <= 0 or _proven_infeasible(problem):
            return None
        deadline = Deadline(started + time_limit_s - self.margin_s - _MIN_CBC_S)  # for building: CBC needs time
        warm = best_warm_start(problem, warm_start, deadline)
        data = _build_data(problem, warm or [])
        if estimated_rows(data) > self.max_rows:
            return None
        try:  # building a large model can take seconds: it must not overrun the time limit either
            model = _build_model(data, deadline)
        except OutOfTime:
            return None
        warm_used = warm is not None and _set_warm_start(model, data, warm)
        outcome = _Outcome("none", None, None)
        for use_warm in (warm_used, False) if warm_used else (False,):
            remaining = time_limit_s - (time.perf_counter() - started) - self.margin_s
            if remaining < _MIN_CBC_S:
                break
            outcome = _solve(model, remaining, use_warm, self.threads, self.solver_name)
            if outcome.status != "error":
                break
        self.last_outcome = outcome
        if outcome.status not in ("optimal", "feasible"):
            return None  # proven infeasible, or nothing found in time
        candidate = _repair(data, _read_solution(model, data))
        if candidate is not None and not is_valid(problem, candidate):
            candidate = None
        return _result(problem, outcome, candidate, warm)


def meets_bound(value: float, bound: float) -> bool:
    """Whether a plan's score ``value`` is within :data:`OPTIMALITY_TOLERANCE` of a proven lower ``bound``."""
    return value <= bound + OPTIMALITY_TOLERANCE * max(1.0, abs(bound))


def _result(
    problem: Problem, outcome: _Outcome, candidate: list[Assignment] | None, warm: list[Assignment] | None
) -> EngineResult | None:
    """The better of the MILP's schedule and the warm start; "optimal" when its value meets CBC's bound."""
    options = [items for items in (candidate, warm) if items is not None]
    if not options:
        return None
    best = min(options, key=problem.score)
    value, bound = problem.score(best)[0], outcome.bound
    proven = bound is not None and meets_bound(value, bound)
    status: SolverStatus = "optimal" if proven else "feasible"
    gap = None if bound is None or value <= 0 else max(0.0, (value - bound) / value)
    return EngineResult(
        assignments=tuple(sorted(best, key=lambda a: (a.start_s, a.task))),
        method=MilpEngine.name,
        status=status,
        gap=gap,
        bound=bound,
    )

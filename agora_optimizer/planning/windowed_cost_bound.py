"""A cost lower bound under a deadline over time buckets: each task in its window, each type's count at every moment.

The packed-work bound of :mod:`agora_optimizer.planning.bounds` lets the cheap types take all the work
their counts can hold over the whole schedule, before the deadline D, and counts a task's share of a
machine as a fraction. But a task cannot start before its ancestors could finish (its *head*) nor end
later than D minus the chain of descendants after it (its *tail*), so under a tight deadline a burst
of tasks must run in a short window, where the cheap types' few machines cannot hold it all and the
rest goes to dearer types; and two tasks that each need over half a machine's memory never share it.
This bound is a linear programme over time buckets:

- every task i has the window ``[head_i, D - tail_i]`` (head and tail on the fastest types it fits,
  no transfers, as in :mod:`agora_optimizer.planning.window_bound`); on type k it starts no earlier
  than ``earliest_start_of`` k, and a type on which it cannot finish within its window is not one of
  its options (under a tight deadline, the critical path's tasks only fit the fast types);
- the horizon ``[0, D]`` is cut into at most :data:`MAX_BUCKETS` buckets; a task's window is widened
  to whole buckets (which only weakens the bound);
- tasks with the same options, cores, memory, GPUs and widened window are one class, whose
  reference seconds (``runtime_s``, before speed) ``z_gkb`` may be split over the types k and the
  buckets b of its window at will (pre-emption and migration relax the plan);
- on type k in bucket b, ``S_kb`` machine-seconds are busy: at least the class work's core-seconds
  over ``vcpus``, byte-seconds over memory and GPU-seconds over GPUs, each also under the share rules
  of :data:`SHARE_EPSILONS` (whole tasks), and at most ``count_k`` times the bucket's length after the
  type's earliest start;
- type k leases ``M_k`` machines at least, no fewer than any bucket's ``S_kb`` over its length (each lease is
  busy at most the whole bucket); each lease pays its boot and at least its billing minimum, so type k
  costs ``C_k >= price_k (M_k boot_k + sum_b S_kb)`` and ``C_k >= price_k M_k minimum_k``, and
  ``C_k >= price_k f_k sum_b S_kb`` with :func:`~agora_optimizer.planning.bounds.cost_lower_bound_usd`'s
  deadline factor ``f_k = max(minimum_k, D - release_k) / (D - earliest_start_k)`` (a machine busy ``s``
  seconds before D pays at least ``f_k s`` seconds of its price). The cost is ``sum_k C_k``: a burst that
  must run in a short window on many machines pays a boot on each (bwa-1k on AWS: 4 % of its cost).

Every plan of the spec gives a solution (each task's run cut at the bucket edges, each machine's busy
time in each bucket), so the optimum is a lower bound on every plan's cost. Tasks are aggregated so
the programme stays small at 30,000 tasks: classes of :func:`bucket_classes`. It is solved with HiGHS
within a :class:`~agora_optimizer.planning.time_budget.TimeBudget`; out of time (building or solving),
or with no deadline, it is 0, and the caller keeps the older bound (the larger of the two is the bound).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.planning.time_budget import OutOfTime, TimeBudget

MAX_BUCKETS = 64
MAX_CLASSES = 4_000  # beyond, memory is rounded down to quarter octaves (a weaker bound, as small)
_SAFETY = 1 - 1e-7  # the safe side of HiGHS's tolerances
# Share rules, each a dual feasible function of bin packing (Fekete and Schepers 2001): a task taking a
# fraction x of a machine's cores (memory, GPUs) counts f(x), where tasks that fit together on one
# machine count at most 1 in all. None: f(x) = x. epsilon: f(x) = 1 above 1 - epsilon, 0 below
# epsilon, x between (two tasks over half a machine's memory never share it).
SHARE_EPSILONS: tuple[float | None, ...] = (None, 1 / 2, 1 / 3)


@dataclass(frozen=True)
class Windows:
    """Each task's window, in the workflow's task order: the earliest it may start (its types' own earliest
    starts aside), the latest it may end, and the types on which it can start and finish within it."""

    ready_s: np.ndarray
    due_s: np.ndarray
    within: list[list[Resource]]


class _Durations:
    """Each task's duration on each of its types, and when each type may start it, as arrays per set of types."""

    def __init__(self, tasks: tuple[Task, ...], options: dict[str, list[Resource]]) -> None:
        groups: dict[tuple[str, ...], list[int]] = {}
        for i, task in enumerate(tasks):
            groups.setdefault(tuple(r.name for r in options[task.id]), []).append(i)
        self.types: list[list[Resource]] = []
        self.group = np.zeros(len(tasks), dtype=int)
        self.row = np.zeros(len(tasks), dtype=int)
        self.runtime_s: list[np.ndarray] = []  # per group: tasks x types
        self.earliest_s: list[np.ndarray] = []  # per group: tasks x types, each type's and the task's release
        for g, members in enumerate(groups.values()):
            types = options[tasks[members[0]].id]
            reference = np.array([tasks[i].runtime_s for i in members])
            release = np.array([tasks[i].release_s for i in members])
            speed = np.array([r.speed for r in types])
            self.types.append(types)
            self.group[members] = g
            self.row[members] = range(len(members))
            self.runtime_s.append(reference[:, None] / speed + np.array([r.added_latency_s for r in types]))
            self.earliest_s.append(np.maximum(release[:, None], np.array([r.earliest_start_s for r in types])))
        self.fastest_s = np.zeros(len(tasks))
        self.latest_start_s = np.zeros(len(tasks))  # from here on, every type may start the task
        for g, runtime in enumerate(self.runtime_s):
            members = self.group == g
            self.fastest_s[members] = runtime.min(axis=1)[self.row[members]]
            self.latest_start_s[members] = self.earliest_s[g].max(axis=1)[self.row[members]]

    def finish_s(self, i: int, start_s: float) -> float:
        """The earliest task ``i`` can finish when ready at ``start_s``, on the type that finishes it first."""
        if start_s >= self.latest_start_s[i]:
            return start_s + float(self.fastest_s[i])
        g, row = self.group[i], self.row[i]
        return float((np.maximum(start_s, self.earliest_s[g][row]) + self.runtime_s[g][row]).min())


def task_windows(
    workflow: Workflow, options: dict[str, list[Resource]], deadline_s: float, budget: TimeBudget | None = None
) -> Windows:
    """Heads and tails on the fastest types, no transfers: no plan meeting ``deadline_s`` runs a task outside them.

    ``ready_s``: the latest of its own release and its parents' earliest finishes, each parent on the
    type that finishes it first (from that type's earliest start on). ``due_s``: the deadline minus its
    tail, the longest chain of descendants after it, each on its fastest type. ``within``: the types on
    which it can start (no earlier than their ``earliest_start_of`` it) and finish between the two.
    Raises :class:`~agora_optimizer.planning.time_budget.OutOfTime` once ``budget`` has expired.
    """
    budget = budget or TimeBudget()
    tasks = workflow.tasks
    durations = _Durations(tasks, options)
    index = {t.id: i for i, t in enumerate(tasks)}
    parent = np.array([index[e.parent] for e in workflow.edges], dtype=int)
    child = np.array([index[e.child] for e in workflow.edges], dtype=int)
    levels = _levels(len(tasks), parent, child)
    budget.check()
    out_of, into = _Adjacency(parent, len(tasks)), _Adjacency(child, len(tasks))
    start = np.zeros(len(tasks))  # the latest of the parents' earliest finishes
    fastest = durations.fastest_s
    for level in levels:  # a level's parents are all in the levels before it
        finish = start[level] + fastest[level]
        for k in np.flatnonzero(start[level] < durations.latest_start_s[level]).tolist():  # a type starts later
            finish[k] = durations.finish_s(int(level[k]), float(start[level[k]]))
        edges = out_of.edges(level)
        np.maximum.at(start, child[edges], np.repeat(finish, out_of.count[level]))
        budget.check()
    ready = np.maximum(start, np.array([t.release_s for t in tasks]))
    tail = np.zeros(len(tasks))
    for level in reversed(levels):  # a level's children are all in the levels after it
        edges = into.edges(level)
        np.maximum.at(tail, parent[edges], np.repeat(fastest[level] + tail[level], into.count[level]))
    due = deadline_s - tail
    budget.check()
    within: list[list[Resource]] = [[] for _ in tasks]
    for g, types in enumerate(durations.types):
        members = np.flatnonzero(durations.group == g)
        rows = durations.row[members]
        earliest, runtime = durations.earliest_s[g][rows], durations.runtime_s[g][rows]
        latest = due[members, None]
        fits = (earliest < latest) & (np.maximum(ready[members, None], earliest) + runtime <= latest + 1e-9)
        for member, row in zip(members.tolist(), fits, strict=True):
            within[member] = [r for r, ok in zip(types, row, strict=True) if ok]
    return Windows(ready, due, within)


def _levels(n: int, parent: np.ndarray, child: np.ndarray) -> list[np.ndarray]:
    """The tasks by depth (the longest chain of parents above them): each task after all of its parents."""
    waiting = np.bincount(child, minlength=n)
    out_of = _Adjacency(parent, n)
    levels = []
    level = np.flatnonzero(waiting == 0)
    while level.size:
        levels.append(level)
        reached = child[out_of.edges(level)]
        np.subtract.at(waiting, reached, 1)
        level = np.unique(reached[waiting[reached] == 0])
    return levels


class _Adjacency:
    """The edges of each task at one end (``ends[e]``: the task at that end of edge e), as ranges of a sorted order."""

    def __init__(self, ends: np.ndarray, n: int) -> None:
        self.order = np.argsort(ends, kind="stable")
        self.count = np.bincount(ends, minlength=n)
        self.first = np.concatenate(([0], np.cumsum(self.count)[:-1]))

    def edges(self, tasks: np.ndarray) -> np.ndarray:
        """The edges at ``tasks``, task by task in their order."""
        counts = self.count[tasks]
        offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        return self.order[np.repeat(self.first[tasks], counts) + offsets]


def bucket_edges(windows: Windows, types: list[Resource], deadline_s: float, max_buckets: int) -> np.ndarray:
    """At most ``max_buckets`` + 1 edges from 0 to the deadline: the types' earliest starts, then the
    windows' ends, evenly among their distinct values when there are more."""
    ends = np.concatenate((windows.ready_s, windows.due_s))
    ends = np.unique(ends[(ends > 0) & (ends < deadline_s)])
    fixed = {0.0, deadline_s, *(r.earliest_start_s for r in types if 0 < r.earliest_start_s < deadline_s)}
    room = max(max_buckets + 1 - len(fixed), 0)
    if len(ends) > room:
        ends = ends[np.unique(np.linspace(0, len(ends) - 1, room).round().astype(int))] if room else ends[:0]
    return np.unique(np.concatenate((np.array(sorted(fixed)), ends)))


BucketClass = tuple[tuple[str, ...], int, int, int, int, int]  # types, cores, memory, GPUs, first and last edge


def bucket_classes(
    workflow: Workflow, windows: Windows, edges: np.ndarray, max_classes: int
) -> dict[BucketClass, float]:
    """Tasks alike for the bucket programme, with their reference seconds summed: the same types within
    their windows, cores, memory and GPUs, and window widened to the edges (from the last edge at or
    before its ready time to the first at or after its due time). With more than ``max_classes``,
    memory is rounded down to a quarter octave."""
    first = np.maximum(np.searchsorted(edges, windows.ready_s, side="right") - 1, 0)
    last = np.minimum(np.searchsorted(edges, windows.due_s - 1e-9, side="left"), len(edges) - 1)
    names = [tuple(sorted(r.name for r in rs)) for rs in windows.within]
    memory = [t.memory_bytes for t in workflow.tasks]
    for rounding in (False, True):
        if rounding:
            memory = [min(int(2 ** (np.floor(np.log2(m) * 4) / 4)), m) if m > 1 else 0 for m in memory]
        classes: dict[BucketClass, float] = {}
        for i, task in enumerate(workflow.tasks):
            key = (names[i], task.cores, memory[i], task.gpus, int(first[i]), int(last[i]))
            classes[key] = classes.get(key, 0.0) + task.runtime_s
        if len(classes) <= max_classes:
            break
    return classes


def _share(fraction: float, epsilon: float | None) -> float:
    """The dual feasible function ``f_0^epsilon`` of ``fraction`` (None: the identity), on the safe side of rounding."""
    if epsilon is None:
        return fraction
    if fraction > 1 - epsilon + 1e-12:
        return 1.0
    return fraction if fraction >= epsilon + 1e-12 else 0.0


def deadline_factor(resource: Resource, deadline_s: float) -> float:
    """What a busy second of ``resource`` before ``deadline_s`` costs at least, in seconds of its price."""
    return max(resource.billing.minimum_s, deadline_s - resource.release_s) / (deadline_s - resource.earliest_start_s)


def windowed_cost_bound_usd(
    workflow: Workflow,
    options: dict[str, list[Resource]],
    deadline_s: float,
    budget: TimeBudget | None = None,
    max_buckets: int = MAX_BUCKETS,
) -> float:
    """The bucket programme's optimum (see the module's docstring), with more buckets while time allows.

    The programme is solved with 4 buckets, then 8, 16 ... up to ``max_buckets``: each answer is a
    bound, and the best is returned. It stops when the next, about four times as long, would not fit in
    ``budget``, or when two in a row gained nothing (the windows span nearly the whole horizon, so no
    bucket holds less than the whole). 0 when no programme was solved in time, or when one has no
    solution (the deadline cannot be met: the optimizer says so).
    """
    budget = budget or TimeBudget()
    best = 0.0
    if not workflow.tasks or deadline_s <= 0:
        return best
    try:
        windows = task_windows(workflow, options, deadline_s, budget)
        if any(not rs for rs in windows.within):
            return 0.0  # some task cannot meet the deadline on any type
        stale, buckets = 0, min(4, max_buckets)
        while True:
            with budget:
                found = _solve(workflow, windows, deadline_s, budget, buckets)
            stale = stale + 1 if found <= best * (1 + 1e-6) else 0
            best = max(best, found)
            if buckets >= max_buckets or stale >= 2 or budget.remaining_s() < 4 * budget.step_s:
                return best
            buckets = min(2 * buckets, max_buckets)
    except OutOfTime:
        return best


def _solve(workflow: Workflow, windows: Windows, deadline_s: float, budget: TimeBudget, max_buckets: int) -> float:
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    types = sorted({r.name: r for rs in windows.within for r in rs}.values(), key=lambda r: r.name)
    edges = bucket_edges(windows, types, deadline_s, max_buckets)
    classes = bucket_classes(workflow, windows, edges, MAX_CLASSES)
    budget.check()
    by_name = {r.name: k for k, r in enumerate(types)}
    n_buckets = len(edges) - 1
    starts, ends = edges[:-1], edges[1:]
    n_s = len(types) * n_buckets  # S_kb first (type major), then the z columns
    dims = 3 if workflow.uses_gpus else 2
    rules = dims * len(SHARE_EPSILONS)  # rows of each (type, bucket): a dimension under a share rule
    eq_rows: list[int] = []
    ub_rows: list[int] = []
    ub_cols: list[int] = []
    ub_vals: list[float] = []
    for g, (names, cores, memory, gpus, first, last) in enumerate(classes):
        for name in names:
            k = by_name[name]
            r = types[k]
            fractions = (cores / r.vcpus, memory / r.memory_bytes, gpus / r.gpus if gpus else 0.0)[:dims]
            shares = [
                (rule, value / r.speed)
                for rule, value in enumerate(_share(x, epsilon) for x in fractions for epsilon in SHARE_EPSILONS)
                if value > 0
            ]
            for b in range(first, last):
                if ends[b] <= r.earliest_start_s:
                    continue
                column = n_s + len(eq_rows)
                eq_rows.append(g)
                for rule, value in shares:
                    ub_rows.append((k * n_buckets + b) * rules + rule)
                    ub_cols.append(column)
                    ub_vals.append(value)
        budget.check()
    n_z = len(eq_rows)
    machines_at, cost_at = n_s + n_z, n_s + n_z + len(types)  # then M_k, then C_k
    n_var = cost_at + len(types)
    for s in range(n_s):  # each rule's machine-seconds <= S_kb
        ub_rows.extend(range(s * rules, (s + 1) * rules))
        ub_cols.extend([s] * rules)
        ub_vals.extend([-1.0] * rules)
    row = n_s * rules
    cost = np.zeros(n_var)
    upper = np.full(n_var, np.inf)
    for k, r in enumerate(types):
        if r.earliest_start_s >= deadline_s:
            upper[k * n_buckets : (k + 1) * n_buckets] = 0.0
            continue
        price_s = r.price_per_hour_usd / 3600.0
        length = np.maximum(ends - np.maximum(starts, r.earliest_start_s), 0.0)
        if r.count is not None:
            upper[k * n_buckets : (k + 1) * n_buckets] = r.count * length
        busy = list(range(k * n_buckets, (k + 1) * n_buckets))
        for b, s in enumerate(busy):  # S_kb <= M_k x the bucket's length: M_k leases at least
            ub_rows.extend([row, row])
            ub_cols.extend([s, machines_at + k])
            ub_vals.extend([1.0, -float(length[b])])
            row += 1
        lease_rows = (  # C_k >= each: f_k x busy; busy plus a boot per lease; a billing minimum per lease
            [(s, price_s * deadline_factor(r, deadline_s)) for s in busy],
            [*[(s, price_s) for s in busy], (machines_at + k, price_s * r.boot_s)],
            [(machines_at + k, price_s * r.billing.minimum_s)],
        )
        for terms in lease_rows:
            for column, value in [*terms, (cost_at + k, -1.0)]:
                ub_rows.append(row)
                ub_cols.append(column)
                ub_vals.append(value)
            row += 1
        cost[cost_at + k] = 1.0
    a_ub = coo_matrix((ub_vals, (ub_rows, ub_cols)), shape=(row, n_var)).tocsr()
    a_eq = coo_matrix(([1.0] * n_z, (eq_rows, range(n_s, n_s + n_z))), shape=(len(classes), n_var)).tocsr()
    remaining = budget.remaining_s()
    result = linprog(
        cost,
        A_ub=a_ub,
        b_ub=np.zeros(row),
        A_eq=a_eq,
        b_eq=np.array(list(classes.values())),
        bounds=np.column_stack((np.zeros(n_var), upper)),
        method="highs",
        options={} if remaining == np.inf else {"time_limit": max(remaining, 0.01)},
    )
    if result.status != 0:  # out of time, or no solution
        return 0.0
    return float(result.fun) * _SAFETY

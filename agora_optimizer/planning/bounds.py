"""Lower bounds on makespan and cost, used to normalise objectives and to report plan quality."""

from __future__ import annotations

from collections.abc import Iterable

from agora_optimizer.errors import TooManyGpusError, UnplaceableTaskError
from agora_optimizer.model.catalog import GIB, Catalog, Resource
from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.planning.window_bound import timing_types, window_bound_s


def feasible_types(workflow: Workflow, catalog: Catalog) -> dict[str, list[Resource]]:
    """The resource types each task fits on; raises ``UnplaceableTaskError`` for a task with none
    (``TooManyGpusError``, one of them, when no type has as many GPUs as the task needs)."""
    return feasible_types_of(workflow.tasks, catalog)


def feasible_types_of(tasks: Iterable[Task], catalog: Catalog) -> dict[str, list[Resource]]:
    """:func:`feasible_types` of some tasks (of a workflow, or fewer)."""
    result: dict[str, list[Resource]] = {}
    for task in tasks:
        options = catalog.feasible(task)
        if not options:
            most = catalog.most_gpus()
            if task.gpus > most.gpus:
                raise TooManyGpusError(task.id, task.gpus, most.name, most.gpus)
            largest = catalog.largest()
            gpus = f", {largest.gpus} GPUs" if task.gpus else ""
            raise UnplaceableTaskError(
                task.id,
                task.cores,
                task.memory_bytes,
                f"{largest.name} ({largest.vcpus} vcpus, {largest.memory_bytes} bytes{gpus})",
                task.gpus,
            )
        result[task.id] = options
    return result


def fastest_runtime_s(task: Task, options: list[Resource]) -> float:
    return min(r.runtime_s(task) for r in options)


def makespan_lower_bound_s(workflow: Workflow, catalog: Catalog) -> float:
    """The largest of three bounds on the makespan.

    - Critical path with no transfers, each task on the type that would finish it
      first; a task on type k starts no earlier than ``earliest_start_s`` of k (its release plus
      ``boot_s``: no lease before 0 nor before the type's release), nor before its own ``release_s``.
    - Work over capacity, where every type a task fits has a ``count``: all machines
      sharing the work perfectly (see :func:`_balanced_work_s`).
    - Head-body-tail bounds over windows of the DAG (see :mod:`agora_optimizer.planning.window_bound`).
    """
    options = feasible_types(workflow, catalog)
    timing = timing_types(options)
    finish: dict[str, float] = {}
    for task_id in workflow.topological_order:
        ready = max((finish[e.parent] for e in workflow.parents[task_id]), default=0.0)
        task = workflow.by_id[task_id]
        finish[task_id] = min(max(ready, r.earliest_start_of(task)) + r.runtime_s(task) for r in timing[task_id])
    critical_path = max(finish.values(), default=0.0)
    if any(r.count is None for rs in options.values() for r in rs):
        return critical_path  # some task may use unlimited machines: only the path binds
    return max(
        critical_path,
        _balanced_work_s(workflow, options, critical_path),
        window_bound_s(workflow, options),
    )


TaskClass = tuple[tuple[str, ...], int, int, int]  # the types its tasks fit (names, sorted), cores, memory, GPUs


def task_classes(workflow: Workflow, options: dict[str, list[Resource]], max_columns: int) -> dict[TaskClass, float]:
    """Tasks alike for a work bound, with their reference seconds summed (``runtime_s``, before speed).

    Tasks that fit the same types with the same cores, memory and GPUs are one class; when that
    gives more than ``max_columns`` (class, type) pairs, classes merge by types and cores and keep
    their least memory and least GPUs (which only weakens a bound, never breaks it).
    """
    exact: dict[TaskClass, float] = {}
    for task in workflow.tasks:
        key = (tuple(sorted(r.name for r in options[task.id])), task.cores, task.memory_bytes, task.gpus)
        exact[key] = exact.get(key, 0.0) + task.runtime_s
    if sum(len(key[0]) for key in exact) <= max_columns:
        return exact
    merged: dict[tuple[tuple[str, ...], int], tuple[float, int, int]] = {}
    for (names, cores, memory, gpus), total in exact.items():
        seconds, least, fewest = merged.get((names, cores), (0.0, memory, gpus))
        merged[(names, cores)] = (seconds + total, min(least, memory), min(fewest, gpus))
    return {(names, cores, memory, gpus): total for (names, cores), (total, memory, gpus) in merged.items()}


def _balanced_work_s(workflow: Workflow, options: dict[str, list[Resource]], floor_s: float = 0.0) -> float:
    """The shortest time in which all machines, sharing the work perfectly, could do it.

    ``z_(g,k)`` reference seconds of task class g run on type k, taking ``z / speed_k``
    seconds there with the class's cores and memory; type k offers ``vcpus_k * count_k``
    cores and ``memory_k * count_k`` bytes at every instant from its ``earliest_start_s`` e_k
    (no lease before 0: its release plus its boot). Minimise T such that, on every type,
    core-seconds <= (T - m_k) * cores and byte-seconds <= (T - m_k) * bytes (and, where a task
    needs GPUs, GPU-seconds <= (T - m_k) * GPUs): a linear programme over the classes of
    :func:`task_classes`. With ``floor_s`` a makespan already known to be a bound (the critical
    path), ``m_k = min(e_k, floor_s)`` keeps it linear and valid: for every T >= floor_s a type
    is usable for at most max(0, T - e_k) <= T - m_k seconds.
    """
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    groups = task_classes(workflow, options, LP_MAX_VARIABLES)
    types = {r.name: r for rs in options.values() for r in rs}
    names = sorted(types)
    index = {name: k for k, name in enumerate(names)}
    pairs = [(g, name) for g, key in enumerate(groups) for name in key[0]]
    n = len(pairs) + 1  # z_(group, type), then T
    cost = np.zeros(n)
    cost[-1] = 1.0
    rows, cols, values = [], [], []
    keys = list(groups)
    dims = 3 if workflow.uses_gpus else 2  # cores, memory[, GPUs]: rows dims * k ...
    for column, (g, name) in enumerate(pairs):
        _, cores, memory, gpus = keys[g]
        speed = types[name].speed
        rows += [dims * index[name], dims * index[name] + 1]
        cols += [column, column]
        values += [cores / speed, memory / GIB / speed]  # GiB keeps the LP well scaled
        if dims == 3 and gpus:
            rows.append(dims * index[name] + 2)
            cols.append(column)
            values.append(gpus / speed)
    offered = np.zeros(dims * len(names))  # capacity per unit time, then b_ub = -capacity * m_k
    for name, k in index.items():
        count = types[name].count or 0
        capacities = [float(types[name].vcpus * count), types[name].memory_bytes / GIB * count]
        if dims == 3:
            capacities.append(float(types[name].gpus * count))
        for d, capacity in enumerate(capacities):
            rows.append(dims * k + d)
            cols.append(n - 1)
            values.append(-capacity)
            offered[dims * k + d] = -capacity * min(types[name].earliest_start_s, floor_s)
    a_ub = coo_matrix((values, (rows, cols)), shape=(dims * len(names), n)).tocsr()
    a_eq = coo_matrix(([1.0] * len(pairs), ([g for g, _ in pairs], range(len(pairs)))), shape=(len(groups), n))
    result = linprog(
        cost,
        A_ub=a_ub,
        b_ub=offered,
        A_eq=a_eq.tocsr(),
        b_eq=list(groups.values()),
        bounds=(0, None),
        method="highs",
    )
    return float(result.fun) * (1 - 1e-7) if result.status == 0 else 0.0


LP_MAX_VARIABLES = 60_000  # about 3,000 tasks on 20 types: the LP stays under a second
# The whole-machines MILP: about 240 tasks on 21 types. Beyond that, rounding the number of machines
# up gained under 1 % on the real workflows (many machines), and it cost seconds.
MACHINES_MAX_VARIABLES = 5_000
MACHINES_TIME_LIMIT_S = 1.0


def cost_lower_bound_usd(workflow: Workflow, catalog: Catalog, deadline_s: float | None = None) -> float:
    """A bound no plan can beat: perfectly packed machines, plus what leases must pay.

    Work: on a machine of type k, the leased seconds are at least the core-seconds of its
    tasks over ``vcpus``, at least their byte-seconds over its memory and at least their
    GPU-seconds over its GPUs (the last by the per-dimension sums only). The cheapest
    fractional split of the tasks over the types under both (a linear programme, or the
    larger of the two per-dimension sums for very large workflows) bounds the cost of
    the busy time. Every plan of a workflow with tasks also leases at least one machine,
    which pays its boot time and at least its billing minimum (with no tasks: no lease, 0): for
    each task, one of the types it fits; the largest of those least payments over the tasks.

    With a deadline D, a machine of type k is busy at most ``D - release_k - boot_k`` seconds
    (its tasks run within [release_k + boot_k, D]) and is billed at least
    ``max(minimum_k, boot_k + busy)``, so each busy second costs at least
    ``max(minimum_k, D_k) / (D_k - boot_k)`` times its price, with ``D_k = D - release_k``; a
    task slower than ``D_k - boot_k`` on type k cannot use k at all.
    """
    options = feasible_types(workflow, catalog)
    if not workflow.tasks:
        return 0.0  # no task, no lease: an empty workflow's plan (Airflow runs an empty DAG) costs nothing
    used = {r.name: r for rs in options.values() for r in rs}.values()
    kinds = {tuple(r.name for r in rs): rs for rs in options.values()}.values()  # each task's types, once
    # Each task's machine is leased, so one of its types pays a boot (and a billing minimum): the
    # dearest such least payment over the tasks (a GPU task's on the GPU types) is one lease's.
    one_lease = max(min(r.price_per_hour_usd / 3600.0 * r.boot_s for r in rs) for rs in kinds)
    minimum = max(min(r.price_per_hour_usd / 3600.0 * max(r.billing.minimum_s, r.boot_s) for r in rs) for rs in kinds)
    plain = _packed_work_cost_usd(workflow, options, {r.name: 1.0 for r in used}) + one_lease
    if deadline_s is None:
        return max(plain, minimum)
    factor = {
        r.name: max(r.billing.minimum_s, deadline_s - r.release_s) / (deadline_s - r.earliest_start_s)
        for r in used
        if r.earliest_start_s < deadline_s
    }
    within = {
        t.id: [r for r in rs if r.name in factor and r.runtime_s(t) <= deadline_s - r.earliest_start_s + 1e-9]
        for t in workflow.tasks
        for rs in [options[t.id]]
    }
    if any(not rs for rs in within.values()):
        return max(plain, minimum)  # the deadline is infeasible; the optimizer says so
    capacity = {  # machine-seconds a type can give before the deadline, all its machines busy throughout
        r.name: r.count * (deadline_s - r.earliest_start_s) for r in used if r.name in factor and r.count is not None
    }
    packed = _packed_work_cost_usd(workflow, within, factor, capacity)
    return max(plain, minimum, packed, whole_machines_cost_usd(workflow, within, deadline_s))


def _packed_work_cost_usd(
    workflow: Workflow,
    options: dict[str, list[Resource]],
    factor: dict[str, float],
    capacity_s: dict[str, float] | None = None,
) -> float:
    dimensions = ("cores", "memory", "gpus") if workflow.uses_gpus else ("cores", "memory")  # else GPUs cost 0
    per_dimension = max(
        sum(min(_dimension_cost(t, r, dimension) * factor[r.name] for r in options[t.id]) for t in workflow.tasks)
        for dimension in dimensions
    )
    return max(per_dimension, _lp_work_cost_usd(workflow, options, factor, capacity_s or {}))


def _dimension_cost(task: Task, resource: Resource, dimension: str) -> float:
    """What ``task`` costs on ``resource`` by one dimension: its share of the machine's cores, memory
    or GPUs (a machine is leased at least its tasks' GPU-seconds over its GPUs), times its run."""
    if dimension == "cores":
        share = task.cores / resource.vcpus
    elif dimension == "memory":
        share = task.memory_bytes / resource.memory_bytes
    else:
        share = task.gpus / resource.gpus if task.gpus else 0.0
    return resource.price_per_hour_usd / 3600.0 * resource.runtime_s(task) * share


Column = tuple[int, Resource, float, float, float]  # row, type, core-s / vcpus, byte-s / memory, GPU-s / GPUs


def _gpu_share(gpus: int, resource: Resource) -> float:
    return gpus / resource.gpus if gpus else 0.0


def _work_columns(workflow: Workflow, options: dict[str, list[Resource]], max_columns: int) -> tuple[list[Column], int]:
    """The columns of the work programmes, and their number of rows: ``(row, type, core-s / vcpus,
    byte-s / memory, GPU-s / GPUs)``, the machine-seconds a row's work takes on the type by each
    dimension (the last 0 for work without GPUs).

    A row is a task (its runtime on the type, the platform's latency included) where that makes at
    most ``max_columns`` columns; else a class of :func:`task_classes` (its reference seconds over
    the type's speed, the latency left out): both bound the same cost, the classes a little lower.
    """
    if sum(len(options[t.id]) for t in workflow.tasks) <= max_columns:
        columns = [
            (
                row,
                r,
                seconds * task.cores / r.vcpus,
                seconds * task.memory_bytes / r.memory_bytes,
                seconds * _gpu_share(task.gpus, r),
            )
            for row, task in enumerate(workflow.tasks)
            for r in options[task.id]
            for seconds in [r.runtime_s(task)]
        ]
        return columns, len(workflow.tasks)
    types = {r.name: r for rs in options.values() for r in rs}
    classes = task_classes(workflow, options, max_columns)
    columns = [
        (row, r, seconds * cores / r.vcpus, seconds * memory / r.memory_bytes, seconds * _gpu_share(gpus, r))
        for row, ((names, cores, memory, gpus), reference_s) in enumerate(classes.items())
        for r in (types[name] for name in names)
        for seconds in [reference_s / r.speed]
    ]
    return columns, len(classes)


def _lp_work_cost_usd(
    workflow: Workflow, options: dict[str, list[Resource]], factor: dict[str, float], capacity_s: dict[str, float]
) -> float:
    """min sum_k f_k price_k S_k  s.t.  S_k >= core-s_k / vcpus_k,  S_k >= byte-s_k / memory_k,  sum_k x_ik = 1,
    S_k <= capacity_k (where given), and S_k >= GPU-s_k / gpus_k where a task needs GPUs; 0 when the
    programme is too large or has no solution."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    columns, n_rows = _work_columns(workflow, options, LP_MAX_VARIABLES)
    if len(columns) > LP_MAX_VARIABLES:
        return 0.0
    types = sorted({column[1].name: column[1] for column in columns}.values(), key=lambda r: r.name)
    index = {r.name: k for k, r in enumerate(types)}
    n_x = len(columns)
    n_var = n_x + len(types)
    cost = np.zeros(n_var)
    cost[n_x:] = [r.price_per_hour_usd / 3600.0 * factor[r.name] for r in types]
    dims = 3 if workflow.uses_gpus else 2  # rows dims * k + (cores, memory[, GPUs])
    ub_rows, ub_cols, ub_vals = [], [], []
    for column, (_, r, core_s, byte_s, gpu_s) in enumerate(columns):
        k = index[r.name]
        ub_rows += [dims * k, dims * k + 1]
        ub_cols += [column, column]
        ub_vals += [core_s, byte_s]
        if gpu_s:
            ub_rows.append(dims * k + 2)
            ub_cols.append(column)
            ub_vals.append(gpu_s)
    for k in range(len(types)):
        ub_rows += [dims * k + d for d in range(dims)]
        ub_cols += [n_x + k] * dims
        ub_vals += [-1.0] * dims
    a_ub = coo_matrix((ub_vals, (ub_rows, ub_cols)), shape=(dims * len(types), n_var)).tocsr()
    eq_rows = [column[0] for column in columns]
    a_eq = coo_matrix(([1.0] * n_x, (eq_rows, range(n_x))), shape=(n_rows, n_var)).tocsr()
    result = linprog(
        cost,
        A_ub=a_ub,
        b_ub=np.zeros(dims * len(types)),
        A_eq=a_eq,
        b_eq=np.ones(n_rows),
        bounds=[(0, None)] * n_x + [(0, capacity_s.get(r.name)) for r in types],
        method="highs",
    )
    if result.status != 0:  # no solution: the counts cannot hold the work by the deadline (the optimizer says so)
        return 0.0
    return float(result.fun) * (1 - 1e-7)  # stay on the safe side of floating-point optimality


def whole_machines_cost_usd(workflow: Workflow, options: dict[str, list[Resource]], deadline_s: float) -> float:
    """The packed-work bound with whole machines, under a deadline D (0 when not computed).

    A machine of type k hosts at most ``(D - release_k - boot_k)`` seconds of its cores', its memory's
    (and its GPUs') capacity, and its lease costs at least ``max(minimum_k, boot_k + busy)``. So with n_k machines
    of type k (an integer, at most ``count_k``) and the tasks' core-seconds S_k over ``vcpus_k``
    and byte-seconds over memory placed fractionally:
    ``n_k (D - release_k - boot_k) >= S_k``, ``cost_k >= price_k n_k minimum_k`` and
    ``cost_k >= price_k (n_k boot_k + S_k)``. With n_k real this is :func:`cost_lower_bound_usd`'s
    deadline LP; whole machines matter when a few leases do all the work (a short deadline, long
    billing minimums). A small MILP (HiGHS, time-limited; its proven dual bound if it stops early).
    """
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    columns, n_rows = _work_columns(workflow, options, MACHINES_MAX_VARIABLES)
    types = sorted({column[1].name: column[1] for column in columns}.values(), key=lambda r: r.name)
    n_x = len(columns)
    if n_x > MACHINES_MAX_VARIABLES or not types:
        return 0.0
    index = {r.name: k for k, r in enumerate(types)}
    n_types = len(types)
    n_var = n_x + 2 * n_types  # x (row shares), then n_k (machines), then cost_k
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lower: list[float] = []
    upper: list[float] = []

    def row(entries: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(lower)
        for column, value in entries:
            rows.append(r)
            cols.append(column)
            vals.append(value)
        lower.append(low)
        upper.append(high)

    per_type: list[list[tuple[int, float, float, float]]] = [[] for _ in types]  # (column, core-s, byte-s, GPU-s)
    shares: list[list[tuple[int, float]]] = [[] for _ in range(n_rows)]
    for column, (share_row, r, core_s, byte_s, gpu_s) in enumerate(columns):
        shares[share_row].append((column, 1.0))
        per_type[index[r.name]].append((column, core_s, byte_s, gpu_s))
    for entries in shares:
        row(entries, 1.0, 1.0)
    for k, r in enumerate(types):
        machines, cost = n_x + k, n_x + n_types + k
        per_second = r.price_per_hour_usd / 3600.0
        # cores, memory (and GPUs): S_k <= n_k (D - release - boot_k); cost_k >= price (n_k boot + S_k)
        for dimension in (1, 2, 3) if workflow.uses_gpus and r.gpus else (1, 2):
            work = [(c, entry[dimension]) for entry in per_type[k] for c in [entry[0]]]
            row([*work, (machines, -(deadline_s - r.earliest_start_s))], -np.inf, 0.0)
            row(
                [*[(c, per_second * w) for c, w in work], (machines, per_second * r.boot_s), (cost, -1.0)], -np.inf, 0.0
            )
        row([(machines, per_second * r.billing.minimum_s), (cost, -1.0)], -np.inf, 0.0)
    matrix = coo_matrix((vals, (rows, cols)), shape=(len(lower), n_var)).tocsr()
    objective = np.zeros(n_var)
    objective[n_x + n_types :] = 1.0
    high = np.full(n_var, np.inf)
    high[:n_x] = 1.0
    high[n_x : n_x + n_types] = [r.count if r.count is not None else np.inf for r in types]
    integrality = np.zeros(n_var)
    integrality[n_x : n_x + n_types] = 1
    result = milp(
        objective,
        constraints=LinearConstraint(matrix, np.array(lower), np.array(upper)),
        integrality=integrality,
        bounds=Bounds(np.zeros(n_var), high),
        options={"time_limit": MACHINES_TIME_LIMIT_S, "mip_rel_gap": 1e-6},
    )
    if result.status == 0 and result.fun is not None:
        proven = float(result.fun) if getattr(result, "mip_dual_bound", None) is None else float(result.mip_dual_bound)
        return min(float(result.fun), proven) * (1 - 1e-7)  # the safe side of HiGHS's tolerances
    bound = getattr(result, "mip_dual_bound", None)  # stopped early: the bound it proved
    return 0.0 if bound is None or not np.isfinite(bound) else float(bound) * (1 - 1e-7)

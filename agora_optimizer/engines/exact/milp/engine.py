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

Variables, named in the model (:class:`~agora_optimizer.engines.exact.milp.model.MilpModel`) and in
the solver as here, then their indices (``x_3_0_1``, ``start_3``, ``lease_end_0_1``):
- x[i,k,m] binary: task i runs on slot (k, m); used[k,m] binary: slot (k, m) is leased;
- lane[i,k,m,l] binary: task i takes lane l of slot (k, m) (tasks that need lanes on k);
- start[i] continuous: start of i; end_i = start_i + sum p_ik x[i,k,m]; makespan;
- same[i,j], share_lane[i,j] in [0, 1]: i and j share a machine, a lane;
- first[i,j] binary: i starts no later than j; running_at[i,j] binary: i still runs at j's start;
- lease_start[k,m], lease_end[k,m]; steps[k,m] integer: billing steps; billed[k,m]: billed seconds;
- overlap[k,m',m] binary: the leases of slots m' < m of a count-limited type overlap.

Constraints (their names in brackets):
- sum_{k,m} x[i,k,m] = 1 [assign]; x <= used [used_by]; used <= sum_i x [empty];
  used[k,m+1] <= used[k,m] [symmetry];
- start_i >= sum max(release_k + boot_k, r_i) x[i,k,m] [boot] (a lease cannot begin before 0 nor
  before its type's release; r_i is the task's own release, e.g. after an Airflow sensor's wait);
  makespan >= end_i [makespan];
- edge i -> j: start_j >= end_i + tr_ij (1 - same_ij) [edge], with same_ij <= 1 - x[i,k,m] +
  x[j,k,m] [apart];
- lanes: sum_l lane[i,k,m,l] = cores_i x[i,k,m] [cores]; share_lane_ij >= lane[i,k,m,l] +
  lane[j,k,m,l] - 1 [lane_shared]; start_j >= end_i - M (1 - first_ij) - M (1 - share_lane_ij)
  [lanefirst] and start_i >= end_j - M first_ij - M (1 - share_lane_ij) [lanesecond];
- memory, at every task j's start: mem_j + sum_i mem_i running_at[i,j] <= sum mem_k x[j,k,m]
  [memory], where start_j >= end_i - M (2 + running_at[i,j] - same_ij - first_ij) [active]
  forces running_at[i,j] = 1 when i shares j's machine [together], starts no later and has not
  ended; first is a linear order (triangle inequalities [triangle, triangle2]), so on every set
  of tasks that run together the first-latest one's row counts them all; first_ij = 1 =>
  start_i <= start_j [before], first_ij = 0 => start_j <= start_i [after];
- leases: lease_start <= start_i - boot_k + M (1 - x) [lstart], lease_end >= end_i - M (1 - x)
  [lend], g_k steps >= lease_end - lease_start [steps_cover], billed >= g_k steps
  [billed_steps], billed >= minimum_k used [minimum], so that billed = max(minimum, ceil(lease /
  g) g);
- counts: see "slots" [lorder, leaseapart, count]; deadline: makespan <= deadline_s [deadline];
  budget: C <= budget_usd [cost_cap];
- valid cuts (not needed for exactness): lease_end - lease_start >= (boot + p_ik) x[i,k,m]
  [lspan]; lease_end <= makespan [within]; lease_end - lease_start <= H used [leased]; the work
  on every lane, the memory-seconds on every slot, and the work of every chain of a chain cover
  of the DAG (ancestors never overlap their descendants) on every slot fit in lease_end -
  lease_start - boot used [energy, energy_memory, energy_chain].

Objective: time T / T_lb (T the makespan); cost C / C_lb with C = sum price_k / 3600 billed[k,m];
balanced alpha T / T_lb + (1 - alpha) C / C_lb: the first element of
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
  (overlap[k,m',m] = 0 => lease_end[k,m'] <= lease_start[k,m]): exact, so no plan that re-leases machine ids
  after a gap is cut off.

Solving: HiGHS where ``highspy`` is installed (:mod:`agora_optimizer.engines.exact.milp.highs`:
in this process, with the same warm start, the bound from HiGHS itself), else CBC via
PuLP's ``COIN_CMD`` on the binary PuLP 3.3 ships or PuLP 4's ``cbc`` extra brings
(:mod:`agora_optimizer.engines.exact.milp.pulp_api`; without one CBC finds nothing), started
from the best of the given warm start and a few list schedules (``setInitialValue`` and
``warmStart=True``), with ``timeLimit`` = what is left of ``time_limit_s`` after building, and
killed (``timeout -s KILL``, where available) at 1.1 times that plus 1 s.
PuLP 3.3 does not expose CBC's best bound for ``COIN_CMD``, so on both PuLPs it is read from
CBC's log (:func:`agora_optimizer.engines.exact.milp.cbc.read_cbc_bound`: the main search's
last "Cbc0005I Partial search ... (best possible X)", else the summary's "Lower bound:", or the
root LP's value when CBC stopped inside the root's cuts); when CBC proves optimality its bound
is the objective value. The
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

import time

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.engines.exact.milp.cbc import solve
from agora_optimizer.engines.exact.milp.data import build_data, estimated_rows
from agora_optimizer.engines.exact.milp.highs import SolverOutcome as _Outcome
from agora_optimizer.engines.exact.milp.highs import highs_available
from agora_optimizer.engines.exact.milp.model import build_model
from agora_optimizer.engines.exact.milp.solution import read_solution, repair
from agora_optimizer.engines.exact.milp.warm import set_warm_start
from agora_optimizer.engines.exact.shared import (
    applies,
    best_warm_start,
    exact_result,
    is_valid,
)
from agora_optimizer.model.plan import Assignment
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.time_budget import OutOfTime, TimeBudget

DEFAULT_MAX_TASKS = 40
DEFAULT_MAX_ROWS = 50_000
_MIN_CBC_S = 0.05


class MilpEngine(Engine):
    """The exact MILP of the execution model, for small workflows (see the module docstring).

    ``max_tasks``: larger workflows return None at once. ``max_rows``: so do problems whose
    model would have more constraints than that (:func:`estimated_rows`; PuLP builds about
    20,000 rows a second and CBC's root node grows with them). ``threads``: the solver's threads
    (None: its default). ``margin_s``: time kept back from ``time_limit_s`` for reading and
    repairing the solution. ``solver``: "highs", "cbc", or "auto" (HiGHS where installed).
    A workflow with a task that needs GPUs returns None at once: the model packs cores and memory
    only (GPUs are section 5 of the spec), so a plan of it could over-subscribe a machine's GPUs.
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
        if not applies(problem, self.max_tasks, time_limit_s):
            return None  # GPUs, spot types, too many tasks, no time, or limits proven out of reach
        deadline = TimeBudget.until(started + time_limit_s - self.margin_s - _MIN_CBC_S)  # for building: CBC needs time
        warm = best_warm_start(problem, warm_start, deadline)
        data = build_data(problem, warm or [])
        if estimated_rows(data) > self.max_rows:
            return None
        try:  # building a large model can take seconds: it must not overrun the time limit either
            model = build_model(data, deadline)
        except OutOfTime:
            return None
        warm_used = warm is not None and set_warm_start(model, data, warm)
        outcome = _Outcome("none", None, None)
        for use_warm in (warm_used, False) if warm_used else (False,):
            remaining = time_limit_s - (time.perf_counter() - started) - self.margin_s
            if remaining < _MIN_CBC_S:
                break
            outcome = solve(model, remaining, use_warm, self.threads, self.solver_name)
            if outcome.status != "error":
                break
        self.last_outcome = outcome
        if outcome.status not in ("optimal", "feasible"):
            return None  # proven infeasible, or nothing found in time
        candidate = repair(data, read_solution(model, data))
        if candidate is not None and not is_valid(problem, candidate):
            candidate = None
        return _result(problem, outcome, candidate, warm)


def _result(
    problem: Problem, outcome: _Outcome, candidate: list[Assignment] | None, warm: list[Assignment] | None
) -> EngineResult | None:
    """The better of the MILP's schedule and the warm start; "optimal" when its value meets CBC's bound."""
    options = [items for items in (candidate, warm) if items is not None]
    if not options:
        return None
    return exact_result(problem, min(options, key=problem.score), outcome.bound, MilpEngine.name)

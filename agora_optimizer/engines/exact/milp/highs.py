"""HiGHS as the MILP's solver, where ``highspy`` is installed: PuLP builds the model, HiGHS solves it.

PuLP's ``HiGHS`` class runs HiGHS in this process through ``highspy``, with the variables'
initial values (the MILP's warm start, set with ``setInitialValue``) as a start solution
(:mod:`agora_optimizer.engines.exact.milp.pulp_api`: PuLP 4 does it itself, on PuLP 3.3 a
subclass does); HiGHS checks it and keeps it as its incumbent when it is feasible. The relative gap at
which HiGHS stops is ``gap`` (its default, 1e-4, would call "optimal" a plan 0.01 % off),
and the best bound is HiGHS's ``mip_dual_bound``. HiGHS prints a banner on standard output
the first time a process creates a solver, whatever its options (stdout is where
``agora optimize --json`` writes its plan): :func:`_quiet_first_solver` creates that first
one with file descriptor 1 pointed at ``/dev/null`` for the moment it takes.

On the small instances of ``bench/run_small_exact.py`` (12 tasks, 10 s each) HiGHS proved
17 of 24 optimal where CBC proved 10, and it keeps its time limit more closely (CBC
overran a 3 s limit by 1.6 s on 40 tasks, HiGHS by 0.3 s): it is the MILP's default
solver (agora installs ``highspy``); without it the MILP runs on CBC.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from agora_optimizer.engines.exact.milp import pulp_api


def highs_available() -> bool:
    """Whether ``highspy`` can be imported (PuLP then offers its ``HiGHS`` solver)."""
    return importlib.util.find_spec("highspy") is not None


_BANNER_LOCK = threading.Lock()
_banner_shown = False


def _quiet_first_solver() -> None:
    """Create the process's first HiGHS solver with stdout (the descriptor) silenced: its banner goes nowhere."""
    global _banner_shown
    with _BANNER_LOCK:
        if _banner_shown:
            return
        import highspy

        sys.stdout.flush()
        saved = os.dup(1)
        try:
            with open(os.devnull, "wb") as sink:
                os.dup2(sink.fileno(), 1)
                highspy.Highs()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        _banner_shown = True


@dataclass(frozen=True)
class SolverOutcome:
    """What one solver run found, HiGHS's here or CBC's (:mod:`agora_optimizer.engines.exact.milp.engine`)."""

    status: str  # "optimal", "feasible", "infeasible", "none" (nothing found) or "error"
    objective: float | None
    bound: float | None
    solve_s: float = 0.0


def solve_with_highs(lp: Any, time_limit_s: float, warm: bool, threads: int | None, gap: float) -> SolverOutcome:
    """Solve ``lp`` with HiGHS within ``time_limit_s``; its values stay on the variables."""
    import highspy

    started = time.perf_counter()
    _quiet_first_solver()
    solver = pulp_api.highs_solver(warm, max(time_limit_s, 0.01), threads, gap)
    try:
        result = pulp_api.run(lp, solver)
    except (pulp_api.PulpSolverError, RuntimeError):
        return SolverOutcome("error", None, None, time.perf_counter() - started)
    elapsed = time.perf_counter() - started
    if result.infeasible:
        return SolverOutcome("infeasible", None, None, elapsed)
    value = lp.objective.value() if lp.objective is not None else None
    if not result.has_solution or value is None:
        return SolverOutcome("none", None, None, elapsed)
    bound = float(lp.solverModel.getInfo().mip_dual_bound)
    if lp.solverModel.getModelStatus() == highspy.HighsModelStatus.kOptimal:
        return SolverOutcome("optimal", value, value if not math.isfinite(bound) else min(bound, value), elapsed)
    return SolverOutcome("feasible", value, bound if math.isfinite(bound) else None, elapsed)

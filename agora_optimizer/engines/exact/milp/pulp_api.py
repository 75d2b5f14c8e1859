"""PuLP 3.3 (Python 3.11) and PuLP 4 (Python 3.12 and later) behind the few calls the MILP makes.

PuLP 4 needs Python 3.12, so 3.11 stays on PuLP 3.3 (setup.cfg picks one by Python version).
Building a model is the same in both (``LpProblem``, ``add_variable``, ``addConstraint``,
``lpSum``, ``setObjective``, ``setInitialValue``, ``value()``); solving is not:

- PuLP 4's ``LpProblem.solve`` returns an ``LpSolveStats`` (why the solver stopped, whether it
  has a solution); PuLP 3.3 sets ``lp.status`` and ``lp.sol_status`` instead. :func:`run` reads
  either into a :class:`SolveResult`.
- PuLP 4's ``HiGHS`` hands the variables' initial values to HiGHS as a start solution
  (``warmStart=True``); PuLP 3.3's passes none, so :class:`_WarmHiGHS3` does it there.
- PuLP 3.3 ships a CBC binary; PuLP 4 ships none: its ``cbc`` extra (the ``cbcbox`` wheel,
  which agora installs with it) brings one, else ``cbc`` on ``PATH`` is used, else there is no
  CBC (:func:`cbc_binary` returns None; HiGHS, the default, is unaffected).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulp

PULP_MAJOR = int(pulp.__version__.split(".")[0])

LpProblem = pulp.LpProblem
LpMinimize = pulp.LpMinimize
PulpSolverError = pulp.PulpSolverError
lpSum = pulp.lpSum


@dataclass(frozen=True)
class SolveResult:
    """What one ``lp.solve`` said, in the terms of either PuLP."""

    infeasible: bool  # the solver proved there is no solution
    has_solution: bool  # the variables hold a feasible solution
    optimal: bool  # ... which the solver proved optimal (within its gap)


def run(lp: Any, solver: Any) -> SolveResult:
    """Solve ``lp`` with ``solver``; the solution's values stay on the variables."""
    if PULP_MAJOR >= 4:
        stats = lp.solve(solver)
        done = pulp.LpSolveStatus
        has_solution = bool(stats.has_solution)
        return SolveResult(
            stats.status == done.Infeasible,
            has_solution,
            has_solution and stats.status in (done.Optimal, done.GapLimit),
        )
    lp.solve(solver)
    has_solution = lp.status == pulp.LpStatusOptimal  # PuLP 3.3: "optimal" also when stopped with a solution
    return SolveResult(
        lp.status == pulp.LpStatusInfeasible, has_solution, has_solution and lp.sol_status == pulp.LpSolutionOptimal
    )


class _WarmHiGHS3(pulp.HiGHS):  # type: ignore[misc, unused-ignore]
    """PuLP 3.3's in-process HiGHS, plus a start solution from the variables' initial values."""

    def __init__(self, warm: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.warm = warm

    def actualSolve(self, lp: Any) -> int:
        import highspy

        self.createAndConfigureSolver(lp)
        self.buildSolverModel(lp)
        if self.warm:
            start = highspy.HighsSolution()
            start.col_value = [v.varValue if v.varValue is not None else 0.0 for v in lp.variables()]
            start.value_valid = True
            lp.solverModel.setSolution(start)
        self.callSolver(lp)
        status, solution_status = self.findSolutionValues(lp)
        for var in lp.variables():
            var.modified = False
        lp.assignStatus(status, solution_status)
        return int(status)


def highs_solver(warm: bool, time_limit_s: float, threads: int | None, gap: float) -> Any:
    """PuLP's in-process HiGHS, quiet, stopping at relative gap ``gap`` (and no absolute gap)."""
    if PULP_MAJOR >= 4:
        return pulp.HiGHS(msg=False, timeLimit=time_limit_s, threads=threads, gapRel=gap, gapAbs=0.0, warmStart=warm)
    solver = _WarmHiGHS3(warm, msg=False, timeLimit=time_limit_s, threads=threads, gapRel=gap)
    solver.optionsDict["mip_abs_gap"] = 0.0
    return solver


def cbc_binary() -> str | None:
    """The CBC binary: PuLP 3.3's own, or PuLP 4's ``cbc`` extra (``cbcbox``), else ``cbc`` on PATH, else None."""
    if PULP_MAJOR >= 4:
        found = shutil.which(pulp.COIN_CMD().path)  # cbcbox's absolute path, or "cbc" looked up on PATH
        if found is not None:
            return found
    else:
        bundled = pulp.PULP_CBC_CMD.pulp_cbc_path
        if Path(bundled).exists():
            return str(bundled)
    return shutil.which("cbc")


def cbc_solver(path: str, time_limit_s: float, warm: bool, log_path: Path, threads: int | None, tmp_dir: str) -> Any:
    """PuLP's ``COIN_CMD`` on ``path`` (``PULP_CBC_CMD`` is deprecated in 3.3, gone in 4), its files in ``tmp_dir``."""
    solver = pulp.COIN_CMD(
        path=path, msg=False, timeLimit=time_limit_s, warmStart=warm, logPath=str(log_path), threads=threads
    )
    solver.tmpDir = tmp_dir  # the model and solution files go there too, even when CBC is killed
    return solver

"""Solving the MILP with CBC: the binary PuLP 3.3 ships or PuLP 4's ``cbc`` extra brings (see
:mod:`agora_optimizer.engines.exact.milp.pulp_api`), its time limit, and the lower bound read from its
log (PuLP 3.3 does not return it)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from agora_optimizer.engines.exact.milp import pulp_api
from agora_optimizer.engines.exact.milp.highs import SolverOutcome as _Outcome
from agora_optimizer.engines.exact.milp.highs import solve_with_highs
from agora_optimizer.engines.exact.milp.model import MilpModel
from agora_optimizer.engines.exact.shared import (
    OPTIMALITY_TOLERANCE,
)

_FINAL_BOUND = re.compile(r"^Cbc0005I Partial search .*\(best possible (\S+)\)", re.MULTILINE)
_LOWER_BOUND = re.compile(r"^Lower bound:\s+(\S+)", re.MULTILINE)
_ROOT_LP = re.compile(r"^Cbc0013I At root node, .* changed objective from (\S+) to", re.MULTILINE)
_CONTINUOUS = re.compile(r"^Continuous objective value is (\S+)", re.MULTILINE)


def _last_number(pattern: re.Pattern[str], log: str) -> float | None:
    for text in reversed(pattern.findall(log)):
        try:
            return float(text)
        except ValueError:
            continue
    return None


def read_cbc_bound(log: str, objective: float | None = None) -> float | None:
    """CBC's best bound when it stopped early, from its log (``objective``: the value it found).

    The last "Cbc0005I Partial search ... (best possible X)" closes the main search (sub-searches
    of heuristics end earlier) and prints 8 significant digits; the summary's "Lower bound:" only
    3 decimals, so it is the fallback. A CBC stopped by its time limit inside the root node's cut
    passes (seen with the CBC of PuLP 4's cbc extra) prints as "best possible" the value of an
    unfinished LP, far above ``objective``, and as "Lower bound" that clipped to ``objective``:
    neither is a bound, so then the root LP's value before the cuts is (else the continuous
    relaxation's), and no bound when those are missing too.
    """
    final = _last_number(_FINAL_BOUND, log)
    if final is None:
        return _last_number(_LOWER_BOUND, log)
    if objective is None or final <= objective + OPTIMALITY_TOLERANCE * max(abs(objective), 1.0):
        return final
    for pattern in (_ROOT_LP, _CONTINUOUS):
        relaxed = _last_number(pattern, log)
        if relaxed is not None and relaxed <= objective:
            return relaxed
    return None


def _cbc_path(folder: Path, hard_limit_s: float) -> str | None:
    """The CBC binary (:func:`pulp_api.cbc_binary`), behind ``timeout -s KILL`` where there is one.

    CBC checks its own limit (``-sec``) only between steps, and can overrun it by far in the
    root node of a large model; the wrapper ends it for good.
    """
    binary = pulp_api.cbc_binary()
    killer = shutil.which("timeout")
    if binary is None or killer is None or os.name == "nt":
        return binary
    wrapper = folder / "cbc"
    wrapper.write_text(f'#!/bin/sh\nexec "{killer}" -s KILL {hard_limit_s:.3f} "{binary}" "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def solve(model: MilpModel, time_limit_s: float, warm: bool, threads: int | None, solver: str = "cbc") -> _Outcome:
    """Run the solver (HiGHS, or CBC) and read what it found."""
    if solver == "highs":
        found = solve_with_highs(model.lp, time_limit_s, warm, threads, OPTIMALITY_TOLERANCE)
        if found.status in ("optimal", "feasible") and not model.solved():
            return _Outcome("none", None, None, found.solve_s)
        return found
    return _solve_cbc(model, time_limit_s, warm, threads)


def _solve_cbc(model: MilpModel, time_limit_s: float, warm: bool, threads: int | None) -> _Outcome:
    """Run CBC (PuLP's ``COIN_CMD``) and read what it found; "none" when there is no CBC binary."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agora-milp-") as folder:
        log_path = Path(folder) / "cbc.log"
        path = _cbc_path(Path(folder), time_limit_s * 1.1 + 1.0)
        if path is None:
            return _Outcome("none", None, None)
        solver = pulp_api.cbc_solver(path, time_limit_s, warm, log_path, threads, folder)
        try:
            result = pulp_api.run(model.lp, solver)
        except pulp_api.PulpSolverError:  # CBC killed at the hard limit, or exited abnormally
            return _Outcome("error", None, None, time.perf_counter() - started)
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
    elapsed = time.perf_counter() - started
    if result.infeasible:
        return _Outcome("infeasible", None, None, elapsed)
    value = model.lp.objective.value() if model.lp.objective is not None else None
    if not result.has_solution or value is None or not model.solved():
        return _Outcome("none", None, None, elapsed)
    if result.optimal:  # CBC closed the gap: its bound is the value
        return _Outcome("optimal", value, value, elapsed)
    return _Outcome("feasible", value, read_cbc_bound(log, value), elapsed)

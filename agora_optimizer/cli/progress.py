"""The one progress display of every long ``agora`` command: a line on stderr, updated in place.

As a solver's log: the time since the command began, the best plan so far and its gap to the
bound, and what runs now (``optimize``, the window planner); the points of the front (``pareto``);
the files, rows or models done (``traces import``, ``train``). Shown only on a terminal: never when
stderr is piped, never with ``--json``; erased when the work ends, so nothing is left above the
summary. The planners only call back with numbers (:class:`~agora_optimizer.optimize.portfolio.PortfolioProgress`,
:class:`~agora_optimizer.optimize.pareto.SweepProgress`,
:class:`~agora_optimizer.optimize.window.WindowProgress`); the text is made here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.text import Text

from agora_optimizer.cli.clock import command_started
from agora_optimizer.cli.common import err_console

if TYPE_CHECKING:
    from agora_optimizer.model.plan import Objective
    from agora_optimizer.optimize.pareto import SweepProgress
    from agora_optimizer.optimize.portfolio import PortfolioProgress
    from agora_optimizer.optimize.window import WindowProgress

Show = Callable[[str], None]  # shows a text in place of the one before
REDRAW_S = 0.2  # a text shown sooner after the last is drawn at the next refresh: many small steps cost no writes


class _Line:
    """What the display draws: the label, the seconds since the command began, the latest text.

    Rendered at every refresh (four a second), so the time moves on while an engine runs.
    """

    def __init__(self, label: str, started: float) -> None:
        self.label, self.started, self.text = label, started, ""

    def __rich__(self) -> Text:
        return Text(progress_line_text(self.label, time.perf_counter() - self.started, self.text))


def progress_line_text(label: str, elapsed_s: float, text: str) -> str:
    """One line of the display: ``label  12.3 s  text``."""
    return f"{label}  {elapsed_s:5.1f} s  {text}".rstrip()


def shown(quiet: bool = False) -> bool:
    """Whether progress is shown: stderr is a terminal and the output is not JSON (``quiet``)."""
    return not quiet and err_console.is_terminal


@contextmanager
def progress_line(label: str, *, quiet: bool = False) -> Iterator[Show]:
    """A function that shows a text on the progress line while the block runs; the line is erased after it.

    It does nothing when stderr is not a terminal or when ``quiet`` (``--json``).
    """
    if not shown(quiet):
        yield lambda text: None
        return
    from rich.live import Live

    line = _Line(label, command_started())
    drawn_at = -math.inf
    # stdout is the command's output: only stderr's writes are moved above the line
    with Live(line, console=err_console, transient=True, redirect_stdout=False, redirect_stderr=True) as live:

        def show(text: str) -> None:
            nonlocal drawn_at
            line.text = text
            if time.perf_counter() - drawn_at >= REDRAW_S:  # else the next refresh (4 a second) draws it
                live.refresh()
                drawn_at = time.perf_counter()

        yield show


@contextmanager
def planning_progress(
    label: str, objective: Objective, *, quiet: bool = False
) -> Iterator[Callable[[PortfolioProgress], None]]:
    """:func:`progress_line` fed by the engine portfolio (``optimize``)."""
    with progress_line(label, quiet=quiet) as show:
        yield lambda state: show(planning_text(state, objective))


def _objective_name(objective: Objective) -> str:
    """What the objective's value is, in the terms of the bounds (LB: the problem's lower bound)."""
    if objective.kind == "time":
        return "makespan/LB"
    if objective.kind == "cost":
        return "cost/LB"
    return f"{objective.alpha:g} makespan/LB + {1 - objective.alpha:g} cost/LB"


def planning_text(state: PortfolioProgress, objective: Objective) -> str:
    """The portfolio's state as a solver prints it: the best plan so far, its objective's value and gap to the
    bound (the problem's lower bounds, or an exact engine's proof where tighter), and the engine running."""
    engine = f"engine {state.done + 1}/{state.planned} {state.engine}" if state.engine else "engines done"
    if state.best_score is None or state.best_makespan_s is None or state.best_cost_usd is None:
        return f"best: none yet; {engine}"
    best = f"best {state.best_makespan_s:,.1f} s, {state.best_cost_usd:.4f} USD"
    over = "" if state.within_limits else " (misses the deadline or budget)"
    gap = state.gap
    bound = "the LB" if state.bound_score <= 1.0 else f"the proven bound {state.bound_score:.3f}"
    value = f"{_objective_name(objective)} = {state.best_score:.3f}" + (
        "" if gap is None else f", gap {gap:.1%} to {bound}"
    )
    return f"{best}{over}; {value}; {engine}"


def sweep_text(state: SweepProgress) -> str:
    """``pareto``'s sweep: the runs done, the last one's best plan and the front's size."""
    if state.makespan_s is None or state.cost_usd is None:
        return f"sweep {state.done}/{state.planned}"
    return (
        f"sweep {state.done}/{state.planned}; last best {state.makespan_s:,.1f} s, {state.cost_usd:.4f} USD; "
        f"{state.front} points on the front"
    )


def window_text(state: WindowProgress, cost_bound_usd: float) -> str:
    """The window planner as :func:`planning_text`: the best window so far and its gap to the cost bound."""
    if state.cost_usd is None:
        return f"best: none yet; {state.stage}"
    gap = f", gap {(state.cost_usd - cost_bound_usd) / state.cost_usd:.1%} to the cost LB" if state.cost_usd > 0 else ""
    late = f", {state.late_runs} run(s) late" if state.late_runs else ""
    return f"best {state.cost_usd:.4f} USD{late}{gap}; {state.stage}"


def count_text(done: int, total: int, unit: str, rows: int | None = None) -> str:
    """Work counted in units (``3/10 files read``), with the rows read so far."""
    return f"{done}/{total} {unit}" + ("" if rows is None else f", {rows:,} rows")

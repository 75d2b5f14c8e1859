"""Options that several ``agora`` commands share (the main CLI and its sub-apps), and the range of each number."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from agora_optimizer.errors import AgoraError
from agora_optimizer.model.limits import MAX_MACHINE_MEMORY_GIB, MAX_PLANNING_S, MAX_RUNTIME_S, MAX_TIME_S, MAX_USD

CatalogOpt = Annotated[Path, typer.Option("--catalog", "-c", help="Catalog of resource types (YAML or JSON).")]
PlanCatalogOpt = Annotated[
    Path | None,
    typer.Option(
        "--catalog", "-c", help="Catalog of resource types [default: the plan's own, from here or beside the plan]."
    ),
]


@dataclass(frozen=True)
class Range:
    """The values a number option takes: finite, from ``minimum`` (excluded when ``open``) to ``maximum``."""

    minimum: float
    maximum: float
    open: bool = False

    def __str__(self) -> str:
        return f"{'(' if self.open else '['}{self.minimum:g}, {self.maximum:g}]"


# The range of every number option (from agora_optimizer.model.limits), checked by check_option.
OPTION_RANGES: dict[str, Range] = {
    "--alpha": Range(0.0, 1.0),
    "--deadline-s": Range(0.0, MAX_TIME_S, open=True),
    "--budget-usd": Range(0.0, MAX_USD),
    "--time-limit-s": Range(0.01, MAX_PLANNING_S),
    "--default-memory-gib": Range(0.001, MAX_MACHINE_MEMORY_GIB),
    "--queue-time-limit-s": Range(1.0, MAX_RUNTIME_S),
}


def ranged(option: str, text: str) -> str:
    """An option's help text with its range."""
    return f"{text} {OPTION_RANGES[option]}"


def check_option(option: str, value: float | None, bounds: Range | None = None) -> None:
    """Refuse ``inf``, ``nan`` and values out of the option's range: an ``AgoraError`` naming it (exit code 2).

    Checked here rather than by typer's ``min``/``max`` (which lets ``nan`` through) so that every
    number option fails the same way, in one line, before anything is read or written. ``bounds``
    for an option whose name means something else in another command (``agora queue``'s
    ``--time-limit-s`` is a SLURM job's, not the planner's).
    """
    if value is None:
        return
    bounds = bounds or OPTION_RANGES[option]
    above = value > bounds.minimum if bounds.open else value >= bounds.minimum
    if not (math.isfinite(value) and above and value <= bounds.maximum):
        raise AgoraError(f"option {option}: expected a number in {bounds}, got {value:g}")

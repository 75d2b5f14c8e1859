"""The one interface every planning engine implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from agora_optimizer.model.plan import Assignment, SolverStatus
from agora_optimizer.planning.problem import Problem


@dataclass(frozen=True)
class EngineResult:
    """A complete schedule and what the engine knows of its quality.

    ``bound`` is a proven lower bound on the objective value (in the units of
    :func:`agora_optimizer.planning.problem.score`'s first element) where the engine has one, and
    ``gap`` = (value - bound) / value.
    """

    assignments: tuple[Assignment, ...]
    method: str
    status: SolverStatus = "heuristic"
    gap: float | None = None
    bound: float | None = None


class Engine(ABC):
    """Plans a :class:`Problem` within a time limit.

    ``solve`` returns ``None`` when the engine does not apply (too large for an exact
    model, a catalog it cannot handle) or found nothing in time; it never returns an
    invalid schedule: every assignment honours section 3 of the model.
    """

    name: ClassVar[str]

    @abstractmethod
    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        """Return a schedule for every task of ``problem.workflow``, or ``None``."""

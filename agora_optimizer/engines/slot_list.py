"""The engine around a list scheduler over machine slots (HEFT, PEFT): one schedule, within the time limit.

Each scheduler picks the next task its own way and places it with
:class:`~agora_optimizer.planning.slots.SlotSchedule`; this class runs it and reports the schedule.
"""

from __future__ import annotations

import time
from abc import abstractmethod

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.model.plan import Assignment
from agora_optimizer.planning.problem import Problem


class SlotListEngine(Engine):
    """A list scheduler over machine slots; objective-blind (it minimises the makespan; the plan is billed
    as leased). ``unlimited_slots``: the slots of a type without a ``count`` (default: the workflow's
    widest level, :func:`~agora_optimizer.planning.slots.pool_for`)."""

    def __init__(self, unlimited_slots: int | None = None) -> None:
        self.unlimited_slots = unlimited_slots

    @abstractmethod
    def schedule(self, problem: Problem, deadline: float) -> list[Assignment] | None:
        """The scheduler's schedule of ``problem``; ``None`` if ``time.perf_counter()`` passes ``deadline``."""

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        assignments = self.schedule(problem, time.perf_counter() + time_limit_s)
        if assignments is None:
            return None
        return EngineResult(assignments=tuple(assignments), method=self.name, status="heuristic")

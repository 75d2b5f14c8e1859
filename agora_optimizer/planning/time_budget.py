"""The one time budget of the planning engines: a wall-clock end that work checks as it goes."""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class OutOfTime(Exception):
    """A model build passed its budget's end: the engine gives up rather than overrun its time limit."""


class TimeBudget:
    """Ends ``seconds`` (times ``fraction``) from now; ``None``: never.

    ``expired()`` once the end has passed; ``check()`` raises :class:`OutOfTime` then (long model
    builds call it as they go); ``affords()`` says whether one more step as long as the longest
    step timed so far (``with budget:``) still fits; ``share(parts)`` is a budget for one of
    ``parts`` pieces of work that split what is left. :meth:`until` makes one that ends at a given
    ``clock()`` time.
    """

    def __init__(
        self, seconds: float | None = None, fraction: float = 1.0, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._clock = clock
        self.started = clock()
        self.ends = None if seconds is None else self.started + max(seconds, 0.0) * fraction
        self.step_s = 0.0
        self._step_started: float | None = None

    @classmethod
    def until(cls, at: float | None, clock: Callable[[], float] = time.perf_counter) -> TimeBudget:
        """A budget that ends at ``clock()`` time ``at`` (None: never)."""
        budget = cls(None, clock=clock)
        budget.ends = at
        return budget

    def remaining_s(self) -> float:
        return math.inf if self.ends is None else max(self.ends - self._clock(), 0.0)

    def expired(self) -> bool:
        return self.ends is not None and self._clock() >= self.ends

    def affords(self) -> bool:
        return self.ends is None or self._clock() + self.step_s <= self.ends

    def check(self) -> None:
        """Raise :class:`OutOfTime` once the budget has expired."""
        if self.expired():
            raise OutOfTime

    def share(self, parts: int) -> TimeBudget:
        """A budget for one of ``parts`` pieces of work that split the time left."""
        return TimeBudget(self.remaining_s() / max(parts, 1), clock=self._clock)

    def __enter__(self) -> TimeBudget:
        self._step_started = self._clock()
        return self

    def __exit__(self, *_: object) -> None:
        if self._step_started is not None:
            self.step_s = max(self.step_s, self._clock() - self._step_started)

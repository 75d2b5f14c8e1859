"""A time budget that does not start what it cannot finish."""

from __future__ import annotations

import time


class TimeBudget:
    """Ends at ``now + seconds``; ``affords()`` says whether one more step of the last step's length fits."""

    def __init__(self, seconds: float) -> None:
        self.started = time.perf_counter()
        self.ends = self.started + seconds
        self.step_s = 0.0
        self._step_started: float | None = None

    def remaining(self) -> float:
        return self.ends - time.perf_counter()

    def affords(self) -> bool:
        return time.perf_counter() + self.step_s <= self.ends

    def expired(self) -> bool:
        return time.perf_counter() > self.ends

    def __enter__(self) -> TimeBudget:
        self._step_started = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        if self._step_started is not None:
            self.step_s = max(self.step_s, time.perf_counter() - self._step_started)


class OutOfTime(Exception):
    """A model build passed its deadline: the engine gives up rather than overrun its time limit."""


class Deadline:
    """A point in ``time.perf_counter()`` time (None: never) that long model builds check as they go."""

    def __init__(self, at: float | None = None) -> None:
        self.at = at

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.perf_counter() + seconds)

    def passed(self) -> bool:
        return self.at is not None and time.perf_counter() > self.at

    def check(self) -> None:
        """Raise :class:`OutOfTime` once the deadline has passed."""
        if self.passed():
            raise OutOfTime

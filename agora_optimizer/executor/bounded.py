"""A map that forgets its oldest entries: what a long-lived scheduler process may remember.

The backends remember things about jobs they were told of (a finished job's status, a job's
directory) for as long as the scheduler runs; a scheduler that runs for months must not grow
with every job it ever ran. A :class:`BoundedDict` keeps the ``max_entries`` most recently set
entries; what it forgets, the backends can find again (the job directory from SLURM's record)
or report as unknown, as a restarted scheduler would.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedDict(OrderedDict[K, V]):
    """A dict of at most ``max_entries``; setting an entry makes it the newest, and the oldest go first."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        super().__init__()
        self.max_entries = max_entries

    def __setitem__(self, key: K, value: V) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.max_entries:
            self.popitem(last=False)

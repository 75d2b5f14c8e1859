"""When the running ``agora`` command began: the start its ``--time-limit-s`` counts from.

A limit the user sets is the wall-clock limit of the whole command (loading, bounds, planning,
writing), so it counts from the command's start, not from the moment the planner is called.
:func:`agora_optimizer.cli.main` calls :func:`mark_start` first thing; the console script's
first command counts from the import of the command line (the interpreter's own start-up, some
tenths of a second, is the only part before it).
"""

from __future__ import annotations

import time

_IMPORTED_AT = time.perf_counter()
_started_at: float | None = None


def mark_start(*, from_import: bool = False) -> None:
    """The command begins now (``from_import``: it began when this module was imported, the
    console script's case)."""
    global _started_at
    _started_at = _IMPORTED_AT if from_import and _started_at is None else time.perf_counter()


def command_started() -> float:
    """The ``time.perf_counter()`` at which the command began (now, when no command was marked)."""
    return time.perf_counter() if _started_at is None else _started_at


def seconds_left(started: float, limit_s: float) -> float:
    """What is left of ``limit_s`` counted from ``started`` (0 once it has passed)."""
    return max(started + limit_s - time.perf_counter(), 0.0)

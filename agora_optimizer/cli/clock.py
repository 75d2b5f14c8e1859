"""When the running ``agora`` command began: the start its ``--time-limit-s`` counts from.

A limit the user sets is the wall-clock limit of the whole command (start-up, loading, bounds,
planning, writing), so it counts from the command's start, not from the moment the planner is
called. :func:`agora_optimizer.cli.main` calls :func:`mark_start` first thing: the console
script's command began when its process did (read from ``/proc`` on Linux; elsewhere, when this
module was imported), a command run in-process when ``main`` was called.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_IMPORTED_AT = time.perf_counter()
_started_at: float | None = None


def process_age_s() -> float | None:
    """Seconds since this process started (Linux ``/proc``, to 10 ms); None where that cannot be read."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime, in clock ticks since boot
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(uptime_s - start_s, 0.0)


def mark_start(*, from_process_start: bool = False) -> None:
    """The command begins now, or (``from_process_start``, the console script's case) began with the process."""
    global _started_at
    now = time.perf_counter()
    if from_process_start:
        age_s = process_age_s()
        _started_at = _IMPORTED_AT if age_s is None else now - age_s
    else:
        _started_at = now


def mark_end() -> None:
    """The command is over: a command run later without :func:`mark_start` counts from its own call."""
    global _started_at
    _started_at = None


def command_started() -> float:
    """The ``time.perf_counter()`` at which the command began (now, when no command was marked)."""
    return time.perf_counter() if _started_at is None else _started_at

"""The SLURM backend's settings, checked once: :class:`SlurmSettings`, shared by its parts.

From ``[agora]`` (:meth:`SlurmSettings.from_agora`): ``slurm_pilot_max_tasks`` and ``slurm_pilot_window_s``;
the rest keep their defaults there and are given by tests and benchmarks. A bad value is an error
naming the option (AgoraError) or the field (FieldError) when the backend is made, not at its first job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agora_optimizer import settings
from agora_optimizer.errors import AgoraError, FieldError

DEFAULT_EXPORT: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "VIRTUAL_ENV",
    "PYTHONPATH",
)
LEASE_IDLE_S = 120.0  # a lease's allocation with no task for this long ends (its scheduler may be gone, and it bills)
REMEMBER_MAX = 10_000  # job and pilot directories a backend remembers; the oldest are found again from SLURM
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class SlurmSettings:
    """How the SLURM backend submits, packs and holds jobs.

    ``pilot_max_tasks`` of 0 or 1 turns pilots off; a job of at most ``pilot_max_time_limit_s`` is
    gathered into a pilot for up to ``pilot_window_s`` (the pilot's directory under ``pilot_root``,
    default: beside its first job's). ``time_grace_s`` is added to a task's limit for SLURM's, so the
    worker's own limit ends the task first and writes its result. Every SLURM command gets
    ``command_timeout_s``; a job's ``--export`` names ``export`` (those set here). ``remember_max``
    bounds the job and pilot directories remembered (the oldest are forgotten and found again from
    SLURM's WorkDir). A lease's allocation lives in a directory under ``lease_root`` (default: the
    executor's job directory, ``[agora] state_dir``) and ends by itself once no task came for
    ``lease_idle_s`` (a scheduler that died never closes it).
    """

    pilot_max_tasks: int = 0
    pilot_window_s: float = 5.0
    pilot_max_time_limit_s: float = 900.0
    pilot_root: Path | None = None
    time_grace_s: float = 30.0
    command_timeout_s: float = 20.0
    export: Sequence[str] = DEFAULT_EXPORT
    remember_max: int = REMEMBER_MAX
    lease_root: Path | None = None
    lease_idle_s: float = LEASE_IDLE_S

    def __post_init__(self) -> None:
        checks: dict[str, tuple[float, bool, str]] = {
            "pilot_max_tasks": (self.pilot_max_tasks, self.pilot_max_tasks >= 0, "must be >= 0"),
            "pilot_window_s": (self.pilot_window_s, 0 <= self.pilot_window_s < math.inf, "must be >= 0 seconds"),
            "pilot_max_time_limit_s": (
                self.pilot_max_time_limit_s,
                0 < self.pilot_max_time_limit_s < math.inf,
                "must be > 0 seconds",
            ),
            "time_grace_s": (self.time_grace_s, 0 <= self.time_grace_s < math.inf, "must be >= 0 seconds"),
            "command_timeout_s": (
                self.command_timeout_s,
                0 < self.command_timeout_s < math.inf,
                "must be > 0 seconds",
            ),
            "remember_max": (self.remember_max, self.remember_max >= 1, "must be >= 1"),
            "lease_idle_s": (self.lease_idle_s, 1 <= self.lease_idle_s < math.inf, "must be >= 1 second"),
        }
        for name, (value, ok, rule) in checks.items():
            if not ok:
                raise FieldError("SlurmBackend", name, f"{rule}, got {value!r}")
        bad = [name for name in self.export if not ENV_NAME.match(name)]
        if bad:
            raise FieldError("SlurmBackend", "export", f"not variable names: {bad}")
        object.__setattr__(self, "export", tuple(self.export))

    @classmethod
    def from_agora(cls) -> SlurmSettings:
        """``[agora] slurm_pilot_max_tasks`` and ``slurm_pilot_window_s``; AgoraError naming the option of a bad
        value."""
        pilot_max_tasks = settings.get_float("slurm_pilot_max_tasks")
        if not 0 <= pilot_max_tasks < math.inf:
            raise AgoraError(f"[agora] slurm_pilot_max_tasks must be >= 0, got {pilot_max_tasks!r}")
        pilot_window_s = settings.get_float("slurm_pilot_window_s")
        if not 0 <= pilot_window_s < math.inf:
            raise AgoraError(f"[agora] slurm_pilot_window_s must be >= 0 seconds, got {pilot_window_s!r}")
        return cls(pilot_max_tasks=int(pilot_max_tasks), pilot_window_s=pilot_window_s)

    @property
    def pilots(self) -> bool:
        """Whether short jobs are gathered into pilots."""
        return self.pilot_max_tasks >= 2

    def minutes(self, time_limit_s: float | None) -> int | None:
        """SLURM's ``--time`` for a task of ``time_limit_s``: with the grace, rounded up to minutes (at least 1)."""
        if time_limit_s is None:
            return None
        return max(1, math.ceil((time_limit_s + self.time_grace_s) / 60))

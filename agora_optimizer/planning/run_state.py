"""A drifted run's state as a re-plan reads it, and the answer of :func:`agora_optimizer.planning.replan.replan`.

Each task of the run is :class:`Done`, :class:`Running` or :class:`Pending` (free to move; after an
OOM kill it reserves more memory); :class:`Replan` is the answer, :class:`ReplanError` a state that
cannot be re-planned. :func:`late_by_s` is the rule by which a late end is a drift, the executor's
and the simulated repairs' alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agora_optimizer.errors import AgoraError
from agora_optimizer.model.plan import Assignment

REPLAN_SLACK = 0.2  # [agora] replan_slack's default: how late (a share of its planned duration) a task may end
REPLAN_TIME_LIMIT_S = 0.5  # the executor's re-plans abandon their list schedules past it (the scheduler's loop waits)


def late_by_s(start_s: float, end_s: float, ended_s: float, slack: float, min_late_s: float = 0.0) -> float | None:
    """How late a task planned from ``start_s`` to ``end_s`` ended (at ``ended_s``) when that is a drift that
    calls for a re-plan: later than planned by more than ``slack`` times its planned duration and more than
    ``min_late_s`` (the platform's jitter); None when it is not, or ``slack`` <= 0 (repair off). The executor's
    rule (:func:`agora_optimizer.executor.runs.repair.late_end`) and the simulated repairs' alike."""
    duration_s, late_s = end_s - start_s, ended_s - end_s
    if slack <= 0 or duration_s <= 0 or late_s <= max(slack * duration_s, min_late_s):
        return None
    return late_s


class ReplanError(AgoraError):
    """A run's state that cannot be re-planned: an unknown task or machine, a time in the future."""


@dataclass(frozen=True)
class Done:
    """The task ended at ``end_s`` on ``machine`` (its start, when known, keeps the lease's start)."""

    machine: str
    end_s: float
    start_s: float | None = None


@dataclass(frozen=True)
class Running:
    """The task runs on ``machine`` since ``start_s``; ``memory_bytes`` if it reserved more than planned."""

    machine: str
    start_s: float
    memory_bytes: int | None = None


@dataclass(frozen=True)
class Pending:
    """Not queued yet, free to move; ``memory_bytes``: what a retry after an OOM kill reserves."""

    memory_bytes: int | None = None


TaskState = Done | Running | Pending


@dataclass(frozen=True)
class Replan:
    """The answer: new placements of the pending tasks, and what the whole run is predicted to be.

    ``fixed`` holds the done and running tasks as they ran or are expected to (a done task's real
    duration, not its planned one); ``moved_machine`` the pending tasks on another machine than
    planned, ``moved_resource`` those of them on another type. ``makespan_s`` and ``cost_usd``
    cover the whole run (leases already paid included); ``method`` says which schedule won, and
    ``list_wall_s`` how long the list schedule took (None: abandoned at the time limit).
    ``deadline_note``: with a deadline at risk, what the re-plan moved to keep it, and why ('' otherwise).
    """

    assignments: tuple[Assignment, ...]
    fixed: tuple[Assignment, ...]
    moved_machine: tuple[str, ...]
    moved_resource: tuple[str, ...]
    makespan_s: float
    cost_usd: float
    method: Literal["kept", "list", "deadline"]
    wall_s: float
    list_wall_s: float | None = None
    deadline_note: str = ""

    @property
    def schedule(self) -> tuple[Assignment, ...]:
        """Every task of the run: what ran, what runs, what is planned."""
        return self.fixed + self.assignments

"""Learning runtimes during a run: each category's planned runtimes corrected from its tasks that ended (pure).

Each task that ends is an observation of its category: its real runtime over its planned runtime on the
type it ran on (:func:`runtime_ratio`; one within ``min_late_s`` of its plan ran as planned). The
category's factor is the observations' mean in log space, shrunk toward 1 with few of them
(:func:`shrunk_factor`, ``k`` = :data:`SHRINK_K`: why, and what it was measured to do, in
:mod:`agora_optimizer.executor.runs.learning`), and multiplies the planned runtimes of the category's tasks
to come (:func:`corrected_workflow`). A factor that moved by more than the run's slack from the one its plan
carries, with tasks of the category to come, calls for a re-plan (:meth:`CategoryRuntime.moved`).

The rule is the executor's (:mod:`agora_optimizer.executor.runs.learning`, whose re-plans use it) and the
simulated runs' (:mod:`agora_optimizer.predict.repair_replay`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from agora_optimizer.model.limits import MAX_RUNTIME_S
from agora_optimizer.model.workflow import Workflow

SHRINK_K = 0.25  # observations' weight n / (n + k): (0.25 / 0.5)^2, the within-run over the model's log spread
RATIO_LIMIT = 100.0  # an observation further off than this is clamped (a stuck task, a clock jump)


def shrunk_factor(log_ratios: list[float], k: float = SHRINK_K) -> float:
    """``exp(mean(log_ratios) * n / (n + k))``: 1 with no observation, toward their mean with more."""
    return _shrunk(sum(log_ratios), len(log_ratios), k)


def _shrunk(total_log: float, n: int, k: float) -> float:
    return math.exp(total_log / (n + k)) if n else 1.0


def runtime_ratio(actual_s: float, model_s: float, min_late_s: float = 0.0) -> float | None:
    """One ended task's observation: ``actual_s / model_s``, 1 within ``min_late_s`` of the plan (the platform's
    jitter), clamped to :data:`RATIO_LIMIT` either way; None when either is not positive."""
    if model_s <= 0 or actual_s <= 0:
        return None
    ratio = 1.0 if abs(actual_s - model_s) <= min_late_s else actual_s / model_s
    return min(max(ratio, 1 / RATIO_LIMIT), RATIO_LIMIT)


@dataclass
class CategoryRuntime:
    """One category's observations in a run (their count and sum in log), and the factor its plan carries now."""

    tasks: int = 0
    total_log: float = 0.0
    applied: float = 1.0

    def factor(self, k: float = SHRINK_K) -> float:
        """:func:`shrunk_factor` of its observations."""
        return _shrunk(self.total_log, self.tasks, k)

    def moved(self, slack: float, k: float = SHRINK_K) -> bool:
        """Its factor is more than ``slack`` away (either way) from the one the plan carries."""
        return abs(math.log(self.factor(k) / self.applied)) > math.log1p(slack)


@dataclass
class RunRuntimes:
    """A run's runtime learning by category, fed with :meth:`observe`; :meth:`applied_now` after each re-plan."""

    categories: dict[str, CategoryRuntime] = field(default_factory=dict)
    k: float = SHRINK_K

    def observe(self, category: str, ratio: float) -> CategoryRuntime:
        found = self.categories.setdefault(category, CategoryRuntime())
        found.tasks += 1
        found.total_log += math.log(ratio)
        return found

    def factors(self) -> dict[str, float]:
        """Each category's factor, where it is not 1."""
        found = {category: c.factor(self.k) for category, c in self.categories.items()}
        return {category: f for category, f in found.items() if f != 1.0}

    def applied_now(self) -> None:
        """A re-plan used every category's factor: the plan carries them from now."""
        for found in self.categories.values():
            found.applied = found.factor(self.k)


def corrected_workflow(workflow: Workflow, factors: Mapping[str, float]) -> Workflow:
    """``workflow`` with each task of ``factors`` lasting that many times its runtime (the rest as they are)."""
    if not factors:
        return workflow
    tasks = tuple(
        replace(task, runtime_s=min(task.runtime_s * factors[task.id], MAX_RUNTIME_S)) if task.id in factors else task
        for task in workflow.tasks
    )
    return replace(workflow, tasks=tasks)

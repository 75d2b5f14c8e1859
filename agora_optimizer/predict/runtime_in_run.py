"""Learning runtimes during a run: each category's planned runtimes corrected from its tasks that ended (pure).

Each task that ends is an observation of its category: its real runtime over its planned runtime on the
type it ran on (:func:`runtime_ratio`; one within ``min_late_s`` of its plan ran as planned). The
category's factor is the mean its observations' spread implies, in log space ``mean + var / 2`` (the
mean of a log-normal ratio), shrunk toward 1 with few of them (weight ``n / (n + k)``, ``k`` =
:data:`SHRINK_K`: why, and what it was measured to do, in :mod:`agora_optimizer.executor.runs.learning`),
and multiplies the planned runtimes of the category's tasks to come (:func:`corrected_workflow`). Not the
ratios' geometric mean alone (:func:`shrunk_factor`, the rule before): a plan's makespan adds its tasks'
times, and where a category's ratios spread their geometric mean falls short of what they add up to by
``exp(var / 2)`` (a seismology run's ratios spread 0.69 in log: its forecast came 20 % short and crept up
repair after repair). Nor their true over planned seconds: the tasks predicted longest are the likeliest
over-predicted, and a few of them ending first pulled a blast run's factor to 0.66 where its tasks ran at
1.04. A category not seen yet takes the run's own factor where it is above 1 (:meth:`RunRuntimes.factor_of`:
every observation pooled, shrunk by the number of categories seen with :data:`RUN_SHRINK_K`): a model wrong
on new inputs is wrong for most of a run's categories alike, though each by its own factor. A factor that
moved by more than the run's slack from the one its plan carries, with tasks of the category to come, calls
for a re-plan (:meth:`CategoryRuntime.moved`).

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
# A category not seen: the run's factor, weight c / (c + 3) over the c categories seen. On the 22 held-out WfInstances,
# a category's true factor against the rule's when its first task starts, weighed by its predicted seconds
# (bench/unseen_category_factor.py): log error 0.335 at the median over runs with 3, 0.488 with 1 (the rule before:
# bwa-chameleon-large-001's fastq_reduce ran at 23.6, and half of that in log made the bwa tasks 4.9x where they ran
# at 2.5x); under-predicted by over 20 %: 20.1 % of the seconds with 3, 20.0 % with 1, 28.7 % with no run factor.
RUN_SHRINK_K = 3.0
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
    """One category's observations in a run (their count, and their logs' sum and sum of squares), and the factor its
    plan carries now."""

    tasks: int = 0
    total_log: float = 0.0
    total_log2: float = 0.0
    applied: float = 1.0

    def add(self, ratio: float) -> None:
        self.tasks += 1
        self.total_log += math.log(ratio)
        self.total_log2 += math.log(ratio) ** 2

    def factor(self, k: float = SHRINK_K) -> float:
        """The observations' log-normal mean, shrunk in log with weight ``tasks / (tasks + k)``."""
        return _mean_factor(self.tasks, self.total_log, self.total_log2, k)

    def moved(self, slack: float, k: float = SHRINK_K) -> bool:
        """Its factor is more than ``slack`` away (either way) from the one the plan carries."""
        return abs(math.log(self.factor(k) / self.applied)) > math.log1p(slack)


def _mean_factor(n: int, total_log: float, total_log2: float, k: float) -> float:
    """``exp((mean + var / 2) * n / (n + k))`` of ``n`` logs given by their sum and sum of squares (``var`` over
    ``n``, not ``n - 1``: two ratios' spread is a guess, which it should not inflate)."""
    if not n:
        return 1.0
    mean = total_log / n
    var = max(total_log2 / n - mean * mean, 0.0)
    return _shrunk((mean + var / 2) * n, n, k)


@dataclass
class RunRuntimes:
    """A run's runtime learning by category, fed with :meth:`observe`; :meth:`applied_now` after each re-plan."""

    categories: dict[str, CategoryRuntime] = field(default_factory=dict)
    k: float = SHRINK_K
    run_k: float | None = None  # the run's factor's k (:meth:`run_factor`); None: RUN_SHRINK_K ([agora] run_shrink_k)

    def observe(self, category: str, ratio: float) -> CategoryRuntime:
        """One task of ``category`` ended at ``ratio`` times its planned runtime."""
        found = self.categories.setdefault(category, CategoryRuntime())
        found.add(ratio)
        return found

    def factors(self) -> dict[str, float]:
        """Each category's factor, where it is not 1."""
        found = {category: c.factor(self.k) for category, c in self.categories.items()}
        return {category: f for category, f in found.items() if f != 1.0}

    def run_factor(self, run_k: float | None = None) -> float:
        """The run's factor for a category not seen: every observation pooled (:meth:`CategoryRuntime.factor`),
        shrunk in log with weight ``c / (c + k)`` over the ``c`` categories seen (``k``: ``run_k``, else this
        run's :attr:`run_k`, else :data:`RUN_SHRINK_K`); 1 with none, and
        never below 1: a run slower than planned warns of its other categories, one fast category does not make
        them fast (1000genome-chameleon-2ch-100k-001's sifting ran at 0.48 in its first second; taken for the
        whole run, the repair bought too little and the run missed its deadline)."""
        found = self.categories.values()
        n = sum(c.tasks for c in found)
        pooled = _mean_factor(n, sum(c.total_log for c in found), sum(c.total_log2 for c in found), 0.0)
        k = next((value for value in (run_k, self.run_k) if value is not None), RUN_SHRINK_K)
        return max(1.0, _shrunk(math.log(pooled) * len(self.categories), len(self.categories), k))

    def factor_of(self, category: str) -> float:
        """What a task of ``category`` to come is corrected by: its category's factor, else the run's."""
        found = self.categories.get(category)
        return found.factor(self.k) if found is not None else self.run_factor()

    def task_factors(self, category_of: Mapping[str, str]) -> dict[str, float]:
        """The factor of each task of ``category_of`` (task -> its category) where it is not 1 (:meth:`factor_of`);
        none before a task ended."""
        if not self.categories:
            return {}
        found = {task: self.factor_of(category) for task, category in category_of.items()}
        return {task: f for task, f in found.items() if f != 1.0}

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

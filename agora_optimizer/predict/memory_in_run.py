"""Learning memory during a run: a category's reservations raised from its tasks that ended (pure: no I/O).

A plan reserves for each task the memory the model predicts; the executor kills a task that peaks
above its reservation, and on sizes the training never had a whole category can be under by the same
factor (issue 34: a bwa run of a size never seen peaked at 100x its reservations). So, per run and per
category, as Sizey and Ponder learn online from the tasks that completed, each task that ends is an
observation of its category, a ratio to the *model's* reservation of that task:

- it ended with a measured peak: ``peak / model``, exact;
- it was killed for memory at its limit: the peak was above the limit, by how much no one knows, so
  ``limit x KILL_GROWTH / model``, the limit doubled, until the task's own retry measures its peak
  and replaces it.

The category's factor is an upper quantile of its ratios (exact ones and the floors standing; the
:data:`RATIO_QUANTILE` one, by rank: the largest until ten tasks ended, then the second largest...)
times :data:`MEMORY_MARGIN`, once that is above 1. Its tasks still to come reserve the model's
prediction times it (never more than the largest type holds; below it, see the next paragraph), and a
killed task's retry at least that, its own floor, and its limit times :data:`OOM_RETRY_GROWTH` (the
executor's own retry growth). Within one WfInstance run, 0.33 % of the tasks peak above that quantile
of their category's peaks before them times 1.2 (0.22 % above the largest times 1.2, 0.26 % above the
largest times 1.1; the 2,694 tasks with a recorded peak in the 22 chameleon instances, each
category's tasks in a shuffled order): the margin is 1.2. The quantile keeps one task far above the
rest (the model errs per task too: it reserves its 97.5th percentile, so one task in forty is over by
design) from raising every task of its category; its own retry grows. A floor is a guess, and an
exact peak replaces it, so a factor falls back as retries succeed.

The same rule lowers a category whose model reserves too much, once :data:`LOWER_AFTER` of its tasks
ended with a measured peak and none of its kills stands: its tasks to come reserve the quantile times
the margin where that is below 1 (a bwa run reserved 727x its peaks). Over the 34 WfInstances, each
category's tasks in five shuffled orders, a task after the tenth of its category peaks above the upper
quantile of the peaks before it times 1.2 in 0.30 % of 12,735 cases, and reserves 1.21x its peak at the
median (after the fifth: 0.40 %; with 1.1: 0.38 % and 1.11x; ``python bench/memory_in_run_margin.py --dir
../shared/data/wfinstances --after 5,10,20 --margins 1.1,1.2,1.3``). Only a predicted reservation (or a guess:
a category's median, the default) is lowered: a declared or recorded one is the task's own need.

The rule is the executor's (:mod:`agora_optimizer.executor.runs.learning`, whose re-plans reserve it)
and the simulated runs' (:mod:`agora_optimizer.predict.repair_replay`, which kills and retries a task
over its reservation as the executor would).
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

from agora_optimizer.model.instances import split_instance
from agora_optimizer.model.workflow import Task, Workflow, category_of

OOM_RETRY_GROWTH = 1.5  # a retry after an OOM kill reserves this much more than the attempt that died
KILL_GROWTH = 2.0  # a kill's floor for its category: the limit doubled, until the task's own peak is measured
RATIO_QUANTILE = 0.9  # the ratios' upper quantile a category's tasks to come reserve
MEMORY_MARGIN = 1.2  # over that quantile: 0.33 % of a category's peaks within a run exceed it (the docstring)
LOWER_AFTER = 10  # a category's exact peaks, and no kill standing, before its factor may go below 1 (the docstring)
LOWERED_SOURCES = frozenset({"predicted", "category-median", "default"})  # reservations a factor below 1 lowers
CHANGE_STEP = 1.1  # a category's factor that moved by more than this from the one its plan carries calls for a re-plan
NOTE_SHOWN = 5  # categories a note names


def observed_ratio(model_bytes: int, peak_bytes: int | None = None, killed_at_bytes: int | None = None) -> float | None:
    """One ended task's ratio to the model's reservation ``model_bytes``: ``peak_bytes / model`` for a measured
    peak, ``killed_at_bytes x KILL_GROWTH / model`` for a kill at that limit; None when there is nothing to
    learn (no model, no peak)."""
    if model_bytes <= 0:
        return None
    if killed_at_bytes is not None and killed_at_bytes > 0:
        return killed_at_bytes * KILL_GROWTH / model_bytes
    if peak_bytes is not None and peak_bytes > 0:
        return peak_bytes / model_bytes
    return None


def memory_factor(
    ratios: Collection[float], quantile: float = RATIO_QUANTILE, margin: float = MEMORY_MARGIN, lowers: bool = False
) -> float:
    """What a category's tasks to come reserve, times the model's prediction: the ratios' ``quantile`` (by rank,
    the higher one) times ``margin`` where that quantile is above 1, or, where the category ``lowers`` (the
    module's docstring), where the product is below 1; else 1."""
    return _ranked_factor(sorted(ratios), quantile, margin, lowers)


def _ranked_factor(
    ranked: list[float], quantile: float = RATIO_QUANTILE, margin: float = MEMORY_MARGIN, lowers: bool = False
) -> float:
    if not ranked:
        return 1.0
    upper = upper_quantile(ranked, quantile)
    if upper > 1.0 or (lowers and upper * margin < 1.0):
        return upper * margin
    return 1.0


def upper_quantile(ranked: list[float], quantile: float = RATIO_QUANTILE) -> float:
    """The ``quantile`` of the sorted, non-empty ``ranked`` by rank, the higher one: the largest until ten, then
    the second largest..."""
    return ranked[max(0, math.ceil(quantile * len(ranked)) - 1)]


def reservation_bytes(model_bytes: int, factor: float, cap_bytes: int | None = None) -> int:
    """The model's reservation times ``factor``: raised at most to ``cap_bytes`` (the largest type's memory), never
    below the model's own; lowered where ``factor`` is below 1."""
    if factor < 1.0:
        return max(1, math.ceil(model_bytes * factor))
    raised = math.ceil(model_bytes * factor)
    if cap_bytes is not None:
        raised = min(raised, cap_bytes)
    return max(model_bytes, raised)


def retry_bytes(killed_at_bytes: int, model_bytes: int, factor: float, cap_bytes: int | None = None) -> int:
    """What the retry of a task killed for memory at ``killed_at_bytes`` reserves: its limit times
    :data:`OOM_RETRY_GROWTH`, and at least its category's raised reservation; at most ``cap_bytes``."""
    grown = max(math.ceil(killed_at_bytes * OOM_RETRY_GROWTH), reservation_bytes(model_bytes, factor))
    return grown if cap_bytes is None else min(grown, cap_bytes)


@functools.lru_cache(maxsize=65536)
def id_stem(task_id: str) -> str:
    """A task id's category stem: ``mProject_ID0000001`` -> ``mProject``, ``load[3]`` -> ``load``."""
    return category_of(split_instance(task_id)[0])


def category_of_task(task: Task) -> str:
    """The task's category: its own, else its id's stem (:func:`id_stem`)."""
    return task.category or id_stem(task.id)


@dataclass
class CategoryMemory:
    """One category's memory in a run: each ended task's exact ratio, the floors of the killed tasks whose peak is
    not measured yet, and the factor its plan carries."""

    peaks: dict[str, float] = field(default_factory=dict)
    floors: dict[str, float] = field(default_factory=dict)
    applied: float = 1.0
    ranked: list[float] = field(default_factory=list)  # every ratio standing, peaks' and floors', in order

    def observe(self, task_id: str, ratio: float, killed: bool) -> None:
        if killed and task_id in self.peaks:
            return  # its peak was measured: a kill says less
        old = self.peaks.pop(task_id, None) if not killed else None
        floor = self.floors.pop(task_id, None)
        for gone in (old, floor):
            if gone is not None:
                del self.ranked[bisect.bisect_left(self.ranked, gone)]
        if killed:
            ratio = max(ratio, floor or 0.0)
            self.floors[task_id] = ratio
        else:
            self.peaks[task_id] = ratio
        bisect.insort(self.ranked, ratio)

    def copy(self) -> CategoryMemory:
        return CategoryMemory(dict(self.peaks), dict(self.floors), self.applied, list(self.ranked))

    @property
    def factor(self) -> float:
        return _ranked_factor(self.ranked, lowers=self.lowers)

    @property
    def lowers(self) -> bool:
        """Enough exact peaks, and no kill standing, for the factor to go below 1 (:data:`LOWER_AFTER`)."""
        return not self.floors and len(self.peaks) >= LOWER_AFTER

    def factor_of(self, task_id: str) -> float:
        """The factor of one task: its category's, and at least its own floor (it was killed, its peak unknown)."""
        return max(self.factor, self.floors.get(task_id, 0.0))

    @property
    def tasks(self) -> int:
        return len(self.peaks) + len(self.floors)

    @property
    def changed(self) -> bool:
        """The factor moved from the one the plan carries by more than :data:`CHANGE_STEP`: the tasks to come
        would reserve too little (or, a floor replaced by a measured peak, much too much)."""
        return not self.applied / CHANGE_STEP <= self.factor <= self.applied * CHANGE_STEP


@dataclass
class RunMemory:
    """One run's memory learned by category (:class:`CategoryMemory`)."""

    categories: dict[str, CategoryMemory] = field(default_factory=dict)

    def observe(self, category: str, task_id: str, ratio: float, killed: bool = False) -> CategoryMemory:
        """The task of ``category`` ended (``killed`` for memory, or with a measured peak): its
        :func:`observed_ratio`."""
        found = self.categories.setdefault(category, CategoryMemory())
        found.observe(task_id, ratio, killed)
        return found

    def factor(self, category: str, task_id: str = "") -> float:
        """The category's factor; with ``task_id``, that task's (:meth:`CategoryMemory.factor_of`)."""
        found = self.categories.get(category)
        return 1.0 if found is None else found.factor_of(task_id)

    def factors(self) -> dict[str, float]:
        """Each category's factor, where it is not 1."""
        return {name: found.factor for name, found in self.categories.items() if found.factor != 1.0}

    def applied_now(self) -> None:
        """A re-plan reserved every category's factor: the plan carries them from now."""
        for found in self.categories.values():
            found.applied = found.factor


def raised_workflow(workflow: Workflow, factors: Mapping[str, float], cap_bytes: int | None = None) -> Workflow:
    """``workflow`` with each task of ``factors`` reserving that many times its memory (:func:`reservation_bytes`);
    a factor below 1 lowers only a reservation of :data:`LOWERED_SOURCES`."""
    applied = applied_factors(workflow, factors)
    if not applied:
        return workflow
    tasks = tuple(
        replace(task, memory_bytes=reservation_bytes(task.memory_bytes, applied[task.id], cap_bytes))
        if task.id in applied
        else task
        for task in workflow.tasks
    )
    return replace(workflow, tasks=tasks)


def applied_factors(workflow: Workflow, factors: Mapping[str, float]) -> dict[str, float]:
    """The factors of ``factors`` that move a task's reservation: above 1, or below 1 for a reservation of
    :data:`LOWERED_SOURCES`."""
    by_id = workflow.by_id
    return {
        t: f
        for t, f in factors.items()
        if t in by_id and (f > 1.0 or (f < 1.0 and by_id[t].memory_source in LOWERED_SOURCES))
    }


def memory_note(workflow: Workflow, factors: Mapping[str, float]) -> str:
    """The reservations a re-plan moved, in words, by category: ``memory raised from this run: bwa x3.60
    (12 tasks); memory lowered from this run: blastall x0.40 (30 tasks)``; '' for none."""
    applied = applied_factors(workflow, factors)
    raised = category_factors_note("memory raised from this run", workflow, {t: f for t, f in applied.items() if f > 1})
    lowered = category_factors_note(
        "memory lowered from this run", workflow, {t: f for t, f in applied.items() if f < 1}
    )
    return "; ".join(note for note in (raised, lowered) if note)


def category_factors_note(heading: str, workflow: Workflow, factors: Mapping[str, float]) -> str:
    """``HEADING: bwa x3.60 (12 tasks), ...``: the tasks of ``factors`` by category, each category's largest factor,
    the :data:`NOTE_SHOWN` furthest from 1 first; '' for none (the executor's runtime and memory notes alike)."""
    by_category: dict[str, list[float]] = {}
    for task in workflow.tasks:
        if task.id in factors:
            by_category.setdefault(category_of_task(task), []).append(factors[task.id])
    if not by_category:
        return ""
    shown = sorted(by_category.items(), key=lambda item: -abs(math.log(max(item[1]))))
    words = [f"{name} x{max(values):.2f} ({len(values)} tasks)" for name, values in shown[:NOTE_SHOWN]]
    more = f" and {len(shown) - NOTE_SHOWN} more" if len(shown) > NOTE_SHOWN else ""
    return f"{heading}: " + ", ".join(words) + more

"""Learning during a run: each category's runtimes corrected from its tasks that ended (pure: no I/O, no clock).

A plan's runtimes are predictions, and on new inputs a whole category can be off by the same factor
(docs/prediction.md: the same inputs ran 10x longer in another instance, while within one run a
category's median predicts its other tasks within 2-28 % for most families). So, per run and per
category (the task's category as the plan's workflow names it, :attr:`MachineOrder.categories`; else
the task's stem, ``mProject_ID0000001`` -> ``mProject``, ``load[3]`` -> ``load``), each task that ends
is an observation: its real runtime (from its start, or its release to its machine, to its end, on
the run's plan clock) over its planned runtime on the type it ran on. A task within
``[agora] replan_min_late_s`` of its planned runtime ran as planned (the platform's jitter, as for a
drift). The category's factor is the log-normal mean of the observations (their logs' mean plus half
their variance: a makespan adds its tasks' times, and the geometric mean measured below falls short of
what spread tasks add up to; :mod:`agora_optimizer.predict.runtime_in_run`), shrunk toward 1 with few
of them::

    factor = exp((mean(log ratio) + var(log ratio) / 2) * n / (n + k))

and a category none of whose tasks ended yet takes the run's factor where it is above 1, every
observation pooled and shrunk by the number of categories seen.

``k`` is :data:`SHRINK_K`, the ratio of the two variances the evidence has: a category's tasks
within one run spread about 0.25 in log around their median (the 2-28 % above), while the model's
error on new inputs is about 0.5 in log (a runtime MdAPE of 0.634 at the median over ten unseen
sizes, issue 34): k = (0.25 / 0.5)^2, so one task that ran 2x moves its category to 1.74x, two to
1.85x. Where the run is the evidence, the run wins fast; one outlier cannot move a category alone
past what a second task confirms. Measured (``bench/learning_in_run.py --dir ../shared/data/wfinstances
--k 0.25,1,2``: 20 WfInstance runs, each predicted by its categories' medians in another instance of its
family), the runtime MdAPE of the tasks with one of their category ended before them is 0.675 from the
model alone, 0.327 corrected with k = 0.25, 0.331 with k = 1 and 0.364 with k = 2.

The rule (an observation's ratio, the shrunk factor, the corrected workflow) is
:mod:`agora_optimizer.predict.runtime_in_run`'s, shared with the simulated runs
(:mod:`agora_optimizer.predict.repair_replay`). The factor is applied to the category's tasks that have not
ended (their planned runtimes are multiplied by it) at every re-plan of the run
(:class:`~agora_optimizer.executor.runs.events.Replan`'s ``runtime_factors``, read by
:class:`~agora_optimizer.executor.runs.replanner.Replanner`). A factor that
moves by more than ``[agora] replan_slack`` from the one the run's plan carries now, while the category
still has tasks to come, is a drift of its own (:class:`~agora_optimizer.executor.runs.repair.Drift`):
the run is re-planned from the corrected runtimes before any of those tasks runs late. A re-planned
task's planned runtime carries its factor, so its own observation divides it out again: each task is
compared with the model's prediction, never with a prediction already corrected.

Memory is learned alongside, by the rule of :mod:`agora_optimizer.predict.memory_in_run`: a task that
ended with a measured peak, or was killed for memory at its limit, is an observation of its category's
peak over the model's reservation; once one is above 1, the category's tasks to come (and a killed
task's retry) reserve an upper quantile of the ratios times a margin (a kill's limit, doubled, until
its retry measures its peak), never less than the model's own; once ten ended with a measured peak and
no kill stands, they reserve that where it is below the model's (a predicted reservation only). A factor
that moved by more than 10 % from the one the plan carries, with tasks of the category to come, is a
drift too: the re-plan (:class:`~agora_optimizer.executor.runs.events.Replan`'s ``memory_factors``)
reserves the new memory before those tasks start, and moves them to a type that holds it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from agora_optimizer.executor.bounded import BoundedDict
from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import JobStatus
from agora_optimizer.executor.lifecycle import Now
from agora_optimizer.executor.runs.machine_order import RunBook
from agora_optimizer.executor.runs.repair import Drift, RunRepairs, clock_at
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.predict.memory_in_run import RunMemory, category_factors_note, id_stem, observed_ratio
from agora_optimizer.predict.runtime_in_run import (  # the rule, shared with the simulated runs
    SHRINK_K,
    RunRuntimes,
    corrected_workflow,
    runtime_ratio,
    shrunk_factor,
)

__all__ = ["SHRINK_K", "RunCorrection", "RunLearning", "corrected_workflow", "correction_note", "shrunk_factor"]

RUNS_MAX = 1024  # runs whose corrections are kept

Run = tuple[str, str]


def task_category(book: RunBook, task_id: str) -> str:
    """The task's category: its plan's workflow's, else its stem (``load[3]`` -> ``load``)."""
    return book.order.categories.get(task_id) or id_stem(task_id)


@dataclass
class RunCorrection:
    """One run's corrections: each category's runtime observations (:class:`RunRuntimes`, the simulated runs' own)
    and the factor each task's planned runtime carries; the same for memory."""

    runtimes: RunRuntimes = field(default_factory=RunRuntimes)
    carried: dict[str, float] = field(default_factory=dict)  # task -> factor its planned runtime was re-planned with
    memory: RunMemory = field(default_factory=RunMemory)
    memory_carried: dict[str, float] = field(default_factory=dict)  # task -> factor its reservation was raised by


class RunLearning:
    """Every run's corrections (:class:`RunCorrection`, by ``(dag_id, run_id)``), fed by the tasks that end.

    ``k``: the shrinkage (:data:`SHRINK_K`); ``run_k``: the run's factor's (``[agora] run_shrink_k``; None:
    :data:`~agora_optimizer.predict.runtime_in_run.RUN_SHRINK_K`). The run machine feeds :meth:`ended`, asks
    :meth:`factors` for each re-plan and tells :meth:`applied` what the re-plan used.
    """

    def __init__(self, k: float = SHRINK_K, run_k: float | None = None) -> None:
        self.k, self.run_k = k, run_k
        self.runs: BoundedDict[Run, RunCorrection] = BoundedDict(RUNS_MAX)

    def run(self, run: Run) -> RunCorrection:
        found = self.runs.get(run)
        if found is None:
            found = self.runs[run] = RunCorrection(RunRuntimes(k=self.k, run_k=self.run_k))
        return found

    def ended(
        self, book: RunBook, record: JobRecord, status: JobStatus, end_s: float, now: Now, repairs: RunRepairs
    ) -> None:
        """The job's task process ended at plan clock ``end_s`` (``status``: its job's): one observation of its
        category, unless the job is known to have failed. Its runtime runs from its start where the backend
        says, else from its release to its machine. A drift of its run (in ``repairs``) when the category's
        factor moved past ``repairs.slack`` from the one the plan carries and tasks of it are to come."""
        run, task_id = (record.dag_id, record.run_id), record.plan_task
        started_s = None if status.started_at is None else clock_at(book, now.monotonic_s, now.wall, status.started_at)
        drift = self._observed(book, run, task_id, status, end_s, started_s, repairs.slack, repairs.min_late_s)
        if drift is not None:
            repairs.run(*run).drift(drift)

    def finished(self, book: RunBook, record: JobRecord, status: JobStatus, repairs: RunRepairs) -> None:
        """The job finished (``status``: its final one, which says its peak or its kill; a task's end may have been
        seen before, from its worker's mark): its peak, or the limit it was killed at, over the model's reservation
        of its task is an observation of its category's memory; a drift of its run (in ``repairs``) when the
        category's factor moved from the one the plan carries and tasks of it are to come."""
        if repairs.slack <= 0 or status.phase != "finished":
            return
        run = (record.dag_id, record.run_id)
        drift = self._memory_observed(book, run, record, status)
        if drift is not None:
            repairs.run(*run).drift(drift)

    def _memory_observed(self, book: RunBook, run: Run, record: JobRecord, status: JobStatus) -> Drift | None:
        task_id = record.plan_task
        planned = book.order.by_task.get(task_id)
        if planned is None:
            return None
        correction = self.run(run)
        model_bytes = round(planned.memory_bytes / correction.memory_carried.get(task_id, 1.0))
        if status.oom_killed:
            ratio = observed_ratio(model_bytes, killed_at_bytes=record.memory_bytes)
        elif status.succeeded:
            ratio = observed_ratio(model_bytes, peak_bytes=status.peak_rss_bytes)
        else:
            ratio = None
        if ratio is None:
            return None
        category = task_category(book, task_id)
        found = correction.memory.observe(category, task_id, ratio, killed=status.oom_killed)
        if not found.changed:
            return None
        coming = [t for t in _to_come(book) if task_category(book, t) == category]
        if found.factor <= 1.0:  # not raised: a declared or recorded reservation stays, so a re-plan would not move it
            coming = [t for t in coming if t not in book.order.fixed_memory]
        if not coming:
            return None
        last = f"killed at {record.memory_bytes} bytes" if status.oom_killed else f"peaked at {ratio:.2f}x"
        return Drift(
            task_id,
            f"category {category}'s {len(coming)} tasks to come reserve {found.factor:.2f}x their predicted memory, "
            f"not {found.applied:.2f}x ({found.tasks} tasks ended; task {task_id} {last})",
        )

    def _observed(
        self,
        book: RunBook,
        run: Run,
        task_id: str,
        status: JobStatus,
        end_s: float,
        started_s: float | None,
        slack: float,
        min_late_s: float,
    ) -> Drift | None:
        planned = book.order.by_task.get(task_id)
        released_s = book.started_s.get(task_id)
        if planned is None or slack <= 0 or (status.phase != "running" and not status.succeeded):
            return None
        start_s = max(s for s in (released_s, started_s, -math.inf) if s is not None)
        if not math.isfinite(start_s):
            return None
        correction = self.run(run)
        model_s = planned.duration_s / correction.carried.get(task_id, 1.0)
        ratio = runtime_ratio(end_s - start_s, model_s, min_late_s)
        if ratio is None:
            return None
        category = task_category(book, task_id)
        found = correction.runtimes.observe(category, ratio)
        if not found.moved(slack, self.k):
            return None  # the common case, decided before the run's tasks are looked through
        factor = found.factor(self.k)
        coming = [t for t in _to_come(book) if task_category(book, t) == category]
        if not coming:
            return None
        return Drift(
            task_id,
            f"category {category} runs {factor:.2f}x its planned time ({found.tasks} tasks ended, "
            f"the last {ratio:.2f}x); its {len(coming)} tasks to come re-planned at that",
        )

    def factors(self, run: Run, book: RunBook) -> dict[str, float]:
        """The factor of each task of the run that has not ended, where it is not 1: its category's, or the run's
        for a category none of whose tasks ended (:meth:`RunRuntimes.factor_of`)."""
        correction = self.runs.get(run)
        if correction is None:
            return {}
        ending = [t for t in book.order.by_task if t not in book.ended and t not in book.gone]
        return correction.runtimes.task_factors({t: task_category(book, t) for t in ending})

    def memory_factors(self, run: Run, book: RunBook, retries: Collection[str] = ()) -> dict[str, float]:
        """The memory factor of each task of the run a re-plan places (not started, or whose retry, ``retries``, is
        to come: a running task keeps what it reserved), where it is not 1."""
        correction = self.runs.get(run)
        if correction is None or not correction.memory.categories:
            return {}
        found: dict[str, float] = {}
        for task_id in _placed(book, retries):
            factor = correction.memory.factor(task_category(book, task_id), task_id)
            if factor != 1.0:
                found[task_id] = factor
        return found

    def applied(
        self,
        run: Run,
        book: RunBook,
        factors: Mapping[str, float],
        memory_factors: Mapping[str, float] | None = None,
        retries: Collection[str] = (),
    ) -> None:
        """A re-plan of the run used ``factors`` and ``memory_factors`` (by task; ``retries``: the tasks whose retry
        it placed): their planned runtimes and the reservations of the tasks it placed carry them from now."""
        correction = self.run(run)
        for task_id in book.order.by_task:
            if task_id not in book.ended and task_id not in book.gone:
                correction.carried[task_id] = factors.get(task_id, 1.0)
        raised = memory_factors or {}
        for task_id in _placed(book, retries):
            correction.memory_carried[task_id] = raised.get(task_id, 1.0)
        correction.runtimes.applied_now()
        correction.memory.applied_now()


def _placed(book: RunBook, retries: Collection[str]) -> list[str]:
    """The run's planned tasks a re-plan places: not started and coming, or a failed one whose retry is to come."""
    return [t for t in book.order.by_task if (t not in book.started and t not in book.gone) or t in retries]


def _to_come(book: RunBook) -> list[str]:
    """The run's planned tasks that have not started (and will come)."""
    return [t for t in book.order.by_task if t not in book.started and t not in book.gone]


def correction_note(workflow: Workflow, factors: Mapping[str, float]) -> str:
    """The factors of a re-plan in words, by category: ``runtimes corrected from this run: mProject x1.85 (12
    tasks)``; '' for none."""
    return category_factors_note("runtimes corrected from this run", workflow, factors)

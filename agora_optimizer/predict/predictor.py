"""The predictor's front door: learn from task attempts, answer for a workflow on a catalog.

``Predictor().fit(attempts)`` learns a :class:`RuntimeChoiceRegressor` (per category, boosted
trees or a power law of the size read, whichever erred less on held-out runs; a model saved
before it holds a :class:`RuntimeRegressor`, the trees alone, and still answers) and a
:class:`MemoryQuantileRegressor` and summarises the history for the cold-start chain;
``predict(workflow, catalog)`` gives every task its runtime on every resource type of the
catalog, with its p50 and p90 (:mod:`agora_optimizer.predict.runtime_quantiles`), its memory
quantile, and the level of the chain that answered each; ``predicted_workflow`` turns that into a
:class:`Workflow` the optimizer can plan (reference runtimes at a chosen quantile,
``memory_source="predicted"``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import pandas as pd

from agora_optimizer.model.catalog import GIB, Catalog, Resource
from agora_optimizer.model.shapes import TaskShape, WorkflowShape
from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.predict.errors import EmptyHistoryError, PredictorError, UnknownResourceError
from agora_optimizer.predict.fallback import LEVELS, Estimate, History, Level, first_answer, summarise
from agora_optimizer.predict.features import (
    RESOURCE_NUMERIC,
    feature_frame,
    resource_columns,
    run_widths,
    shape_of_attempt,
    with_resource,
)
from agora_optimizer.predict.memory_model import MemoryQuantileRegressor
from agora_optimizer.predict.runtime_choice import RuntimeChoiceRegressor
from agora_optimizer.predict.runtime_model import RuntimeRegressor
from agora_optimizer.predict.runtime_quantiles import REPORTED_QUANTILES, RuntimeQuantiles, quantile_label
from agora_optimizer.traces.records import TaskAttempt

log = logging.getLogger(__name__)

DEFAULT_MEMORY_BYTES = GIB

RuntimeModel = RuntimeChoiceRegressor | RuntimeRegressor


# What each level of the cold-start chain means, as ``describe_sources`` says it.
LEVEL_WORDS: Mapping[Level, str] = MappingProxyType(
    {
        "task": "from their own runs",
        "category": "from their category's or operator's runs",
        "hint": "from their hints",
        "default": "from the defaults",
    }
)


@dataclass(frozen=True)
class TaskPrediction:
    """One task's predicted runtime on each resource type, its memory quantile, and their sources."""

    task_id: str
    category: str
    reference_runtime_s: float
    runtime_s: Mapping[str, float]
    memory_bytes: int
    runtime_source: Level
    memory_source: Level
    runtime_model: str = ""  # the model behind the runtime: "trees" or "scaling" (per category), "" for a hint
    # Each reported quantile's runtime over ``runtime_s`` ({"p50": 0.97, "p90": 2.4}); 1.0 where unknown.
    runtime_factors: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def runtime_at(self, label: str) -> dict[str, float]:
        """The runtime on each type at quantile ``label`` (``p50``, ``p90``)."""
        factor = self.runtime_factors.get(label, 1.0)
        return {name: value * factor for name, value in self.runtime_s.items()}

    @property
    def runtime_s_p50(self) -> dict[str, float]:
        return self.runtime_at("p50")

    @property
    def runtime_s_p90(self) -> dict[str, float]:
        return self.runtime_at("p90")


@dataclass(frozen=True)
class Prediction:
    """Predictions for every task of one workflow on the resource types of one catalog."""

    workflow: str
    tasks: tuple[TaskPrediction, ...]
    resources: tuple[str, ...]

    def runtime_s(self, task_id: str, resource: str) -> float:
        """The predicted runtime of ``task_id`` on ``resource``; unknown names are a clear error."""
        if resource not in self.resources:
            raise UnknownResourceError(resource, list(self.resources))
        for task in self.tasks:
            if task.task_id == task_id:
                return task.runtime_s[resource]
        raise PredictorError(f"workflow '{self.workflow}' has no task '{task_id}'")

    def sources(self) -> dict[str, dict[str, int]]:
        """How many tasks each level answered, for runtime and for memory."""
        return {
            "runtime": dict(Counter(t.runtime_source for t in self.tasks)),
            "memory": dict(Counter(t.memory_source for t in self.tasks)),
        }

    def describe_sources(self, names_shown: int = 3) -> str:
        """Which tasks each level answered, runtime then memory, best level first, a few names each.

        ``runtime: 2 from their own runs (extract, load), 3 from hints (clean, ...); memory: ...``
        """
        parts = []
        for quantity in ("runtime", "memory"):
            by_level: dict[str, list[str]] = {}
            for task in self.tasks:
                by_level.setdefault(getattr(task, f"{quantity}_source"), []).append(task.task_id)
            answered = []
            for level in LEVELS:
                ids = by_level.get(level, [])
                if ids:
                    shown = ", ".join([*ids[:names_shown], *(["..."] if len(ids) > names_shown else [])])
                    answered.append(f"{len(ids)} {LEVEL_WORDS[level]} ({shown})")
            parts.append(f"{quantity}: {', '.join(answered) or 'no tasks'}")
        return "; ".join(parts)


def training_hash(attempts: Sequence[TaskAttempt]) -> str:
    """SHA-256 of the attempts' learned-from fields, independent of their order."""
    rows = sorted(
        json.dumps([a.key, a.category, a.operator, a.resource_type, a.speed, a.state, a.runtime_s, a.peak_rss_bytes])
        + json.dumps([a.input_bytes, a.output_bytes, a.requested_cores, a.requested_memory_bytes])
        for a in attempts
    )
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


class Predictor:
    """Runtime and memory predictions with a cold-start chain (task -> category -> hint -> default)."""

    def __init__(
        self,
        runtime_model: RuntimeModel | None = None,
        memory_model: MemoryQuantileRegressor | None = None,
        default_memory_bytes: int = DEFAULT_MEMORY_BYTES,
        runtime_quantiles: RuntimeQuantiles | None = None,
    ) -> None:
        self.runtime_model: RuntimeModel = runtime_model if runtime_model is not None else RuntimeChoiceRegressor()
        self.memory_model = memory_model if memory_model is not None else MemoryQuantileRegressor()
        self.runtime_quantiles = runtime_quantiles if runtime_quantiles is not None else RuntimeQuantiles()
        self.has_runtime_quantiles = False  # a model saved before them has none: every factor is 1.0
        self.default_memory_bytes = default_memory_bytes
        self.fitted = False
        self.has_memory_model = False
        self.history = History()
        self.skipped: dict[str, int] = {}
        self.training_sha256 = ""
        self.training_rows = {"runtime": 0, "memory": 0, "runs": 0}

    # --- learning -----------------------------------------------------------------------------

    def fit(self, attempts: Sequence[TaskAttempt], catalog: Catalog | None = None) -> Predictor:
        """Learn from ``attempts``; unusable ones are skipped and counted (``self.skipped``).

        ``catalog`` gives the vcpus, memory and speed of the types attempts ran on.
        Raises :class:`EmptyHistoryError` when no attempt has a usable runtime.
        """
        skipped: Counter[str] = Counter()
        runtime_rows: list[tuple[TaskAttempt, Resource | None]] = []
        for attempt in attempts:
            reason = _unusable(attempt, catalog)
            if reason:
                skipped[reason] += 1
                continue
            resource = catalog.by_name.get(attempt.resource_type) if catalog and attempt.resource_type else None
            runtime_rows.append((attempt, resource))
        if not runtime_rows:
            detail = f" ({', '.join(f'{n} {r}' for r, n in skipped.items())})" if skipped else ""
            raise EmptyHistoryError(f"no usable task attempt to learn from: {len(attempts)} given{detail}")
        if skipped:
            log.warning("skipped %d attempt(s): %s", sum(skipped.values()), dict(skipped))
        frame, reference = _training_frame(runtime_rows, run_widths(attempts))
        runs = [f"{a.dag_id}\x00{a.run_id}" for a, _ in runtime_rows]
        self.runtime_model.fit(frame, reference, groups=runs)
        self.runtime_quantiles.fit(self.runtime_model, frame, reference, groups=runs)
        self.has_runtime_quantiles = True
        residuals = np.log(np.maximum(reference, self.runtime_model.runtime_floor_s)) - np.log(
            self.runtime_model.predict(frame)
        )
        memory_index = [i for i, (a, _) in enumerate(runtime_rows) if a.peak_rss_bytes]
        self.has_memory_model = bool(memory_index)
        if memory_index:
            memory_frame = frame.iloc[memory_index].reset_index(drop=True)
            peaks = [runtime_rows[i][0].peak_rss_bytes for i in memory_index]
            self.memory_model.fit(memory_frame, peaks, groups=[runs[i] for i in memory_index])
        self.history = summarise(
            residuals=[((a.dag_id, a.task_id), float(r)) for (a, _), r in zip(runtime_rows, residuals, strict=True)],
            peaks=_peaks(attempts),
            runtime_groups=(frame["category"], frame["operator"]),
            memory_groups=(frame["category"].iloc[memory_index], frame["operator"].iloc[memory_index]),
        )
        self.skipped = dict(skipped)
        self.training_sha256 = training_hash(attempts)
        self.training_rows = {
            "runtime": len(runtime_rows),
            "memory": len(memory_index),
            "runs": len({(a.dag_id, a.run_id) for a, _ in runtime_rows}),
        }
        self.fitted = True
        return self

    # --- answering ----------------------------------------------------------------------------

    def predict(self, workflow: WorkflowShape, catalog: Catalog, resources: Sequence[str] | None = None) -> Prediction:
        """Each task's runtime on every type of ``catalog`` (or only ``resources``) and its memory quantile."""
        if not self.fitted:
            raise PredictorError("the predictor is not trained: fit it or load a trained model first")
        chosen = _chosen_types(catalog, resources)
        if not workflow.tasks:
            return Prediction(workflow.name, (), tuple(r.name for r in chosen))
        frame = feature_frame(workflow.tasks)
        per_type = self._reference_per_type(frame, chosen)
        memory = self.memory_model.predict(frame) if self.has_memory_model else None
        categories = [shape.category for shape in workflow.tasks]
        quantiles = {quantile_label(q): self._category_factors(categories, q) for q in REPORTED_QUANTILES}
        tasks = []
        for i, shape in enumerate(workflow.tasks):
            model_s = statistics.median(float(values[i]) for values in per_type.values())
            runtime = self._runtime(shape, model_s)
            memory_estimate = self._memory(shape, None if memory is None else float(memory[i]))
            scale = runtime.value / model_s  # a task's own history or hint rescales every type alike
            factors = {label: 1.0 if runtime.source == "hint" else float(f[i]) for label, f in quantiles.items()}
            tasks.append(
                TaskPrediction(
                    task_id=shape.task_id,
                    category=shape.category,
                    reference_runtime_s=runtime.value,
                    runtime_s=MappingProxyType({r.name: float(per_type[r.name][i]) * scale / r.speed for r in chosen}),
                    memory_bytes=math.ceil(memory_estimate.value),
                    runtime_source=runtime.source,
                    memory_source=memory_estimate.source,
                    runtime_model=self.runtime_model_of(shape.category) if runtime.source != "hint" else "",
                    runtime_factors=MappingProxyType(factors),
                )
            )
        return Prediction(workflow.name, tuple(tasks), tuple(r.name for r in chosen))

    def runtime_model_of(self, category: str) -> str:
        """The runtime model that answers for ``category``: "scaling" or "trees" (a model saved before the
        choice: "trees" for every category)."""
        if isinstance(self.runtime_model, RuntimeChoiceRegressor):
            return self.runtime_model.chosen(category)
        return "trees"

    def _category_factors(self, categories: Sequence[str], quantile: float) -> np.ndarray:
        """The factor that takes each task's predicted runtime to its ``quantile``: its category's (the pooled
        one for a category the quantiles did not learn), 1.0 for a model saved without quantiles.

        A declared hint is the author's number, not the model's: its spread is unknown, so callers keep it
        as declared (1.0)."""
        if not self.has_runtime_quantiles:
            return np.ones(len(categories))
        return self.runtime_quantiles.factors(categories, quantile)

    def quantile_note(self, quantile: float) -> str:
        """How the runtimes at ``quantile`` were made, for a plan's reader."""
        label = quantile_label(quantile)
        if not self.has_runtime_quantiles:
            return (
                f"runtimes at {label}: the model has no runtime quantiles (saved before them), so its point prediction"
            )
        return f"runtimes at {label} (declared hints as declared)"

    def _reference_per_type(self, frame: pd.DataFrame, chosen: Sequence[Resource]) -> dict[str, np.ndarray]:
        """The model's reference runtime of every task, per type (the same for all unless types matter)."""
        if not self.runtime_model.uses_resources_:
            values = self.runtime_model.predict(frame)
            return {r.name: values for r in chosen}
        return {r.name: self.runtime_model.predict(with_resource(frame, r)) for r in chosen}

    def _runtime(self, shape: TaskShape, model_s: float) -> Estimate:
        past = self.history.task(*shape.key)
        task = model_s * math.exp(past.log_runtime_residual) if past and past.log_runtime_residual is not None else None
        category = model_s if self._knows(self.history.knows_category, shape, shape.hint_runtime_s) else None
        return first_answer(task, category, shape.hint_runtime_s, model_s)

    @staticmethod
    def _knows(knows: Callable[[str, str], bool], shape: TaskShape, hint: float | None) -> bool:
        """The task's category was learned; or its operator was, and the task declares no hint.

        An operator class is shared far and wide (every ``@task`` is a ``_PythonDecoratedOperator``),
        so what other tasks of the same class did says less than what the author declared.
        """
        return knows(shape.category, "") or (hint is None and knows(shape.category, shape.operator))

    def _memory(self, shape: TaskShape, model_bytes: float | None) -> Estimate:
        past = self.history.task(*shape.key)
        known = model_bytes is not None and self._knows(self.history.knows_memory_of, shape, shape.hint_memory_bytes)
        task = None
        if past and past.peak_bytes:
            task = max(float(past.peak_bytes), model_bytes if known and model_bytes else 0.0)
        # What other tasks of its category used never undercuts what the author declared: only the task's own
        # history may (a reservation below the declared need gets the task killed for memory).
        category = max(model_bytes, float(shape.hint_memory_bytes or 0)) if known and model_bytes else None
        return first_answer(task, category, shape.hint_memory_bytes, float(self.default_memory_bytes))

    def predicted_workflow(
        self,
        workflow: WorkflowShape,
        catalog: Catalog,
        runtime_quantile: float | None = None,
        prediction: Prediction | None = None,
    ) -> Workflow:
        """The workflow with predicted reference runtimes and memory quantiles, ready to plan.

        ``runtime_quantile`` (e.g. 0.9): each runtime at that quantile (a hint as declared);
        ``None``: the model's point prediction. A memory quantile above the largest type's memory is
        cut to it (logged): no machine can reserve more, and the plan then gives the task the largest
        machine there is. ``prediction``: :meth:`predict`'s answer for ``workflow`` on ``catalog``,
        where the caller has it already (else it is asked here).
        """
        if prediction is None:
            prediction = self.predict(workflow, catalog)
        by_id = {t.task_id: t for t in prediction.tasks}
        categories = [shape.category for shape in workflow.tasks]
        factors = self._category_factors(categories, runtime_quantile) if runtime_quantile is not None else None
        largest = catalog.largest().memory_bytes if catalog.resources else None
        tasks = []
        cut = 0
        for i, shape in enumerate(workflow.tasks):
            predicted = by_id[shape.task_id]
            memory = predicted.memory_bytes
            factor = 1.0 if factors is None or predicted.runtime_source == "hint" else float(factors[i])
            if largest is not None and memory > largest:
                memory, cut = largest, cut + 1
            tasks.append(
                Task(
                    id=shape.task_id,
                    runtime_s=predicted.reference_runtime_s * factor,
                    cores=shape.cores,
                    memory_bytes=memory,
                    category=shape.category,
                    memory_source="predicted",
                    gpus=shape.gpus,
                )
            )
        if cut:
            log.warning(
                "%s: %d predicted peak(s) above the largest type's memory, cut to %d bytes", workflow.name, cut, largest
            )
        return Workflow.create(workflow.name, tasks, list(workflow.edges), source=workflow.source)


def _unusable(attempt: TaskAttempt, catalog: Catalog | None) -> str:
    """Why an attempt cannot teach a runtime ('' when it can)."""
    if attempt.state != "success":
        return f"state {attempt.state}"
    if attempt.runtime_s is None:
        return "no runtime"
    unknown_type = catalog is not None and attempt.resource_type and attempt.resource_type not in catalog.by_name
    if unknown_type and attempt.speed is None:
        return "unknown resource type"
    return ""


def _peaks(attempts: Sequence[TaskAttempt]) -> list[tuple[tuple[str, str], int]]:
    """Known peaks per task: a success's peak; an OOM kill's peak or the limit it was killed at."""
    peaks = []
    for attempt in attempts:
        if attempt.state == "success" and attempt.peak_rss_bytes:
            peaks.append(((attempt.dag_id, attempt.task_id), attempt.peak_rss_bytes))
        elif attempt.state == "oom_killed":
            limit = max(attempt.peak_rss_bytes or 0, attempt.requested_memory_bytes or 0)
            if limit:
                peaks.append(((attempt.dag_id, attempt.task_id), limit))
    return peaks


def _training_frame(
    rows: Sequence[tuple[TaskAttempt, Resource | None]], widths: Mapping[tuple[str, str, str], int]
) -> tuple[pd.DataFrame, np.ndarray]:
    """Feature rows and reference runtimes (runtime x the speed of the type it ran on, when known); ``widths``:
    each mapped task's width in each run, for rows that recorded none (:func:`~agora_optimizer.predict.features.
    run_widths`)."""
    attempts = [a for a, _ in rows]
    frame = feature_frame([shape_of_attempt(a, widths.get((a.dag_id, a.task_id, a.run_id))) for a in attempts])
    speeds = [a.speed or (r.speed if r else None) for a, r in rows]
    columns = resource_columns(
        speeds, [r.vcpus if r else None for _, r in rows], [r.memory_gib if r else None for _, r in rows]
    )
    for name in RESOURCE_NUMERIC:
        frame[name] = columns[name]
    reference = np.array([float(a.runtime_s or 0.0) * (s or 1.0) for a, s in zip(attempts, speeds, strict=True)])
    return frame, reference


def _chosen_types(catalog: Catalog, names: Sequence[str] | None) -> list[Resource]:
    if names is None:
        return list(catalog.resources)
    known = [r.name for r in catalog.resources]
    for name in names:
        if name not in catalog.by_name:
            raise UnknownResourceError(name, known)
    return [catalog.by_name[name] for name in dict.fromkeys(names)]

"""How good a predictor is on runs it did not see: the numbers the benchmark and ``agora train`` report.

- runtime: the median absolute percentage error (MdAPE) of the reference runtime, over
  the tasks whose recorded runtime is > 0 (a 0 s task has no percentage error), and over
  those of at least 1 s (sub-second runtimes are mostly timer noise);
- memory: the share of tasks whose recorded peak exceeds the predicted quantile
  (exceedance), and the median of predicted / recorded peak (over-reservation);
- runtime quantiles: the share of tasks whose recorded runtime is at most their predicted
  p50 or p90 (coverage; a calibrated p90 covers about 90 %).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.shapes import WorkflowShape
from agora_optimizer.predict.errors import PredictorError
from agora_optimizer.predict.features import shapes_of_attempts
from agora_optimizer.predict.predictor import Prediction, Predictor, TaskPrediction
from agora_optimizer.traces.records import TaskAttempt

REFERENCE_CATALOG = Catalog(
    resources=(Resource("reference", "local", vcpus=4096, memory_gib=65536, speed=1.0, price_per_hour_usd=0.0),),
    bandwidth_bytes_per_s=1e9,
    source="<reference>",
)


def runtime_scores(predicted: Sequence[float], actual: Sequence[float]) -> dict[str, Any]:
    """MdAPE over tasks with a runtime > 0, and over those of >= 1 s (None where there are none)."""
    positive = [abs(p - a) / a for p, a in zip(predicted, actual, strict=True) if a > 0]
    long = [abs(p - a) / a for p, a in zip(predicted, actual, strict=True) if a >= 1.0]
    return {
        "tasks": len(positive),
        "mdape": statistics.median(positive) if positive else None,
        "tasks_ge_1s": len(long),
        "mdape_ge_1s": statistics.median(long) if long else None,
    }


def coverage(upper: Sequence[float], actual: Sequence[float]) -> dict[str, Any]:
    """The share of tasks with a runtime > 0 whose runtime is at most its predicted quantile (None where none)."""
    pairs = [(u, a) for u, a in zip(upper, actual, strict=True) if a > 0]
    return {"tasks": len(pairs), "share": sum(1 for u, a in pairs if a <= u) / len(pairs) if pairs else None}


def memory_scores(predicted: Sequence[float], actual: Sequence[float | None]) -> dict[str, Any]:
    """Exceedance share and median over-reservation over tasks with a recorded peak."""
    pairs = [(p, a) for p, a in zip(predicted, actual, strict=True) if a]
    if not pairs:
        return {"tasks": 0, "exceedance": None, "median_over_reservation": None}
    return {
        "tasks": len(pairs),
        "exceedance": sum(1 for p, a in pairs if a > p) / len(pairs),
        "median_over_reservation": statistics.median(p / a for p, a in pairs),
    }


def predict_attempts(predictor: Predictor, attempts: Sequence[TaskAttempt]) -> list[tuple[TaskAttempt, TaskPrediction]]:
    """Each attempt with the prediction for its task, as if its run were a new workflow."""
    by_run: dict[tuple[str, str], list[TaskAttempt]] = defaultdict(list)
    for attempt in attempts:
        by_run[(attempt.dag_id, attempt.run_id)].append(attempt)
    pairs: list[tuple[TaskAttempt, TaskPrediction]] = []
    for (dag_id, run_id), rows in by_run.items():
        shapes = tuple(shapes_of_attempts(rows))
        prediction: Prediction = predictor.predict(WorkflowShape(f"{dag_id}/{run_id}", shapes, ()), REFERENCE_CATALOG)
        pairs.extend(zip(rows, prediction.tasks, strict=True))
    return pairs


def scores(predictor: Predictor, attempts: Sequence[TaskAttempt]) -> dict[str, Any]:
    """Runtime and memory scores of ``predictor`` on ``attempts`` (successful ones with a runtime)."""
    usable = [a for a in attempts if a.state == "success" and a.runtime_s is not None]
    pairs = predict_attempts(predictor, usable)
    return {
        "runtime": runtime_scores(
            [p.reference_runtime_s for _, p in pairs], [float(a.runtime_s or 0.0) * (a.speed or 1.0) for a, _ in pairs]
        ),
        "memory": memory_scores([p.memory_bytes for _, p in pairs], [a.peak_rss_bytes for a, _ in pairs]),
    }


def group_cv_metrics(
    attempts: Sequence[TaskAttempt],
    catalog: Catalog | None = None,
    folds: int = 5,
    on_fold: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Scores on held-out runs: ``folds`` folds of whole runs, each predicted by a model fit on the others.

    ``on_fold(fold, folds)`` is called before each fold's model is fit (``agora train``'s progress)."""
    runs = sorted({(a.dag_id, a.run_id) for a in attempts})
    if len(runs) < 2:
        return {"held_out_runs": None, "note": "fewer than two runs: no held-out score"}
    k = min(folds, len(runs))
    fold_of = {run: i % k for i, run in enumerate(runs)}
    predicted_runtime: list[float] = []
    actual_runtime: list[float] = []
    predicted_memory: list[float] = []
    actual_memory: list[float | None] = []
    for fold in range(k):
        if on_fold is not None:
            on_fold(fold, k)
        train = [a for a in attempts if fold_of[(a.dag_id, a.run_id)] != fold]
        test = [a for a in attempts if fold_of[(a.dag_id, a.run_id)] == fold]
        try:
            predictor = Predictor().fit(train, catalog)
        except PredictorError:
            continue
        for attempt, prediction in predict_attempts(
            predictor, [a for a in test if a.state == "success" and a.runtime_s is not None]
        ):
            predicted_runtime.append(prediction.reference_runtime_s)
            actual_runtime.append(float(attempt.runtime_s or 0.0) * (attempt.speed or 1.0))
            predicted_memory.append(prediction.memory_bytes)
            actual_memory.append(attempt.peak_rss_bytes)
    return {
        "held_out_runs": {
            "folds": k,
            "runs": len(runs),
            "runtime": runtime_scores(predicted_runtime, actual_runtime),
            "memory": memory_scores(predicted_memory, actual_memory),
        }
    }


def rounded(value: Any, digits: int = 4) -> Any:
    """``value`` with floats rounded (for reports), recursively."""
    if isinstance(value, float):
        return round(value, digits) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v, digits) for v in value]
    return value

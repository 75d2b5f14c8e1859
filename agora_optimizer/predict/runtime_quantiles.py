"""``RuntimeQuantiles``: how far a runtime model's answers stray on new runs, as a factor per category.

The runtime model gives one number per task (about the median). A plan under a deadline needs
more: a runtime the task stays under nine times in ten. :class:`RuntimeQuantiles` wraps any
regressor with ``fit``/``predict`` (the runtime model, or whatever replaces it): it fits clones of
it on folds that hold out whole runs (:func:`~agora_optimizer.predict.conformal.out_of_fold_residuals`,
as the memory margin does) and keeps the log residuals ``log(true) - log(predicted)`` per category
where a category has at least ``min_category_rows`` of them, else pooled over all rows. Each
held-out run weighs the same, however many tasks it has: a quantile is of runs, not of tasks, so one
large run that strays (blast's medium instance: 300 tasks 10x slower on the same inputs as three
small ones) sets the p90, not the p50. Only the
errors on categories the fold's model had seen count: an unseen category's error (a task that ran
once) is the cold start's, tens of times a known task's, and would swamp the pooled factors that
the known categories with few errors take. The
runtime at quantile q is the model's answer times ``exp(q-quantile of the residuals)``: at p50
about 1 (the model's own bias on new runs), at p90 the headroom that keeps nine tasks in ten.

Quantiles are written ``p50``, ``p90`` (or any number in [0.5, 1)); ``auto`` is p90 when the plan
has a deadline and p50 otherwise (:func:`resolve_quantile`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Self

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone
from sklearn.utils.validation import check_is_fitted

from agora_optimizer.predict.conformal import (
    out_of_fold_residuals,
    residual_quantile,
    run_weights,
    weighted_residual_quantile,
)
from agora_optimizer.predict.quantile_choice import (  # the choice's functions, where they were first
    AUTO,
    DEADLINE_QUANTILE,
    DEFAULT_QUANTILE,
    parse_quantile,
    quantile_label,
    quantile_reason,
    resolve_quantile,
)
from agora_optimizer.predict.runtime_model import check_frame, check_target

__all__ = [
    "AUTO",
    "DEADLINE_QUANTILE",
    "DEFAULT_QUANTILE",
    "REPORTED_QUANTILES",
    "RuntimeQuantiles",
    "parse_quantile",
    "quantile_label",
    "quantile_reason",
    "resolve_quantile",
]

REPORTED_QUANTILES = (0.5, 0.9)  # what every prediction carries: p50 and p90


class RuntimeQuantiles(BaseEstimator):
    """Multiplicative factors per category that turn a runtime model's answer into its quantiles.

    ``fit(estimator, X, y, groups)``: ``estimator`` is the (unfitted or fitted) runtime model, cloned
    per fold; ``y`` the runtimes it learns (seconds), ``groups`` one label per row (the run).
    """

    def __init__(
        self, n_splits: int = 5, min_category_rows: int = 10, runtime_floor_s: float = 0.01, random_state: int = 0
    ) -> None:
        self.n_splits = n_splits
        self.min_category_rows = min_category_rows
        self.runtime_floor_s = runtime_floor_s
        self.random_state = random_state

    def fit(self, estimator: Any, X: pd.DataFrame, y: Any, groups: Any = None) -> Self:
        """Learn the out-of-fold log residuals of ``estimator`` on ``X``, ``y``."""
        if self.n_splits < 2:
            raise ValueError(f"n_splits must be >= 2, got {self.n_splits!r}")
        if self.min_category_rows < 1:
            raise ValueError(f"min_category_rows must be >= 1, got {self.min_category_rows!r}")
        if not self.runtime_floor_s > 0:
            raise ValueError(f"runtime_floor_s must be > 0, got {self.runtime_floor_s!r}")
        X = check_frame(X, ["category"], "RuntimeQuantiles.fit")
        runtimes = check_target(y, len(X), "RuntimeQuantiles.fit")
        target = np.log(np.maximum(runtimes, self.runtime_floor_s))

        def fit_predict(train: np.ndarray, test: np.ndarray) -> np.ndarray:
            model = clone(estimator, safe=False).fit(X.iloc[train], runtimes[train])
            return np.log(np.maximum(np.asarray(model.predict(X.iloc[test]), dtype=float), self.runtime_floor_s))

        residuals = out_of_fold_residuals(
            X, target, groups, fit_predict, self.n_splits, self.random_state, "RuntimeQuantiles.fit", True
        )
        known = np.isfinite(residuals)
        categories = X["category"].astype(str).to_numpy()
        runs = np.zeros(len(X), dtype=int) if groups is None else np.unique(np.asarray(groups), return_inverse=True)[1]
        self.pooled_residuals_, self.pooled_weights_ = _by_run(residuals[known], runs[known])
        self.category_residuals_: dict[str, np.ndarray] = {}
        self.category_weights_: dict[str, np.ndarray] = {}
        for category in sorted(set(categories[known].tolist())):
            mine = known & (categories == category)
            if mine.sum() >= self.min_category_rows:
                self.category_residuals_[category], self.category_weights_[category] = _by_run(
                    residuals[mine], runs[mine]
                )
        self.n_residuals_ = int(known.sum())
        return self

    def factors(self, categories: Sequence[str], quantile: float) -> np.ndarray:
        """Each category's factor at ``quantile`` (its own residuals where it had enough, else the pooled)."""
        check_is_fitted(self, "pooled_residuals_")
        if not 0.0 < quantile < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {quantile!r}")
        pooled = self._pooled(quantile)
        cache: dict[str, float] = {}
        out = np.empty(len(categories), dtype=float)
        for i, category in enumerate(categories):
            key = str(category)
            if key not in cache:
                mine = self.category_residuals_.get(key)
                weights = getattr(self, "category_weights_", {}).get(key)
                cache[key] = pooled if mine is None else math.exp(_quantile(mine, weights, quantile))
            out[i] = cache[key]
        return out

    def summary(self) -> dict[str, Any]:
        """The pooled p50 and p90 factors and how many residuals and categories they come from."""
        check_is_fitted(self, "pooled_residuals_")
        return {
            "residuals": self.n_residuals_,
            "categories_with_own_factors": len(self.category_residuals_),
            **{f"pooled_{quantile_label(q)}": self._pooled(q) for q in REPORTED_QUANTILES},
        }

    def _pooled(self, quantile: float) -> float:
        return math.exp(_quantile(self.pooled_residuals_, getattr(self, "pooled_weights_", None), quantile))


def _by_run(residuals: np.ndarray, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The residuals sorted, with weights that give every held-out run among them the same total."""
    order = np.argsort(residuals, kind="stable")
    return residuals[order], run_weights(runs)[order]


def _quantile(residuals: np.ndarray, weights: np.ndarray | None, quantile: float) -> float:
    """The quantile of runs (a model saved before the weights: of rows)."""
    if weights is None:
        return residual_quantile(residuals, quantile)
    return weighted_residual_quantile(residuals, weights, quantile)

"""``MemoryQuantileRegressor``: a safe upper quantile (p97.5 by default) of a task's peak memory.

A point model (boosted trees on ``log(peak bytes)``, the same pipeline as the runtime
model, without resource columns: a peak is the task's, not the machine's, correcting a
baseline: with ``base="scaling"``, each category's power law of the size it reads,
:class:`~agora_optimizer.predict.scaling_model.ScalingRegressor`, so that a run reading more
than any seen gets more memory; with ``base="median"``, the category's median) plus a
conformal margin: the ``quantile`` of the out-of-fold log residuals, per category where a
category has at least ``min_category_rows`` of them, else over all rows. Folds hold out
whole groups (runs) where the category was seen in other runs, so the margin measures how
far a *new run* strays from the runs the model saw, which is the question a plan asks;
a category seen in one run only gets its within-run spread. The prediction is
``exp(point + margin)``, the margin never below ``min_margin`` (0.1: 10.5 % headroom, as
a few runs understate how far the next one strays).

The default quantile is 0.975, not 0.95: a margin read off a few dozen residuals is itself
uncertain, and a new run strays further than the runs it was measured on, so a nominal 95 %
leaves about 5 % of a new run's tasks above their reservation (5.2 % on srasearch in
``bench/run_predictor.py``), right at the target; 97.5 % held it to 3.8 % (0 % on montage)
for 1 % more memory reserved at the median.
"""

from __future__ import annotations

from typing import Any, Self

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from agora_optimizer.predict.conformal import conformal_margin, out_of_fold_residuals
from agora_optimizer.predict.features import CATEGORICAL, TASK_NUMERIC
from agora_optimizer.predict.runtime_model import (
    baseline_of,
    boosted_trees,
    check_frame,
    check_target,
    group_baseline,
    known_group,
    one_thread,
)
from agora_optimizer.predict.scaling_model import ScalingRegressor

MIN_BYTES = 1.0


class MemoryQuantileRegressor(RegressorMixin, BaseEstimator):
    """Upper ``quantile`` of peak memory in bytes, from task features."""

    # What a model saved before ``base`` existed (format agora-predictor/1) reads: the category's median.
    base = "median"
    scaling_: ScalingRegressor | None = None

    def __init__(
        self,
        base: str = "scaling",
        quantile: float = 0.975,
        min_margin: float = 0.1,
        n_splits: int = 5,
        min_category_rows: int = 10,
        min_samples_leaf: int = 3,
        max_iter: int = 100,
        learning_rate: float = 0.1,
        random_state: int = 0,
    ) -> None:
        self.base = base
        self.quantile = quantile
        self.min_margin = min_margin
        self.n_splits = n_splits
        self.min_category_rows = min_category_rows
        self.min_samples_leaf = min_samples_leaf
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.random_state = random_state

    def _model(self) -> Any:
        return boosted_trees(TASK_NUMERIC, self.min_samples_leaf, self.max_iter, self.learning_rate, self.random_state)

    def _fit_point(self, X: pd.DataFrame, target: np.ndarray) -> tuple[Any, tuple[Any, ...]]:
        """The point model: a baseline (the category's median, or its power law of size) + trees on the rest."""
        levels = group_baseline(X, target)
        scaling = None
        if self.base == "scaling":
            scaling = ScalingRegressor(runtime_floor_s=MIN_BYTES).fit(X, np.exp(target))
        base = self._baseline(levels, scaling, X)
        return self._model().fit(X, target - base), (*levels, scaling)

    @staticmethod
    def _baseline(levels: tuple[Any, ...], scaling: ScalingRegressor | None, X: pd.DataFrame) -> np.ndarray:
        """Each row's log level: its category's power law of size where one was fitted, else the medians."""
        base = baseline_of(X, *levels[:3])
        if scaling is not None:
            mine = np.array([str(c) in scaling.intercept_ for c in X["category"]], dtype=bool)
            if mine.any():
                base[mine] = scaling.predict_log(X.loc[mine])
        return base

    @classmethod
    def _predict_point(cls, model: Any, levels: tuple[Any, ...], X: pd.DataFrame) -> np.ndarray:
        correction = model.predict(X)
        correction[~known_group(X, levels[0], levels[1])] = 0.0
        scaling = levels[3] if len(levels) > 3 else None
        return np.asarray(cls._baseline(levels, scaling, X) + correction, dtype=float)

    def fit(self, X: pd.DataFrame, y: Any, groups: Any = None) -> Self:
        """Learn peaks ``y`` (bytes); ``groups`` (one label per row, e.g. the run) shapes the folds."""
        if self.base not in ("median", "scaling"):
            raise ValueError(f"base must be 'median' or 'scaling', got {self.base!r}")
        if not 0.5 <= self.quantile < 1.0:
            raise ValueError(f"quantile must be in [0.5, 1), got {self.quantile!r}")
        if not 0.0 <= self.min_margin <= 5.0:
            raise ValueError(f"min_margin must be in [0, 5] (log units), got {self.min_margin!r}")
        if self.n_splits < 2:
            raise ValueError(f"n_splits must be >= 2, got {self.n_splits!r}")
        X = check_frame(X, [*CATEGORICAL, *TASK_NUMERIC], "MemoryQuantileRegressor.fit")
        target = np.log(np.maximum(check_target(y, len(X), "MemoryQuantileRegressor.fit"), MIN_BYTES))
        with one_thread():
            residuals = self._out_of_fold_residuals(X, target, groups)
            self.pipeline_, levels = self._fit_point(X, target)
        self.category_level_, self.operator_level_, self.overall_level_, self.scaling_ = levels
        known = np.isfinite(residuals)
        self.margin_ = max(conformal_margin(residuals[known], self.quantile), self.min_margin)
        self.category_margins_: dict[str, float] = {}
        categories = X["category"].astype(str).to_numpy()
        for category in sorted(set(categories)):
            mine = residuals[known & (categories == category)]
            if len(mine) >= self.min_category_rows:
                self.category_margins_[category] = max(conformal_margin(mine, self.quantile), self.min_margin)
        self.n_rows_ = len(X)
        self.n_residuals_ = int(known.sum())
        return self

    def _out_of_fold_residuals(self, X: pd.DataFrame, target: np.ndarray, groups: Any) -> np.ndarray:
        """One residual per row from a point model that did not see the row's run (or the row)."""

        def fit_predict(train: np.ndarray, test: np.ndarray) -> np.ndarray:
            model, levels = self._fit_point(X.iloc[train], target[train])
            return self._predict_point(model, levels, X.iloc[test])

        return out_of_fold_residuals(
            X, target, groups, fit_predict, self.n_splits, self.random_state, "MemoryQuantileRegressor.fit"
        )

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Upper-quantile peaks in bytes."""
        check_is_fitted(self, "pipeline_")
        X = check_frame(X, [*CATEGORICAL, *TASK_NUMERIC], "MemoryQuantileRegressor.predict")
        margins = np.array([self.category_margins_.get(str(c), self.margin_) for c in X["category"]], dtype=float)
        with one_thread():
            levels = (self.category_level_, self.operator_level_, self.overall_level_, self.scaling_)
            point = self._predict_point(self.pipeline_, levels, X)
            return np.asarray(np.exp(point + margins), dtype=float)

"""``QueueWaitRegressor``: the queue wait of a SLURM job from the queue it met and its own request.

A scikit-learn estimator (parameters only in ``__init__``, learned attributes end in ``_``): a
``Pipeline`` of a ``ColumnTransformer`` (one-hot partition, the numbers as they are) and gradient-
boosted trees, fitted on ``log1p(wait_s)`` so that a 10 s error on a 5 s wait weighs like a 10 min
error on a 5 min wait. With fewer than ``min_samples`` waits it fits no trees and predicts each
partition's median wait, and 0 s (with a :class:`QueueWaitFallbackWarning`) for a partition it has
never seen. :meth:`QueueWaitRegressor.describe` says which of the two it is and how much data it saw.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder
from sklearn.utils.validation import check_is_fitted

from agora_optimizer.queue_wait.errors import QueueWaitModelError
from agora_optimizer.queue_wait.features import CATEGORICAL_COLUMNS, FEATURE_COLUMNS, NUMERIC_COLUMNS, QueueFeatures
from agora_optimizer.queue_wait.recorder import QueueWaitObservation

SMALL_SAMPLE = 500  # below this, describe() warns that the errors are large


class QueueWaitFallbackWarning(UserWarning):
    """A prediction that is not the model's: a partition it has no data about."""


class QueueWaitRegressor(RegressorMixin, BaseEstimator):
    """Predicts a job's queue wait in seconds from :data:`FEATURE_COLUMNS` (see ``features.py``)."""

    def __init__(
        self,
        min_samples: int = 30,
        n_estimators: int = 200,
        learning_rate: float = 0.05,
        max_depth: int = 3,
        min_samples_leaf: int = 5,
        random_state: int | None = 0,
    ) -> None:
        self.min_samples = min_samples
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.max_depth = max_depth
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state

    def fit(self, X: pd.DataFrame, y: Any) -> QueueWaitRegressor:
        frame = _checked_frame(X)
        waits = np.asarray(y, dtype=float).reshape(-1)
        if len(waits) != len(frame):
            raise QueueWaitModelError(f"{len(frame)} feature rows but {len(waits)} waits")
        if not np.all(np.isfinite(waits)) or np.any(waits < 0):
            raise QueueWaitModelError("waits must be finite and >= 0 seconds")
        if self.min_samples < 1:
            raise QueueWaitModelError(f"min_samples must be >= 1, got {self.min_samples}")
        partitions = frame["partition"].astype(str)
        self.n_samples_ = len(waits)
        self.samples_per_partition_ = {str(p): int(n) for p, n in partitions.value_counts().sort_index().items()}
        self.partition_median_s_ = {
            str(p): float(np.median(waits[(partitions == p).to_numpy()])) for p in self.samples_per_partition_
        }
        self.median_s_ = float(np.median(waits)) if len(waits) else None
        self.pipeline_: Pipeline | None = None
        if self.n_samples_ >= self.min_samples:
            self.pipeline_ = self._pipeline().fit(frame, np.log1p(waits))
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        check_is_fitted(self, "n_samples_")
        frame = _checked_frame(X)
        unseen = sorted(set(frame["partition"].astype(str)) - set(self.samples_per_partition_))
        if self.pipeline_ is not None:
            if unseen:
                warnings.warn(
                    f"queue-wait model: no recorded wait for partition(s) {', '.join(unseen)}; "
                    "predicting from the queue features alone",
                    QueueWaitFallbackWarning,
                    stacklevel=2,
                )
            return np.clip(np.expm1(self.pipeline_.predict(frame)), 0.0, None)
        if unseen:
            warnings.warn(
                f"queue-wait model: too little data ({self.n_samples_} waits) and none for partition(s) "
                f"{', '.join(unseen)}; predicting 0 s there",
                QueueWaitFallbackWarning,
                stacklevel=2,
            )
        return np.array([self.partition_median_s_.get(str(p), 0.0) for p in frame["partition"]], dtype=float)

    def describe(self) -> str:
        """What the model is and how much data it saw, in one paragraph."""
        if not hasattr(self, "n_samples_"):
            return "queue-wait model: not fitted"
        seen = ", ".join(f"{p}: {n}" for p, n in self.samples_per_partition_.items()) or "none"
        medians = ", ".join(f"{p}: {m:.1f} s" for p, m in self.partition_median_s_.items()) or "none"
        if self.pipeline_ is None:
            return (
                f"queue-wait fallback, not a model: {self.n_samples_} recorded waits (per partition: {seen}), "
                f"fewer than min_samples={self.min_samples}; it predicts each partition's median wait "
                f"({medians}) whatever the queue, and 0 s (with a warning) for a partition it never saw."
            )
        caution = (
            f" That is a small sample (under {SMALL_SAMPLE}): expect large errors, above all on queues "
            "unlike the recorded ones."
            if self.n_samples_ < SMALL_SAMPLE
            else ""
        )
        return (
            f"queue-wait model: gradient-boosted trees on log1p(wait) from {self.n_samples_} recorded waits "
            f"(per partition: {seen}; median wait {medians}).{caution}"
        )

    def _pipeline(self) -> Pipeline:
        columns = ColumnTransformer(
            [
                ("partition", OneHotEncoder(handle_unknown="ignore"), list(CATEGORICAL_COLUMNS)),
                ("numbers", "passthrough", list(NUMERIC_COLUMNS)),
            ]
        )
        trees = GradientBoostingRegressor(  # single-threaded: no OpenMP spinning on a busy machine
            n_estimators=self.n_estimators,
            learning_rate=self.learning_rate,
            max_depth=self.max_depth,
            min_samples_leaf=self.min_samples_leaf,
            random_state=self.random_state,
        )
        return Pipeline([("features", columns), ("trees", trees)])


def features_frame(features: Sequence[QueueFeatures]) -> pd.DataFrame:
    """Feature rows as the frame the model takes (columns in :data:`FEATURE_COLUMNS` order)."""
    return pd.DataFrame([f.as_row() for f in features], columns=list(FEATURE_COLUMNS))


def training_data(observations: Sequence[QueueWaitObservation]) -> tuple[pd.DataFrame, np.ndarray]:
    """``(X, y)`` from recorded waits: features and wait in seconds."""
    return features_frame([o.features for o in observations]), np.array([o.wait_s for o in observations], dtype=float)


def _checked_frame(X: Any) -> pd.DataFrame:
    if not isinstance(X, pd.DataFrame):
        raise QueueWaitModelError(f"features must be a pandas DataFrame with columns {', '.join(FEATURE_COLUMNS)}")
    missing = [c for c in FEATURE_COLUMNS if c not in X.columns]
    if missing:
        raise QueueWaitModelError(f"features lack column(s) {', '.join(missing)}")
    frame = X.loc[:, list(FEATURE_COLUMNS)].copy()
    frame["partition"] = frame["partition"].astype(str)
    return frame

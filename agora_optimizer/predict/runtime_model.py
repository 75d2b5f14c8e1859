"""``RuntimeRegressor``: a task's runtime on a reference core, learned from past attempts.

It learns ``log(reference runtime)`` (an attempt's runtime times the speed of the type it
ran on, or its runtime when the speed is unknown) as a baseline, the median of the task's
category (else of its operator, else of all rows), corrected by gradient-boosted trees over
the columns of :mod:`agora_optimizer.predict.features`, in one ``Pipeline`` whose
``ColumnTransformer`` encodes the categorical columns. The baseline keeps a run whose sizes
lie outside the training range near its category's level: trees alone would route it to
whatever leaf its numbers fall in, possibly another category's. The runtime on type k is the
prediction for k's resource columns divided by ``speed_k``. The resource columns are used
only when the training rows ran on several types (``resource_features="auto"``); with one
type (or none known) they carry no information, and the runtime on k is exactly the
reference runtime / ``speed_k``, as the spec's execution model says.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Self

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OrdinalEncoder
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from agora_optimizer.predict.features import CATEGORICAL, RESOURCE_NUMERIC, TASK_NUMERIC

MAX_CATEGORIES = 250  # the trees take at most 255 bins per feature; rarer categories are pooled


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the trees on one OpenMP thread.

    Our training sets are small (thousands of rows), where threads cost more than they
    give; on a loaded machine, OpenMP's spinning threads made one fit 60 times slower.
    """
    with threadpool_limits(limits=1, user_api="openmp"):
        yield


def boosted_trees(
    numeric: Sequence[str], min_samples_leaf: int, max_iter: int, learning_rate: float, random_state: int
) -> Pipeline:
    """Ordinal-encoded categorical columns (unknown -> missing) and numbers, into boosted trees."""
    encode = OrdinalEncoder(
        handle_unknown="use_encoded_value",
        unknown_value=np.nan,
        encoded_missing_value=np.nan,
        max_categories=MAX_CATEGORIES,
    )
    columns = ColumnTransformer(
        [("categories", encode, list(CATEGORICAL)), ("numbers", "passthrough", list(numeric))],
        remainder="drop",
    )
    trees = HistGradientBoostingRegressor(
        categorical_features=list(range(len(CATEGORICAL))),
        min_samples_leaf=min_samples_leaf,
        max_iter=max_iter,
        learning_rate=learning_rate,
        early_stopping=False,
        random_state=random_state,
    )
    return Pipeline([("columns", columns), ("trees", trees)])


def group_baseline(X: pd.DataFrame, target: np.ndarray) -> tuple[dict[str, float], dict[str, float], float]:
    """Median target per category, per operator, and overall: the level the trees correct."""
    frame = pd.DataFrame({"category": X["category"].astype(str), "operator": X["operator"].astype(str), "y": target})
    by_category = {str(k): float(v) for k, v in frame.groupby("category")["y"].median().items()}
    named = frame[frame["operator"] != ""]
    by_operator = {str(k): float(v) for k, v in named.groupby("operator")["y"].median().items()}
    return by_category, by_operator, float(np.median(target))


def baseline_of(
    X: pd.DataFrame, by_category: dict[str, float], by_operator: dict[str, float], overall: float
) -> np.ndarray:
    """Each row's baseline: its category's median, else its operator's, else the overall median."""
    return np.array(
        [
            by_category.get(str(c), by_operator.get(str(o), overall))
            for c, o in zip(X["category"], X["operator"], strict=True)
        ],
        dtype=float,
    )


def known_group(X: pd.DataFrame, by_category: dict[str, float], by_operator: dict[str, float]) -> np.ndarray:
    """Rows whose category (or operator) was learned: the trees' corrections apply to them only.

    The trees learn deviations from a category's level; for a category never seen they
    mean nothing, so such a row gets the overall median alone (the chain's ``default``).
    """
    return np.array(
        [str(c) in by_category or str(o) in by_operator for c, o in zip(X["category"], X["operator"], strict=True)],
        dtype=bool,
    )


def check_frame(X: Any, columns: Sequence[str], who: str) -> pd.DataFrame:
    """``X`` as a DataFrame that has ``columns``, or a ``ValueError`` naming the missing ones."""
    if not isinstance(X, pd.DataFrame):
        raise TypeError(f"{who} expects a pandas DataFrame of feature columns, got {type(X).__name__}")
    missing = [c for c in columns if c not in X.columns]
    if missing:
        raise ValueError(f"{who}: feature columns missing: {', '.join(missing)}")
    return X


def check_target(y: Any, n_rows: int, who: str) -> np.ndarray:
    values = np.asarray(y, dtype=float)
    if values.ndim != 1 or len(values) != n_rows:
        raise ValueError(f"{who}: expected {n_rows} target values, got shape {values.shape}")
    if n_rows == 0:
        raise ValueError(f"{who}: no training rows")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError(f"{who}: targets must be finite and >= 0")
    return values


class RuntimeRegressor(RegressorMixin, BaseEstimator):
    """Reference runtime (seconds on a core of speed 1.0) from task and resource features.

    Parameters are stored as given; ``fit`` checks them. ``runtime_floor_s`` is the
    smallest runtime learned (recorded zeros become it, so that logs stay finite).
    """

    def __init__(
        self,
        min_samples_leaf: int = 3,
        max_iter: int = 100,
        learning_rate: float = 0.1,
        runtime_floor_s: float = 0.01,
        resource_features: str = "auto",
        random_state: int = 0,
    ) -> None:
        self.min_samples_leaf = min_samples_leaf
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.runtime_floor_s = runtime_floor_s
        self.resource_features = resource_features
        self.random_state = random_state

    def fit(self, X: pd.DataFrame, y: Any, groups: Any = None) -> Self:
        """Learn from rows of :func:`~agora_optimizer.predict.features.feature_frame` (+ resource columns).

        ``groups`` (the rows' runs) is not used: it is accepted as the other runtime models take it.
        """
        if self.resource_features not in ("auto", "always", "never"):
            raise ValueError(f"resource_features must be 'auto', 'always' or 'never', got {self.resource_features!r}")
        if not self.runtime_floor_s > 0:
            raise ValueError(f"runtime_floor_s must be > 0, got {self.runtime_floor_s!r}")
        X = check_frame(X, [*CATEGORICAL, *TASK_NUMERIC], "RuntimeRegressor.fit")
        target = check_target(y, len(X), "RuntimeRegressor.fit")
        self.uses_resources_ = self._uses_resources(X)
        self.numeric_ = [*TASK_NUMERIC, *(RESOURCE_NUMERIC if self.uses_resources_ else ())]
        X = check_frame(X, [*CATEGORICAL, *self.numeric_], "RuntimeRegressor.fit")
        self.pipeline_ = boosted_trees(
            self.numeric_, self.min_samples_leaf, self.max_iter, self.learning_rate, self.random_state
        )
        log_target = np.log(np.maximum(target, self.runtime_floor_s))
        self.category_level_, self.operator_level_, self.overall_level_ = group_baseline(X, log_target)
        with one_thread():
            self.pipeline_.fit(X, log_target - self._baseline(X))
        self.categories_ = sorted(set(X["category"].astype(str)))
        self.n_rows_ = len(X)
        return self

    def _uses_resources(self, X: pd.DataFrame) -> bool:
        if self.resource_features != "auto":
            return self.resource_features == "always"
        if not all(c in X.columns for c in RESOURCE_NUMERIC):
            return False
        known = X[list(RESOURCE_NUMERIC)].dropna()
        return len(known.drop_duplicates()) >= 2

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Reference runtimes in seconds (divide by a type's speed for its runtime)."""
        check_is_fitted(self, "pipeline_")
        X = check_frame(X, [*CATEGORICAL, *self.numeric_], "RuntimeRegressor.predict")
        with one_thread():
            correction = self.pipeline_.predict(X)
        correction[~known_group(X, self.category_level_, self.operator_level_)] = 0.0
        return np.asarray(np.exp(self._baseline(X) + correction), dtype=float)

    def _baseline(self, X: pd.DataFrame) -> np.ndarray:
        return baseline_of(X, self.category_level_, self.operator_level_, self.overall_level_)

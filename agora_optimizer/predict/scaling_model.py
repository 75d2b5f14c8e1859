"""``ScalingRegressor``: a task's runtime as a power of what it reads, per category.

Runtime grows with the size of what a task reads, and a new run often reads more than any
run seen: boosted trees answer such a run from their last leaf (flat), a power law goes on
growing. Per category ``c``, in log space (``x``: the log of a size, ``y``: log runtime)::

    y = a_c + b_c * (x - mean_c(x))

- the size column is the category's first of :data:`SIZE_COLUMNS` (input bytes, output
  bytes, input file count) whose values vary within the category (standard deviation above
  ``min_spread``), else the first that is known (non-zero) at all, else none (the category's
  level alone);
- ``b_c`` is the least-squares exponent shrunk toward the pooled exponent ``b_pool`` (one
  power law fitted over every row that has the column, all categories together): it
  minimises ``sum((y - a - b x)^2) + k * (b - b_pool)^2``, that is
  ``b_c = (Sxy + k b_pool) / (Sxx + k)``, with ``k`` the category's noise over the prior's
  spread (empirical Bayes, see :class:`ScalingRegressor`): a category whose sizes hardly vary
  (two rows, or the same file each run) gets the pooled exponent, a clean power law over a
  wide spread its own. Exponents are clipped to ``[min_exponent, max_exponent]``. Not a prior made of the
  categories' own slopes (their shared within-category slope, or their median): tried on 2026-12-06 with
  ``bench/run_predictor.py --no-plans``, bwa's held-out MdAPE went from 37 % to 1,984 % (bwa-large, predicted
  from the two small instances, ran 20x shorter than their slopes said) and the median over families from 52 %
  to 73 %;
- ``a_c`` is the median of ``y - b_c (x - mean_c(x))`` (robust to a few outliers).

A row whose size column is missing (0) is predicted at its category's centre; a category
never seen gets the median of all rows (the fallback chain's ``default``). Resource columns
are not used: the runtime on type k is the reference runtime / ``speed_k``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Self

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from agora_optimizer.predict.features import CATEGORICAL
from agora_optimizer.predict.runtime_model import check_frame, check_target

SIZE_COLUMNS = ("log_input_bytes", "log_output_bytes", "log_input_files")


def log_size(column: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``log(size)`` from a feature column of ``log1p(size)`` (exact for small counts), and where it is known.

    A size of 0 is unknown (a source that does not say), not a size: its log is left at 0 and masked.
    """
    known = column > 0
    return np.where(known, np.log(np.expm1(np.where(known, column, 1.0))), 0.0), known


def pooled_exponent(column: np.ndarray, y: np.ndarray) -> float | None:
    """The least-squares slope of ``y`` on the log size over rows that know it (None when it is constant)."""
    x, known = log_size(column)
    if known.sum() < 2:
        return None
    xs, ys = x[known], y[known]
    sxx = float(np.sum((xs - xs.mean()) ** 2))
    if sxx <= 1e-12:
        return None
    return float(np.sum((xs - xs.mean()) * (ys - ys.mean())) / sxx)


@dataclass(frozen=True)
class _Sums:
    """A category's least-squares sums over the rows that know its size column."""

    column: str
    center: float  # mean log size
    sxx: float
    sxy: float
    rss: float  # residual sum of squares of its own fit (its level alone when sizes do not vary)
    dof: int  # degrees of freedom left by that fit
    x: np.ndarray
    y: np.ndarray


class ScalingRegressor(RegressorMixin, BaseEstimator):
    """Reference runtime (seconds) as ``exp(a_c) * size^b_c`` per category, shrunk toward a pooled exponent.

    Shrinkage is empirical Bayes: a category's exponent is the posterior mean under a prior
    centred on the pooled exponent with standard deviation ``exponent_spread``, given its rows'
    noise ``sigma_c`` (log units), that is ``k = sigma_c^2 / exponent_spread^2`` above. ``sigma_c^2``
    is the category's residual variance shrunk toward the variance pooled over all categories
    (``prior_rows`` pseudo-rows of it), never below ``noise_floor^2``: two rows give no estimate of
    their own noise, so they get the others'; a clean power law over twenty rows gets its own
    exponent. ``runtime_floor_s`` is the smallest runtime learned (recorded zeros become it).
    """

    def __init__(
        self,
        exponent_spread: float = 0.5,
        noise_floor: float = 0.1,
        prior_rows: float = 2.0,
        min_exponent: float = 0.0,
        max_exponent: float = 2.0,
        min_spread: float = 0.05,
        runtime_floor_s: float = 0.01,
    ) -> None:
        self.exponent_spread = exponent_spread
        self.noise_floor = noise_floor
        self.prior_rows = prior_rows
        self.min_exponent = min_exponent
        self.max_exponent = max_exponent
        self.min_spread = min_spread
        self.runtime_floor_s = runtime_floor_s

    def _check_params(self) -> None:
        for name in ("exponent_spread", "noise_floor"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not self.prior_rows >= 0:
            raise ValueError(f"prior_rows must be >= 0, got {self.prior_rows!r}")
        if not self.min_exponent <= self.max_exponent:
            raise ValueError(f"min_exponent ({self.min_exponent!r}) must be <= max_exponent ({self.max_exponent!r})")
        if not self.min_spread >= 0:
            raise ValueError(f"min_spread must be >= 0, got {self.min_spread!r}")
        if not self.runtime_floor_s > 0:
            raise ValueError(f"runtime_floor_s must be > 0, got {self.runtime_floor_s!r}")

    def fit(self, X: pd.DataFrame, y: Any, groups: Any = None) -> Self:
        """Learn from rows of :func:`~agora_optimizer.predict.features.feature_frame`; ``groups`` is not used."""
        self._check_params()
        X = check_frame(X, [*CATEGORICAL, *SIZE_COLUMNS], "ScalingRegressor.fit")
        target = np.log(np.maximum(check_target(y, len(X), "ScalingRegressor.fit"), self.runtime_floor_s))
        self.pooled_exponent_: dict[str, float] = {}
        for column in SIZE_COLUMNS:
            slope = pooled_exponent(X[column].to_numpy(dtype=float), target)
            if slope is not None:
                self.pooled_exponent_[column] = self._clipped(slope)
        categories = X["category"].astype(str).to_numpy()
        sums: dict[str, _Sums | None] = {}
        for category in sorted(set(categories.tolist())):
            mine = categories == category
            sums[category] = self._sums(X.loc[mine], target[mine])
        rss = sum(s.rss for s in sums.values() if s is not None)
        dof = sum(s.dof for s in sums.values() if s is not None)
        self.noise_variance_ = max(rss / dof if dof > 0 else 0.0, self.noise_floor**2)
        self.size_column_: dict[str, str] = {}
        self.center_: dict[str, float] = {}
        self.intercept_: dict[str, float] = {}
        self.exponent_: dict[str, float] = {}
        self.own_weight_: dict[str, float] = {}  # how much of the exponent is the category's own (0..1)
        for category, category_sums in sums.items():
            if category_sums is None:
                self.size_column_[category], self.center_[category], self.exponent_[category] = "", 0.0, 0.0
                self.intercept_[category] = float(np.median(target[categories == category]))
                self.own_weight_[category] = 0.0
                continue
            self._fit_category(category, category_sums)
        self.overall_level_ = float(np.median(target))
        self.n_rows_ = len(X)
        return self

    def _sums(self, X: pd.DataFrame, target: np.ndarray) -> _Sums | None:
        column = self._size_column(X)
        if column is None:
            return None
        x, known = log_size(X[column].to_numpy(dtype=float))
        xs, ys = x[known], target[known]
        center = float(xs.mean())
        sxx = float(np.sum((xs - center) ** 2))
        sxy = float(np.sum((xs - center) * (ys - ys.mean())))
        syy = float(np.sum((ys - ys.mean()) ** 2))
        varies = sxx > 1e-12
        rss = max(syy - sxy * sxy / sxx, 0.0) if varies else syy
        return _Sums(column, center, sxx, sxy, rss, max(len(xs) - (2 if varies else 1), 0), xs, ys)

    def _fit_category(self, category: str, sums: _Sums) -> None:
        noise = (sums.rss + self.prior_rows * self.noise_variance_) / (sums.dof + self.prior_rows or 1.0)
        shrinkage = max(noise, self.noise_floor**2) / self.exponent_spread**2
        pooled = self.pooled_exponent_.get(sums.column, 0.0)
        exponent = self._clipped((sums.sxy + shrinkage * pooled) / (sums.sxx + shrinkage))
        self.size_column_[category] = sums.column
        self.center_[category] = sums.center
        self.exponent_[category] = exponent
        self.own_weight_[category] = sums.sxx / (sums.sxx + shrinkage)
        self.intercept_[category] = float(np.median(sums.y - exponent * (sums.x - sums.center)))

    def _size_column(self, X: pd.DataFrame) -> str | None:
        """The first size column that varies within the category, else the first known at all."""
        present = [c for c in SIZE_COLUMNS if (X[c] > 0).any()]
        for column in present:
            x, known = log_size(X[column].to_numpy(dtype=float))
            if float(np.std(x[known])) > self.min_spread:
                return column
        return present[0] if present else None

    def _clipped(self, exponent: float) -> float:
        return float(min(max(exponent, self.min_exponent), self.max_exponent))

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Reference runtimes in seconds (divide by a type's speed for its runtime)."""
        check_is_fitted(self, "intercept_")
        return np.asarray(np.exp(self.predict_log(X)), dtype=float)

    def predict_log(self, X: pd.DataFrame) -> np.ndarray:
        """Log reference runtimes."""
        check_is_fitted(self, "intercept_")
        X = check_frame(X, [*CATEGORICAL, *SIZE_COLUMNS], "ScalingRegressor.predict")
        out = np.full(len(X), self.overall_level_, dtype=float)
        sizes = {column: log_size(X[column].to_numpy(dtype=float)) for column in SIZE_COLUMNS}
        categories = X["category"].astype(str).to_numpy()
        for category in set(categories.tolist()) & set(self.intercept_):
            mine = categories == category
            column = self.size_column_[category]
            if not column:
                out[mine] = self.intercept_[category]
                continue
            x, known = sizes[column][0][mine], sizes[column][1][mine]
            offset = np.where(known, x - self.center_[category], 0.0)
            out[mine] = self.intercept_[category] + self.exponent_[category] * offset
        return out

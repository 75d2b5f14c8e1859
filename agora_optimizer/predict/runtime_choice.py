"""``RuntimeChoiceRegressor``: per category, the runtime model that did better on rows it had not seen.

Two models answer for a task's reference runtime: boosted trees over every feature
(:class:`~agora_optimizer.predict.runtime_model.RuntimeRegressor`), which follow whatever the
features say within the range they saw, and a per-category power law of the size read
(:class:`~agora_optimizer.predict.scaling_model.ScalingRegressor`), which goes on growing
beyond it. Which is right depends on the category, so, as Sizey picks among its models, ``fit``
scores both out of fold and each category keeps the one with the lower median absolute log
error on its held-out rows:

- folds hold out whole groups (runs) when ``groups`` is given, so a category's score is its
  error on a run not seen, the question a plan asks (rows of the same run score how well a
  model interpolates within it: on 1000genome, trained on one instance, row folds chose the
  trees for 4 of 5 categories, and the held-out instance's MdAPE was 24 % against 15 % for the
  power law alone); without ``groups``, rows, ``n_splits`` folds;
- a category with fewer than ``min_category_rows`` held-out rows (seen in one run only, or a
  handful of rows), or a tie, keeps the power law: shrunk toward the pooled exponent, it is
  the category's level where sizes say nothing, and grows with them where they do;
- a category never seen is answered by the trees (their operator and overall fallbacks).

``choice_`` says which model each category uses, ``errors_`` the held-out errors behind it
(``agora predict`` and the model's metadata show them).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal, Self

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.model_selection import GroupKFold, KFold
from sklearn.utils.validation import check_is_fitted

from agora_optimizer.predict.features import CATEGORICAL, TASK_NUMERIC
from agora_optimizer.predict.runtime_model import RuntimeRegressor, check_frame, check_target
from agora_optimizer.predict.scaling_model import ScalingRegressor

ModelName = Literal["trees", "scaling"]
MODEL_NAMES: tuple[ModelName, ...] = ("trees", "scaling")


class RuntimeChoiceRegressor(RegressorMixin, BaseEstimator):
    """Reference runtime (seconds on a core of speed 1.0): per category, trees or a power law of size.

    ``trees`` and ``scaling`` are the unfitted models to choose between (defaults when None);
    ``runtime_floor_s`` is given to both.
    """

    def __init__(
        self,
        trees: RuntimeRegressor | None = None,
        scaling: ScalingRegressor | None = None,
        n_splits: int = 5,
        min_category_rows: int = 3,
        runtime_floor_s: float = 0.01,
        random_state: int = 0,
    ) -> None:
        self.trees = trees
        self.scaling = scaling
        self.n_splits = n_splits
        self.min_category_rows = min_category_rows
        self.runtime_floor_s = runtime_floor_s
        self.random_state = random_state

    def _models(self) -> dict[ModelName, Any]:
        trees = clone(self.trees) if self.trees is not None else RuntimeRegressor(random_state=self.random_state)
        scaling = clone(self.scaling) if self.scaling is not None else ScalingRegressor()
        return {
            "trees": trees.set_params(runtime_floor_s=self.runtime_floor_s),
            "scaling": scaling.set_params(runtime_floor_s=self.runtime_floor_s),
        }

    def fit(self, X: pd.DataFrame, y: Any, groups: Any = None) -> Self:
        """Learn both models from all rows, and each category's choice from held-out rows."""
        if self.n_splits < 2:
            raise ValueError(f"n_splits must be >= 2, got {self.n_splits!r}")
        if self.min_category_rows < 1:
            raise ValueError(f"min_category_rows must be >= 1, got {self.min_category_rows!r}")
        X = check_frame(X, [*CATEGORICAL, *TASK_NUMERIC], "RuntimeChoiceRegressor.fit")
        target = check_target(y, len(X), "RuntimeChoiceRegressor.fit")
        labels = None if groups is None else np.asarray(groups)
        if labels is not None and len(labels) != len(X):
            raise ValueError(f"RuntimeChoiceRegressor.fit: {len(labels)} groups for {len(X)} rows")
        errors = self._held_out_errors(X, target, labels)
        categories = X["category"].astype(str).to_numpy()
        self.choice_: dict[str, ModelName] = {}
        self.errors_: dict[str, dict[str, float]] = {}
        for category in sorted(set(categories.tolist())):
            mine = categories == category
            scored = {name: errors[name][mine] for name in MODEL_NAMES}
            known = np.isfinite(scored["trees"]) & np.isfinite(scored["scaling"])
            if known.sum() < self.min_category_rows:
                self.choice_[category] = "scaling"
                continue
            medians: dict[str, float] = {name: float(np.median(scored[name][known])) for name in MODEL_NAMES}
            self.errors_[category] = medians
            self.choice_[category] = "trees" if medians["trees"] < medians["scaling"] else "scaling"
        models = self._models()
        self.trees_ = models["trees"].fit(X, target)
        self.scaling_ = models["scaling"].fit(X, target)
        self.uses_resources_ = bool(self.trees_.uses_resources_)
        self.n_rows_ = len(X)
        return self

    def _held_out_errors(self, X: pd.DataFrame, target: np.ndarray, labels: np.ndarray | None) -> dict[str, np.ndarray]:
        """Per model, each row's absolute log error from a fit that did not see it (NaN: not scored).

        A row is scored only when its category was in the fold's training rows: the choice is
        between two ways to follow a known category, not a guess at an unknown one.
        """
        log_target = np.log(np.maximum(target, self.runtime_floor_s))
        errors: dict[str, np.ndarray] = {name: np.full(len(X), np.nan) for name in MODEL_NAMES}
        categories = X["category"].astype(str).to_numpy()
        if labels is not None:
            runs = len(set(labels.tolist()))
            if runs < 2:
                return errors
            splits = GroupKFold(n_splits=min(self.n_splits, runs)).split(X, target, labels)
        elif len(X) >= 2:
            splits = KFold(n_splits=min(self.n_splits, len(X)), shuffle=True, random_state=self.random_state).split(X)
        else:
            return errors
        for train, test in splits:
            test = test[np.isin(categories[test], categories[train])]
            if not len(test):
                continue
            for name, model in self._models().items():
                model.fit(X.iloc[train], target[train])
                predicted = np.log(model.predict(X.iloc[test]))
                errors[name][test] = np.abs(predicted - log_target[test])
        return errors

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Reference runtimes in seconds: each row from its category's chosen model (trees when unknown)."""
        check_is_fitted(self, "choice_")
        X = check_frame(X, [*CATEGORICAL, *self.trees_.numeric_], "RuntimeChoiceRegressor.predict")
        out = self.trees_.predict(X)
        scaled = np.array([self.choice_.get(str(c)) == "scaling" for c in X["category"]], dtype=bool)
        if scaled.any():
            out[scaled] = self.scaling_.predict(X.loc[scaled])
        return out

    def chosen(self, category: str) -> ModelName:
        """The model that answers for ``category`` (the trees for a category never seen)."""
        check_is_fitted(self, "choice_")
        return self.choice_.get(category, "trees")

    def summary(self) -> dict[str, int]:
        """How many categories each model answers for."""
        check_is_fitted(self, "choice_")
        return dict(Counter(self.choice_.values()))

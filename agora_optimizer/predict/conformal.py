"""Out-of-fold residuals and their quantiles: the margins the memory model and the runtime quantiles add.

A margin read off the residuals of a model on the rows it was fitted to is too small: the
model has seen those rows. :func:`out_of_fold_residuals` gives each row the residual of a model
that did not see it, holding out whole groups (runs) where the row's category was seen in other
runs, so the spread is how far a *new run* strays from the runs the model saw;
:func:`residual_quantile` reads a quantile off them with split-conformal's rank rule, and
:func:`conformal_margin` is its upper margin, never below the point estimate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from sklearn.model_selection import GroupKFold, KFold

# Fit on the rows of the first index array, predict the rows of the second: the targets' space (e.g. logs).
FitPredict = Callable[[np.ndarray, np.ndarray], np.ndarray]


def residual_quantile(residuals: np.ndarray, quantile: float) -> float:
    """The ceil((n+1)q)-th smallest residual (the largest if beyond); 0.0 for no residuals."""
    if len(residuals) == 0:
        return 0.0
    ordered = np.sort(residuals)
    rank = min(max(math.ceil((len(ordered) + 1) * quantile), 1), len(ordered))
    return float(ordered[rank - 1])


def weighted_residual_quantile(residuals: np.ndarray, weights: np.ndarray, quantile: float) -> float:
    """:func:`residual_quantile` where row i counts ``weights[i]`` (e.g. 1 / its run's rows: each run once).

    The rank rule on the total weight W: the smallest residual whose cumulative weight reaches
    (W + 1) q (the largest if none does); with unit weights it is :func:`residual_quantile`.
    """
    if len(residuals) == 0:
        return 0.0
    if len(weights) != len(residuals):
        raise ValueError(f"{len(weights)} weights for {len(residuals)} residuals")
    order = np.argsort(residuals, kind="stable")
    ordered, cumulative = residuals[order], np.cumsum(weights[order])
    rank = int(np.searchsorted(cumulative, (cumulative[-1] + 1.0) * quantile - 1e-9))
    return float(ordered[min(max(rank, 0), len(ordered) - 1)])


def run_weights(groups: np.ndarray) -> np.ndarray:
    """Each group (run) the same total weight, however many rows it has; the weights sum to the rows.

    Runs of equal size weigh each row 1 (the plain rank rule); a run of 300 rows beside three of 40
    weighs as much as each of them, not 2.5 times all three together.
    """
    _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    return len(groups) / (len(counts) * counts[inverse])


def conformal_margin(residuals: np.ndarray, quantile: float) -> float:
    """The split-conformal upper margin: :func:`residual_quantile`, never below 0 (the point estimate)."""
    return max(residual_quantile(residuals, quantile), 0.0)


def out_of_fold_residuals(
    X: pd.DataFrame,
    target: np.ndarray,
    groups: Any,
    fit_predict: FitPredict,
    n_splits: int,
    random_state: int,
    who: str,
    known_categories_only: bool = False,
) -> np.ndarray:
    """One residual (``target`` minus prediction) per row, from a model that did not see the row.

    Where ``groups`` (runs) are given, a row's residual comes from a model that did not see its
    run, provided that model saw the row's category: that is the error on a new run of a known
    task (an unknown category is the fallback chain's business). Other rows (a category seen in
    one run only, or no groups) get the residual of three plain row folds: the spread within a
    run. A single row gets none (NaN); with ``known_categories_only``, nor does a row whose
    category the row fold's model did not see (its error is an unknown category's, which says
    nothing of how far a known one strays).
    """
    labels = None if groups is None else np.asarray(groups)
    if labels is not None and len(labels) != len(X):
        raise ValueError(f"{who}: {len(labels)} groups for {len(X)} rows")
    residuals = np.full(len(X), np.nan)
    categories = X["category"].astype(str).to_numpy()
    if labels is not None and len(set(labels.tolist())) >= 2:
        splitter = GroupKFold(n_splits=min(n_splits, len(set(labels.tolist()))))
        for train, test in splitter.split(X, target, labels):
            known = np.isin(categories[test], categories[train])
            if known.any():
                test = test[known]
                residuals[test] = target[test] - fit_predict(train, test)
    missing = np.flatnonzero(np.isnan(residuals))
    if len(missing) and len(X) >= 2:
        folds = KFold(n_splits=min(3, len(X)), shuffle=True, random_state=random_state)
        for train, test in folds.split(X):
            test = np.intersect1d(test, missing)
            if known_categories_only:
                test = test[np.isin(categories[test], categories[train])]
            if len(test):
                residuals[test] = target[test] - fit_predict(train, test)
    return residuals

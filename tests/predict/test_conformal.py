"""Quantiles of out-of-fold residuals: the rank rule, the upper margin, and residuals from unseen runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agora_optimizer.predict.conformal import (
    conformal_margin,
    out_of_fold_residuals,
    residual_quantile,
    run_weights,
    weighted_residual_quantile,
)


def test_conformal_margin_is_an_upper_quantile() -> None:
    residuals = np.linspace(-1.0, 1.0, 101)
    assert conformal_margin(residuals, 0.95) == pytest.approx(0.94, abs=0.03)
    assert conformal_margin(np.array([0.3]), 0.95) == pytest.approx(0.3)  # too few: the largest
    assert conformal_margin(np.array([-2.0, -1.0]), 0.95) == 0.0  # never below the point estimate
    assert conformal_margin(np.zeros(0), 0.95) == 0.0


def test_residual_quantile_may_be_below_the_point_and_grows_with_q() -> None:
    residuals = np.linspace(-1.0, 1.0, 101)
    assert residual_quantile(residuals, 0.5) == pytest.approx(0.0, abs=0.03)
    assert residual_quantile(np.array([-2.0, -1.0, -0.5]), 0.5) == -1.0  # not clamped, unlike the margin
    values = [residual_quantile(residuals, q) for q in (0.5, 0.6, 0.75, 0.9, 0.99)]
    assert values == sorted(values)


def test_out_of_fold_residuals_hold_out_whole_runs() -> None:
    """A model that learns each run's level by heart (the mean of what it saw) is off by the run's own offset
    on a held-out run: the residuals measure a new run's error, not the fit's."""
    runs = np.repeat(["a", "b", "c", "d"], 5)
    offset = {"a": -1.0, "b": 0.0, "c": 1.0, "d": 2.0}
    target = np.array([offset[r] for r in runs])
    X = pd.DataFrame({"category": ["x"] * len(runs)})

    def fit_predict(train: np.ndarray, test: np.ndarray) -> np.ndarray:
        assert not set(runs[train]) & set(runs[test])  # no run on both sides
        return np.full(len(test), target[train].mean())

    residuals = out_of_fold_residuals(X, target, runs, fit_predict, n_splits=4, random_state=0, who="test")
    assert np.all(np.isfinite(residuals))
    assert residuals[runs == "d"] == pytest.approx(np.full(5, 2.0 - 0.0))  # d: 2 against the others' mean 0
    with pytest.raises(ValueError, match="test: 3 groups for 20 rows"):
        out_of_fold_residuals(X, target, runs[:3], fit_predict, n_splits=4, random_state=0, who="test")


def test_known_categories_only_leaves_a_category_the_fold_never_saw_without_a_residual() -> None:
    X = pd.DataFrame({"category": ["a"] * 6 + ["once"]})
    target = np.zeros(7)

    def fit_predict(train: np.ndarray, test: np.ndarray) -> np.ndarray:
        return np.zeros(len(test))

    runs = ["r"] * 7  # one run: row folds only
    every = out_of_fold_residuals(X, target, runs, fit_predict, n_splits=3, random_state=0, who="test")
    known = out_of_fold_residuals(X, target, runs, fit_predict, 3, 0, "test", known_categories_only=True)
    assert np.all(np.isfinite(every))
    assert np.all(np.isfinite(known[:6])) and np.isnan(known[6])


def test_the_weighted_quantile_with_runs_of_equal_size_is_the_rank_rule() -> None:
    residuals = np.random.default_rng(3).normal(size=60)
    groups = np.repeat(np.arange(6), 10)
    weights = run_weights(groups)
    assert np.allclose(weights, 1.0)
    for quantile in (0.1, 0.5, 0.9, 0.99):
        assert weighted_residual_quantile(residuals, weights, quantile) == residual_quantile(residuals, quantile)


def test_run_weights_give_each_run_the_same_total_and_sum_to_the_rows() -> None:
    groups = np.array(["a"] * 3 + ["b"] * 30 + ["c"] * 7)
    weights = run_weights(groups)
    assert weights.sum() == pytest.approx(len(groups))
    totals = {g: weights[groups == g].sum() for g in "abc"}
    assert totals["a"] == pytest.approx(totals["b"]) == pytest.approx(totals["c"])
    with pytest.raises(ValueError, match="2 weights for 3 residuals"):
        weighted_residual_quantile(np.zeros(3), np.ones(2), 0.5)

"""The per-category power law: it extrapolates a category's runtime to inputs larger than any seen, and
a category with few points borrows the exponent of the others."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agora_optimizer.model.shapes import TaskShape, WorkflowShape
from agora_optimizer.predict.evaluation import REFERENCE_CATALOG
from agora_optimizer.predict.features import feature_frame
from agora_optimizer.predict.predictor import Predictor
from agora_optimizer.predict.runtime_model import RuntimeRegressor
from agora_optimizer.predict.scaling_model import ScalingRegressor
from agora_optimizer.traces.records import TaskAttempt

MIB = 2**20


def power_law_s(input_bytes: float) -> float:
    """runtime = a * size^b with b = 0.8: 10x the input takes 6.3x as long."""
    return 2e-4 * input_bytes**0.8


def _frame(rows: list[tuple[str, int]]) -> pd.DataFrame:
    return feature_frame([TaskShape(f"{c}_{i}", c, input_bytes=b) for i, (c, b) in enumerate(rows)])


def _align_rows() -> tuple[pd.DataFrame, np.ndarray]:
    """A category whose runtime follows the power law over inputs of 1 to 10 MiB, beside one of constant runtime."""
    rows = [("align", int(MIB * (1 + 9 * i / 19))) for i in range(20)] + [("index", MIB * (1 + i)) for i in range(5)]
    y = np.array([power_law_s(b) if c == "align" else 30.0 for c, b in rows])
    return _frame(rows), y


def test_a_power_law_category_is_extrapolated_to_ten_times_the_largest_input_seen() -> None:
    X, y = _align_rows()
    new = _frame([("align", 100 * MIB), ("index", 100 * MIB)])
    truth = power_law_s(100 * MIB)
    scaled = ScalingRegressor().fit(X, y)
    assert scaled.predict(new)[0] == pytest.approx(truth, rel=0.03)
    assert scaled.exponent_["align"] == pytest.approx(0.8, abs=0.02)
    assert scaled.predict(new)[1] == pytest.approx(30.0, rel=0.1)  # the constant category stays about constant


def test_the_trees_alone_stay_flat_beyond_the_largest_input_seen() -> None:
    """Why the power law is there: the trees answer 100 MiB as they answered 10 MiB, 6x too low."""
    X, y = _align_rows()
    trees = RuntimeRegressor(min_samples_leaf=2).fit(X, y)
    at_10, at_100 = trees.predict(_frame([("align", 10 * MIB), ("align", 100 * MIB)]))
    assert at_100 == pytest.approx(at_10, rel=0.01)
    assert at_100 < 0.3 * power_law_s(100 * MIB)


def test_the_predictor_extrapolates_a_new_run_with_ten_times_the_input() -> None:
    """End to end: runs that read 1-10 MiB teach the predictor; a run reading 100 MiB is predicted within 5 %
    (the trees alone, the model before, answered with the 10 MiB run's runtime)."""
    attempts = [
        TaskAttempt.create(
            dag_id="etl",
            task_id=f"align_{i}",
            run_id=f"run{run}",
            category="align",
            input_bytes=size,
            input_files=1,
            runtime_s=power_law_s(size),
        )
        for run in range(1, 11)
        for i, size in enumerate([int(run * MIB * (1 + 0.1 * k)) for k in range(5)])
    ]
    new_run = WorkflowShape("etl", (TaskShape("align_0", "align", input_bytes=100 * MIB, dag_id="new"),), ())
    predicted = Predictor().fit(attempts).predict(new_run, REFERENCE_CATALOG).tasks[0]
    assert predicted.runtime_model == "scaling"
    assert predicted.reference_runtime_s == pytest.approx(power_law_s(100 * MIB), rel=0.05)


def test_a_category_with_two_points_gets_the_pooled_exponent_and_one_with_many_its_own() -> None:
    """Two points close together say little of the exponent: the pooled one (about 1, from the others) wins."""
    rows = [(c, MIB * k) for c in ("a", "b", "c") for k in (1, 2, 4, 8, 16)]
    y = [0.01 * b / MIB * (3 if c == "b" else 1) for c, b in rows]  # linear: b = 1
    rows += [("rare", 4 * MIB), ("rare", int(4.4 * MIB))]
    y += [10.0, 10.0 * 1.1**1.9]  # its own exponent: 1.9
    X = _frame(rows)
    scaled = ScalingRegressor().fit(X, y)
    assert scaled.pooled_exponent_["log_input_bytes"] == pytest.approx(1.0, abs=0.1)
    assert scaled.exponent_["rare"] == pytest.approx(1.0, abs=0.15) and scaled.own_weight_["rare"] < 0.2
    assert scaled.exponent_["a"] == pytest.approx(1.0, abs=0.01)
    unshrunk = ScalingRegressor(exponent_spread=1e6).fit(X, y)  # a prior that says nothing
    assert unshrunk.exponent_["rare"] == pytest.approx(1.9, abs=0.01)
    # with many points spread wide, the category's own exponent holds against the pooled one
    wide = [("rare", MIB * k) for k in (1, 2, 4, 8, 16, 32, 64)]
    many = ScalingRegressor().fit(_frame(rows[:-2] + wide), y[:-2] + [0.01 * (b / MIB) ** 1.9 for _, b in wide])
    assert many.exponent_["rare"] == pytest.approx(1.9, abs=0.1)


def test_exponents_are_clipped_and_sizes_fall_back_to_output_bytes_then_counts() -> None:
    shapes = [TaskShape(f"shrink_{k}", "shrink", input_bytes=MIB * k) for k in (1, 2, 4, 8)]
    shapes += [TaskShape(f"write_{k}", "write", output_bytes=MIB * k) for k in (1, 2, 4, 8)]
    shapes += [TaskShape(f"gather_{k}", "gather", input_bytes=MIB, input_files=k) for k in (1, 2, 4, 8)]
    y = [100.0 / k for k in (1, 2, 4, 8)] + [float(k) for k in (1, 2, 4, 8)] + [float(k) for k in (1, 2, 4, 8)]
    scaled = ScalingRegressor(exponent_spread=1e6).fit(feature_frame(shapes), y)
    assert scaled.exponent_["shrink"] == 0.0  # more input, less time: clipped at min_exponent
    columns = {"shrink": "log_input_bytes", "write": "log_output_bytes", "gather": "log_input_files"}
    assert scaled.size_column_ == columns
    more = feature_frame([TaskShape("g", "gather", input_bytes=MIB, input_files=16)])
    assert scaled.predict(more)[0] == pytest.approx(16.0, rel=0.1)


def test_an_unknown_category_gets_the_median_and_bad_parameters_are_refused_in_fit() -> None:
    X, y = _align_rows()
    scaled = ScalingRegressor().fit(X, y)
    assert scaled.predict(_frame([("never", MIB)]))[0] == pytest.approx(float(np.exp(np.median(np.log(y)))))
    with pytest.raises(ValueError, match="min_exponent"):
        ScalingRegressor(min_exponent=3.0).fit(X, y)
    with pytest.raises(ValueError, match="exponent_spread"):
        ScalingRegressor(exponent_spread=0.0).fit(X, y)

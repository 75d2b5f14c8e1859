"""The memory quantile on a run that reads more than any seen: its power-law base grows the reservation."""

from __future__ import annotations

import numpy as np
import pytest

from agora_optimizer.model.shapes import TaskShape
from agora_optimizer.predict.features import feature_frame
from agora_optimizer.predict.memory_model import MemoryQuantileRegressor

MIB = 2**20


def peak_bytes(input_bytes: float) -> float:
    """A power law of the input: 10x the input, 6.3x the memory."""
    return 500.0 * input_bytes**0.8


def test_a_run_reading_ten_times_more_gets_a_reservation_above_its_peak() -> None:
    rng = np.random.default_rng(3)
    shapes, peaks, runs = [], [], []
    for run in range(4):
        for i in range(10):
            size = int(MIB * 100 * 2**run * (1 + 0.2 * rng.random()))
            shapes.append(TaskShape(f"load_{i}", "load", input_bytes=size))
            peaks.append(peak_bytes(size))
            runs.append(f"run{run}")
    X = feature_frame(shapes)
    new = feature_frame([TaskShape("load_0", "load", input_bytes=10 * 800 * MIB)])
    truth = peak_bytes(10 * 800 * MIB)
    scaled = MemoryQuantileRegressor(max_iter=30).fit(X, peaks, groups=runs).predict(new)[0]
    assert truth <= scaled <= 1.5 * truth
    flat = MemoryQuantileRegressor(base="median", max_iter=30).fit(X, peaks, groups=runs).predict(new)[0]
    assert flat < 0.5 * truth  # the category's median and the trees' last leaf: the task would be killed


def test_an_unknown_base_is_refused_in_fit() -> None:
    shapes = [TaskShape(f"t_{i}", "t", input_bytes=MIB * (i + 1)) for i in range(4)]
    with pytest.raises(ValueError, match="base"):
        MemoryQuantileRegressor(base="mean").fit(feature_frame(shapes), [float(MIB)] * 4)

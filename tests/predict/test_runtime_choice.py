"""The per-category choice between the trees and the power law, by their errors on runs held out."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agora_optimizer.model.shapes import TaskShape
from agora_optimizer.predict.features import feature_frame
from agora_optimizer.predict.runtime_choice import RuntimeChoiceRegressor

MIB = 2**20


def _runs() -> tuple[pd.DataFrame, np.ndarray, list[str]]:
    """Five runs, each reading more than the one before.

    - ``align``: runtime = 2e-4 * input_bytes^0.8 (a power law of what it reads);
    - ``render``: runtime = 120 s / cores; its input size varies at random and says nothing.
    """
    rng = np.random.default_rng(7)
    shapes, runtimes, runs = [], [], []
    for run in range(5):
        for i in range(12):
            size = int(MIB * 4**run * (1 + 0.5 * rng.random()))
            shapes.append(TaskShape(f"align_{i}", "align", input_bytes=size, dag_id="wf"))
            runtimes.append(2e-4 * size**0.8)
            cores = int(rng.choice([1, 2, 4, 8]))
            noise = int(MIB * 4 ** rng.integers(0, 5))
            shapes.append(TaskShape(f"render_{i}", "render", input_bytes=noise, cores=cores, dag_id="wf"))
            runtimes.append(120.0 / cores)
            runs += [f"run{run}", f"run{run}"]
    return feature_frame(shapes), np.array(runtimes), runs


def test_the_choice_is_the_power_law_where_size_drives_runtime_and_the_trees_where_it_does_not() -> None:
    X, y, runs = _runs()
    model = RuntimeChoiceRegressor().fit(X, y, groups=runs)
    assert model.choice_ == {"align": "scaling", "render": "trees"}
    assert model.errors_["align"]["scaling"] < model.errors_["align"]["trees"]
    assert model.errors_["render"]["trees"] < model.errors_["render"]["scaling"]
    # each category is answered by its model: a 4x larger align than any seen, a render on 8 cores
    new = feature_frame(
        [
            TaskShape("align_0", "align", input_bytes=1024 * MIB),
            TaskShape("render_0", "render", input_bytes=MIB, cores=8),
        ]
    )
    align_s, render_s = model.predict(new)
    assert align_s == pytest.approx(2e-4 * (1024 * MIB) ** 0.8, rel=0.05)
    assert render_s == pytest.approx(15.0, rel=0.1)
    assert model.chosen("never seen") == "trees" and model.summary() == {"scaling": 1, "trees": 1}


def test_one_run_or_a_category_of_one_run_keeps_the_power_law() -> None:
    """Rows of one run say how well a model interpolates within it, not how it does on a new run: no choice
    is made from them, and the power law (the category's level, shrunk toward the pooled exponent) answers."""
    X, y, runs = _runs()
    one_run = [r == "run0" for r in runs]
    model = RuntimeChoiceRegressor().fit(X[one_run], y[one_run], groups=[r for r in runs if r == "run0"])
    assert model.choice_ == {"align": "scaling", "render": "scaling"} and model.errors_ == {}
    X2 = pd.concat([X, feature_frame([TaskShape("solo_0", "solo", input_bytes=MIB)])], ignore_index=True)
    model = RuntimeChoiceRegressor().fit(X2, [*y, 5.0], groups=[*runs, "run9"])
    assert model.choice_["solo"] == "scaling" and "solo" not in model.errors_


def test_groups_must_match_the_rows() -> None:
    X, y, runs = _runs()
    with pytest.raises(ValueError, match="groups"):
        RuntimeChoiceRegressor().fit(X, y, groups=runs[:-1])
    with pytest.raises(ValueError, match="n_splits"):
        RuntimeChoiceRegressor(n_splits=1).fit(X, y, groups=runs)

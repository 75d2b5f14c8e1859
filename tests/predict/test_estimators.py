"""The two estimators follow scikit-learn's conventions, and the runtime model honours resource speeds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.shapes import TaskShape
from agora_optimizer.predict.features import feature_frame, with_resource
from agora_optimizer.predict.memory_model import MemoryQuantileRegressor
from agora_optimizer.predict.runtime_choice import RuntimeChoiceRegressor
from agora_optimizer.predict.runtime_model import RuntimeRegressor
from agora_optimizer.predict.scaling_model import ScalingRegressor

ESTIMATORS = [
    RuntimeRegressor(min_samples_leaf=2, max_iter=30),
    MemoryQuantileRegressor(max_iter=30, n_splits=3),
    ScalingRegressor(),
    RuntimeChoiceRegressor(n_splits=3),
]


def _rows(n: int = 60) -> tuple[pd.DataFrame, np.ndarray]:
    """Two categories whose runtime grows with input size, in three runs."""
    shapes = [
        TaskShape(f"{cat}_{i}", cat, cat, input_bytes=1000 * (1 + i % 10), dag_id=f"run{i % 3}")
        for i in range(n)
        for cat in ("small", "big")
    ]
    frame = feature_frame(shapes)
    y = np.array([(1.0 if s.category == "small" else 50.0) * s.input_bytes / 1000 for s in shapes])
    return frame, y


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_scikit_learn_conventions(estimator) -> None:
    params = estimator.get_params()
    copy = clone(estimator)
    assert copy.get_params() == params and copy is not estimator
    with pytest.raises(NotFittedError):
        copy.predict(_rows()[0])
    before = set(vars(copy))
    X, y = _rows()
    assert copy.fit(X, y) is copy
    learned = set(vars(copy)) - before
    assert learned and all(name.endswith("_") for name in learned)
    assert copy.get_params() == params  # fit does not touch the parameters
    predicted = copy.predict(X)
    assert predicted.shape == (len(X),) and np.all(predicted > 0)


def test_init_only_stores_and_fit_validates() -> None:
    bad = RuntimeRegressor(resource_features="sometimes")  # accepted as given...
    with pytest.raises(ValueError, match="resource_features"):
        bad.fit(*_rows())  # ...and refused in fit
    with pytest.raises(ValueError, match="quantile"):
        MemoryQuantileRegressor(quantile=1.5).fit(*_rows())
    with pytest.raises(ValueError, match="missing"):
        RuntimeRegressor().fit(pd.DataFrame({"category": ["a"]}), [1.0])
    with pytest.raises(ValueError, match="no training rows"):
        RuntimeRegressor().fit(_rows()[0].iloc[:0], [])


def test_runtime_model_learns_size_and_category() -> None:
    X, y = _rows()
    model = RuntimeRegressor(min_samples_leaf=2).fit(X, y)
    predicted = model.predict(X)
    assert np.median(np.abs(predicted - y) / y) < 0.1
    big = X["category"] == "big"
    assert predicted[big].mean() > 10 * predicted[~big].mean()


def test_one_resource_type_means_runtime_over_speed() -> None:
    X, y = _rows()
    model = RuntimeRegressor().fit(with_resource(X, None), y)
    assert not model.uses_resources_
    slow = Resource("slow", "aws", 2, 4, 0.5, 0.1)
    fast = Resource("fast", "aws", 2, 4, 2.0, 0.1)
    assert np.allclose(model.predict(with_resource(X, slow)), model.predict(with_resource(X, fast)))


def test_several_resource_types_are_learned_from() -> None:
    """A task that does not speed up on a faster type: the model sees it when traces cover two types."""
    X, y = _rows()
    slow = Resource("slow", "aws", 2, 4, 1.0, 0.1)
    fast = Resource("fast", "aws", 8, 32, 2.0, 0.1)
    both = pd.concat([with_resource(X, slow), with_resource(X, fast)], ignore_index=True)
    reference = np.concatenate([y * 1.0, y * 2.0])  # same wall time on both: reference runtime doubles on fast
    model = RuntimeRegressor(min_samples_leaf=2).fit(both, reference)
    assert model.uses_resources_
    ratio = model.predict(with_resource(X, fast)) / model.predict(with_resource(X, slow))
    assert np.median(ratio) == pytest.approx(2.0, rel=0.15)


def test_memory_quantile_covers_its_own_spread() -> None:
    rng = np.random.default_rng(0)
    X, _ = _rows(120)
    peaks = 1e8 * np.exp(rng.normal(0.0, 0.3, len(X)))
    groups = [f"g{i % 4}" for i in range(len(X))]
    model = MemoryQuantileRegressor(max_iter=30).fit(X, peaks, groups=groups)
    fresh = 1e8 * np.exp(rng.normal(0.0, 0.3, len(X)))
    assert np.mean(fresh <= model.predict(X)) >= 0.88

"""Runtime quantiles: p90 over p50 for every task, calibrated on new runs, any regressor wrapped, plans from them."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from agora_optimizer.errors import AgoraError
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Objective
from agora_optimizer.model.shapes import TaskShape, WorkflowShape
from agora_optimizer.model.workflow import Edge
from agora_optimizer.optimize.optimize import optimize
from agora_optimizer.planning.validate import validate_plan
from agora_optimizer.predict.features import feature_frame
from agora_optimizer.predict.predictor import Predictor
from agora_optimizer.predict.runtime_model import RuntimeRegressor
from agora_optimizer.predict.runtime_quantiles import (
    RuntimeQuantiles,
    parse_quantile,
    quantile_label,
    resolve_quantile,
)
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.wfformat_import import read_workflow_shape
from tests.predict.conftest import SRA_2

SIGMA = 0.5  # the log-normal noise of the synthetic runtimes
CATEGORY_S = {"align": 30.0, "sort": 5.0, "merge": 120.0}


def _synthetic(runs: range, seed: int) -> tuple[pd.DataFrame, np.ndarray, list[str]]:
    """Three categories whose runtime grows with input size, times log-normal noise, in whole runs."""
    rng = np.random.default_rng(seed)
    shapes, runtimes, groups = [], [], []
    for run in runs:
        for category, seconds in CATEGORY_S.items():
            for i in range(12):
                size = 10**6 * (1 + i % 6)
                shapes.append(TaskShape(f"{category}_{i}", category, "op", input_bytes=size, dag_id="wf"))
                runtimes.append(seconds * size / 10**6 * math.exp(rng.normal(0.0, SIGMA)))
                groups.append(f"run{run}")
    return feature_frame(shapes), np.array(runtimes), groups


def test_p90_covers_about_nine_new_tasks_in_ten_on_lognormal_noise() -> None:
    X, y, groups = _synthetic(range(8), seed=1)
    model = RuntimeRegressor(max_iter=40).fit(X, y)
    quantiles = RuntimeQuantiles().fit(RuntimeRegressor(max_iter=40), X, y, groups)
    new_X, new_y, _ = _synthetic(range(8, 14), seed=2)
    point = model.predict(new_X)
    categories = list(new_X["category"])
    p50 = point * quantiles.factors(categories, 0.5)
    p90 = point * quantiles.factors(categories, 0.9)
    assert np.all(p90 >= p50)
    coverage = float(np.mean(new_y <= p90))
    assert 0.8 <= coverage <= 0.97, coverage
    assert 0.35 <= float(np.mean(new_y <= p50)) <= 0.65  # p50 is about the median too
    assert set(quantiles.category_residuals_) == set(CATEGORY_S)  # enough residuals each: their own factors
    # the p90 factor is about exp(1.28 sigma) = 1.9, the model's own error on top of the noise
    assert 1.5 <= quantiles.summary()["pooled_p90"] <= 2.6


class _CategoryMedian:
    """A regressor that is not scikit-learn's: each category's median runtime, the overall one for others."""

    def fit(self, X: pd.DataFrame, y: np.ndarray) -> _CategoryMedian:
        frame = pd.DataFrame({"category": X["category"].to_numpy(), "y": y})
        self.medians = frame.groupby("category")["y"].median().to_dict()
        self.overall = float(np.median(y))
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return np.array([self.medians.get(c, self.overall) for c in X["category"]])


def test_any_regressor_with_fit_and_predict_is_wrapped() -> None:
    X, y, groups = _synthetic(range(6), seed=3)
    quantiles = RuntimeQuantiles().fit(_CategoryMedian(), X, y, groups)
    factors = quantiles.factors(["align", "sort", "never-seen"], 0.9)
    assert np.all(factors > 1.0)
    assert factors[2] == quantiles.summary()["pooled_p90"]  # a category it did not learn: the pooled factor
    assert np.all(quantiles.factors(["align"], 0.95) >= quantiles.factors(["align"], 0.9))


def test_a_category_with_few_residuals_takes_the_pooled_factor() -> None:
    X, y, groups = _synthetic(range(6), seed=4)
    quantiles = RuntimeQuantiles(min_category_rows=10_000).fit(_CategoryMedian(), X, y, groups)
    assert quantiles.category_residuals_ == {}
    assert len(set(quantiles.factors(list(CATEGORY_S), 0.9))) == 1


def test_every_task_of_a_prediction_has_p90_at_least_p50(trained: Predictor, catalog: Catalog) -> None:
    prediction = trained.predict(read_workflow_shape(SRA_2), catalog)
    assert prediction.tasks
    for task in prediction.tasks:
        assert set(task.runtime_factors) == {"p50", "p90"}
        for resource, runtime_s in task.runtime_s.items():
            assert task.runtime_s_p90[resource] >= task.runtime_s_p50[resource] > 0, task.task_id
            assert task.runtime_s_p50[resource] == pytest.approx(runtime_s * task.runtime_factors["p50"])


def test_a_declared_hint_keeps_its_value_at_every_quantile(trained: Predictor, catalog: Catalog) -> None:
    shape = WorkflowShape("new", (TaskShape("never_seen_1", "never_seen", "NewOperator", hint_runtime_s=77.0),), ())
    task = trained.predict(shape, catalog).tasks[0]
    assert task.runtime_source == "hint" and dict(task.runtime_factors) == {"p50": 1.0, "p90": 1.0}
    assert trained.predicted_workflow(shape, catalog, runtime_quantile=0.9).tasks[0].runtime_s == 77.0


def _attempts(runs: int, seed: int) -> list[TaskAttempt]:
    """A chain of three tasks per run whose runtimes vary from run to run (log-normal)."""
    rng = np.random.default_rng(seed)
    rows = []
    for run in range(runs):
        for task, seconds in CATEGORY_S.items():
            runtime_s = seconds * math.exp(rng.normal(0.0, SIGMA))
            fields = {"dag_id": "chain", "task_id": task, "run_id": f"r{run}", "category": task, "operator": "op"}
            rows.append(TaskAttempt.create(**fields, runtime_s=runtime_s, peak_rss_bytes=2**28))
    return rows


def test_a_deadline_plan_from_p90_is_no_shorter_than_from_p50(catalog: Catalog) -> None:
    predictor = Predictor().fit(_attempts(runs=20, seed=5))
    shape = WorkflowShape(
        "chain",
        tuple(TaskShape(t, t, "op", dag_id="chain") for t in CATEGORY_S),
        (Edge("align", "sort"), Edge("sort", "merge")),
    )
    objective = Objective(kind="cost", deadline_s=3600.0)
    plans = {}
    for quantile in (0.5, 0.9):
        workflow = predictor.predicted_workflow(shape, catalog, runtime_quantile=quantile)
        plans[quantile] = optimize(workflow, catalog, objective, "aws", time_limit_s=5)
        assert validate_plan(plans[quantile], workflow, catalog) == []
    assert plans[0.9].makespan_s >= plans[0.5].makespan_s
    assert plans[0.9].makespan_s > 1.2 * plans[0.5].makespan_s  # the noise is wide: p90 is well above p50


@pytest.mark.parametrize(
    ("text", "expected"),
    [("p90", 0.9), ("P50", 0.5), ("0.95", 0.95), ("90", 0.9), ("p97.5", 0.975), ("auto", "auto")],
)
def test_parse_quantile(text: str, expected: object) -> None:
    assert parse_quantile(text) == pytest.approx(expected) if expected != "auto" else parse_quantile(text) == "auto"


@pytest.mark.parametrize("text", ["p100", "0.3", "1", "nan", "inf", "fast", ""])
def test_a_bad_quantile_is_one_line_naming_the_option(text: str) -> None:
    with pytest.raises(AgoraError, match=r"^--runtime-quantile: expected p50, p90, auto or a quantile in \[0.5, 1\)"):
        parse_quantile(text)


def test_auto_is_p90_with_a_deadline_and_p50_without() -> None:
    assert resolve_quantile("auto", has_deadline=True) == 0.9
    assert resolve_quantile("auto", has_deadline=False) == 0.5
    assert resolve_quantile(0.75, has_deadline=True) == 0.75
    assert [quantile_label(q) for q in (0.5, 0.9, 0.975)] == ["p50", "p90", "p97.5"]


def test_a_task_seen_once_does_not_swamp_the_pooled_factors() -> None:
    """A category that ran once has no error of a known task to give: were its cold-start error (here 1000x)
    counted, a known category with few errors of its own would plan 1000x its runtime at p90."""
    X, y, groups = _synthetic(range(3), seed=6)
    once = feature_frame([TaskShape("report_1", "report", "op", input_bytes=10**6, dag_id="other")])
    with_once = RuntimeQuantiles(min_category_rows=1000).fit(
        _CategoryMedian(), pd.concat([X, once], ignore_index=True), np.append(y, 1000.0 * y.max()), [*groups, "x"]
    )
    alone = RuntimeQuantiles(min_category_rows=1000).fit(_CategoryMedian(), X, y, groups)
    assert with_once.n_residuals_ == alone.n_residuals_ == len(X)
    assert with_once.summary()["pooled_p90"] == alone.summary()["pooled_p90"] < 3.0


def test_a_quantile_is_of_runs_so_one_large_run_that_strays_sets_the_p90_not_the_p50() -> None:
    # Three runs of 40 tasks at about 10 s and one of 300 at about 100 s on the same inputs (as blast's
    # small and medium instances): a new run is three times in four like the small ones.
    rng = np.random.default_rng(7)
    sizes = {"small-1": (40, 10.0), "small-2": (40, 10.0), "small-3": (40, 10.0), "medium": (300, 100.0)}
    shapes, runtimes, groups = [], [], []
    for run, (tasks, seconds) in sizes.items():
        for i in range(tasks):
            shapes.append(TaskShape(f"blastall_{i}", "blastall", "op", input_bytes=10**6, dag_id=run))
            runtimes.append(seconds * math.exp(rng.normal(0.0, 0.05)))
            groups.append(run)
    X, y = feature_frame(shapes), np.array(runtimes)
    quantiles = RuntimeQuantiles(n_splits=4).fit(_CategoryMedian(), X, y, groups)
    p50, p90 = (float(quantiles.factors(["blastall"], q)[0]) for q in (0.5, 0.9))
    # Out of fold, a small run is predicted from the medium's median (10x too high), the medium from the
    # small ones' (10x too low): by tasks the medium's 300 would make the p50 10x; by runs it is 0.1x.
    assert p50 < 0.2 and p90 > 5.0, (p50, p90)

"""QueueWaitRegressor on waits recorded from the real cluster, and on queues made to order."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import skops.io as sio
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils._testing import check_output  # subprocess.check_output, inside scikit-learn

from agora_optimizer.errors import InputFileError
from agora_optimizer.queue_wait import model_file
from agora_optimizer.queue_wait.errors import QueueWaitModelError
from agora_optimizer.queue_wait.features import FEATURE_COLUMNS, QueueFeatures
from agora_optimizer.queue_wait.model import QueueWaitFallbackWarning, QueueWaitRegressor, features_frame, training_data
from agora_optimizer.queue_wait.model_file import META_FILE, PIPELINE_FILE, load_model, save_model
from agora_optimizer.queue_wait.recorder import QueueWaitStore
from tests.slurm_fixtures import RecordedRun


def recorded(run: RecordedRun) -> tuple[pd.DataFrame, np.ndarray]:
    return training_data(QueueWaitStore(run.store_url).observations())


def test_the_model_fits_recorded_waits_and_predicts_non_negative_waits(recorded_run: RecordedRun) -> None:
    features, waits = recorded(recorded_run)
    model = QueueWaitRegressor(min_samples=8, n_estimators=50, min_samples_leaf=2).fit(features, waits)
    assert model.pipeline_ is not None
    assert model.n_samples_ == len(waits) == len(recorded_run.job_ids)
    assert sum(model.samples_per_partition_.values()) == len(waits)
    predicted = model.predict(features)
    assert predicted.shape == waits.shape
    assert np.all(np.isfinite(predicted)) and np.all(predicted >= 0)
    text = model.describe()
    assert f"from {len(waits)} recorded waits" in text and "small sample" in text


def test_too_little_data_falls_back_to_partition_medians_and_says_so(recorded_run: RecordedRun) -> None:
    features, waits = recorded(recorded_run)
    model = QueueWaitRegressor(min_samples=1000).fit(features, waits)
    assert model.pipeline_ is None
    text = model.describe()
    assert "fallback, not a model" in text and f"{len(waits)} recorded waits" in text and "min_samples=1000" in text
    predicted = model.predict(features)
    for partition in ("debug", "compute"):
        mask = (features["partition"] == partition).to_numpy()
        assert np.all(predicted[mask] == np.median(waits[mask]))
    unseen = features.head(1).assign(partition="gpu")
    with pytest.warns(QueueWaitFallbackWarning, match="none for partition.*gpu.*0 s"):
        assert model.predict(unseen).tolist() == [0.0]


def test_no_data_at_all_predicts_zero_with_a_warning() -> None:
    model = QueueWaitRegressor().fit(features_frame([]), [])
    assert model.n_samples_ == 0 and "0 recorded waits" in model.describe()
    with pytest.warns(QueueWaitFallbackWarning):
        assert model.predict(features_frame([_queue(3)])).tolist() == [0.0]


def _queue(pending: int, partition: str = "compute", cores: int = 2) -> QueueFeatures:
    return QueueFeatures(
        partition=partition,
        pending_jobs=pending,
        pending_cores=2 * pending,
        pending_memory_gib=0.5 * pending,
        pending_time_limit_h=0.1 * pending,
        pending_core_hours=0.2 * pending,
        running_jobs=4,
        running_cores=8,
        running_remaining_h=0.1,
        other_pending_jobs=0,
        other_pending_cores=0,
        other_running_cores=0,
        cores=cores,
        memory_gib=1.0,
        time_limit_h=0.1,
    )


def test_the_model_learns_that_a_longer_queue_means_a_longer_wait() -> None:
    rng = np.random.default_rng(3)
    pending = rng.integers(0, 30, 300)
    rows = [_queue(int(n), partition=("debug", "compute")[i % 2]) for i, n in enumerate(pending)]
    waits = 6.0 * pending * rng.uniform(0.8, 1.2, len(pending))
    model = QueueWaitRegressor().fit(features_frame(rows[:200]), waits[:200])
    baseline = QueueWaitRegressor(min_samples=10**6).fit(features_frame(rows[:200]), waits[:200])
    test_x, test_y = features_frame(rows[200:]), waits[200:]
    model_mae = np.abs(model.predict(test_x) - test_y).mean()
    baseline_mae = np.abs(baseline.predict(test_x) - test_y).mean()
    assert model_mae < 0.5 * baseline_mae
    short, long = model.predict(features_frame([_queue(1), _queue(25)]))
    assert long > 5 * max(short, 1.0)


def test_it_follows_scikit_learn_conventions() -> None:
    model = QueueWaitRegressor(min_samples=5, n_estimators=20)
    assert model.get_params()["min_samples"] == 5
    assert not hasattr(model, "n_samples_")
    assert clone(model).get_params() == model.get_params()
    with pytest.raises(NotFittedError):
        model.predict(features_frame([_queue(1)]))
    assert model.describe() == "queue-wait model: not fitted"
    assert model.fit(features_frame([_queue(n) for n in range(10)]), np.arange(10.0)) is model


@pytest.mark.parametrize(
    ("features", "waits", "message"),
    [
        (features_frame([_queue(1)]).drop(columns=["cores"]), [1.0], "lack column.*cores"),
        (features_frame([_queue(1)]), [1.0, 2.0], "1 feature rows but 2 waits"),
        (features_frame([_queue(1)]), [-1.0], ">= 0 seconds"),
        (features_frame([_queue(1)]), [float("nan")], "finite"),
        ([[1, 2, 3]], [1.0], "pandas DataFrame"),
    ],
)
def test_bad_training_data_is_refused_with_the_reason(features: object, waits: list[float], message: str) -> None:
    with pytest.raises(QueueWaitModelError, match=message):
        QueueWaitRegressor().fit(features, waits)


def test_a_saved_model_predicts_the_same_after_loading(recorded_run: RecordedRun, tmp_path: Path) -> None:
    features, waits = recorded(recorded_run)
    for min_samples in (8, 1000):  # a fitted pipeline, and a fallback
        model = QueueWaitRegressor(min_samples=min_samples, n_estimators=30, min_samples_leaf=2).fit(features, waits)
        folder = tmp_path / str(min_samples)
        save_model(model, folder)
        loaded = load_model(folder)
        assert (folder / PIPELINE_FILE).exists() == (model.pipeline_ is not None)
        assert np.allclose(loaded.predict(features), model.predict(features))
        assert loaded.describe() == model.describe()
        assert json.loads((folder / META_FILE).read_text())["n_samples"] == len(waits)


def test_a_broken_or_missing_model_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=r"queue_wait\.json: no queue-wait model here"):
        load_model(tmp_path)
    (tmp_path / META_FILE).write_text("{not json")
    with pytest.raises(InputFileError, match="not a queue-wait model file"):
        load_model(tmp_path)
    model = QueueWaitRegressor(min_samples=2, n_estimators=5).fit(
        features_frame([_queue(n) for n in range(6)]), range(6)
    )
    save_model(model, tmp_path)
    meta = json.loads((tmp_path / META_FILE).read_text())
    (tmp_path / META_FILE).write_text(json.dumps({**meta, "feature_columns": ["partition"]}))
    with pytest.raises(InputFileError, match="other features"):
        load_model(tmp_path)
    (tmp_path / META_FILE).write_text(json.dumps(meta))
    (tmp_path / PIPELINE_FILE).write_bytes(b"not a zip file")
    with pytest.raises(InputFileError, match=r"pipeline\.skops: refused: its SHA-256 is not the one"):
        load_model(tmp_path)
    _replace_pipeline(tmp_path, b"not a zip file")
    with pytest.raises(InputFileError, match=r"pipeline\.skops: not a skops file"):
        load_model(tmp_path)
    sio.dump({"features": _queue(1)}, tmp_path / PIPELINE_FILE)  # a type that is not scikit-learn's
    _replace_pipeline(tmp_path, (tmp_path / PIPELINE_FILE).read_bytes())
    with pytest.raises(InputFileError, match=r"refused.*QueueFeatures"):
        load_model(tmp_path)
    with pytest.raises(QueueWaitModelError, match="not fitted"):
        save_model(QueueWaitRegressor(), tmp_path / "x")


def _replace_pipeline(folder: Path, content: bytes) -> None:
    """Put ``content`` in place of the pipeline file, with its hash in the JSON (as a forger would)."""
    (folder / PIPELINE_FILE).write_bytes(content)
    meta = json.loads((folder / META_FILE).read_text())
    meta["pipeline_sha256"] = hashlib.sha256(content).hexdigest()
    (folder / META_FILE).write_text(json.dumps(meta))


def test_a_pipeline_that_would_run_a_command_is_refused_unloaded(tmp_path: Path) -> None:
    """scikit-learn's own namespace holds functions that run commands: no ``sklearn.`` type is trusted wholesale."""
    model = QueueWaitRegressor(min_samples=2, n_estimators=5).fit(
        features_frame([_queue(n) for n in range(6)]), range(6)
    )
    save_model(model, tmp_path)
    marker = tmp_path / "ran"
    forged = FunctionTransformer(func=check_output, kw_args={"args": ["touch", str(marker)]})
    sio.dump(Pipeline([("run", forged)]), tmp_path / "forged.skops")
    _replace_pipeline(tmp_path, (tmp_path / "forged.skops").read_bytes())
    with pytest.raises(InputFileError, match=r"refused: it would build types agora does not trust: .*check_output"):
        load_model(tmp_path)
    assert not marker.exists()
    meta = json.loads((tmp_path / META_FILE).read_text())
    del meta["pipeline_sha256"]  # a file from before the hash was recorded
    (tmp_path / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(InputFileError, match="records no SHA-256"):
        load_model(tmp_path)


def test_an_unseen_partition_gets_a_model_prediction_and_a_warning() -> None:
    model = QueueWaitRegressor(min_samples=5, n_estimators=20).fit(
        features_frame([_queue(n) for n in range(20)]), range(20)
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wait = model.predict(features_frame([_queue(5, partition="gpu")]))
    assert wait[0] >= 0
    assert any(issubclass(w.category, QueueWaitFallbackWarning) and "gpu" in str(w.message) for w in caught)
    assert list(features_frame([_queue(1)]).columns) == list(FEATURE_COLUMNS)


def _small_model(min_samples: int = 2) -> QueueWaitRegressor:
    return QueueWaitRegressor(min_samples=min_samples, n_estimators=5).fit(
        features_frame([_queue(n) for n in range(6)]), range(6)
    )


def test_a_save_that_fails_after_the_first_file_leaves_the_old_model_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "model"
    save_model(_small_model(), folder)
    before = {name: (folder / name).read_bytes() for name in (META_FILE, PIPELINE_FILE)}

    def disk_full(path: Path, *args: object, **kwargs: object) -> None:
        raise InputFileError(path, "cannot be written: No space left on device")

    monkeypatch.setattr(model_file, "write_text_atomically", disk_full)  # after pipeline.skops is written
    with pytest.raises(InputFileError, match="No space left on device"):
        save_model(_small_model(min_samples=1000), folder)  # a fallback: would drop the pipeline file
    assert {name: (folder / name).read_bytes() for name in before} == before
    assert load_model(folder).pipeline_ is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no new directory left behind
    monkeypatch.undo()
    save_model(_small_model(min_samples=1000), folder)
    assert sorted(p.name for p in folder.iterdir()) == [META_FILE] and load_model(folder).pipeline_ is None


def test_a_binary_model_file_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / META_FILE).write_bytes(bytes(range(256)))
    with pytest.raises(InputFileError, match=r"queue_wait\.json: not a queue-wait model file: not UTF-8"):
        load_model(tmp_path)
    (tmp_path / META_FILE).write_text("[" * 100_000)
    with pytest.raises(InputFileError, match=r"queue_wait\.json: not a queue-wait model file"):
        load_model(tmp_path)

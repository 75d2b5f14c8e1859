"""Saving and loading a trained predictor: same answers back, and no code run from a bad file."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import stat
from pathlib import Path

import pytest
import skops.io as sio

from agora_optimizer.errors import AgoraError, InputFileError
from agora_optimizer.io import atomic
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.predict import model_store
from agora_optimizer.predict.errors import ModelFileError
from agora_optimizer.predict.model_store import (
    HISTORY_FILE,
    METADATA_FILE,
    MODEL_FILE,
    MODEL_FILES,
    default_model_dir,
    load_predictor,
    read_metadata,
    save_predictor,
)
from agora_optimizer.predict.predictor import Predictor
from agora_optimizer.traces.wfformat_import import read_workflow_shape
from tests.predict.conftest import SRA_2

MARKER_NAME = "agora-test-pwned"


class _Pwn:
    """A pickle payload that creates a file when unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


class _Foreign:
    """A type no predictor file may hold."""


@pytest.fixture(scope="module")
def saved(trained: Predictor, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("model")
    save_predictor(trained, directory, metrics={"note": "test"}, sources=["blast", "srasearch"])
    return directory


def _copy(saved: Path, tmp_path: Path) -> Path:
    target = tmp_path / "model"
    target.mkdir()
    for name in (MODEL_FILE, HISTORY_FILE, METADATA_FILE):
        (target / name).write_bytes((saved / name).read_bytes())
    return target


def _rehash(directory: Path) -> None:
    """Make metadata.json vouch for the files as they are now (an attacker could do as much)."""
    metadata = json.loads((directory / METADATA_FILE).read_text())
    for name in metadata["files"]:
        metadata["files"][name] = hashlib.sha256((directory / name).read_bytes()).hexdigest()
    (directory / METADATA_FILE).write_text(json.dumps(metadata))


def test_round_trip_gives_the_same_predictions(trained: Predictor, saved: Path, catalog: Catalog) -> None:
    loaded = load_predictor(saved)
    shape = read_workflow_shape(SRA_2)
    assert loaded.predict(shape, catalog) == trained.predict(shape, catalog)
    assert loaded.history == trained.history
    assert loaded.training_sha256 == trained.training_sha256


def test_metadata_says_what_was_trained_how(saved: Path, trained: Predictor) -> None:
    metadata = read_metadata(saved)
    for key in ("library_versions", "features", "training_data", "metrics", "trained_at", "estimators"):
        assert key in metadata
    assert metadata["library_versions"]["scikit-learn"]
    assert metadata["training_data"]["sha256"] == trained.training_sha256
    assert metadata["training_data"]["rows"] == trained.training_rows
    assert metadata["features"]["categorical"] == ["category", "operator", "task_stem"]
    assert metadata["estimators"]["runtime"]["params"] == trained.runtime_model.get_params()


def test_the_runtime_quantiles_come_back(saved: Path, trained: Predictor, catalog: Catalog) -> None:
    loaded = load_predictor(saved)
    assert loaded.has_runtime_quantiles
    shape = read_workflow_shape(SRA_2)
    assert [t.runtime_factors for t in loaded.predict(shape, catalog).tasks] == [
        t.runtime_factors for t in trained.predict(shape, catalog).tasks
    ]
    summary = read_metadata(saved)["estimators"]["runtime_quantiles"]["summary"]
    assert summary["pooled_p90"] >= summary["pooled_p50"] and summary["residuals"] > 0


def test_a_model_saved_before_the_quantiles_loads_with_one_warning(
    saved: Path, tmp_path: Path, catalog: Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    """The two estimators alone, as models were saved before the runtime quantiles: factors of 1.0, said once."""
    directory = _copy(saved, tmp_path)
    estimators = sio.load(directory / MODEL_FILE, trusted=model_store.TRUSTED_TYPES)
    sio.dump({"runtime": estimators["runtime"], "memory": estimators["memory"]}, directory / MODEL_FILE)
    _rehash(directory)
    with caplog.at_level("WARNING", logger=model_store.log.name):
        old = load_predictor(directory)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "no runtime quantiles" in warnings[0] and str(directory) in warnings[0]
    assert not old.has_runtime_quantiles
    shape = read_workflow_shape(SRA_2)
    for task in old.predict(shape, catalog).tasks:
        assert task.runtime_s_p50 == task.runtime_s_p90 == dict(task.runtime_s)
    assert "no runtime quantiles" in old.quantile_note(0.9)
    save_predictor(old, tmp_path / "again")  # and saves again as it is, without them
    assert "runtime_quantiles" not in read_metadata(tmp_path / "again")["estimators"]


def test_a_pickle_in_place_of_the_model_is_refused_and_not_run(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, tmp_path)
    marker = tmp_path / MARKER_NAME
    (directory / MODEL_FILE).write_bytes(pickle.dumps(_Pwn(marker)))
    _rehash(directory)
    with pytest.raises(ModelFileError, match=MODEL_FILE):
        load_predictor(directory)
    assert not marker.exists()


def test_a_skops_file_with_an_untrusted_type_is_refused_unloaded(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, tmp_path)
    sio.dump({"runtime": _Foreign(), "memory": _Foreign()}, directory / MODEL_FILE)
    _rehash(directory)
    with pytest.raises(ModelFileError, match=r"not trusted.*_Foreign"):
        load_predictor(directory)


def test_a_file_changed_after_training_is_refused(saved: Path, tmp_path: Path) -> None:
    directory = _copy(saved, tmp_path)
    data = bytearray((directory / MODEL_FILE).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (directory / MODEL_FILE).write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="SHA-256"):
        load_predictor(directory)
    (directory / MODEL_FILE).write_bytes(bytes(data[: len(data) // 2]))  # a flipped byte may hit padding: cut it
    _rehash(directory)  # even vouched for, a corrupt zip is a clear error
    with pytest.raises(ModelFileError, match=MODEL_FILE):
        load_predictor(directory)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / METADATA_FILE).write_text("{not json"), "metadata.json"),
        (lambda d: (d / METADATA_FILE).write_text(json.dumps({"format": "other/9"})), "other/9.*retrain"),
        (lambda d: (d / METADATA_FILE).unlink(), "missing"),
        (lambda d: (d / HISTORY_FILE).unlink(), HISTORY_FILE),
        (lambda d: ((d / HISTORY_FILE).write_text('{"tasks": 3}'), _rehash(d)), HISTORY_FILE),
    ],
)
def test_damaged_model_directories_are_clear_errors(saved: Path, tmp_path: Path, damage, message: str) -> None:
    directory = _copy(saved, tmp_path)
    damage(directory)
    with pytest.raises(AgoraError, match=message):
        load_predictor(directory)


def test_metadata_says_which_runtime_model_answers_each_category(saved: Path, trained: Predictor) -> None:
    chosen = read_metadata(saved)["runtime_model_per_category"]
    assert chosen and {c: v["model"] for c, v in chosen.items()} == {c: trained.runtime_model_of(c) for c in chosen}
    assert all(set(entry) <= {"model", "held_out_mdae_log"} for entry in chosen.values())


def test_a_model_of_format_1_still_loads_and_answers_from_its_trees(
    saved: Path, tmp_path: Path, trained: Predictor, catalog: Catalog, caplog: pytest.LogCaptureFixture
) -> None:
    """A model saved before the per-category choice (the trees alone, no quantiles) loads and says so."""
    directory = _copy(saved, tmp_path)
    sio.dump({"runtime": trained.runtime_model.trees_, "memory": trained.memory_model}, directory / MODEL_FILE)
    metadata = json.loads((directory / METADATA_FILE).read_text())
    (directory / METADATA_FILE).write_text(json.dumps({**metadata, "format": "agora-predictor/1"}))
    _rehash(directory)
    with caplog.at_level("WARNING"):
        predictor = load_predictor(directory)
    assert "has no runtime quantiles" in caplog.text and not predictor.has_runtime_quantiles
    prediction = predictor.predict(read_workflow_shape(SRA_2), catalog)
    assert prediction.tasks and {t.runtime_model for t in prediction.tasks} == {"trees"}


def test_the_shipped_model_is_of_the_current_format_with_quantiles() -> None:
    shipped = Path(__file__).resolve().parents[2] / "models" / "predictor"
    assert read_metadata(shipped)["format"] == model_store.MODEL_FORMAT  # retrain: models/README.md
    assert load_predictor(shipped).has_runtime_quantiles


def test_the_shipped_model_trained_before_the_map_features_answers_as_before(catalog: Catalog) -> None:
    """Its trees never saw ``map_index`` / ``map_width``: it loads, ignores them, and a mapped instance gets
    what the same task unmapped gets."""
    from dataclasses import replace

    shipped = Path(__file__).resolve().parents[2] / "models" / "predictor"
    assert "map_width" not in read_metadata(shipped)["features"]["task_numeric"]  # else this test proves nothing
    predictor = load_predictor(shipped)
    shape = read_workflow_shape(SRA_2)
    mapped = replace(shape, tasks=tuple(replace(t, map_index=i, map_width=50) for i, t in enumerate(shape.tasks)))
    before, after = predictor.predict(shape, catalog), predictor.predict(mapped, catalog)
    assert [t.runtime_s for t in after.tasks] == [t.runtime_s for t in before.tasks]
    assert [t.memory_bytes for t in after.tasks] == [t.memory_bytes for t in before.tasks]


def test_a_model_trained_with_the_map_features_says_so_in_its_metadata(saved: Path) -> None:
    assert {"map_index", "map_width"} <= set(read_metadata(saved)["features"]["task_numeric"])


def test_a_format_2_file_holding_the_trees_alone_is_refused(saved: Path, tmp_path: Path, trained: Predictor) -> None:
    directory = _copy(saved, tmp_path)
    sio.dump({"runtime": trained.runtime_model.trees_, "memory": trained.memory_model}, directory / MODEL_FILE)
    _rehash(directory)
    with pytest.raises(ModelFileError, match="RuntimeChoiceRegressor, format agora-predictor/2"):
        load_predictor(directory)


def test_missing_directory_and_untrained_save(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="no such model directory"):
        load_predictor(tmp_path / "nowhere")
    with pytest.raises(ModelFileError, match="never trained"):
        save_predictor(Predictor(), tmp_path / "m")


def test_default_model_dir_is_the_repository_models_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AGORA_MODEL_DIR", raising=False)
    assert default_model_dir() == Path(__file__).resolve().parents[2] / "models" / "predictor"
    monkeypatch.setenv("AGORA_MODEL_DIR", str(tmp_path))
    assert default_model_dir() == tmp_path


def test_an_installed_package_finds_the_model_its_wheel_put_under_the_prefix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import agora_optimizer

    monkeypatch.delenv("AGORA_MODEL_DIR", raising=False)
    site = tmp_path / "site-packages" / "agora_optimizer"  # no models/ beside it: not a source tree
    site.mkdir(parents=True)
    monkeypatch.setattr(agora_optimizer, "__file__", str(site / "__init__.py"))
    monkeypatch.setattr("sys.prefix", str(tmp_path / "venv"))
    assert default_model_dir() == tmp_path / "venv" / "share" / "agora" / "models" / "predictor"


def _generation(directory: Path) -> int:
    return int(read_metadata(directory)["metrics"]["generation"])


def test_a_save_that_fails_after_the_first_file_leaves_the_old_model_whole(
    trained: Predictor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "model"
    save_predictor(trained, directory, metrics={"generation": 1})

    def disk_full(path: Path, *args: object, **kwargs: object) -> None:
        raise InputFileError(path, "cannot be written: No space left on device")

    monkeypatch.setattr(model_store, "write_text_atomically", disk_full)  # the skops file is written, then this
    with pytest.raises(ModelFileError, match="No space left on device"):
        save_predictor(trained, directory, metrics={"generation": 2})
    assert _generation(directory) == 1 and load_predictor(directory).history == trained.history
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no new directory left behind
    assert sorted(p.name for p in directory.iterdir()) == sorted(MODEL_FILES)
    monkeypatch.undo()
    save_predictor(trained, directory, metrics={"generation": 3})
    assert _generation(directory) == 3 and sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_without_an_atomic_exchange_a_save_interrupted_mid_swap_is_recovered(
    trained: Predictor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(atomic, "_exchange", lambda first, second: False)  # as on a system without renameat2
    directory = tmp_path / "model"
    save_predictor(trained, directory, metrics={"generation": 1})
    save_predictor(trained, directory, metrics={"generation": 2})
    assert _generation(directory) == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    directory.rename(tmp_path / ".model.old-crashed")  # a crash after the old model was moved aside
    monkeypatch.setattr(model_store, "_write_model_files", _fail)
    with pytest.raises(RuntimeError, match="crash"):
        save_predictor(trained, directory, metrics={"generation": 3})
    assert _generation(directory) == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def _fail(*args: object) -> None:
    raise RuntimeError("crash while writing")


def test_a_save_never_replaces_a_directory_holding_other_files(trained: Predictor, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ModelFileError, match=r"holds files that are not this model's \(notes\.txt\)"):
        save_predictor(trained, tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_saved_model_is_readable_by_all_whatever_the_umask(trained: Predictor, tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        save_predictor(trained, tmp_path / "model")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "model").stat().st_mode) == 0o755
    assert {stat.S_IMODE((tmp_path / "model" / name).stat().st_mode) for name in MODEL_FILES} == {0o644}


def _with_trained_versions(saved: Path, tmp_path: Path, **versions: str) -> Path:
    target = _copy(saved, tmp_path)
    metadata = json.loads((target / METADATA_FILE).read_text())
    metadata["library_versions"].update(versions)
    (target / METADATA_FILE).write_text(json.dumps(metadata))
    return target


def _bumped(version: str, part: int) -> str:
    numbers = [int(n) for n in version.split(".")[:3]]
    numbers[part] += 1
    return ".".join(str(n) for n in numbers)


@pytest.mark.parametrize(
    ("library", "part", "warned"),
    [
        ("scikit-learn", 2, True),  # any scikit-learn release may change its estimators
        ("numpy", 1, False),  # a numpy minor release gives the same predictions
        ("numpy", 0, True),  # a numpy major release may not
    ],
)
def test_loading_warns_of_library_versions_that_may_change_predictions(
    saved: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, library: str, part: int, warned: bool
) -> None:
    running = model_store.library_versions()[library]
    other = _with_trained_versions(saved, tmp_path, **{library: _bumped(running, part)})
    with caplog.at_level("WARNING", logger=model_store.log.name):
        load_predictor(other)
    drift = [r.getMessage() for r in caplog.records if "predictions may differ" in r.getMessage()]
    assert bool(drift) is warned, drift
    if warned:
        assert f"{library} {_bumped(running, part)}, running {running}" in drift[0]


def test_loading_with_the_training_versions_warns_of_nothing(saved: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger=model_store.log.name):
        load_predictor(saved)
    assert not [r for r in caplog.records if "predictions may differ" in r.getMessage()]

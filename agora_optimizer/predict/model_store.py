"""Save and load a trained predictor: a directory with three files, and no pickle.

- ``predictor.skops``: the two fitted estimators and the runtime quantiles' residuals
  (:mod:`~agora_optimizer.predict.runtime_quantiles`), in skops' format (a zip of JSON and
  numpy arrays), loaded with an explicit list of trusted types: a file that names any
  other type is refused before anything in it is built, so loading never runs code the
  file chose (a pickle, a ``__reduce__``, an arbitrary function);
- ``history.json``: the cold-start chain's per-task and per-category summary;
- ``metadata.json``: format, library versions, features, estimator parameters, which runtime
  model answers for each category (``runtime_model_per_category``), the training data's hash
  and size, metrics, ``trained_at``, and the SHA-256 of the two
  other files, checked on load (a file changed after training is refused).

A model saved before the runtime quantiles loads with one warning: its p50 and p90 are its point
prediction (a factor of 1.0) until it is trained again.

A save replaces the directory as a whole (a new sibling directory swapped in), so a crash
while saving never leaves a mix of two models, nor a half-written one.

The shipped model is ``models/predictor/`` at the root of the source tree; a wheel installs it
as data under ``<prefix>/share/agora/models/predictor`` (``setup.cfg``'s ``data_files``), where
an install that is not editable finds it. ``AGORA_MODEL_DIR`` points elsewhere.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import agora_optimizer
from agora_optimizer.errors import InputFileError
from agora_optimizer.io.atomic import replaced_directory
from agora_optimizer.io.documents import file_sha256, write_text_atomically
from agora_optimizer.predict.errors import ModelFileError
from agora_optimizer.predict.fallback import History
from agora_optimizer.predict.features import CATEGORICAL, RESOURCE_NUMERIC, TASK_NUMERIC
from agora_optimizer.predict.memory_model import MemoryQuantileRegressor
from agora_optimizer.predict.predictor import Predictor
from agora_optimizer.predict.runtime_choice import RuntimeChoiceRegressor
from agora_optimizer.predict.runtime_model import RuntimeRegressor
from agora_optimizer.predict.runtime_quantiles import RuntimeQuantiles

log = logging.getLogger(__name__)

MODEL_FORMAT = "agora-predictor/2"  # 2: the runtime model chooses per category (RuntimeChoiceRegressor)
READABLE_FORMATS = ("agora-predictor/1", MODEL_FORMAT)  # 1: the runtime model is the trees alone
MODEL_FILE = "predictor.skops"
HISTORY_FILE = "history.json"
METADATA_FILE = "metadata.json"
MODEL_FILES = (MODEL_FILE, HISTORY_FILE, METADATA_FILE)
MODEL_DIR_ENV = "AGORA_MODEL_DIR"
MAX_MODEL_BYTES = 64 * 2**20

# Every type a predictor file may hold beyond skops' defaults (builtins, numpy, scikit-learn
# estimators). ``functools.partial`` is loaded child by child, so a partial of anything but
# the function listed here is still refused.
TRUSTED_TYPES = [
    "agora_optimizer.predict.memory_model.MemoryQuantileRegressor",
    "agora_optimizer.predict.runtime_choice.RuntimeChoiceRegressor",
    "agora_optimizer.predict.runtime_model.RuntimeRegressor",
    "agora_optimizer.predict.scaling_model.ScalingRegressor",
    "agora_optimizer.predict.runtime_quantiles.RuntimeQuantiles",
    "functools.partial",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "sklearn.utils.validation.check_array",
]
_LIBRARIES = ("agora-optimizer", "scikit-learn", "numpy", "scipy", "pandas", "skops")


def default_model_dir() -> Path:
    """``$AGORA_MODEL_DIR``; else ``models/predictor`` of the source tree the package runs from (a
    clone, an editable install); else the copy a wheel installed under ``<prefix>/share/agora``."""
    configured = os.environ.get(MODEL_DIR_ENV)
    if configured:
        return Path(configured)
    source_tree = Path(agora_optimizer.__file__).resolve().parent.parent / "models" / "predictor"
    if source_tree.is_dir():
        return source_tree
    return Path(sys.prefix) / "share" / "agora" / "models" / "predictor"


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            versions[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def save_predictor(
    predictor: Predictor,
    directory: str | Path,
    metrics: Mapping[str, Any] | None = None,
    sources: list[str] | None = None,
) -> Path:
    """Write ``predictor`` to ``directory`` as a whole; returns the metadata file's path.

    The three files are written into a new sibling directory that then takes ``directory``'s
    place (:func:`~agora_optimizer.io.atomic.replaced_directory`): a crash or an error at any
    point leaves the previous model, complete and loadable, or the new one.
    """
    if not predictor.fitted:
        raise ModelFileError(directory, "refusing to save a predictor that was never trained")
    directory = Path(directory)
    try:
        with replaced_directory(directory, MODEL_FILES) as staging:
            _write_model_files(predictor, staging, metrics, sources)
    except InputFileError as exc:
        raise ModelFileError(exc.path, exc.reason) from None
    return directory / METADATA_FILE


def _write_model_files(
    predictor: Predictor, directory: Path, metrics: Mapping[str, Any] | None, sources: list[str] | None
) -> None:
    import skops.io as sio

    estimators = {"runtime": predictor.runtime_model, "memory": predictor.memory_model}
    if predictor.has_runtime_quantiles:
        estimators["runtime_quantiles"] = predictor.runtime_quantiles
    sio.dump(estimators, directory / MODEL_FILE, compression=8)
    write_text_atomically(directory / HISTORY_FILE, json.dumps(predictor.history.to_json(), indent=1) + "\n", 0o644)
    document = {
        "format": MODEL_FORMAT,
        "trained_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "library_versions": library_versions(),
        "features": {
            "categorical": list(CATEGORICAL),
            "task_numeric": list(TASK_NUMERIC),
            "resource_numeric": list(RESOURCE_NUMERIC),
            "runtime_uses_resource_columns": bool(predictor.runtime_model.uses_resources_),
        },
        "estimators": {
            "runtime": {"class": type(predictor.runtime_model).__name__, "params": _params(predictor.runtime_model)},
            "memory": {"class": "MemoryQuantileRegressor", "params": _params(predictor.memory_model)},
            **(
                {
                    "runtime_quantiles": {
                        "class": "RuntimeQuantiles",
                        "params": predictor.runtime_quantiles.get_params(),
                        "summary": predictor.runtime_quantiles.summary(),
                    }
                }
                if predictor.has_runtime_quantiles
                else {}
            ),
        },
        "runtime_model_per_category": _choices(predictor),
        "has_memory_model": predictor.has_memory_model,
        "default_memory_bytes": predictor.default_memory_bytes,
        "training_data": {
            "sha256": predictor.training_sha256,
            "rows": predictor.training_rows,
            "skipped": predictor.skipped,
            "sources": sources or [],
        },
        "metrics": dict(metrics or {}),
        "files": {name: file_sha256(directory / name) for name in (MODEL_FILE, HISTORY_FILE)},
    }
    write_text_atomically(directory / METADATA_FILE, json.dumps(document, indent=1, sort_keys=False) + "\n", 0o644)
    (directory / MODEL_FILE).chmod(0o644)  # a model is for all to read, whatever the umask


def _params(estimator: Any) -> dict[str, Any]:
    """An estimator's parameters as JSON (a nested estimator by its own, ``trees__max_iter``...)."""
    return {k: v for k, v in estimator.get_params(deep=True).items() if not hasattr(v, "get_params")}


def _choices(predictor: Predictor) -> dict[str, Any]:
    """Which runtime model answers for each category, and the held-out errors it was chosen by."""
    model = predictor.runtime_model
    if not isinstance(model, RuntimeChoiceRegressor):
        return {}
    return {
        category: {
            "model": chosen,
            **({"held_out_mdae_log": model.errors_[category]} if category in model.errors_ else {}),
        }
        for category, chosen in sorted(model.choice_.items())
    }


def read_metadata(directory: str | Path) -> dict[str, Any]:
    """The metadata of a model directory, checked for format and the files it lists."""
    directory = Path(directory)
    path = directory / METADATA_FILE
    if not directory.is_dir():
        raise ModelFileError(directory, "no such model directory (train one with `agora train --out DIR`)")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelFileError(path, "missing: not a model directory written by `agora train`") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ModelFileError(path, f"not a readable JSON metadata file ({exc})") from None
    if not isinstance(document, dict) or document.get("format") not in READABLE_FORMATS:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        expected = " or ".join(repr(f) for f in READABLE_FORMATS)
        raise ModelFileError(path, f"format is {found!r}, expected {expected}; retrain with `agora train`")
    files = document.get("files")
    if not isinstance(files, dict) or set(files) != {MODEL_FILE, HISTORY_FILE}:
        raise ModelFileError(path, f"'files' must list the SHA-256 of {MODEL_FILE} and {HISTORY_FILE}")
    return document


def load_predictor(directory: str | Path) -> Predictor:
    """Load a predictor saved by :func:`save_predictor`; anything wrong is a ``ModelFileError``."""
    directory = Path(directory)
    document = read_metadata(directory)
    for name, expected in document["files"].items():
        path = directory / name
        if not path.is_file():
            raise ModelFileError(path, "missing from the model directory")
        if path.stat().st_size > MAX_MODEL_BYTES:
            raise ModelFileError(path, f"is larger than {MAX_MODEL_BYTES} bytes")
        if file_sha256(path) != expected:
            raise ModelFileError(path, "changed since training (its SHA-256 differs from metadata.json); retrain")
    estimators = _load_estimators(directory / MODEL_FILE, document["format"])
    history_path = directory / HISTORY_FILE
    try:
        history = History.from_json(json.loads(history_path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelFileError(history_path, f"not a predictor history ({type(exc).__name__}: {exc})") from None
    _warn_on_version_drift(document)
    predictor = Predictor(
        runtime_model=estimators["runtime"],
        memory_model=estimators["memory"],
        default_memory_bytes=int(document.get("default_memory_bytes", Predictor().default_memory_bytes)),
    )
    predictor.history = history
    predictor.has_memory_model = bool(document.get("has_memory_model"))
    if "runtime_quantiles" in estimators:
        predictor.runtime_quantiles = estimators["runtime_quantiles"]
        predictor.has_runtime_quantiles = True
    else:
        log.warning(
            "model %s has no runtime quantiles (saved before them): its p50 and p90 runtimes are its point "
            "prediction; retrain with `agora train` to learn them",
            directory,
        )
    training = document.get("training_data", {})
    predictor.training_sha256 = str(training.get("sha256", ""))
    predictor.skipped = dict(training.get("skipped", {}))
    predictor.fitted = True
    return predictor


def _load_estimators(path: Path, model_format: str) -> dict[str, Any]:
    """The estimators of a skops file, refusing any type outside skops' defaults and ``TRUSTED_TYPES``.

    Format 1 holds the trees alone as its runtime model (a :class:`RuntimeRegressor`), format 2 the
    per-category choice (a :class:`RuntimeChoiceRegressor`): any other runtime model is refused.
    """
    import skops.io as sio

    # skops raises many kinds of exception on a bad file (zip, JSON, schema, types): at this
    # trust boundary each one means the same thing to the user, so all become ModelFileError.
    try:
        untrusted = sorted(set(sio.get_untrusted_types(file=path)) - set(TRUSTED_TYPES))
    except Exception as exc:
        raise ModelFileError(path, f"not a skops model file ({type(exc).__name__}: {exc})") from None
    if untrusted:
        raise ModelFileError(path, f"names types that are not trusted, refused unloaded: {', '.join(untrusted)}")
    try:
        loaded = sio.load(path, trusted=TRUSTED_TYPES)
    except Exception as exc:
        raise ModelFileError(path, f"cannot be loaded ({type(exc).__name__}: {exc})") from None
    runtime_class, fitted = (
        (RuntimeChoiceRegressor, "choice_") if model_format == MODEL_FORMAT else (RuntimeRegressor, "pipeline_")
    )
    if (
        not isinstance(loaded, dict)
        or not isinstance(loaded.get("runtime"), runtime_class)
        or not isinstance(loaded.get("memory"), MemoryQuantileRegressor)
        or not hasattr(loaded["runtime"], fitted)
    ):
        raise ModelFileError(
            path,
            f"does not hold a fitted runtime model ({runtime_class.__name__}, format {model_format}) and memory model",
        )
    quantiles = loaded.get("runtime_quantiles")
    if quantiles is not None and (
        not isinstance(quantiles, RuntimeQuantiles) or not hasattr(quantiles, "pooled_residuals_")
    ):
        raise ModelFileError(path, "holds runtime quantiles that are not fitted RuntimeQuantiles")
    return loaded


def _warn_on_version_drift(document: Mapping[str, Any]) -> None:
    """Warn where the libraries that compute a prediction differ from the training's.

    scikit-learn's estimators may change between any two releases, so any difference is named;
    numpy's only across major versions (the shipped model gives the same predictions, to the last
    bit, under numpy 2.4.6 and 2.5.5: ``bench/predictor_portability.py``).
    """
    trained = document.get("library_versions", {})
    if not isinstance(trained, dict):
        return
    now = library_versions()
    for name in ("scikit-learn", "numpy"):
        then, current = trained.get(name), now.get(name)
        if then is None or then == current:
            continue
        if name == "numpy" and _major(then) == _major(current):
            continue
        log.warning(
            "model trained with %s %s, running %s: predictions may differ; retrain with `agora train`",
            name,
            then,
            current,
        )


def _major(version: object) -> str:
    return str(version).split(".", 1)[0]

"""A trained :class:`QueueWaitRegressor` in a directory: ``queue_wait.json`` and ``pipeline.skops``.

The JSON holds the parameters, what the model saw (samples and median wait per partition) and
its :meth:`~QueueWaitRegressor.describe` text and the SHA-256 of the fitted scikit-learn pipeline
(absent for a fallback), which is written with skops, not pickle. On load, the pipeline file must
have that hash, and skops may build only the types it trusts by default and
:data:`TRUSTED_TYPES`: a file that asks for anything else is refused unloaded (a prefix such as
``sklearn.`` would not do: scikit-learn ships functions that run commands).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sklearn
import skops.io as sio

from agora_optimizer.errors import InputFileError
from agora_optimizer.io.atomic import replaced_directory
from agora_optimizer.io.documents import file_sha256, write_text_atomically
from agora_optimizer.queue_wait.errors import QueueWaitModelError
from agora_optimizer.queue_wait.features import FEATURE_COLUMNS
from agora_optimizer.queue_wait.model import QueueWaitRegressor

FORMAT = "agora-queue-wait/1"
META_FILE = "queue_wait.json"
PIPELINE_FILE = "pipeline.skops"
TRUSTED_TYPES = ["sklearn.tree._tree.Tree"]  # what a fitted pipeline holds beyond skops' defaults


def save_model(model: QueueWaitRegressor, directory: str | Path) -> Path:
    """Write ``model`` (fitted) into ``directory``, replacing it as a whole; returns the JSON file's path.

    The files go into a new sibling directory that then takes ``directory``'s place, so a crash
    at any point leaves the previous model or the new one, never a mix.
    """
    if not hasattr(model, "n_samples_"):
        raise QueueWaitModelError("cannot save a queue-wait model that is not fitted")
    folder = Path(directory)
    with replaced_directory(folder, (META_FILE, PIPELINE_FILE)) as staging:
        _write_model_files(model, staging)
    return folder / META_FILE


def _write_model_files(model: QueueWaitRegressor, folder: Path) -> None:
    pipeline_path = folder / PIPELINE_FILE
    if model.pipeline_ is not None:
        sio.dump(model.pipeline_, pipeline_path)
        pipeline_path.chmod(0o644)
    meta = {
        "format": FORMAT,
        "params": model.get_params(),
        "feature_columns": list(FEATURE_COLUMNS),
        "n_samples": model.n_samples_,
        "samples_per_partition": model.samples_per_partition_,
        "partition_median_s": model.partition_median_s_,
        "median_s": model.median_s_,
        "has_pipeline": model.pipeline_ is not None,
        "pipeline_sha256": file_sha256(pipeline_path) if model.pipeline_ is not None else None,
        "sklearn_version": sklearn.__version__,
        "saved_at": datetime.now(UTC).isoformat(),
        "describe": model.describe(),
    }
    write_text_atomically(folder / META_FILE, json.dumps(meta, indent=2) + "\n", 0o644)


def load_model(directory: str | Path) -> QueueWaitRegressor:
    """Read a model written by :func:`save_model`; errors name the file and what is wrong."""
    folder = Path(directory)
    meta_path = folder / META_FILE
    try:
        meta: Any = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputFileError(meta_path, "no queue-wait model here (train one with 'agora queue train')") from None
    except UnicodeDecodeError as exc:
        raise InputFileError(
            meta_path, f"not a queue-wait model file: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    except (OSError, ValueError, RecursionError) as exc:
        raise InputFileError(meta_path, f"not a queue-wait model file: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise InputFileError(meta_path, f"not a queue-wait model file (format is not {FORMAT!r})")
    if meta.get("feature_columns") != list(FEATURE_COLUMNS):
        raise InputFileError(meta_path, "written for other features than this agora's: train it again")
    try:
        model = QueueWaitRegressor(**meta["params"])
        model.n_samples_ = int(meta["n_samples"])
        model.samples_per_partition_ = {str(k): int(v) for k, v in meta["samples_per_partition"].items()}
        model.partition_median_s_ = {str(k): float(v) for k, v in meta["partition_median_s"].items()}
        model.median_s_ = None if meta["median_s"] is None else float(meta["median_s"])
        has_pipeline = bool(meta["has_pipeline"])
        expected_sha256 = meta.get("pipeline_sha256") or ""
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputFileError(meta_path, f"malformed queue-wait model file: {exc!r}") from None
    model.pipeline_ = _load_pipeline(folder / PIPELINE_FILE, expected_sha256) if has_pipeline else None
    return model


def _load_pipeline(path: Path, expected_sha256: str) -> Any:
    try:
        actual_sha256 = file_sha256(path)
    except FileNotFoundError:
        raise InputFileError(path, "missing: the model's JSON says it has a fitted pipeline") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot be read: {exc.strerror or exc}") from None
    if not expected_sha256:
        raise InputFileError(
            path, f"refused: {META_FILE} records no SHA-256 for it (an older agora wrote it): train again"
        )
    if actual_sha256 != expected_sha256:
        raise InputFileError(path, f"refused: its SHA-256 is not the one {META_FILE} recorded (file changed)")
    try:
        untrusted = sio.get_untrusted_types(file=path)
    except Exception as exc:  # skops raises assorted errors for a file that is not its format
        raise InputFileError(path, f"not a skops file: {exc}") from None
    foreign = sorted(set(untrusted) - set(TRUSTED_TYPES))
    if foreign:
        raise InputFileError(path, f"refused: it would build types agora does not trust: {', '.join(foreign)}")
    try:
        return sio.load(path, trusted=TRUSTED_TYPES)
    except Exception as exc:
        raise InputFileError(path, f"cannot load the fitted pipeline: {exc}") from None

"""Reading JSON and YAML documents with errors that name the file and the field path."""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from agora_optimizer.errors import FieldError, InputFileError
from agora_optimizer.io.atomic import fsync_directory, replace_file
from agora_optimizer.io.yaml_loader import load_yaml
from agora_optimizer.model.workflow import check_number, shown

MAX_DOCUMENT_BYTES = 512 * 2**20


def read_document(path: str | Path) -> Any:
    """Parse a JSON or YAML file (by its suffix; anything else is tried as JSON, then YAML).

    Either refuses a key said twice in one mapping (a reader would keep only one of them), naming the
    key and the field path; YAML also an alias bomb (:mod:`agora_optimizer.io.yaml_loader`).
    """
    path = Path(path)
    try:
        if path.is_dir():
            raise InputFileError(path, "is a directory, not a file")
        if path.stat().st_size > MAX_DOCUMENT_BYTES:
            raise InputFileError(path, f"is larger than {MAX_DOCUMENT_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputFileError(path, "no such file") from None
    except PermissionError:
        raise InputFileError(path, "permission denied") from None
    except UnicodeDecodeError as exc:
        raise InputFileError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise InputFileError(path, f"cannot be read: {exc.strerror or exc}") from None
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        document = _parse_yaml(path, text)
    else:
        try:
            document = _parse_json(path, text)
        except InputFileError:
            if suffix == ".json":
                raise
            document = _parse_yaml(path, text)
    if "\\u" in text or "\\U" in text:  # only an escape can spell a lone surrogate
        _reject_lone_surrogates(path, document)
    return document


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _values(document: Any) -> Iterator[tuple[str, Any]]:
    """Every value of ``document`` with its field path ("" for the whole), a shared one once."""
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [("", document)]
    while stack:
        where, value = stack.pop()
        yield where, value
        if not isinstance(value, dict | list) or id(value) in seen:  # YAML anchors may share or nest values
            continue
        seen.add(id(value))
        if isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))
        else:
            stack.extend((f"{where}.{key}" if where else str(key), item) for key, item in value.items())


def _reject_lone_surrogates(path: Path, document: Any) -> None:
    """Refuse strings with an unpaired ``\\ud800``-``\\udfff`` escape: they cannot be printed or written as UTF-8."""
    reason = "contains a lone surrogate (an unpaired \\ud800-\\udfff escape), which is not text"
    for where, value in _values(document):
        if isinstance(value, str) and not _is_text(value):
            raise FieldError(path, where or "<document>", f"{shown(value)} {reason}")
        if isinstance(value, dict):
            for key in value:
                if isinstance(key, str) and not _is_text(key):
                    raise FieldError(path, where or "<document>", f"key {shown(key)} {reason}")


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a valid JSON number")


def _parse_json(path: Path, text: str) -> Any:
    repeated: dict[int, str] = {}  # id of an object that said a key twice -> that key

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found = dict(pairs)
        if len(found) < len(pairs):
            repeated[id(found)] = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        return found

    try:
        document = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise InputFileError(path, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except (ValueError, RecursionError) as exc:
        raise InputFileError(path, f"invalid JSON: {exc}") from None
    if repeated:  # JSON readers keep one of the two (Python's the last): which was meant is unknown
        where, key = next((where, repeated[id(v)]) for where, v in _values(document) if id(v) in repeated)
        raise FieldError(path, where or "<document>", f"duplicate key {shown(key)}: say it once")
    return document


def _parse_yaml(path: Path, text: str) -> Any:
    try:
        return load_yaml(text, str(path))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputFileError(path, f"invalid YAML{where}: {problem}") from None
    except (ValueError, RecursionError) as exc:
        raise InputFileError(path, f"invalid YAML: {exc}") from None


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (hex), read in blocks: what model files record of their parts."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_text_atomically(path: str | Path, text: str, mode: int | None = None, durable: bool = False) -> None:
    """Write ``text`` to ``path`` so that a reader never sees half a file, and no temporary is left behind.

    ``mode`` sets the file's permissions whatever the umask (else 0600); ``durable`` flushes the
    file and its directory to disk before returning. Errors name the file (InputFileError).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(path, text, 0o600 if mode is None else mode, durable=durable)
        if durable:
            fsync_directory(path.parent)
    except OSError as exc:
        raise InputFileError(path, f"cannot be written: {exc.strerror or exc}") from None


_MISSING = object()


class Node:
    """A value inside a document, with the path that leads to it (for error messages)."""

    def __init__(self, value: Any, source: str, path: str = "") -> None:
        self.value = value
        self.source = source
        self.path = path

    def _child_path(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else key

    def fail(self, reason: str) -> FieldError:
        return FieldError(self.source, self.path or "<document>", reason)

    def mapping(self) -> dict[str, Any]:
        if not isinstance(self.value, dict):
            raise self.fail(f"expected an object, got {type(self.value).__name__}")
        return self.value

    def has(self, key: str) -> bool:
        return key in self.mapping() and self.mapping()[key] is not None

    def get(self, key: str, default: Any = _MISSING) -> Node:
        mapping = self.mapping()
        if key not in mapping:
            if default is _MISSING:
                raise FieldError(self.source, self._child_path(key), "is required but missing")
            return Node(default, self.source, self._child_path(key))
        return Node(mapping[key], self.source, self._child_path(key))

    def items(self) -> Iterator[Node]:
        if not isinstance(self.value, list):
            raise self.fail(f"expected a list, got {type(self.value).__name__}")
        for i, item in enumerate(self.value):
            yield Node(item, self.source, self._child_path(i))

    def string(self) -> str:
        if not isinstance(self.value, str) or not self.value.strip():
            raise self.fail(f"expected a non-empty string, got {shown(self.value)}")
        return self.value

    def text(self) -> str:
        """A string that may be empty (a task's category, when its source gave none)."""
        if not isinstance(self.value, str):
            raise self.fail(f"expected a string, got {type(self.value).__name__}")
        return self.value

    def optional(self) -> Node | None:
        return None if self.value is None else self

    def number(self, **limits: Any) -> float:
        value = self.value
        if isinstance(value, str):  # YAML 1.1 reads 1.25e9 as a string
            try:
                value = float(value)
            except ValueError:
                raise self.fail(f"expected a number, got {shown(self.value)}") from None
        return check_number(self.source, self.path, value, **limits)

    def integer(self, **limits: Any) -> int:
        return int(self.number(integer=True, **limits))

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            raise self.fail(f"expected true or false, got {shown(self.value)}")
        return self.value


def is_finite_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

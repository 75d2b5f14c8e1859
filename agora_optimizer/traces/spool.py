"""Trace rows that could not be written wait on disk until the trace store answers again.

The listener (in the task process) and the executor (in the scheduler) both write one
attempt's row; when the store is down (a PostgreSQL restart, a network cut) each writes
the row it could not store as one JSON file in the spool directory, ``STATE_DIR/.trace-spool``
(the executor's state directory, which SLURM nodes share). The executor replays the spool
on its heartbeat (:func:`replay`), merging each row with what the store holds by then, so
that the order the two writers come back in does not matter: the listener's row brings what
the task knew (operator, times, its state and error), the executor's what only it knows
(resource, backend, host, requests, queue time, the worker's measure) and the failures the
task could not report (an OOM kill, a lost job, a cancel). No row is lost while the spool's
file system has room; a row that cannot even be spooled is logged with its key.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import asdict, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from agora_optimizer.io.atomic import replace_file
from agora_optimizer.traces.records import TaskAttempt

log = logging.getLogger(__name__)

Source = Literal["listener", "executor"]
SPOOL_NAME = ".trace-spool"
BACKEND_FAILURES = ("oom_killed", "lost", "cancelled", "interrupted")  # what only the executor can tell of an attempt
_EXECUTOR_FIELDS = ("resource_type", "backend", "host", "requested_cores", "requested_memory_bytes", "queued_at")
_TIMES = {f.name for f in fields(TaskAttempt) if f.name in ("queued_at", "started_at", "ended_at")}


def spool_path(name: str = SPOOL_NAME) -> Path:
    """``STATE_DIR/<name>`` of ``[agora] state_dir``, the trace spool by default (not created)."""
    from agora_optimizer import settings

    return settings.directory("state_dir", "jobs", create=False) / name


def spool_dir(name: str = SPOOL_NAME) -> Path:
    """``STATE_DIR/<name>`` of ``[agora] state_dir``, the trace spool by default (created)."""
    from agora_optimizer import settings

    # Private, as the executor makes it: a task process (any executor's) may create the state
    # directory first, and the executor refuses one that others can write to.
    path = settings.directory("state_dir", "jobs", mode=0o700) / name
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def spool(attempt: TaskAttempt, source: Source, directory: Path | None = None) -> Path:
    """Keep ``attempt`` for a later :func:`replay`; returns its file. Raises OSError when even that fails."""
    target = directory if directory is not None else spool_dir()
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    raw = {name: value.isoformat() if isinstance(value, datetime) else value for name, value in asdict(attempt).items()}
    path = target / f"{_file_key(attempt)}.{source}.json"
    replace_file(path, json.dumps({"source": source, "attempt": raw}), 0o600)  # a row holds the task's error
    return path


def merge(listener: TaskAttempt, executor: TaskAttempt) -> TaskAttempt:
    """One attempt's row from the listener's and the executor's (as ``executor_attempt`` merges them)."""
    backend_failure = executor.state in BACKEND_FAILURES
    return replace(
        listener,
        **{name: getattr(executor, name) or getattr(listener, name) for name in _EXECUTOR_FIELDS},
        peak_rss_bytes=listener.peak_rss_bytes or executor.peak_rss_bytes,
        cpu_time_s=listener.cpu_time_s if listener.cpu_time_s is not None else executor.cpu_time_s,
        state=executor.state if backend_failure else listener.state,
        error_text=executor.error_text if backend_failure else listener.error_text,
    )


def pending(directory: Path | None = None) -> int:
    """How many rows wait in the spool."""
    target = directory if directory is not None else spool_path()
    return sum(1 for _ in target.glob("*.json")) if target.is_dir() else 0


def replay(store: Any, directory: Path | None = None, limit: int = 200) -> int:
    """Write up to ``limit`` spooled rows to ``store`` (a TraceStore), merged with its rows; returns how many.

    A file is removed only once its row is written; a store error stops the replay (the rest
    waits for the next one), a file that cannot be read is renamed ``*.bad`` and logged.
    """
    target = directory if directory is not None else spool_path()
    if not target.is_dir():
        return 0
    written = 0
    for path in oldest_first(target)[:limit]:
        try:  # another process (the executor, a task's listener) may replay the same spool meanwhile
            document = json.loads(path.read_text())
            source: Source = document["source"]
            attempt = _attempt(document["attempt"])
        except FileNotFoundError:
            continue  # written by the other one
        except (OSError, ValueError, KeyError, TypeError) as exc:
            set_aside(path, "spooled trace row", exc)
            continue
        existing = store.attempt(attempt.dag_id, attempt.task_id, attempt.run_id, attempt.try_number, attempt.map_index)
        row = attempt
        if existing is not None:
            row = merge(attempt, existing) if source == "listener" else merge(existing, attempt)
        store.add([row])
        path.unlink(missing_ok=True)
        written += 1
    return written


def oldest_first(directory: Path) -> list[Path]:
    """The spooled files (``*.json``) of ``directory``, oldest first."""
    return sorted(directory.glob("*.json"), key=_mtime)


def set_aside(path: Path, what: str, exc: BaseException) -> None:
    """Rename a spooled file that cannot be read ``*.bad``, for a person to look at, and say so."""
    bad = path.with_suffix(".bad")
    log.error("agora: %s %s unreadable (%s); kept as %s", what, path, exc, bad.name)
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, bad)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _attempt(raw: dict[str, Any]) -> TaskAttempt:
    values: dict[str, Any] = {
        name: datetime.fromisoformat(value) if name in _TIMES and isinstance(value, str) else value
        for name, value in raw.items()
    }
    return TaskAttempt(**values)


def _file_key(attempt: TaskAttempt) -> str:
    digest = hashlib.sha256(
        json.dumps([attempt.dag_id, attempt.task_id, attempt.run_id, attempt.map_index, attempt.try_number]).encode()
    ).hexdigest()[:32]
    return f"{attempt.dag_id}.{attempt.task_id}.try{attempt.try_number}-{digest}"[-120:]

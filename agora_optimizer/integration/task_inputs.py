"""What an Airflow task reads: the bytes and the files of its input, for the predictor's size features.

A WfFormat task lists the files it reads; an Airflow task says it here, the first source that answers:

1. ``executor_config={"agora": {"input_bytes": ..., "input_files": ...}}``: a whole number, a Jinja
   template rendered with the task's context (``"{{ params.rows * 120 }}"``, ``"{{ dag_run.conf['size'] }}"``),
   or a callable given the context. Before a run (a plan) a template or a callable cannot be
   evaluated: the median of the task's recorded values stands in, else the size is unknown;
2. the task's ``inlets`` that name a local file or directory (an :class:`~airflow.sdk.Asset` or a string:
   ``file:///data/in.csv`` or ``/data/in``): their sizes summed and files counted, a directory walked;
   a path that does not exist counts 0, and is named; an object-store URI (``s3://``) is unknown;
3. what the upstream tasks recorded writing (the trace store's ``output_bytes``, :func:`upstream_outputs`:
   the trace listener records it from a task's local outlets when the task succeeds, sized as inlets are).

The trace listener records what (1) and (2) say with the run's context (:func:`run_inputs`), and (3)
from the upstream rows of its run; planning asks :func:`planned_inputs` with what the DAG file
declares (:func:`declared_inputs`) and the recorded attempts, so that the rows the predictor learns
from and the tasks it answers for are sized alike. A bad value is a
:class:`~agora_optimizer.errors.FieldError` naming the DAG, the task and the field.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from agora_optimizer.errors import FieldError, first_line
from agora_optimizer.model.task_hints import INPUT_KEYS, hint_field, task_agora_config
from agora_optimizer.model.workflow import check_number, shown
from agora_optimizer.traces.records import MAX_BYTES, MAX_FILES, TaskAttempt

INPUT_FIELDS: tuple[str, ...] = INPUT_KEYS
_MAXIMUM = {"input_bytes": MAX_BYTES, "input_files": MAX_FILES}

InputSource = Literal["declared", "recorded", "inlets", "upstream", ""]


@dataclass(frozen=True)
class TaskInputs:
    """How many bytes and files a task reads (None: unknown), which source said so, and what it could not see."""

    input_bytes: int | None = None
    input_files: int | None = None
    source: InputSource = ""
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        """``"1024 bytes in 2 files (inlets)"``, ``"unknown"``; with its notes."""
        if self.input_bytes is None and self.input_files is None:
            said = "unknown"
        else:
            count = self.input_files
            files = f" in {count} file{'' if count == 1 else 's'}" if count is not None else ""
            said = f"{self.input_bytes if self.input_bytes is not None else 'unknown'} bytes{files} ({self.source})"
        return "; ".join([said, *self.notes])


@dataclass(frozen=True)
class InputDeclaration:
    """What a task's DAG file says it reads, before any run.

    ``literal`` holds the fields given as numbers (checked); ``per_run`` the fields given as a template
    or a callable (known only in a run); ``inlets`` the inlets' URIs and paths, as written.
    """

    literal: Mapping[str, int]
    per_run: tuple[str, ...] = ()
    inlets: tuple[str, ...] = ()

    @property
    def declared(self) -> bool:
        """``executor_config["agora"]`` names an input field (which then wins over the inlets)."""
        return bool(self.literal) or bool(self.per_run)


NO_DECLARATION = InputDeclaration(literal={})


def declared_inputs(task: Any, hints: Mapping[str, Any], source: str) -> InputDeclaration:
    """The declaration of ``task`` (an Airflow operator) whose ``executor_config["agora"]`` is ``hints``.

    ``source`` names the DAG in errors; a number that cannot be a size raises ``FieldError``.
    """
    literal: dict[str, int] = {}
    per_run: list[str] = []
    for name in INPUT_FIELDS:
        if name not in hints:
            continue
        value = hints[name]
        if isinstance(value, str) or callable(value):
            per_run.append(name)
        else:
            literal[name] = checked_size(value, source, hint_field(task, name))
    inlets = named_uris(getattr(task, "inlets", None))
    return InputDeclaration(literal=literal, per_run=tuple(per_run), inlets=inlets)


def says_nothing(task: Any) -> bool:
    """``task`` declares no input field and names no inlet: its upstream tasks' outputs are what it reads."""
    hints = task_agora_config(task)
    declared = any(name in hints for name in INPUT_FIELDS)
    return not declared and not named_uris(getattr(task, "inlets", None))


def checked_size(value: object, source: str, field: str) -> int:
    """``value`` as a count of bytes or files (a whole number >= 0, or such a number written as text)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise FieldError(source, field, f"expected a whole number, got {shown(value)}") from None
    name = field.rsplit(".", 1)[-1]
    return int(check_number(source, field, value, maximum=_MAXIMUM.get(name, MAX_BYTES), integer=True))


def run_inputs(task: Any, context: Mapping[str, Any], dag_id: str) -> TaskInputs:
    """What ``task`` reads in the run of ``context`` (its template context); raises ``FieldError``."""
    hints = task_agora_config(task)
    source = f"DAG '{dag_id}'"
    if any(name in hints for name in INPUT_FIELDS):
        values = {name: _evaluated(task, hints[name], context, source, name) for name in INPUT_FIELDS if name in hints}
        return TaskInputs(values.get("input_bytes"), values.get("input_files"), "declared")
    return inlet_sizes(named_uris(getattr(task, "inlets", None)))


def planned_inputs(
    declaration: InputDeclaration,
    key: tuple[str, str],
    upstream: Sequence[str],
    attempts: Iterable[TaskAttempt],
) -> TaskInputs:
    """What the task ``key`` (``(dag_id, task_id)``) will read in its next run, as far as is known before it."""
    dag_id = key[0]
    if declaration.declared:
        values: dict[str, int | None] = dict(declaration.literal)
        notes = []
        mine = [a for a in attempts if (a.dag_id, a.task_id) == key]
        for name in declaration.per_run:
            recorded = [getattr(a, name) for a in mine if getattr(a, name) is not None]
            values[name] = int(statistics.median(recorded)) if recorded else None
            said = f"the median of {len(recorded)} recorded runs" if recorded else "unknown: no run recorded it yet"
            notes.append(f"{name} is evaluated per run; before the run, {said}")
        known = [name for name in INPUT_FIELDS if values.get(name) is not None]
        source: InputSource = "declared" if any(name in declaration.literal for name in known) else "recorded"
        return TaskInputs(values.get("input_bytes"), values.get("input_files"), source if known else "", tuple(notes))
    if declaration.inlets:
        return inlet_sizes(declaration.inlets)
    return upstream_outputs(dag_id, upstream, attempts)


def upstream_outputs(dag_id: str, upstream: Sequence[str], attempts: Iterable[TaskAttempt]) -> TaskInputs:
    """What the upstream tasks wrote, as recorded: per task and run, the sum over its map indexes of the last
    try's ``output_bytes`` (and files); per task the median over runs; summed over the tasks. Before a run
    ``attempts`` are every run's; in a run, that run's. Unknown when no upstream task recorded its output."""
    wanted = set(upstream)
    last: dict[tuple[str, str, int], TaskAttempt] = {}
    for attempt in attempts:
        if attempt.dag_id == dag_id and attempt.task_id in wanted and attempt.output_bytes is not None:
            key = (attempt.task_id, attempt.run_id, attempt.map_index)
            if key not in last or attempt.try_number > last[key].try_number:
                last[key] = attempt
    per_run: dict[str, dict[str, list[TaskAttempt]]] = {}
    for (task_id, run_id, _), attempt in last.items():
        per_run.setdefault(task_id, {}).setdefault(run_id, []).append(attempt)
    if not per_run:
        return TaskInputs()
    total = files = 0
    files_known = True
    for runs in per_run.values():
        total += int(statistics.median(sum(a.output_bytes or 0 for a in rows) for rows in runs.values()))
        counts = [sum(a.output_files or 0 for a in rows) for rows in runs.values() if _all_counted(rows)]
        files_known = files_known and bool(counts)
        files += int(statistics.median(counts)) if counts else 0
    silent = sorted(wanted - set(per_run))
    notes = (f"no recorded output of upstream {', '.join(silent)}",) if silent else ()
    return TaskInputs(min(total, MAX_BYTES), min(files, MAX_FILES) if files_known else None, "upstream", notes)


def _all_counted(rows: Sequence[TaskAttempt]) -> bool:
    return all(a.output_files is not None for a in rows)


def inlet_uri(inlet: object) -> str:
    """The URI or path an inlet names ("" for an inlet that names none: an asset alias, a reference by name)."""
    if isinstance(inlet, str | os.PathLike):
        return os.fsdecode(inlet)  # a path; an Asset: its URI
    if isinstance(getattr(inlet, "protocol", None), str):
        return str(inlet)  # an ObjectStoragePath (a UPath): its URI
    uri = getattr(inlet, "uri", None)
    return uri if isinstance(uri, str) else ""


def named_uris(items: Iterable[object] | None) -> tuple[str, ...]:
    """The URIs and paths that a task's inlets or outlets name, in order (those that name none left out)."""
    return tuple(uri for uri in (inlet_uri(item) for item in items or ()) if uri)


def local_path(uri: str) -> Path | None:
    """The local path a URI names: ``file:///a/b`` (or ``file://localhost/a/b``) and ``/a/b``; None for the rest."""
    parts = urlsplit(uri)
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return Path(unquote(parts.path))
    if not parts.scheme and os.path.isabs(uri):
        return Path(uri)
    return None


def inlet_sizes(uris: Sequence[str], role: str = "inlet") -> TaskInputs:
    """The bytes and files of the inlets' local paths (unknown when none is local); ``role`` names the URIs in
    the notes (the trace listener sizes a task's outlets with it: ``"outlet"``)."""
    total_bytes = total_files = 0
    measured = False
    notes: list[str] = []
    for uri in uris:
        path = local_path(uri)
        if path is None:
            notes.append(f"{role} {uri}: not a local path, its size is unknown")
            continue
        measured = True
        size = path_size(path)
        if size is None:
            notes.append(f"{role} {uri}: {path} does not exist, counted 0 bytes")
            continue
        total_bytes, total_files = total_bytes + size[0], total_files + size[1]
    if not measured:
        return TaskInputs(notes=tuple(notes))
    return TaskInputs(min(total_bytes, MAX_BYTES), min(total_files, MAX_FILES), "inlets", tuple(notes))


def path_size(path: Path) -> tuple[int, int] | None:
    """(bytes, files) of a file, or of every file under a directory; None when the path does not exist."""
    try:
        if not path.is_dir():
            return path.stat().st_size, 1
    except OSError:  # missing, or a dangling link
        return None
    total = files = 0
    for folder, _, names in os.walk(path):
        for name in names:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except OSError:
                continue  # removed while walked, or a dangling link: nothing to read
            files += 1
    return total, files


def _evaluated(task: Any, value: object, context: Mapping[str, Any], source: str, name: str) -> int:
    """A declared field's value in this run: a template rendered, a callable called, then checked."""
    field = hint_field(task, name)
    try:
        if isinstance(value, str):
            value = _rendered(task, value, context)
        elif callable(value):
            value = value(context)
    except Exception as exc:
        raise FieldError(source, field, f"cannot evaluate it: {type(exc).__name__}: {first_line(exc)}") from exc
    return checked_size(value, source, field)


def _rendered(task: Any, template: str, context: Mapping[str, Any]) -> str:
    from airflow.sdk.definitions.context import render_template_to_string

    environment = getattr(task, "get_template_env", None)
    if callable(environment):
        jinja = environment()
    else:
        import jinja2.sandbox

        jinja = jinja2.sandbox.SandboxedEnvironment(undefined=jinja2.StrictUndefined)
    return render_template_to_string(jinja.from_string(template), context)  # type: ignore[arg-type]

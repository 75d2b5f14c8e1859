"""A directory of plans: ``<root>/<dag_id>/current.json``, ``history/<seq>-applied-<time>.json``, ``runs/...``.

The cluster policy reads the current plan of a DAG at parse time, the rerun DAG writes a
new one after each re-optimization, and the UI lists the history. Plans are spec files
(``agora-plan/1``) written atomically and flushed to disk, so a reader never sees half a
plan and a crash loses none; history is appended to (and only its oldest entries removed, below),
one file per time a plan was put in force, numbered in that order (a rollback, which applies an
older plan again, comes last).
History files are created exclusively, so two saves at the same instant, from one process
or several, each get their own entry. Files are 0644 and directories 0755 whatever the
umask: the api-server that shows them may run as another user.

An entry may have the workflow its plan was made from beside it (``<entry>.workflow.json``,
:mod:`agora_optimizer.io.workflow_file`): the executor re-plans a drifted run from it
(:mod:`agora_optimizer.planning.replan`) and has only the plan's version. It is written before its
entry appears, so an entry saved with one is never seen without it; entries saved without one
(and all of the old layout) have none.

History written before the numbering (``<created_at>-<index>.json``) is still read: those
entries come first, in the order their files were written.

The history is bounded two ways, since the rerun DAG puts a plan in force at every rerun:

- a plan identical to the current one (:func:`same_plan`: the same plan but for when and how long it
  was made, and the same workflow beside it when one is given) adds no entry and leaves the current
  plan's file, and so its version, as it was (:attr:`StoredPlan.unchanged`);
- ``history_max`` (``[agora] plan_history_max``, 0: keep all) entries per DAG are kept: a save that is
  told which versions recorded runs still name (``in_use``) removes the oldest entries past that
  limit, with their workflows, but never one of those. A save told nothing removes nothing, since
  the plan store cannot see the run records (they are a layer above it): the rerun DAG
  (:func:`agora_optimizer.integration.reoptimize.replan`) tells it.

A planned DAG run may have a plan of its own (``runs/<run_after>.json``, :meth:`PlanStore.save_run`): a
window of many runs planned together (``agora optimize --dags ... --window 24h --apply``) gives each run
of a DAG its own plan. The policy routes at parse time from the current plan; the executor runs a run's
tasks at its run plan's placements (:mod:`agora_optimizer.executor.runs.plans`). Run plans are not
history (nothing was put in force for the DAG); :meth:`PlanStore.find` and :meth:`PlanStore.workflow` find
them by version as they find history entries, so a run's machine order, repairs and record use its plan.

A plan names resources of the catalogs in ``[agora] catalog``; the policy refuses to apply a
plan whose resources the executor does not know (see
:mod:`agora_optimizer.integration.policy`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agora_optimizer.errors import AgoraError
from agora_optimizer.io.atomic import fsync_directory
from agora_optimizer.io.documents import write_text_atomically
from agora_optimizer.io.plan_file import load_plan, plan_json
from agora_optimizer.io.workflow_file import load_workflow_file, workflow_json
from agora_optimizer.model.plan import Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.validate import ensure_plan_matches

# Airflow's own rule for DAG ids (``KEY_REGEX`` of airflow.sdk, at most 250 characters): Unicode
# letters and digits, ``_``, ``.`` and ``-``. None of them is a path separator; ``.`` and ``..``
# alone are refused, so a DAG id always names one directory under the store's root.
_DAG_ID = re.compile(r"[\w.-]{1,250}")
MAX_NAME_BYTES = 255  # a file name on Linux file systems
_ENTRY = re.compile(r"^(\d+)-applied-(\d{8}T\d{6}\d{6})Z\.json$")
FILE_MODE = 0o644
DIRECTORY_MODE = 0o755
WORKFLOW_SUFFIX = ".workflow.json"
RUNS_DIR = "runs"  # under a DAG's directory: the plan of each planned run, named by its run_after
WINDOW_DIR = "@platform"  # the last window of many DAG runs put in force
WINDOW_FORMAT = "agora-window/1"  # beside a history entry: the workflow its plan was made from


class PlanStoreError(AgoraError):
    """A DAG id that cannot name a directory, or a plan file that cannot be read or written."""


class InvalidDagIdError(PlanStoreError):
    """Not a DAG id Airflow accepts (or one that cannot name a directory)."""


def check_dag_id(dag_id: str) -> str:
    """``dag_id`` if Airflow would accept it and it names one directory; else InvalidDagIdError."""
    if not isinstance(dag_id, str) or not _DAG_ID.fullmatch(dag_id) or dag_id in {".", ".."}:
        raise InvalidDagIdError(
            f"DAG id {dag_id!r} is not a valid Airflow DAG id (letters, digits, '_', '.' and '-', at most 250)"
        )
    if len(dag_id.encode("utf-8")) > MAX_NAME_BYTES:
        raise InvalidDagIdError(
            f"DAG id {dag_id!r} is longer than a file name may be ({MAX_NAME_BYTES} bytes of UTF-8)"
        )
    return dag_id


@dataclass(frozen=True)
class StoredPlan:
    dag_id: str
    path: Path
    plan: Plan
    unchanged: bool = False  # saved as the current plan, which it already was: no history entry was added
    pruned: tuple[Path, ...] = ()  # history entries removed past the store's history_max


class PlanStore:
    """Plans by DAG id under ``root`` (``[agora] plan_dir``), at most ``history_max`` history entries per
    DAG (0: all) besides those recorded runs still name (see the module's docstring)."""

    def __init__(self, root: str | Path, history_max: int = 0) -> None:
        if history_max < 0:
            raise PlanStoreError(f"a plan history of {history_max} entries: give 0 (keep all) or more")
        self.root = Path(root)
        self.history_max = history_max

    def _dag_dir(self, dag_id: str) -> Path:
        return self.root / check_dag_id(dag_id)

    def current_path(self, dag_id: str) -> Path:
        return self._dag_dir(dag_id) / "current.json"

    def save(
        self, dag_id: str, plan: Plan, workflow: Workflow | None = None, *, in_use: Collection[str] | None = None
    ) -> StoredPlan:
        """Make ``plan`` the DAG's current plan and append it to the history, with ``workflow`` (the one
        the plan was made from) beside the entry when given.

        A plan identical to the current one (:func:`same_plan`) adds nothing: the answer is the current
        entry, ``unchanged``. ``in_use``: the plan versions that recorded runs of the DAG name; given, the
        oldest entries past ``history_max`` that none of them names are removed (``pruned``)."""
        history = self._dag_dir(dag_id) / "history"
        try:
            text = plan_json(plan, str(self.current_path(dag_id)))  # refuses what load_plan would
            sidecar = None
            if workflow is not None:
                ensure_plan_matches(plan, workflow)
                sidecar = workflow_json(workflow, str(history / f"<entry>{WORKFLOW_SUFFIX}"))
        except AgoraError as exc:
            raise PlanStoreError(f"plan of DAG {dag_id!r} not saved: {exc}") from None
        try:
            _make_directories(history)
            with _locked(history):  # concurrent saves: numbered, and the last numbered is current
                last = self._in_force(dag_id)
                unchanged = last is not None and same_plan(last, text, sidecar)
                if last is not None and unchanged:
                    entry = last
                else:
                    entry = _add_history_entry(history, text, sidecar)
                    try:
                        write_text_atomically(self.current_path(dag_id), text, FILE_MODE, durable=True)
                    except BaseException:
                        entry.unlink(missing_ok=True)  # history lists only plans that were put in force
                        workflow_path(entry).unlink(missing_ok=True)
                        raise
                pruned = self._prune(dag_id, in_use) if in_use is not None else ()
        except OSError as exc:
            raise PlanStoreError(f"plan of DAG {dag_id!r} not saved in {history.parent}: {exc}") from None
        except AgoraError as exc:
            raise PlanStoreError(f"plan of DAG {dag_id!r} not saved: {exc}") from None
        return StoredPlan(dag_id, entry, load_plan(entry) if unchanged else plan, unchanged, pruned)

    def _in_force(self, dag_id: str) -> Path | None:
        """The newest history entry if the current plan is its plan (the same bytes), else None."""
        entries = self.history(dag_id)
        if not entries:
            return None
        try:
            current = self.current_path(dag_id).read_bytes()
            return entries[-1] if entries[-1].read_bytes() == current else None
        except FileNotFoundError:
            return None

    def _prune(self, dag_id: str, in_use: Collection[str]) -> tuple[Path, ...]:
        """Remove the oldest history entries (and their workflows) past ``history_max`` whose version is not
        ``in_use``; the current plan's entry is always among the newest, so it stays."""
        entries = self.history(dag_id)
        if self.history_max == 0 or len(entries) <= self.history_max:
            return ()
        removed = []
        for path in entries[: -self.history_max]:
            try:
                if plan_version(path.read_bytes()) in in_use:
                    continue
            except FileNotFoundError:
                continue
            workflow_path(path).unlink(missing_ok=True)
            path.unlink(missing_ok=True)
            removed.append(path)
        if removed:
            fsync_directory(path.parent)
        return tuple(removed)

    def run_path(self, dag_id: str, run_after: datetime) -> Path:
        """Where the plan of the DAG's run at ``run_after`` is kept (:func:`run_stamp`)."""
        return self._dag_dir(dag_id) / RUNS_DIR / f"{run_stamp(run_after)}.json"

    def save_run(self, dag_id: str, run_after: datetime, plan: Plan, workflow: Workflow | None = None) -> StoredPlan:
        """Keep ``plan`` as the plan of the DAG's run at ``run_after`` (replacing one kept before), with
        ``workflow`` (the one it was made from) beside it when given, written first."""
        path = self.run_path(dag_id, run_after)
        try:
            text = plan_json(plan, str(path))
            sidecar = None
            if workflow is not None:
                ensure_plan_matches(plan, workflow)
                sidecar = workflow_json(workflow, str(workflow_path(path)))
        except AgoraError as exc:
            raise PlanStoreError(f"plan of DAG {dag_id!r} run {run_after.isoformat()} not saved: {exc}") from None
        try:
            _make_directories(path.parent)
            if sidecar is None:
                workflow_path(path).unlink(missing_ok=True)
            else:
                write_text_atomically(workflow_path(path), sidecar, FILE_MODE, durable=True)
            write_text_atomically(path, text, FILE_MODE, durable=True)
        except (OSError, AgoraError) as exc:
            raise PlanStoreError(
                f"plan of DAG {dag_id!r} run {run_after.isoformat()} not saved in {path.parent}: {exc}"
            ) from None
        return StoredPlan(dag_id, path, plan)

    def run_plan(self, dag_id: str, run_after: datetime) -> StoredPlan | None:
        """The plan of the DAG's run at ``run_after``, None if it has none; an unreadable one raises PlanStoreError
        naming its file."""
        path = self.run_path(dag_id, run_after)
        if not path.exists():
            return None
        try:
            return StoredPlan(dag_id, path, load_plan(path))
        except AgoraError as exc:
            raise PlanStoreError(f"plan of DAG {dag_id!r} run {run_after.isoformat()} unreadable: {exc}") from None

    def run_plans(self, dag_id: str) -> list[Path]:
        """The DAG's run plans, by run_after (their names sort so)."""
        runs = self._dag_dir(dag_id) / RUNS_DIR
        if not runs.is_dir():
            return []
        return sorted(
            p for p in runs.glob("*.json") if not p.name.startswith(".") and not p.name.endswith(WORKFLOW_SUFFIX)
        )

    def current(self, dag_id: str) -> StoredPlan | None:
        """The DAG's current plan, or None if it has none. An unreadable plan raises PlanStoreError."""
        path = self.current_path(dag_id)
        if not path.exists():
            return None
        try:
            return StoredPlan(dag_id, path, load_plan(path))
        except AgoraError as exc:
            raise PlanStoreError(f"current plan of DAG {dag_id!r} unreadable: {exc}") from None

    def history(self, dag_id: str) -> list[Path]:
        """The DAG's plans in the order they were put in force, oldest first (the last one is current)."""
        history = self._dag_dir(dag_id) / "history"
        if not history.is_dir():
            return []
        legacy, numbered = _history_entries(history)
        return [path for _, path in legacy] + [path for _, path in numbered]

    def find(self, dag_id: str, version: str) -> StoredPlan | None:
        """The plan of the DAG whose :func:`plan_version` is ``version`` (current first, then history, newest
        first, then run plans, latest run first), or None; an unreadable match raises PlanStoreError."""
        if not version:
            return None
        for path in [self.current_path(dag_id), *self._entries(dag_id)]:
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if plan_version(data) == version:
                try:
                    return StoredPlan(dag_id, path, load_plan(path))
                except AgoraError as exc:
                    raise PlanStoreError(f"plan {version} of DAG {dag_id!r} unreadable: {exc}") from None
        return None

    def workflow(self, dag_id: str, version: str) -> Workflow | None:
        """The workflow the DAG's plan ``version`` (a history entry or a run plan) was made from, or None (no
        such plan, or saved without one); an unreadable one raises PlanStoreError naming its file."""
        if not version:
            return None
        for path in self._entries(dag_id):
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if plan_version(data) != version:
                continue
            sidecar = workflow_path(path)
            if not sidecar.exists():
                return None
            try:
                return load_workflow_file(sidecar)
            except AgoraError as exc:
                raise PlanStoreError(f"workflow of plan {version} of DAG {dag_id!r} unreadable: {exc}") from None
        return None

    def _entries(self, dag_id: str) -> list[Path]:
        """History newest first, then run plans, latest run first: where a plan version is looked for."""
        return [*reversed(self.history(dag_id)), *reversed(self.run_plans(dag_id))]

    @property
    def window_path(self) -> Path:
        """The last window planned and put in force (``agora optimize --dags ... --apply``): not a DAG's
        directory (``@`` is in no DAG id) nor a ``current.json`` (it is no plan of one DAG)."""
        return self.root / WINDOW_DIR / "window.json"

    def save_window(self, document: dict[str, Any]) -> Path:
        """Keep ``document`` (the window's runs and the platform's machines) as the last window in force."""
        try:
            _make_directories(self.window_path.parent)
            write_text_atomically(self.window_path, json.dumps(document, indent=1) + "\n", FILE_MODE, durable=True)
        except (OSError, AgoraError) as exc:
            raise PlanStoreError(f"window not saved in {self.window_path.parent}: {exc}") from None
        return self.window_path

    def window(self) -> dict[str, Any] | None:
        """The last window in force, or None; an unreadable one raises PlanStoreError."""
        try:
            document = json.loads(self.window_path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise PlanStoreError(f"window {WINDOW_DIR}/window.json unreadable: {exc}") from None
        if not isinstance(document, dict) or document.get("format") != WINDOW_FORMAT:
            raise PlanStoreError(f"window {WINDOW_DIR}/window.json is not an {WINDOW_FORMAT} document")
        return document

    def dag_ids(self) -> list[str]:
        """Every DAG with a current plan."""
        if not self.root.is_dir():
            return []
        return sorted(path.parent.name for path in self.root.glob("*/current.json"))


def plan_version(data: bytes) -> str:
    """A plan file's version: the first 12 hex digits of the SHA-256 of its bytes (the current plan and
    its history entry are the same bytes, so they have the same version)."""
    return hashlib.sha256(data).hexdigest()[:12]


def same_plan(entry: Path, text: str, workflow_text: str | None) -> bool:
    """Whether the plan file ``text`` (with ``workflow_text`` beside it, if any) puts in force what the
    history entry ``entry`` already does: the same plan but for ``created_at`` and the solver's report (a
    re-plan that found the same placements), and, when a workflow is given, the same one beside it."""
    try:
        kept = entry.read_text(encoding="utf-8")
        if workflow_text is not None and workflow_path(entry).read_text(encoding="utf-8") != workflow_text:
            return False
    except FileNotFoundError:
        return False
    return kept == text or _placements(kept) == _placements(text)


def _placements(text: str) -> Any:
    """A plan file's document without what says when and how the plan was made (``created_at``, ``solver``);
    None if it is no JSON object."""
    try:
        document = json.loads(text)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    return {key: value for key, value in document.items() if key not in {"created_at", "solver"}}


def run_stamp(run_after: datetime) -> str:
    """A run plan's file name stem: the run's ``run_after`` in UTC to the microsecond (``20261203T010000000000Z``),
    so that names sort by time; a time without a zone raises PlanStoreError."""
    if run_after.tzinfo is None:
        raise PlanStoreError(f"run_after {run_after.isoformat()} has no time zone")
    return run_after.astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def workflow_path(entry: Path) -> Path:
    """Where the workflow of the history entry ``entry`` is kept (``<entry name>.workflow.json``)."""
    return entry.with_name(entry.name.removesuffix(".json") + WORKFLOW_SUFFIX)


def applied_at(path: Path) -> datetime | None:
    """When the history entry ``path`` was put in force (None for an entry of the old layout)."""
    match = _ENTRY.match(path.name)
    if match is None:
        return None
    return datetime.strptime(match[2], "%Y%m%dT%H%M%S%f").replace(tzinfo=UTC)


def _history_entries(history: Path) -> tuple[list[tuple[tuple[int, str], Path]], list[tuple[int, Path]]]:
    """Old-layout entries by (mtime, name), and numbered ones by number."""
    legacy: list[tuple[tuple[int, str], Path]] = []
    numbered: list[tuple[int, Path]] = []
    for path in history.glob("*.json"):
        if path.name.startswith(".") or path.name.endswith(WORKFLOW_SUFFIX):
            continue
        match = _ENTRY.match(path.name)
        if match is not None:
            numbered.append((int(match[1]), path))
            continue
        try:
            legacy.append(((path.stat().st_mtime_ns, path.name), path))
        except FileNotFoundError:
            continue
    return sorted(legacy), sorted(numbered)


def _add_history_entry(history: Path, text: str, workflow_text: str | None = None) -> Path:
    """Write ``text`` as the next numbered entry, flushed to disk before it appears under its name.

    Called under the history directory's lock, so concurrent saves get consecutive numbers; the
    hard link would fail rather than replace an entry. ``workflow_text`` is written beside it first
    (atomically, flushed), so the entry never appears without it.
    """
    fd, tmp = tempfile.mkstemp(dir=history, prefix=".entry.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), FILE_MODE)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        legacy, numbered = _history_entries(history)
        number = max([len(legacy), *(n for n, _ in numbered)]) + 1
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        entry = history / f"{number:06d}-applied-{stamp}Z.json"
        if workflow_text is not None:
            write_text_atomically(workflow_path(entry), workflow_text, FILE_MODE, durable=True)
        try:
            os.link(tmp, entry)
        except BaseException:
            workflow_path(entry).unlink(missing_ok=True)
            raise
        fsync_directory(history)
        return entry
    finally:
        Path(tmp).unlink(missing_ok=True)


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _make_directories(path: Path) -> None:
    """``mkdir -p`` whose new directories are 0755 whatever the umask (existing ones are left as they are)."""
    missing = []
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue
        directory.chmod(DIRECTORY_MODE)


def default_plan_store() -> PlanStore:
    """The store of ``[agora] plan_dir`` (default ``$AIRFLOW_HOME/agora/plans``), keeping ``[agora]
    plan_history_max`` history entries per DAG."""
    from agora_optimizer import settings

    return PlanStore(settings.directory("plan_dir", "plans"), history_max_setting(settings.get("plan_history_max")))


def history_max_setting(value: str) -> int:
    """``[agora] plan_history_max`` as a count of entries: a whole number, 0 or more; else PlanStoreError."""
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise PlanStoreError(f"[agora] plan_history_max must be a whole number, 0 (keep all) or more, got {value!r}")
    return count

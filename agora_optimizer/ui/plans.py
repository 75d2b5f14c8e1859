"""The plans the agora view shows: each DAG's current plan and its history, read from the plan store.

Plan files are parsed once per version (path, modification time and size) and kept in an
LRU cache, so that a page of a 5,000-task plan does not re-read its file on every request;
history files never change, so they are read once. A plan file that cannot be read is a
:class:`PlanStoreError` naming the file by its place in the store, not by the server's path.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from agora_optimizer.errors import AgoraError, FieldError, InputFileError
from agora_optimizer.io.plan_file import load_plan
from agora_optimizer.model.plan import Plan
from agora_optimizer.plans.store import PlanStore, PlanStoreError, default_plan_store
from agora_optimizer.ui.cache import LruCache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlanFile:
    """A plan as read from ``path``; ``version`` changes whenever the file does."""

    dag_id: str
    path: Path
    version: str
    plan: Plan


class PlanReader:
    """Reads :class:`PlanStore` files through a cache of parsed plans."""

    def __init__(self, store: PlanStore, cache_size: int = 32) -> None:
        self.store = store
        self._plans: LruCache[tuple[str, str], Plan] = LruCache(cache_size)

    def dag_ids(self) -> list[str]:
        """Every DAG with a current plan."""
        return self.store.dag_ids()

    def current(self, dag_id: str) -> PlanFile | None:
        """The DAG's current plan, or None. An unreadable file raises an AgoraError that names it."""
        return self._read(dag_id, self.store.current_path(dag_id))

    def history(self, dag_id: str, offset: int, limit: int) -> tuple[int, list[PlanFile]]:
        """How many plans the DAG has had, and ``limit`` of them from ``offset``, newest first.

        An unreadable entry is left out of the page (and logged): an old plan should not hide the others.
        """
        paths = self.store.history(dag_id)[::-1]
        page = []
        for path in paths[offset : offset + limit]:
            try:
                page.append(self._read(dag_id, path))
            except PlanStoreError as exc:
                log.warning("agora: %s", exc)
        return len(paths), [entry for entry in page if entry is not None]

    def _read(self, dag_id: str, path: Path) -> PlanFile | None:
        try:
            stat = path.stat()
        except FileNotFoundError:
            return None
        version = f"{stat.st_mtime_ns}-{stat.st_size}"
        try:
            plan = self._plans.get_or_compute((str(path), version), lambda: load_plan(path))
        except AgoraError as exc:
            log.warning("agora: plan of DAG %s unreadable: %s", dag_id, exc)
            raise PlanStoreError(
                f"the plan {self._shown(path)} of DAG {dag_id} cannot be read: {_reason(exc)}"
            ) from None
        return PlanFile(dag_id, path, version, plan)

    def _shown(self, path: Path) -> str:
        """The file's path in the plan store (the server's directories are not the browser's business)."""
        try:
            return str(path.relative_to(self.store.root))
        except ValueError:
            return path.name


def _reason(exc: AgoraError) -> str:
    if isinstance(exc, FieldError):
        return f"field '{exc.field}': {exc.reason}"
    if isinstance(exc, InputFileError):
        return exc.reason
    return str(exc)


@cache
def plan_reader() -> PlanReader:
    """The reader of ``[agora] plan_dir``, one per process."""
    return PlanReader(default_plan_store())

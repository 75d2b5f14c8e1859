"""A directory of plans: ``<root>/<dag_id>/current.json`` and ``history/<created>.json``.

The cluster policy reads the current plan of a DAG at parse time, the rerun DAG writes a
new one after each re-optimization, and the UI lists the history. Plans are spec files
(``agora-plan/1``) written atomically, so a reader never sees half a plan; history is
append-only. A plan names resources of the catalogs in ``[agora] catalog``; the policy
refuses to apply a plan whose resources the executor does not know (see
:mod:`agora_optimizer.integration.policy`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from agora_optimizer.errors import AgoraError
from agora_optimizer.io.plan_file import load_plan, write_plan
from agora_optimizer.model.plan import Plan

_DAG_ID = re.compile(r"^[A-Za-z0-9_.-]{1,250}$")


class PlanStoreError(AgoraError):
    """A DAG id that cannot name a directory, or a plan file that cannot be read."""


@dataclass(frozen=True)
class StoredPlan:
    dag_id: str
    path: Path
    plan: Plan


class PlanStore:
    """Plans by DAG id under ``root`` (``[agora] plan_dir``)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _dag_dir(self, dag_id: str) -> Path:
        if not _DAG_ID.match(dag_id) or dag_id in {".", ".."}:
            raise PlanStoreError(f"DAG id {dag_id!r} is not a valid Airflow DAG id")
        return self.root / dag_id

    def current_path(self, dag_id: str) -> Path:
        return self._dag_dir(dag_id) / "current.json"

    def save(self, dag_id: str, plan: Plan) -> StoredPlan:
        """Make ``plan`` the DAG's current plan and append it to the history."""
        history = self._dag_dir(dag_id) / "history"
        history.mkdir(parents=True, exist_ok=True)
        stamp = re.sub(r"[^0-9A-Za-z]", "", plan.created_at)
        index = 0
        while (entry := history / f"{stamp}-{index:03d}.json").exists():
            index += 1
        write_plan(plan, entry)
        write_plan(plan, self.current_path(dag_id))
        return StoredPlan(dag_id, entry, plan)

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
        """The DAG's plans, oldest first."""
        history = self._dag_dir(dag_id) / "history"
        return sorted(history.glob("*.json")) if history.is_dir() else []

    def dag_ids(self) -> list[str]:
        """Every DAG with a current plan."""
        if not self.root.is_dir():
            return []
        return sorted(path.parent.name for path in self.root.glob("*/current.json"))


def default_plan_store() -> PlanStore:
    """The store of ``[agora] plan_dir`` (default ``$AIRFLOW_HOME/agora/plans``)."""
    from agora_optimizer import settings

    return PlanStore(settings.directory("plan_dir", "plans"))

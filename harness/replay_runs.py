"""Runs of replayed WfInstances in a real Airflow, one plan in force at a time: what the benchmarks share.

``bench/run_plans_come_true.py`` and ``bench/run_learning_loop.py`` both start one Airflow 3.3
(:mod:`harness.local_airflow`) with the AgoraExecutor, replay WfInstances workflows as DAGs with
``dags/agora_wfinstance.py`` (runtimes and memory scaled), put a plan in force, wait until the
scheduler's copy of the DAG carries it, trigger a run and read the run's record back with ``agora
runs record`` and ``agora runs show``. :func:`replay_deployment` builds that Airflow;
:class:`ReplayRuns` does the rest.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agora_optimizer.model.plan import Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.plans.store import PlanStore, plan_version
from harness.local_airflow import AirflowDeployment, wait_until

REPO = Path(__file__).resolve().parents[1]
CATALOGS = {
    "local": REPO / "catalogs" / "local-priced.yaml",
    "slurm": REPO / "catalogs" / "slurm-loopback-2core.yaml",
}
DAG_ID_PREFIX = "agora_wfinstance_"
DEFAULT_PLAN = """
import sys
from agora_optimizer.integration.airflow_dag import learned_platform_latency, predicted_dag_workflow
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.plan_file import write_plan
from agora_optimizer.optimize.optimize import default_plan
from agora_optimizer.plans.store import default_plan_store
from agora_optimizer.predict.latency import with_platform_latency

dag_id, catalog_path, folder, out = sys.argv[1:5]
catalog = load_catalog(catalog_path)
workflow, _ = predicted_dag_workflow(dag_id, catalog, folder=folder)
edges = {dag_id: [(edge.parent, edge.child) for edge in workflow.edges]}  # as agora optimize learns it
planned = with_platform_latency(catalog, learned_platform_latency(None, edges), "median")
plan = default_plan(workflow, planned, catalog_path)
if plan is None:
    raise SystemExit(f"{dag_id}: no single type of {catalog_path} fits every task")
write_plan(plan, out)
default_plan_store().save(dag_id, plan, workflow=workflow)  # in force, with its workflow, as --apply does
"""


def replay_deployment(
    root: Path,
    workflows: Sequence[str],
    workflows_dir: Path,
    catalog: Path,
    *,
    time_scale: float,
    runtime_range_s: tuple[float, float],
    memory_scale: float,
    task_load: str,
    hints: str = "all",
) -> AirflowDeployment:
    """An Airflow under ``root`` replaying ``workflows`` (of ``workflows_dir``), the AgoraExecutor on ``catalog``.

    ``hints``: ``all`` (each task declares its scaled runtime and memory, as the plans-come-true
    benchmark wants) or ``none`` (its cores and category only: the plan alone knows what it predicted).
    """
    (root / "dags").mkdir(parents=True)
    (root / "dags" / "agora_wfinstance.py").symlink_to(REPO / "dags" / "agora_wfinstance.py")
    return AirflowDeployment(
        home=root / "home",
        dags_folder=root / "dags",
        extra_env={
            "AGORA_WFINSTANCE": ",".join(workflows),
            "AGORA_WORKFLOWS_DIR": str(workflows_dir.resolve()),
            "AGORA_WFINSTANCE_TIME_SCALE": f"{time_scale:g}",
            "AGORA_WFINSTANCE_MIN_RUNTIME_S": f"{runtime_range_s[0]:g}",
            "AGORA_WFINSTANCE_MAX_RUNTIME_S": f"{runtime_range_s[1]:g}",
            "AGORA_WFINSTANCE_MEMORY_SCALE": f"{memory_scale:g}",
            "AGORA_WFINSTANCE_LOAD": task_load,
            "AGORA_WFINSTANCE_HINTS": hints,
            "AIRFLOW__AGORA__CATALOG": str(catalog),
            "AIRFLOW__AGORA__PLAN_DIR": str(root / "plans"),
            "AIRFLOW__AGORA__STATE_DIR": str(root / "jobs"),
            "AIRFLOW__AGORA__TRACE_STORE_URL": f"sqlite:///{root / 'traces.db'}",
            "AIRFLOW__AGORA__REOPTIMIZE_SCHEDULE": "",  # the rerun DAG would re-plan behind the benchmark's back
            # The DAG file reads these when a task parses it: on SLURM the task inherits nothing else.
            "AIRFLOW__AGORA__TASK_ENVIRONMENT": "AGORA_WFINSTANCE*,AGORA_WORKFLOWS_DIR",
            "AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "5",  # a new plan in force within seconds, not 30
        },
    )


class ReplayRuns:
    """One Airflow, one trace store: plans put in force, runs triggered and recorded, one at a time."""

    def __init__(self, airflow: AirflowDeployment, root: Path, settle_s: float = 3.0) -> None:
        self.airflow = airflow
        self.root = root
        self.settle_s = settle_s
        self.agora_cli = str(Path(sys.executable).with_name("agora"))

    def run(self, dag_id: str, conf: Mapping[str, Any], timeout_s: float) -> tuple[str, str, dict[str, Any]]:
        """Trigger ``dag_id`` under the plan in force: its run id, its end state and its run record."""
        run_id = self.airflow.trigger(dag_id, dict(conf))
        state = self.airflow.wait_for_run(dag_id, run_id, timeout_s=timeout_s)
        return run_id, state, self.record(dag_id, run_id)

    def record(self, dag_id: str, run_id: str) -> dict[str, Any]:
        """The run's record, rebuilt once the executor's trace rows are in (they land after the run ends)."""
        time.sleep(self.settle_s)
        self.agora(["runs", "record", "--dag", dag_id])
        shown = self.agora(["runs", "show", dag_id, run_id, "--json"])
        record: dict[str, Any] = json.loads(shown)
        return record

    def cpu_share(self, dag_id: str, run_id: str) -> float | None:
        """The median over the run's task attempts of CPU time over wall time (None without both)."""
        from agora_optimizer.traces.store import TraceStore

        with TraceStore(f"sqlite:///{self.root / 'traces.db'}") as store:
            attempts = store.attempts(dag_id=dag_id, run_id=run_id)
        shares = [a.cpu_time_s / a.runtime_s for a in attempts if a.cpu_time_s is not None and a.runtime_s]
        return round(statistics.median(shares), 3) if shares else None

    def default_plan(self, dag_id: str, catalog: Path, plan_path: Path) -> None:
        """Put the one-type default in force (written to ``plan_path`` too), made from the predicted DAG."""
        self.python(DEFAULT_PLAN, dag_id, str(catalog), str(self.airflow.dags_folder), str(plan_path))

    def apply(self, dag_id: str, plan: Plan, workflow: Workflow) -> str:
        """Put ``plan`` in force for ``dag_id`` with the workflow it was made from (what a repair re-plans
        from), as ``agora optimize --apply`` does; its version."""
        stored = PlanStore(self.root / "plans").save(dag_id, plan, workflow=workflow)
        return plan_version(stored.path.read_bytes())

    def wait_in_force(self, dag_id: str, version: str) -> None:
        """Until the scheduler's copy of the DAG (its newest serialization in Airflow's database) carries
        the plan ``version`` in its tasks' placements. A run triggered before would run under the previous
        plan: Airflow re-parses every few seconds but writes a changed DAG at most every ``[core]
        min_serialized_dag_update_interval`` (set to 5 s here; 30 s by default)."""
        database = self.airflow.home / "airflow.db"

        def serialized() -> bool:
            with contextlib.closing(sqlite3.connect(database)) as connection:
                row = connection.execute(
                    "SELECT data, data_compressed FROM serialized_dag WHERE dag_id = ? ORDER BY last_updated DESC",
                    (dag_id,),
                ).fetchone()
            if row is None:
                return False
            text = row[0] if row[0] is not None else zlib.decompress(row[1]).decode()
            return f'"plan_version": "{version}"' in text

        wait_until(serialized, 180, f"Airflow to serialize {dag_id} with plan {version}", self.airflow)

    def agora(self, arguments: list[str]) -> str:
        answer = subprocess.run([self.agora_cli, *arguments], env=self.airflow.env, capture_output=True, text=True)
        if answer.returncode != 0:
            raise SystemExit(f"agora {' '.join(arguments)} failed ({answer.returncode}): {answer.stderr[-2000:]}")
        return answer.stdout

    def python(self, script: str, *arguments: str) -> None:
        answer = subprocess.run([sys.executable, "-c", script, *arguments], env=self.airflow.env,
                                capture_output=True, text=True)  # fmt: skip
        if answer.returncode != 0:
            raise SystemExit(f"a plan for {arguments[0]} failed: {answer.stderr[-2000:]}")

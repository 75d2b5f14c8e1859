"""Benchmark: the AgoraExecutor's overhead against Airflow's LocalExecutor on the same DAG.

Usage:
  python bench/run_executor.py [--runs 5] [--tasks 12] [--task-s 1.0] [--out bench/results/executor]

One real Airflow 3.3 (api-server, dag-processor, scheduler on SQLite) with
``[core] executor = LocalExecutor,agora``. Two copies of one DAG (``--tasks`` independent
tasks of ``--task-s`` seconds of CPU, then one join): ``bench_local`` has no plan and runs
on the LocalExecutor; ``bench_agora`` has a plan that spreads the tasks over the two local
pools of ``catalogs/local.yaml`` (one core each, the machine's two cores), so both get the
same two cores. Runs alternate (local, agora, local, ...) so that machine noise hits both;
a run's wall time is its DAG run's end minus its start (Airflow's own record). The ratio
of medians is the overhead (target <= 1.10).

Results: ``OUT.md`` and ``OUT.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo  # noqa: E402
from agora_optimizer.plans.store import PlanStore  # noqa: E402
from harness.local_airflow import AirflowDeployment  # noqa: E402

DAG = """
import time
from datetime import datetime
from airflow.sdk import DAG, task

def burn(seconds):
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        sum(range(10_000))

for dag_id in ("bench_local", "bench_agora"):
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
        @task(task_id="join")
        def join(_values):
            return len(_values)

        @task
        def work(index):
            burn({task_s})
            return index

        join([work.override(task_id=f"work_{{i}}")(i) for i in range({tasks})])
"""


CATALOG = """
network: {bandwidth_bytes_per_s: 2000000000}
resources:
  - {name: bench-pool, backend: local, vcpus: 32, memory_gib: 16, speed: 1.0, price_per_hour_usd: 0.0, count: 1,
     billing: {granularity_s: 1, minimum_s: 0}, boot_s: 0}
"""


def plan(tasks: int) -> Plan:
    """Every task on the one wide pool."""
    work = [Assignment(f"work_{i}", "bench-pool", "bench-pool#0", 0.0, 1.0, 1, 2**29) for i in range(tasks)]
    assignments = (*work, Assignment("join", "bench-pool", "bench-pool#0", 1.0, 2.0, 1, 2**29))
    solver = SolverInfo("bench", "heuristic", None, 0.0)
    return Plan(
        "bench", "catalogs/local.yaml", Objective(), tasks + 1.0, 0.0, assignments, solver, "2026-11-30T00:00:00Z"
    )


def wall_s(airflow: AirflowDeployment, dag_id: str, run_id: str) -> float:
    run = airflow.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
    return (datetime.fromisoformat(run["end_date"]) - datetime.fromisoformat(run["start_date"])).total_seconds()


def _runs(walls: list[float]) -> str:
    return ", ".join(f"{wall:.1f}" for wall in walls)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--task-s", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "executor")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="agora-bench-executor-"))
    (root / "dags").mkdir()
    (root / "dags" / "bench_dags.py").write_text(DAG.format(tasks=args.tasks, task_s=args.task_s))
    PlanStore(root / "plans").save("bench_agora", plan(args.tasks))
    (root / "bench-pool.yaml").write_text(CATALOG)
    airflow = AirflowDeployment(
        home=root / "home",
        dags_folder=root / "dags",
        extra_env={
            "AIRFLOW__CORE__PARALLELISM": "32",  # Airflow's default: the LocalExecutor runs up to 32 at once
            "AIRFLOW__AGORA__CATALOG": str(root / "bench-pool.yaml"),
            "AIRFLOW__AGORA__PLAN_DIR": str(root / "plans"),
            "AIRFLOW__AGORA__STATE_DIR": str(root / "jobs"),
            "AIRFLOW__AGORA__TRACE_STORE_URL": f"sqlite:///{root / 'traces.db'}",
        },
    )
    airflow.migrate()
    airflow.start()
    walls: dict[str, list[float]] = {"bench_local": [], "bench_agora": []}
    started = time.perf_counter()
    try:
        for dag_id in walls:
            airflow.wait_for_dag(dag_id)
        for _ in range(args.runs):
            for dag_id in walls:
                run_id = airflow.trigger(dag_id)
                state = airflow.wait_for_run(dag_id, run_id, timeout_s=900)
                if state != "success":
                    raise SystemExit(f"{dag_id} run {run_id} ended {state}")
                walls[dag_id].append(wall_s(airflow, dag_id, run_id))
                executors = {ti["executor"] for ti in airflow.task_instances(dag_id, run_id).values()}
                print(f"{dag_id}: {walls[dag_id][-1]:.1f} s (executor {executors})", flush=True)
    finally:
        airflow.stop_all()
    local, agora = statistics.median(walls["bench_local"]), statistics.median(walls["bench_agora"])
    result = {
        "runs": args.runs,
        "tasks": args.tasks + 1,
        "task_s": args.task_s,
        "wall_s": walls,
        "median_local_s": local,
        "median_agora_s": agora,
        "ratio": agora / local,
        "bench_wall_s": time.perf_counter() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    table = [
        f"# Executor overhead ({args.runs} alternating runs each, {args.tasks} tasks of {args.task_s:g} s CPU, a join)",
        "",
        "| executor | median DAG run wall (s) | runs (s) |",
        "|---|---|---|",
        f"| LocalExecutor (parallelism 32) | {local:.1f} | {_runs(walls['bench_local'])} |",
        f"| AgoraExecutor (one local pool of 32 cores) | {agora:.1f} | {_runs(walls['bench_agora'])} |",
        "",
        f"AgoraExecutor / LocalExecutor: **{agora / local:.2f}x** (target <= 1.10)",
    ]
    args.out.with_suffix(".md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())

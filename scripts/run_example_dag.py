"""Run the example pipeline in a real Airflow 3.3 with the AgoraExecutor on this machine's local pools.

Usage: python scripts/run_example_dag.py [--out out/airflow] [--catalog catalogs/local.yaml]

1. Configures an Airflow home under ``--out`` (SQLite, ``[core] executor =
   LocalExecutor,agora``, ``[agora] catalog``), migrates its database.
2. Plans ``agora_example_etl`` from its hints (and from the traces of earlier demo runs)
   and puts the plan in force (``agora optimize airflow:agora_example_etl --apply``).
3. Starts the api-server, dag-processor and scheduler, triggers the DAG, waits for it.
4. Prints, per task, the pool its plan chose and the CPUs the task itself saw, and the
   trace rows (runtime, peak memory) the run wrote; stops Airflow.
5. Prints the run's record, planned against actual makespan (``agora runs show``), and draws
   both as a chart (``--out``/run.svg).

Run it again and the plan learns from the first run's traces. The Airflow UI is at the
printed URL while the script runs (user admin, password in the home's passwords.json).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "out" / "airflow")
    parser.add_argument("--catalog", type=Path, default=REPO / "catalogs" / "local.yaml")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))  # the harness is beside the package, not in it
    from agora_optimizer.io.plan_file import load_plan
    from harness.local_airflow import AirflowDeployment

    out = args.out.resolve()
    store_url = f"sqlite:///{out / 'traces.db'}"
    airflow = AirflowDeployment(
        home=out / "home",
        dags_folder=REPO / "dags",
        extra_env={
            "AIRFLOW__AGORA__CATALOG": str(args.catalog.resolve()),
            "AIRFLOW__AGORA__PLAN_DIR": str(out / "plans"),
            "AIRFLOW__AGORA__STATE_DIR": str(out / "jobs"),
            "AIRFLOW__AGORA__TRACE_STORE_URL": store_url,
            # The rerun DAG (dags/agora_reoptimize.py) stays unscheduled here: at start-up it would
            # otherwise re-plan the example while it runs, and the run would use another plan than this one.
            "AIRFLOW__AGORA__REOPTIMIZE_SCHEDULE": "",
        },
    )
    airflow.migrate()
    agora = str(Path(sys.executable).with_name("agora"))
    command = [agora, "optimize", "airflow:agora_example_etl", "--catalog", str(args.catalog)]
    command += ["--dag-folder", str(REPO / "dags"), "-o", str(out / "plan.json"), "--apply"]
    subprocess.run(command, check=True, env=airflow.env)
    print(f"agora: starting Airflow at {airflow.api_url} (logs in {airflow.home})", flush=True)
    with airflow:  # stops every process it started, also on an error or Ctrl-C
        airflow.start()
        airflow.wait_for_dag("agora_example_etl")
        run_id = airflow.trigger("agora_example_etl", {"report_dir": str(out / "report")})
        state = airflow.wait_for_run("agora_example_etl", run_id, timeout_s=600)
        applied = load_plan(out / "plan.json")  # the plan put in force above
        planned = {a.task: a.resource for a in applied.assignments}
        attempts = _executor_rows(store_url, run_id, set(planned))  # before the scheduler (the executor) stops
    print(f"\nrun {run_id}: {state}")
    print(f"{'task':<10} {'planned pool':<13} {'CPUs seen':<10} {'runtime s':>9} {'peak MiB':>9}")
    for task, resource in sorted(planned.items()):
        report = out / "report" / f"{task}.json"
        cpus = json.loads(report.read_text())["cpus"] if report.exists() else "-"
        attempt = attempts.get(task)
        runtime = f"{attempt.runtime_s:.1f}" if attempt and attempt.runtime_s else "-"
        peak = f"{attempt.peak_rss_bytes / 2**20:.0f}" if attempt and attempt.peak_rss_bytes else "-"
        print(f"{task:<10} {resource:<13} {cpus!s:<10} {runtime:>9} {peak:>9}")
    _print_record(agora, airflow.env, run_id, out / "run.svg")
    return 0 if state == "success" else 1


def _executor_rows(store_url: str, run_id: str, tasks: set[str], timeout_s: float = 30.0) -> dict[str, Any]:
    """The run's trace rows once the executor has added its part (peak memory, requested memory) to each.

    The task's own listener writes its half of a row as the task ends, and Airflow may mark the run done
    before the executor, which hears of the job's end at its next poll, writes the other half.
    """
    from agora_optimizer.traces.store import TraceStore

    deadline = time.monotonic() + timeout_s
    while True:
        with TraceStore(store_url) as store:
            rows = {a.task_id: a for a in store.attempts(dag_id="agora_example_etl") if a.run_id == run_id}
        if all(task in rows and rows[task].requested_memory_bytes for task in tasks) or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)


def _print_record(agora: str, env: dict[str, str], run_id: str, chart: Path) -> None:
    """The run against its plan, from its run record (re-recorded: the executor's rows land last)."""
    subprocess.run([agora, "runs", "record", "--dag", "agora_example_etl"], check=True, env=env, capture_output=True)
    shown = subprocess.run(
        [agora, "runs", "show", "agora_example_etl", run_id, "--json", "--chart", str(chart)],
        check=True, env=env, capture_output=True, text=True,
    )  # fmt: skip
    record = json.loads(shown.stdout)
    planned, actual = record["planned_makespan_s"], record["actual_makespan_s"]
    if planned and actual:
        print(
            f"plan against run: makespan {planned:.1f} s planned, {actual:.1f} s actual ({actual / planned - 1:+.0%}); "
            f"chart {chart} (agora runs show agora_example_etl {run_id})"
        )


if __name__ == "__main__":
    sys.exit(main())

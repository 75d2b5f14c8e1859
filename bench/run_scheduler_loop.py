"""Benchmark: the scheduler's loop while DAG runs end and another process holds the trace store's lock.

Usage:
  python bench/run_scheduler_loop.py [--runs 20] [--hold-s 6] [--free-s 1] [--before main]
                                     [--variants none,before,this] [--out bench/results/scheduler-loop]

For each variant, one real Airflow 3.3 (api-server, dag-processor, scheduler on SQLite, the
LocalExecutor) runs ``--runs`` DAG runs of one tiny task, all triggered at once, while another
process takes the trace store's SQLite write lock for ``--hold-s`` seconds, lets it go for
``--free-s``, and again, until every run has ended. The variants differ only in agora's plugin:

- ``none``: no agora (a plugin of the same name in the plugins folder shadows agora's);
- ``before``: agora as it was at ``--before`` (a ``git archive`` of it on ``PYTHONPATH``);
- ``this``: agora of this working tree.

The scheduler logs the time of every loop of its own (``Ran scheduling loop in X ms``, the figure
its ``scheduler.scheduler_loop_duration`` metric sends): the table gives, over the loops from the
first trigger to the last run's end, their count, median, 95th percentile and longest, the loops
over one second, and the wall time until every run ended. After that the lock is let go, and the
run records made within ``--settle-s`` are counted (none is lost if all are there).

Results: ``OUT.md`` and ``OUT.json``.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agora_optimizer.runs.store import RunStore  # noqa: E402
from harness.local_airflow import agora_deployment  # noqa: E402

DAG_ID = "loop_bench"
DAG = f"""
from datetime import datetime
from airflow.sdk import DAG, task

with DAG(dag_id="{DAG_ID}", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, max_active_runs=256):
    @task(retries=0)
    def tiny():
        return 1

    tiny()
"""
NO_AGORA = """
from airflow.plugins_manager import AirflowPlugin


class NoAgora(AirflowPlugin):
    name = "agora"  # registered first, from the plugins folder: the entry point's agora plugin is skipped
"""
# Takes the store's write lock for HOLD_S, lets it go for FREE_S, and again, until it is stopped.
HOLDER = """
import sqlite3, sys, time
hold_s, free_s = float(sys.argv[2]), float(sys.argv[3])
connection = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
while True:
    connection.execute("BEGIN IMMEDIATE")
    time.sleep(hold_s)
    connection.execute("ROLLBACK")
    time.sleep(free_s)
"""
LOOP_LINE = re.compile(r"Ran scheduling loop in ([0-9.]+) ms")
TIME = r"^(\d{4}-\d\d-\d\d[T ][0-9:.]+(?:Z|[+-]\d\d:\d\d))"  # a log line's time, as either logger writes it
# Airflow logs the first just before it calls the listeners of a run's end, the second just after.
LISTENERS_CALLED = re.compile(TIME + r" .*Marking run <DagRun \S+ @ .*?: (\S+), state:", re.MULTILINE)
LISTENERS_DONE = re.compile(TIME + r" .*DagRun Finished: .*?run_id=([^,]+),", re.MULTILINE)
SCHEDULER_DEBUG = "airflow.jobs.scheduler_job_runner=DEBUG"  # the loop's time is a DEBUG line


def checkout(ref: str, root: Path) -> Path:
    """``ref`` of this repository, extracted under ``root`` (its package goes first on ``PYTHONPATH``)."""
    target = root / f"agora-{ref.replace('/', '-')}"
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True, check=True).stdout
    target.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target


def run_variant(variant: str, root: Path, args: argparse.Namespace, before: Path | None) -> dict[str, Any]:
    (root / "dags").mkdir(parents=True)
    (root / "dags" / "loop_bench.py").write_text(DAG)
    plugins = root / "plugins"
    plugins.mkdir()
    extra = {
        "AIRFLOW__LOGGING__NAMESPACE_LEVELS": SCHEDULER_DEBUG,
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins),
        "AIRFLOW__CORE__MAX_ACTIVE_RUNS_PER_DAG": "256",
    }
    if variant == "none":
        (plugins / "no_agora.py").write_text(NO_AGORA)
    if variant == "before":
        assert before is not None
        extra["PYTHONPATH"] = str(before)
    store_url = f"sqlite:///{root / 'traces.db'}"
    RunStore(store_url).close()  # the store exists, as on any deployment that has run a task
    airflow = agora_deployment(root, REPO / "catalogs" / "local.yaml", store_url, executor="LocalExecutor",
                               extra_env=extra)  # fmt: skip
    airflow.migrate()
    holder: subprocess.Popen[bytes] | None = None
    try:
        airflow.start()
        airflow.wait_for_dag(DAG_ID)
        log = airflow.home / "scheduler.log"
        offset = log.stat().st_size
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(root / "traces.db"), str(args.hold_s),
                                   str(args.free_s)])  # fmt: skip
        airflow.request("PATCH", f"/dags/{DAG_ID}", json={"is_paused": True})  # the runs start together, after
        run_ids = [airflow.trigger(DAG_ID) for _ in range(args.runs)]
        started = time.monotonic()
        airflow.request("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
        states = {run_id: airflow.wait_for_run(DAG_ID, run_id, timeout_s=1800) for run_id in run_ids}
        wall_s = time.monotonic() - started
        with log.open("rb") as handle:
            handle.seek(offset)
            text = handle.read().decode(errors="replace")
        loops_ms = [float(m.group(1)) for m in LOOP_LINE.finditer(text)]
        listeners_s = _listener_times_s(text)
        holder.terminate()
        holder.wait(30)
        holder = None
        recorded = _records_made(store_url, run_ids, args.settle_s) if variant != "none" else None
    finally:
        if holder is not None:
            holder.terminate()
            holder.wait(30)
        airflow.stop_all()
    if not loops_ms:
        raise SystemExit(f"{variant}: no 'Ran scheduling loop' line in {log} (is {SCHEDULER_DEBUG} in force?)")
    if not listeners_s:
        raise SystemExit(f"{variant}: no run's end ('Marking run', 'DagRun Finished') in {log}")
    ordered = sorted(loops_ms)
    return {
        "variant": variant,
        "runs": args.runs,
        "succeeded": sum(state == "success" for state in states.values()),
        "wall_s": wall_s,
        "loops": len(loops_ms),
        "median_ms": statistics.median(loops_ms),
        "p95_ms": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "max_ms": ordered[-1],
        "loops_over_1s": sum(ms > 1000 for ms in loops_ms),
        "total_loop_s": sum(loops_ms) / 1000,
        "listener_median_ms": 1000 * statistics.median(listeners_s),
        "listener_max_ms": 1000 * max(listeners_s),
        "listener_total_s": sum(listeners_s),
        "records_made": recorded,
    }


def _listener_times_s(log_text: str) -> list[float]:
    """Per run that ended, the time between Airflow's lines before and after it called the listeners."""
    called = {m.group(2): datetime.fromisoformat(m.group(1)) for m in LISTENERS_CALLED.finditer(log_text)}
    done = {m.group(2): datetime.fromisoformat(m.group(1)) for m in LISTENERS_DONE.finditer(log_text)}
    return [(done[run_id] - at).total_seconds() for run_id, at in called.items() if run_id in done]


def _records_made(store_url: str, run_ids: list[str], settle_s: float) -> int:
    """How many of the runs have a record once the lock is free (waiting up to ``settle_s``)."""
    deadline = time.monotonic() + settle_s
    while True:
        with RunStore(store_url) as store:
            made = sum(store.get(DAG_ID, run_id) is not None for run_id in run_ids)
        if made == len(run_ids) or time.monotonic() > deadline:
            return made
        time.sleep(1)


def _made(result: dict[str, Any]) -> str:
    return "-" if result["records_made"] is None else f"{result['records_made']}/{result['runs']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--hold-s", type=float, default=6.0)
    parser.add_argument("--free-s", type=float, default=1.0)
    parser.add_argument("--settle-s", type=float, default=60.0)
    parser.add_argument("--before", default="main", help="the git ref of the 'before' variant")
    parser.add_argument("--variants", default="none,before,this")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "scheduler-loop")
    args = parser.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(variants) - {"none", "before", "this"}
    if unknown:
        parser.error(f"--variants: unknown {sorted(unknown)} (none, before, this)")
    scratch = Path(tempfile.mkdtemp(prefix="agora-bench-loop-"))
    results = []
    before = checkout(args.before, scratch) if "before" in variants else None
    for variant in variants:
        result = run_variant(variant, scratch / variant, args, before)
        print(json.dumps(result), flush=True)
        results.append(result)
    shutil.rmtree(scratch)  # kept when a variant fails: its Airflow logs are there
    document = {"runs": args.runs, "hold_s": args.hold_s, "free_s": args.free_s, "before": args.before,
                "results": results}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(document, indent=1) + "\n")
    names = {"none": "no agora", "before": f"agora at {args.before}", "this": "agora, this tree"}
    table = [
        f"# The scheduler's loop: {args.runs} DAG runs ending while another process holds the trace store's "
        f"lock {args.hold_s:g} s of every {args.hold_s + args.free_s:g} s",
        "",
        "| agora | loops | median loop (ms) | p95 (ms) | longest (ms) | loops over 1 s | run-end listeners: median "
        "(ms) | longest (ms) | all (s) | all runs ended after (s) | runs succeeded | run records made |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {names[r['variant']]} | {r['loops']} | {r['median_ms']:.0f} | {r['p95_ms']:.0f} | {r['max_ms']:.0f} "
            f"| {r['loops_over_1s']} | {r['listener_median_ms']:.0f} | {r['listener_max_ms']:.0f} "
            f"| {r['listener_total_s']:.1f} | {r['wall_s']:.0f} | {r['succeeded']}/{r['runs']} | {_made(r)} |"
            for r in results
        ),
    ]
    args.out.with_suffix(".md").write_text("\n".join(table) + "\n")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())

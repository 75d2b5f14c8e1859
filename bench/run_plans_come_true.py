"""Benchmark: do plans come true? Real WfInstances workflows, planned by agora, run in a real Airflow.

Usage:
  python bench/run_plans_come_true.py --workflows-dir ../shared/data/wfinstances \\
      --workflows bacass-dirt02-001,scrnaseq-dirt02-001 --backend local --runs 3 \\
      --out bench/results/plans-come-true-local.json

One real Airflow 3.3 (api-server, dag-processor, scheduler on SQLite) with ``[core] executor =
LocalExecutor,agora`` and the AgoraExecutor on the local pools (``catalogs/local-priced.yaml``,
the two local pools with nominal prices) or the loopback SLURM cluster
(``catalogs/slurm-loopback-2core.yaml``: one core per partition, as the host has two; start the
cluster first with ``bash scripts/start_slurm.sh``). Each
workflow is replayed as a DAG by ``dags/agora_wfinstance.py`` with its runtimes scaled by
``--time-scale`` and clamped into [``--min-runtime-s``, ``--max-runtime-s``] (default 5-60 s).
Each task burns one core for its runtime (``--task-load cpu``) or sleeps it (``sleep``): the
loopback SLURM cluster's two "nodes" share the host's two cores with each other and with Airflow,
which a real cluster's nodes do not. Each run's ``cpu_share`` is the median over its tasks of
CPU time over wall time (the trace store's ``cpu_time_s / runtime_s``): how much of a core a
CPU-bound task got.

For each workflow and each of ``--runs`` rounds:

1. ``agora optimize airflow:<dag> --apply`` plans it (learning from the rounds before: the trace
   store keeps every attempt) and puts the plan in force; the benchmark waits until the
   dag-processor has parsed the DAG again, so the run uses that plan, and triggers a run;
2. then the same with the one-type default plan (every task on the cheapest type that fits them
   all, :func:`agora_optimizer.optimize.optimize.default_plan`, with the same learned platform latency),
   so that the saving is measured on real runs beside the predicted one.

After each run ``agora runs record`` (re)builds its run record and ``agora runs show --json``
gives the numbers. With ``--slow-factor F`` two more runs of ``--slow-workflow`` (the first by
default) slow one task F times (DAG run conf ``agora_slow``), the longest of those the plan starts
in the first 40 % of its makespan (a late one leaves a repair nothing to move), planned with
``--slow-objective``: one with repair (``[agora] replan_slack`` as configured, 0.2 by default), then one
without (the scheduler restarted with ``replan_slack = 0``) under the same plan, to see whether
repair brings a drifting run closer to its plan.

Output: ``--out`` holds one JSON object per run (``workflow, backend, plan, run, tasks,
planned_makespan_s, actual_makespan_s, planned_cost_usd, actual_cost_usd, repairs, ...``) and a
summary; ``--out`` with ``.md`` instead of ``.json`` gets the results table.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agora_optimizer.plans.store import plan_version  # noqa: E402
from harness.local_airflow import AirflowDeployment  # noqa: E402
from harness.replay_runs import CATALOGS, DAG_ID_PREFIX, ReplayRuns, replay_deployment  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.default_runs = args.runs if args.default_runs is None else args.default_runs
    workflows = [name.strip() for name in args.workflows.split(",") if name.strip()]
    if not workflows:
        raise SystemExit("--workflows: name at least one workflow")
    missing = [name for name in workflows if not (args.workflows_dir / f"{name}.json").is_file()]
    if missing:
        raise SystemExit(f"--workflows: no {', '.join(missing)} in {args.workflows_dir}")
    slow_workflow = args.slow_workflow or workflows[0]
    if slow_workflow not in workflows:
        raise SystemExit(f"--slow-workflow: {slow_workflow!r} is not one of --workflows")
    catalog = (args.catalog or CATALOGS[args.backend]).resolve()
    root = Path(tempfile.mkdtemp(prefix="agora-bench-plans-"))
    airflow = replay_deployment(
        root,
        workflows,
        args.workflows_dir,
        catalog,
        time_scale=args.time_scale,
        runtime_range_s=(args.min_runtime_s, args.max_runtime_s),
        memory_scale=args.memory_scale,
        task_load=args.task_load,
    )
    bench = _Bench(args, airflow, catalog, root)
    started = time.perf_counter()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # kill(1) unwinds too: Airflow is stopped, none left
    try:
        _run_all(bench, airflow, args, workflows, slow_workflow)
    finally:
        if args.keep_dir:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    summary = _summary(bench.results)
    document = {
        "command": " ".join(["python", "bench/run_plans_come_true.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "backend": args.backend,
        "catalog": str(catalog.relative_to(REPO) if catalog.is_relative_to(REPO) else catalog),
        "runtime_range_s": [args.min_runtime_s, args.max_runtime_s],
        "time_scale": args.time_scale,
        "task_load": args.task_load,
        "bench_wall_s": round(time.perf_counter() - started, 1),
        "runs": bench.results,
        "summary": summary,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    table = _table(document)
    args.out.with_suffix(".md").write_text(table)
    print(table)
    return 0


def _run_all(bench: _Bench, airflow: Any, args: argparse.Namespace, workflows: list[str], slow_workflow: str) -> None:
    """Every run of the benchmark, in one Airflow started here and stopped after."""
    airflow.migrate()
    with airflow:
        airflow.start()
        for name in workflows:
            airflow.wait_for_dag(DAG_ID_PREFIX + name, timeout_s=300)
        for name in workflows:
            for round_number in range(1, args.runs + 1):
                kinds = ["agora", "default"] if round_number <= args.default_runs else ["agora"]
                for kind in kinds if round_number % 2 else reversed(kinds):  # who runs first alternates
                    bench.run(name, kind, round_number)
        if args.slow_factor:  # one workflow, an early long task slowed: with repair, then without
            slow = {"slow_factor": args.slow_factor, "objective": args.slow_objective or args.objective}
            bench.run(slow_workflow, "agora", args.runs + 1, **slow)
            airflow.stop("scheduler")
            airflow.extra_env = {**airflow.extra_env, "AIRFLOW__AGORA__REPLAN_SLACK": "0"}  # repair off
            airflow.start("scheduler")
            bench.run(slow_workflow, "agora", args.runs + 2, repair=False, plan_of=args.runs + 1, **slow)


class _Bench:
    """One Airflow, one trace store: plans, runs and records, one run at a time."""

    def __init__(self, args: argparse.Namespace, airflow: AirflowDeployment, catalog: Path, root: Path) -> None:
        self.args = args
        self.airflow = airflow
        self.catalog = catalog
        self.root = root
        self.runs = ReplayRuns(airflow, root, settle_s=args.settle_s)
        self.results: list[dict[str, Any]] = []

    def run(
        self,
        name: str,
        kind: str,
        round_number: int,
        slow_factor: float = 0.0,
        repair: bool = True,
        objective: str = "",
        plan_of: int | None = None,
    ) -> None:
        """One run of ``name`` under a new plan of ``kind``, or under the plan of round ``plan_of`` (still
        in force: the same plan, so that two runs differ only in what the benchmark changed)."""
        dag_id = DAG_ID_PREFIX + name
        plan_path = self.root / "plans-made" / f"{name}-{kind}-{round_number if plan_of is None else plan_of}.json"
        plan_path.parent.mkdir(parents=True, exist_ok=True)
        if plan_of is not None:
            pass  # the plan in force already
        elif kind == "agora":  # --apply also keeps the workflow beside the plan, which repair re-plans from
            self.runs.agora(["optimize", f"airflow:{dag_id}", "--catalog", str(self.catalog), "--objective",
                             objective or self.args.objective, "--time-limit-s", f"{self.args.optimize_time_limit_s:g}",
                             "--dag-folder", str(self.airflow.dags_folder), "-o", str(plan_path), "--json",
                             "--apply"])  # fmt: skip
        else:
            self.runs.default_plan(dag_id, self.catalog, plan_path)
        self.runs.wait_in_force(dag_id, plan_version(plan_path.read_bytes()))
        conf: dict[str, Any] = {}
        slowed = ""
        if slow_factor:
            slowed = _slowed_task(plan_path)
            conf = {"agora_slow": {slowed: slow_factor}}
        run_id, state, record = self.runs.run(dag_id, conf, self.args.run_timeout_s)
        plan = json.loads(plan_path.read_text())
        result = {
            "workflow": name,
            "backend": self.args.backend,
            "plan": kind,
            "run": round_number,
            "run_id": run_id,
            "state": state,
            "tasks": len(plan["assignments"]),
            "planned_makespan_s": record.get("planned_makespan_s"),
            "actual_makespan_s": record.get("actual_makespan_s"),
            "planned_cost_usd": record.get("planned_cost_usd"),
            "actual_cost_usd": record.get("actual_cost_usd"),
            "repairs": len(record.get("repairs") or []),
            "cpu_share": self.runs.cpu_share(dag_id, run_id),
            "plan_version": record.get("plan_version"),
            "slowed": {slowed: slow_factor} if slowed else {},
            "repair": repair,
            "objective": objective or self.args.objective,
        }
        self.results.append(result)
        print(json.dumps(result), flush=True)


def _slowed_task(plan_path: Path, early: float = 0.4) -> str:
    """The longest task among those the plan starts in its first ``early`` of the makespan."""
    plan = json.loads(plan_path.read_text())
    makespan_s = max(a["end_s"] for a in plan["assignments"])
    candidates = [a for a in plan["assignments"] if a["start_s"] <= early * makespan_s]
    return str(max(candidates, key=lambda a: (a["end_s"] - a["start_s"], a["task"]))["task"])


def _ratio(actual: float | None, planned: float | None) -> float | None:
    if actual is None or planned is None or planned <= 0:
        return None
    return actual / planned


def _summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per plan kind: median and worst |actual/planned - 1| for makespan and cost; the realised saving."""
    summary: dict[str, Any] = {}
    for kind in ("agora", "default"):
        runs = [r for r in results if r["plan"] == kind and not r["slowed"]]
        entry: dict[str, Any] = {"runs": len(runs)}
        for what in ("makespan_s", "cost_usd"):
            errors = [
                abs(ratio - 1) for r in runs if (ratio := _ratio(r[f"actual_{what}"], r[f"planned_{what}"])) is not None
            ]
            entry[f"{what}_median_error"] = statistics.median(errors) if errors else None
            entry[f"{what}_worst_error"] = max(errors) if errors else None
        summary[kind] = entry
    saving: dict[str, Any] = {}
    for workflow in sorted({r["workflow"] for r in results}):
        ours = [r for r in results if r["workflow"] == workflow and r["plan"] == "agora" and not r["slowed"]]
        theirs = [r for r in results if r["workflow"] == workflow and r["plan"] == "default"]
        if not ours or not theirs:
            continue
        saving[workflow] = {
            what: {
                "actual": _saving([r[f"actual_{what}"] for r in ours], [r[f"actual_{what}"] for r in theirs]),
                "planned": _saving([r[f"planned_{what}"] for r in ours], [r[f"planned_{what}"] for r in theirs]),
            }
            for what in ("makespan_s", "cost_usd")
        }
    summary["saving_against_default"] = saving
    return summary


def _saving(ours: list[float | None], theirs: list[float | None]) -> float | None:
    """1 - median(ours) / median(theirs): 0.25 means a quarter less than the default."""
    a, b = [x for x in ours if x is not None], [x for x in theirs if x is not None]
    if not a or not b or statistics.median(b) <= 0:
        return None
    return 1 - statistics.median(a) / statistics.median(b)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _table(document: dict[str, Any]) -> str:
    lines = [
        f"# Plans that come true: {document['backend']} ({document['date']})",
        "",
        f"`{document['command']}`",
        "",
        f"Catalog `{document['catalog']}`; task runtimes scaled by {document['time_scale']:g} into "
        f"[{document['runtime_range_s'][0]:g}, {document['runtime_range_s'][1]:g}] s; "
        f"task load {document.get('task_load', 'cpu')}; "
        f"{document['bench_wall_s'] / 60:.0f} min in all.",
        "",
        "| workflow | plan | run | tasks | state | planned makespan (s) | actual (s) | ratio | planned cost (USD) "
        "| actual (USD) | ratio | repairs | CPU share |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in document["runs"]:
        slowed = ", ".join(f"{task} x{factor:g}" for task, factor in r["slowed"].items())
        repair = "repair on" if r.get("repair", True) else "repair off"
        objective = f", objective {r['objective']}" if slowed and "objective" in r else ""
        kind = r["plan"] + (f" ({slowed}, {repair}{objective})" if slowed else "")
        lines.append(
            f"| {r['workflow']} | {kind} | {r['run']} | {r['tasks']} | {r['state']} | {_num(r['planned_makespan_s'])} "
            f"| {_num(r['actual_makespan_s'])} | {_num(_ratio(r['actual_makespan_s'], r['planned_makespan_s']), 2)} "
            f"| {_num(r['planned_cost_usd'], 5)} | {_num(r['actual_cost_usd'], 5)} "
            f"| {_num(_ratio(r['actual_cost_usd'], r['planned_cost_usd']), 2)} | {r['repairs']} "
            f"| {_num(r.get('cpu_share'), 2)} |"
        )
    lines += ["", "| plan | runs | makespan: median |actual/planned - 1| | worst | cost: median | worst |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for kind in ("agora", "default"):
        s = document["summary"][kind]
        lines.append(
            f"| {kind} | {s['runs']} | {_pct(s['makespan_s_median_error'])} | {_pct(s['makespan_s_worst_error'])} "
            f"| {_pct(s['cost_usd_median_error'])} | {_pct(s['cost_usd_worst_error'])} |"
        )
    savings = document["summary"]["saving_against_default"]
    if savings:
        lines += ["", "| workflow | makespan saving: realised | predicted | cost saving: realised | predicted |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for workflow, s in savings.items():
            lines.append(
                f"| {workflow} | {_pct(s['makespan_s']['actual'])} | {_pct(s['makespan_s']['planned'])} "
                f"| {_pct(s['cost_usd']['actual'])} | {_pct(s['cost_usd']['planned'])} |"
            )
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workflows-dir", type=Path, default=REPO / "workflows")
    parser.add_argument("--workflows", default="bacass-dirt02-001")
    parser.add_argument("--backend", choices=sorted(CATALOGS), default="local")
    parser.add_argument("--catalog", type=Path, help="default: catalogs/local-priced.yaml or slurm-loopback-2core.yaml")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "plans-come-true.json")
    parser.add_argument("--time-scale", type=float, default=0.02)
    parser.add_argument("--min-runtime-s", type=float, default=5.0)
    parser.add_argument("--max-runtime-s", type=float, default=60.0)
    parser.add_argument("--memory-scale", type=float, default=0.25)
    parser.add_argument(
        "--task-load",
        choices=("cpu", "sleep"),
        default="cpu",
        help="each task burns a core for its runtime, or sleeps it (tasks that do not compete for the host's cores)",
    )
    parser.add_argument("--objective", choices=("time", "cost", "balanced"), default="balanced")
    parser.add_argument("--optimize-time-limit-s", type=float, default=20.0)
    parser.add_argument("--default-runs", type=int, default=None, help="rounds with a default run (default: --runs)")
    parser.add_argument(
        "--slow-factor",
        type=float,
        default=0.0,
        help="two more runs of --slow-workflow, an early long task slowed: "
        "with repair ([agora] replan_slack as configured) and without (replan_slack 0)",
    )
    parser.add_argument("--slow-workflow", default="", help="the workflow of the slowed runs (default: the first)")
    parser.add_argument(
        "--slow-objective",
        choices=("", "time", "cost", "balanced"),
        default="",
        help="the objective of the slowed runs' plans (default: --objective); a plan that spreads its tasks "
        "over several machines leaves a repair room to move them",
    )
    parser.add_argument("--run-timeout-s", type=float, default=1800.0)
    parser.add_argument("--settle-s", type=float, default=3.0, help="wait for the executor's trace rows")
    parser.add_argument("--keep-dir", action="store_true", help="keep the run's Airflow home, traces and plans")
    return parser


if __name__ == "__main__":
    sys.exit(main())

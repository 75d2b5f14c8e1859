"""Benchmark: the learning loop. Workflows never seen, planned from predictions under a deadline, run, repaired.

Usage:
  python bench/run_learning_loop.py --simulate --train-dir ../shared/data/wfinstances \\
      [--workflows blast-chameleon-small-001,...] [--catalog catalogs/aws-us-east-1.yaml] \\
      --out bench/results/learning-loop-simulated.json

For each workflow of ``--workflows`` (WfFormat files in ``--workflows-dir``; by default every instance of
``--train-dir`` whose family, the name up to its first ``-``, has two or more), a predictor is trained on
every instance of ``--train-dir`` but that one; the workflow is predicted from its shape alone, planned
for time, and planned again for ``--objective`` (cost) under a deadline of ``--deadline-factor`` (1.5)
times that fastest predicted plan's makespan, aimed ``--deadline-margin`` (5 %) of it early as ``agora optimize``
aims (the plan from the truth likewise). That plan runs on the true runtimes:

- ``--simulate``: without Airflow (:mod:`agora_optimizer.predict.learning_loop`), the executor's repairs
  replayed as tasks end late (:mod:`agora_optimizer.predict.repair_replay`), beside the plan made from
  the truth under the same deadline and the one-type default; every run marked ``"simulated": true``.
- ``--backend local``: in one real Airflow 3.3 (:mod:`harness.replay_runs`, as
  ``bench/run_plans_come_true.py``), each workflow replayed by ``dags/agora_wfinstance.py`` with
  ``AGORA_WFINSTANCE_HINTS=none``: its tasks declare their cores and category only, and sleep or burn
  their true runtime, scaled by ``--time-scale`` into [``--min-runtime-s``, ``--max-runtime-s``]. The
  training runtimes and peaks are scaled the same way (and the task process's bytes added), so the
  predictions are in the replay's units. The plan is made in this process from the predictor trained
  as above (with the platform latency learned from this Airflow's runs so far) and put in force with
  the workflow it was made from, as ``agora optimize --apply`` does; the AgoraExecutor runs it and
  repairs it; once every plan has run, the one-type defaults made from the same predictions run, the
  scheduler restarted with repairs off (``[agora] replan_slack`` 0: Airflow without agora would not
  repair them; a kill for memory still retries). Each run's record
  (``agora runs show``) gives the actual makespan, cost and repairs; the simulated run of the same
  plan is kept beside it (``simulated_*``), as is the memory each task reserved against its peak.
  Planning goes through the same predictor as ``--simulate``, not through ``agora optimize
  airflow:DAG``: the DAG's tasks declare no input sizes, which the predictor needs.

Output: ``--out`` holds ``{"command", "date", "catalog", ..., "runs": [...], "summary": {...}}``, one
object per run (``workflow, planned_makespan_s, actual_makespan_s, deadline_s, deadline_met,
planned_cost_usd, actual_cost_usd, truth_plan_cost_usd, repairs``, the default's planned and actual
cost and makespan, memory over its reservation, the run's forecast once a quarter had run), and
``--out`` with ``.md`` the table against the issue's targets
(:mod:`agora_optimizer.predict.learning_loop_report`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agora_optimizer.io.catalog_file import load_catalog  # noqa: E402
from agora_optimizer.io.wfformat import load_workflow  # noqa: E402
from agora_optimizer.model.plan import OBJECTIVE_KINDS, Plan  # noqa: E402
from agora_optimizer.model.workflow import Edge, Workflow  # noqa: E402
from agora_optimizer.planning.deadline_aim import DEADLINE_MARGIN  # noqa: E402
from agora_optimizer.predict import runtime_in_run  # noqa: E402
from agora_optimizer.predict.learning_loop import (  # noqa: E402
    LoopSettings,
    Scale,
    held_out_instances,
    kept_deadline,
    plan_fields,
    plan_instance,
    repaired_run,
    simulate_instances,
    trained_without,
)
from agora_optimizer.predict.learning_loop_report import markdown, summary  # noqa: E402
from agora_optimizer.predict.repair_replay import MAX_REPAIRS, REPLAN_SLACK  # noqa: E402
from agora_optimizer.traces.wfformat_import import attempts_from_wfformat  # noqa: E402
from harness.replay_runs import DAG_ID_PREFIX, ReplayRuns, replay_deployment  # noqa: E402

SHARED = REPO.parent / "shared" / "data" / "wfinstances"
CATALOGS = {"local": REPO / "catalogs" / "local-priced.yaml"}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    train = sorted(args.train_dir.glob("*.json"))
    if not train:
        raise SystemExit(f"--train-dir: no WfFormat instance (*.json) in {args.train_dir}")
    names = [name.strip() for name in args.workflows.split(",") if name.strip()]
    workflows_dir = args.workflows_dir or args.train_dir
    if names:
        missing = [name for name in names if not (workflows_dir / f"{name}.json").is_file()]
        if missing:
            raise SystemExit(f"--workflows: no {', '.join(missing)} in {workflows_dir}")
        held_out = [workflows_dir / f"{name}.json" for name in names]
    else:
        held_out = held_out_instances(sorted(workflows_dir.glob("*.json")))
    catalog_path = (args.catalog or CATALOGS[args.backend]).resolve()
    label = str(catalog_path.relative_to(REPO) if catalog_path.is_relative_to(REPO) else catalog_path)
    settings = LoopSettings(
        deadline_factor=args.deadline_factor,
        objective=args.objective,
        time_limit_s=args.time_limit_s,
        slack=args.slack,
        interval_s=args.repair_interval_s,
        max_repairs=args.max_repairs,
        deadline_margin=args.deadline_margin,
        run_shrink_k=args.run_shrink_k,  # for a side-by-side run of the rule before (1.0)
    )
    started = time.perf_counter()
    if args.simulate:
        catalog = load_catalog(catalog_path)
        runs = simulate_instances(train, held_out, catalog, label, settings, progress=_show, scale=_scale(args))
    else:
        runs = _real_runs(args, train, held_out, catalog_path, label, settings)
    document: dict[str, Any] = {
        "command": " ".join(["python", "bench/run_learning_loop.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "simulated": args.simulate,
        "backend": "simulated" if args.simulate else args.backend,
        "scale": vars(_scale(args)) if args.scaled or not args.simulate else None,
        "catalog": label,
        "deadline_factor": settings.deadline_factor,
        "deadline_margin": settings.deadline_margin,
        "objective": settings.objective,
        "slack": settings.slack,
        "repair_interval_s": settings.interval_s,
        "time_limit_s": settings.time_limit_s,
        "run_shrink_k": runtime_in_run.RUN_SHRINK_K if args.run_shrink_k is None else args.run_shrink_k,
        "bench_wall_s": round(time.perf_counter() - started, 1),
        "runs": runs,
        "summary": summary(runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    table = markdown(document)
    args.out.with_suffix(".md").write_text(table)
    print(table)
    return 0


def _show(result: dict[str, Any]) -> None:
    print(json.dumps(result), flush=True)


def _dag_module() -> ModuleType:
    """``dags/agora_wfinstance.py``, for its task ids and its replay's constants (it imports Airflow)."""
    spec = importlib.util.spec_from_file_location("agora_wfinstance_bench", REPO / "dags" / "agora_wfinstance.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scale(args: argparse.Namespace) -> Scale:
    """The replay DAG's scaling (identity for ``--simulate`` unless ``--scaled``)."""
    if args.simulate and not args.scaled:
        return Scale()
    dag = _dag_module()
    return Scale(
        time_s=args.time_scale,
        min_runtime_s=args.min_runtime_s,
        max_runtime_s=args.max_runtime_s,
        memory=args.memory_scale,
        max_memory_bytes=dag.REPLAY_MAX_MEMORY_BYTES,
        # the replayed task's peak is its block and the process's own: training and truth must say so (a hint's
        # TASK_PROCESS_BYTES, 41 MiB more, taught the model reservations 1.47x a small task's peak)
        process_bytes=dag.TASK_PROCESS_PEAK_BYTES,
    )


def _renamed(workflow: Workflow, ids: dict[str, str], name: str) -> Workflow:
    """``workflow`` as the replay DAG names it: Airflow's task ids, the DAG id."""
    tasks = [replace(t, id=ids[t.id]) for t in workflow.tasks]
    edges = [Edge(ids[e.parent], ids[e.child], e.bytes) for e in workflow.edges]
    return Workflow.create(name, tasks, edges, source=workflow.source)


def _renamed_plan(plan: Plan, ids: dict[str, str], name: str) -> Plan:
    return replace(plan, workflow=name, assignments=tuple(replace(a, task=ids[a.task]) for a in plan.assignments))


def _real_runs(
    args: argparse.Namespace, train: list[Path], held_out: list[Path], catalog_path: Path, label: str,
    settings: LoopSettings,
) -> list[dict[str, Any]]:  # fmt: skip
    """Each of ``held_out`` planned from predictions, then run in a real Airflow beside the one-type default; the
    scratch directory is removed after (``--keep-dir`` keeps it)."""
    root = Path(tempfile.mkdtemp(prefix="agora-bench-loop-"))
    try:
        return _run_in(root, args, train, held_out, catalog_path, label, settings)
    finally:
        if args.keep_dir:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def _run_in(
    root: Path, args: argparse.Namespace, train: list[Path], held_out: list[Path], catalog_path: Path, label: str,
    settings: LoopSettings,
) -> list[dict[str, Any]]:  # fmt: skip
    """:func:`_real_runs` in the scratch directory ``root`` (Airflow's home, the traces, the plans)."""
    from agora_optimizer.integration.airflow_dag import learned_platform_latency
    from agora_optimizer.predict.latency import with_platform_latency

    dag = _dag_module()
    timeout = args.run_timeout_s
    scale = _scale(args)
    attempts = {path: attempts_from_wfformat(path) for path in train}
    airflow = replay_deployment(
        root, [path.stem for path in held_out], held_out[0].parent, catalog_path, time_scale=args.time_scale,
        runtime_range_s=(args.min_runtime_s, args.max_runtime_s), memory_scale=args.memory_scale,
        task_load=args.task_load, hints="none",
    )  # fmt: skip
    if args.run_shrink_k is not None:  # the executor's learning too, in the scheduler's process
        airflow.extra_env = {**airflow.extra_env, "AIRFLOW__AGORA__RUN_SHRINK_K": f"{args.run_shrink_k:g}"}
    runs = ReplayRuns(airflow, root, settle_s=args.settle_s)
    store_url = f"sqlite:///{root / 'traces.db'}"
    results: list[dict[str, Any]] = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # kill(1) unwinds too: Airflow is stopped, none left
    named = {path: _airflow_names(dag, path) for path in held_out}  # each workflow loaded once
    # every DAG's edges: a task's ready time is its parents' end, not its queued time
    edges = {dag_id: pairs for dag_id, _, pairs in named.values()}
    airflow.migrate()
    with airflow:
        airflow.start()
        for dag_id, _, _ in named.values():
            airflow.wait_for_dag(dag_id, timeout_s=300)
        pending = []
        for path in held_out:
            began = time.perf_counter()
            dag_id, ids, _ = named[path]
            catalog = with_platform_latency(
                load_catalog(catalog_path), learned_platform_latency(store_url, edges), "median"
            )
            planned = plan_instance(trained_without(attempts, path, scale), path, catalog, label, settings, scale)
            simulated = repaired_run(planned.plan, planned.predicted, planned.actual, catalog, settings)
            result: dict[str, Any] = {
                **plan_fields(path, planned, settings),
                "simulated": False,
                "backend": args.backend,
                "simulated_actual_makespan_s": simulated.replay.makespan_s,
                "simulated_actual_cost_usd": simulated.replay.cost_usd,
                "simulated_repairs": len(simulated.repairs),
            }
            predicted = _renamed(planned.predicted, ids, dag_id)
            ours = _renamed_plan(planned.plan, ids, dag_id)
            fields, record = _run_plan(runs, store_url, dag_id, ours, predicted, "", timeout)
            result.update(fields)
            made = result.get("actual_makespan_s")
            result["deadline_met"] = made is not None and kept_deadline(made, planned.deadline_s)
            result.update(_forecast(record, settings.forecast_share))
            result["wall_s"] = time.perf_counter() - began
            pending.append((result, planned.default, ids, dag_id, predicted))
        # The defaults run as Airflow without agora's repairs would run them (a kill for memory still retries).
        airflow.stop("scheduler")
        airflow.extra_env = {**airflow.extra_env, "AIRFLOW__AGORA__REPLAN_SLACK": "0"}
        airflow.start("scheduler")
        for result, default, ids, dag_id, predicted in pending:
            if default is not None:
                renamed = _renamed_plan(default, ids, dag_id)
                result.update(_run_plan(runs, store_url, dag_id, renamed, predicted, "default_", timeout)[0])
            results.append(result)
            _show(result)
    return results


def _run_plan(
    runs: ReplayRuns, store_url: str, dag_id: str, plan: Plan, predicted: Workflow, prefix: str, timeout_s: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Put ``plan`` in force for ``dag_id``, run the DAG once: the run's fields (names ``prefix``-ed) and its record."""
    from agora_optimizer.traces.store import TraceStore

    version = runs.apply(dag_id, plan, predicted)
    runs.wait_in_force(dag_id, version)
    run_id, state, record = runs.run(dag_id, {}, timeout_s)
    with TraceStore(store_url) as store:
        tried = store.attempts(dag_id=dag_id, run_id=run_id)
    fields = {
        f"{prefix}run_id": run_id,
        f"{prefix}state": state,
        f"{prefix}actual_makespan_s": record.get("actual_makespan_s"),
        f"{prefix}actual_cost_usd": record.get("actual_cost_usd"),
        f"{prefix}repairs": len(record.get("repairs") or []),
        f"{prefix}record_planned_makespan_s": record.get("planned_makespan_s"),
        **({f"{prefix}{k}": v for k, v in _memory(tried).items()}),
    }
    return fields, record


def _airflow_names(dag: ModuleType, path: Path) -> tuple[str, dict[str, str], list[tuple[str, str]]]:
    """The replay DAG of ``path`` as Airflow names it: its id, each task's id, its (parent, child) task ids. Without
    the edges a task's ready time is its queued time, which the executor sets when it lets a held task go: the wait
    for its machine's turn would not count as latency."""
    recorded = load_workflow(path)
    ids = dag.airflow_task_ids([t.id for t in recorded.tasks])
    return DAG_ID_PREFIX + dag._sanitized(path.stem), ids, [(ids[e.parent], ids[e.child]) for e in recorded.edges]


def _forecast(record: dict[str, Any], share: float) -> dict[str, Any]:
    """What the run forecast for itself once ``share`` of it had run: its last re-plan's forecast by then (times
    on its plan clock), else its plan's makespan (a run not re-planned expects its plan)."""
    made = record.get("actual_makespan_s")
    if made is None:
        return {"forecast_at_s": None, "forecast_makespan_s": None}
    at_s = share * made
    said = [r for r in record.get("repairs") or [] if r.get("forecast_end_s") is not None and r["at_s"] <= at_s]
    return {
        "forecast_at_s": at_s,
        "forecast_makespan_s": said[-1]["forecast_end_s"] if said else record.get("planned_makespan_s"),
    }


def _memory(tried: list[Any]) -> dict[str, Any]:
    """Over a run's tries with a peak and a reservation: how many peaked above it, and the median reservation/peak."""
    pairs = [
        (a.requested_memory_bytes, a.peak_rss_bytes) for a in tried if a.requested_memory_bytes and a.peak_rss_bytes
    ]
    return {
        "memory_tasks": len(pairs),
        "tasks_over_reservation": sum(1 for reserved, peak in pairs if peak > reserved),
        "median_reservation_over_peak": statistics.median(r / p for r, p in pairs) if pairs else None,
        "tries": len(tried),
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-dir", type=Path, default=SHARED, help="WfFormat instances to learn from")
    parser.add_argument("--workflows-dir", type=Path, help="where --workflows are (default: --train-dir)")
    parser.add_argument("--workflows", default="", help="names, comma-separated (default: every held-out instance)")
    parser.add_argument("--backend", choices=sorted(CATALOGS), default="local")
    parser.add_argument("--catalog", type=Path, help="default: the backend's, catalogs/local-priced.yaml")
    parser.add_argument("--simulate", action="store_true", help="replay the loop without Airflow")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "learning-loop.json")
    parser.add_argument("--deadline-factor", type=float, default=1.5)
    parser.add_argument("--deadline-margin", type=float, default=DEADLINE_MARGIN, help="aim this share early")
    parser.add_argument("--objective", choices=OBJECTIVE_KINDS, default="cost")
    parser.add_argument("--time-limit-s", type=float, default=5.0, help="per plan")
    parser.add_argument("--slack", type=float, default=REPLAN_SLACK, help="[agora] replan_slack (0: no repair)")
    parser.add_argument("--repair-interval-s", type=float, default=0.0, help="least time between two repairs")
    parser.add_argument("--max-repairs", type=int, default=MAX_REPAIRS)
    parser.add_argument(
        "--run-shrink-k",
        type=float,
        help="a category not seen yet: the run's factor's k, here and in the executor ([agora] run_shrink_k)",
    )
    parser.add_argument("--scaled", action="store_true", help="with --simulate: scale as the replay DAG does")
    parser.add_argument("--time-scale", type=float, default=0.02)
    parser.add_argument("--min-runtime-s", type=float, default=5.0)
    parser.add_argument("--max-runtime-s", type=float, default=60.0)
    parser.add_argument("--memory-scale", type=float, default=0.25)
    parser.add_argument("--task-load", choices=("cpu", "sleep"), default="sleep")
    parser.add_argument("--run-timeout-s", type=float, default=1800.0)
    parser.add_argument("--settle-s", type=float, default=3.0, help="wait for the executor's trace rows")
    parser.add_argument("--keep-dir", action="store_true", help="keep the run's Airflow home, traces and plans")
    return parser


if __name__ == "__main__":
    sys.exit(main())

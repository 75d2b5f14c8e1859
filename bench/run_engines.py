"""Benchmark: planning engines side by side, on real and generated workflows and three catalogs.

Usage:
  python bench/run_engines.py [--catalogs aws-us-east-1,hpc-36,memory-tight]
      [--workflows '../shared/data/wfinstances/*.json'] [--sizes 1k,10k,30k]
      [--planners default,heft,peft,agora] [--time-limit-s 60] [--out bench/results/engines]

For every (catalog, workflow) it runs every planner and reports makespan, cost, their
ratios to the lower bounds (:func:`agora_optimizer.planning.problem.lower_bounds`), the planner's
wall time and the peak memory of its process. Objectives (``--objectives``, default
``time,cost``):
- time: minimise makespan;
- cost: minimise cost under a deadline equal to the one-type default's makespan;
- cheapest: minimise cost with no deadline (how much a workflow that may take its time saves).
Planners that ignore the objective (default, HEFT, PEFT, the partitioners) run once and
are scored under both; the cost rows say whether they met the deadline. The static pool
cost is the default's machines leased for the whole makespan (what a standing Airflow
worker pool costs); next to each planner's median cost over it stands the cost lower bound's
(under the row's deadline): no plan can save more against the static pool than that allows.

Each run is a subprocess of its own (``--worker``), so its peak memory is honest: the
worker loads the workflow and catalog, builds the problem, reads ``ru_maxrss`` (setup),
runs the planner alone under the clock, reads ``ru_maxrss`` again (peak), and only then
checks the plan with :func:`agora_optimizer.planning.validate.validate_plan`. A violation is
printed loudly and counted. Runs go one at a time, so wall times do not compete.

Workflows: ``--workflows`` globs (relative to the repository root), plus the generated
``bench/data/*-{size}.json`` of each ``--sizes`` label (write them with
``bench/generate_workflows.py``; ``--sizes none`` for none). Results: ``OUT.md`` (summary
per catalog and workflow set, then every run) and ``OUT.json`` (the raw numbers).

More engines: add one line to ``OPTIONAL_ENGINES`` (name, module, objective-aware); an
engine whose module is missing is skipped with a note.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CATALOGS = ("aws-us-east-1", "hpc-36", "memory-tight")
DEFAULT_WORKFLOWS = "../shared/data/wfinstances/*.json"
DEFAULT_PLANNERS = ("default", "heft", "peft", "agora")
MIB = 1024.0  # ru_maxrss is in KiB on Linux
PRELOADED = ("numpy", "scipy.optimize", "scipy.sparse", "agora_optimizer.optimize.optimize")

Planner = Callable[[Any, float], Sequence[Any] | None]  # (Problem, time_limit_s) -> assignments or None


@dataclass(frozen=True)
class Entry:
    """A registered planner: how to build its callable, and whether its plan depends on the objective."""

    build: Callable[[], Planner]
    objective_aware: bool


def _default() -> Planner:
    from agora_optimizer.optimize.optimize import one_type_default_assignments

    return lambda problem, _limit: one_type_default_assignments(problem.workflow, problem.catalog)


def _agora() -> Planner:
    from agora_optimizer.optimize.optimize import optimize

    def run(problem: Any, time_limit_s: float) -> Sequence[Any]:
        plan = optimize(problem.workflow, problem.catalog, problem.objective, problem.catalog.source, time_limit_s)
        return plan.assignments

    return run


def engine_planner(module: str, name: str) -> Callable[[], Planner]:
    """A planner from the :class:`Engine` subclass named ``name`` in ``module`` (built with no arguments)."""

    def build() -> Planner:
        from agora_optimizer.engines.base import Engine

        loaded = importlib.import_module(module)
        classes = [
            c
            for c in vars(loaded).values()
            if isinstance(c, type) and issubclass(c, Engine) and getattr(c, "name", None) == name
        ]
        if not classes:
            raise LookupError(f"no Engine named '{name}' in {module}")
        engine = classes[0]()

        def run(problem: Any, time_limit_s: float) -> Sequence[Any] | None:
            result = engine.solve(problem, time_limit_s)
            return None if result is None else result.assignments

        return run

    return build


REGISTRY: dict[str, Entry] = {
    "default": Entry(_default, objective_aware=False),
    "heft": Entry(engine_planner("agora_optimizer.engines.heft", "heft"), objective_aware=False),
    "peft": Entry(engine_planner("agora_optimizer.engines.peft", "peft"), objective_aware=False),
    "agora": Entry(_agora, objective_aware=True),
}
OPTIONAL_ENGINES: list[tuple[str, str, bool]] = [  # (engine name, module, objective-aware): one line each
    ("partition", "agora_optimizer.engines.partition.icpp24", False),
    ("partition-homogeneous", "agora_optimizer.engines.partition.homogeneous", False),
    ("milp", "agora_optimizer.engines.exact.milp.engine", True),
]


def available_registry() -> tuple[dict[str, Entry], list[str]]:
    """The registry with every optional engine whose module imports; and notes on those skipped."""
    registry = dict(REGISTRY)
    notes = []
    for name, module, aware in OPTIONAL_ENGINES:
        try:
            importlib.import_module(module)
        except ImportError as error:
            notes.append(f"{name}: skipped ({module} does not import: {error})")
            continue
        registry[name] = Entry(engine_planner(module, name), objective_aware=aware)
    return registry, notes


# ---------------------------------------------------------------- worker (one run, own process)


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / MIB


def _plan_of(problem: Any, assignments: Sequence[Any]) -> Any:
    from agora_optimizer.model.plan import Plan, SolverInfo
    from agora_optimizer.planning.leases import cost_usd, makespan_s

    items = tuple(assignments)
    return Plan(
        workflow=problem.workflow.name,
        catalog=problem.catalog.source,
        objective=problem.objective,
        makespan_s=makespan_s(items),
        cost_usd=cost_usd(items, problem.catalog),
        assignments=items,
        solver=SolverInfo(method="bench", status="heuristic", gap=None, wall_s=0.0),
        created_at="2026-01-01T00:00:00Z",
    )


def static_pool_usd(problem: Any, assignments: Sequence[Any], makespan: float) -> float:
    """Every machine the plan uses, leased from 0 for the whole makespan."""
    machines = {a.machine: problem.catalog.by_name[a.resource] for a in assignments}
    return sum(r.lease_cost_usd(makespan + r.boot_s) for r in machines.values())


def run_worker(job: dict[str, Any], registry: dict[str, Entry]) -> dict[str, Any]:
    """Load, plan, measure, validate: one planner on one workflow, catalog and objective."""
    from agora_optimizer.io.catalog_file import load_catalog
    from agora_optimizer.io.wfformat import load_workflow
    from agora_optimizer.model.plan import Objective
    from agora_optimizer.planning.problem import Bounds, Problem, lower_bounds
    from agora_optimizer.planning.validate import validate_plan

    for module in PRELOADED:  # the same libraries in every worker, so peaks share one baseline
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    planner = registry[job["planner"]].build()
    started = time.perf_counter()
    workflow = load_workflow(job["workflow"])
    catalog = load_catalog(job["catalog"])
    objective = Objective(**job["objective"])
    if job.get("bounds"):
        problem = Problem(workflow, catalog, objective, Bounds(**job["bounds"]))
    else:
        problem = Problem.create(workflow, catalog, objective)
    out: dict[str, Any] = {
        "tasks": len(workflow.tasks),
        "workflow_name": workflow.name,
        "bounds": {"makespan_s": problem.bounds.makespan_s, "cost_usd": problem.bounds.cost_usd},
        "setup_s": time.perf_counter() - started,
        "rss_setup_mib": _rss_mib(),
    }
    started = time.perf_counter()
    assignments = planner(problem, job["time_limit_s"])
    out["wall_s"] = time.perf_counter() - started
    out["rss_peak_mib"] = _rss_mib()
    if assignments is None:
        return out | {"status": "none"}
    plan = _plan_of(problem, assignments)
    violations = validate_plan(plan, workflow, catalog)
    out |= {
        "status": "ok",
        "makespan_s": plan.makespan_s,
        "cost_usd": plan.cost_usd,
        "machines": len({a.machine for a in assignments}),
        "static_pool_usd": static_pool_usd(problem, assignments, plan.makespan_s),
        "violations": len(violations),
        "first_violations": [str(v) for v in violations[:3]],
    }
    if job.get("bounds_at_own_makespan"):  # the default's cost bound under its own makespan as deadline
        cost_bounds = lower_bounds(workflow, catalog, plan.makespan_s)
        out["cost_bounds"] = {"makespan_s": cost_bounds.makespan_s, "cost_usd": cost_bounds.cost_usd}
    return out


def worker_main(job_text: str) -> None:
    job = json.loads(job_text)
    registry, _ = available_registry()
    try:
        result = run_worker(job, registry)
    except Exception as error:  # reported as the run's status; the benchmark goes on
        result = {"status": f"error: {type(error).__name__}: {error}"}
    print(json.dumps(result))


# ---------------------------------------------------------------- parent: jobs, table, files


def launch(job: dict[str, Any], kill_after_s: float) -> dict[str, Any]:
    """Run one job in a fresh interpreter and return what it measured."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(job)]
    env = dict(os.environ, PYTHONHASHSEED="0")
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=kill_after_s, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"status": f"killed after {kill_after_s:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": f"crashed (exit {done.returncode}): {tail}"}
    result: dict[str, Any] = json.loads(lines[-1])
    result["process_s"] = time.perf_counter() - started
    return result


@dataclass(frozen=True)
class Case:
    """One workflow in one workflow set."""

    path: Path
    group: str


def find_cases(globs: Sequence[str], sizes: Sequence[str]) -> list[Case]:
    cases = []
    for pattern in globs:
        if pattern == "none":
            continue
        base = Path(pattern) if Path(pattern).is_absolute() else ROOT / pattern
        matches = sorted(base.parent.glob(base.name))
        cases += [Case(p.resolve(), "wfinstances" if "wfinstances" in str(p) else "given") for p in matches]
    for size in sizes:
        matches = sorted((ROOT / "bench" / "data").glob(f"*-{size}.json"))
        if not matches:
            print(f"note: no bench/data/*-{size}.json: run bench/generate_workflows.py first", flush=True)
        cases += [Case(p.resolve(), f"generated {size}") for p in matches]
    return cases


def catalog_path(name: str) -> Path:
    path = Path(name)
    if path.suffix in (".yaml", ".yml", ".json"):
        return path if path.is_absolute() else (ROOT / path)
    return ROOT / "catalogs" / f"{name}.yaml"


def _print_run(record: dict[str, Any]) -> None:
    status = record.get("status", "?")
    text = f"  {record['planner']:>22} {record['objective']:<4}"
    if status == "ok":
        text += (
            f" makespan {record['makespan_s']:>12,.1f} s ({record['t_ratio']:.3f})"
            f" cost {record['cost_usd']:>9.4f} ({record['c_ratio']:.3f})"
            f" wall {record['wall_s']:>7.2f} s peak {record['rss_peak_mib']:>6.0f} MiB"
        )
        if record.get("violations"):
            text += f"  !!! {record['violations']} VIOLATIONS: {record['first_violations'][0]}"
    else:
        text += f" {status}"
    print(text, flush=True)


def _score(record: dict[str, Any], bounds: dict[str, float]) -> None:
    if record.get("status") == "ok":
        record["t_ratio"] = record["makespan_s"] / max(bounds["makespan_s"], 1e-9)
        record["c_ratio"] = record["cost_usd"] / max(bounds["cost_usd"], 1e-12)
    record["cost_bound_usd"] = bounds["cost_usd"]


def run_case(
    case: Case,
    catalog: Path,
    planners: list[str],
    registry: dict[str, Entry],
    time_limit_s: float,
    kill_after_s: float,
    objectives: tuple[str, ...] = ("time", "cost"),
) -> list[dict[str, Any]]:
    """Every planner on one workflow and catalog, under each objective."""
    base = {"workflow": str(case.path), "catalog": str(catalog), "time_limit_s": time_limit_s}
    time_objective = {"kind": "time"}
    default = launch(
        base | {"planner": "default", "objective": time_objective, "bounds_at_own_makespan": True}, kill_after_s
    )
    label = {"workflow": case.path.stem, "group": case.group, "catalog": catalog.stem, "tasks": default.get("tasks")}
    if "bounds" not in default:
        print(f"{case.path.stem} on {catalog.stem}: {default.get('status')}", flush=True)
        return [label | default | {"planner": "default", "objective": "time"}]
    print(f"{case.path.stem} ({default['tasks']} tasks) on {catalog.stem}", flush=True)
    time_bounds = default["bounds"]
    deadline = default.get("makespan_s")
    cost_bounds = default.get("cost_bounds")
    records = []
    for name in planners:
        blind = name == "default" or not registry[name].objective_aware
        runs: list[tuple[str, dict[str, Any], dict[str, float] | None]] = [("time", time_objective, time_bounds)]
        if deadline is not None and not blind and "cost" in objectives:
            runs.append(("cost", {"kind": "cost", "deadline_s": deadline}, cost_bounds))
        if not blind and "cheapest" in objectives:
            runs.append(("cheapest", {"kind": "cost"}, time_bounds))
        for objective_name, objective, bounds in runs:
            job = base | {"planner": name, "objective": objective, "bounds": bounds}
            result = default if name == "default" else launch(job, kill_after_s)
            record = label | result | {"planner": name, "objective": objective_name}
            _score(record, bounds or time_bounds)
            records.append(record)
            _print_run(record)
            if blind and deadline is not None and cost_bounds is not None and "cost" in objectives:
                twin = dict(record) | {"objective": "cost", "twin": True}
                _score(twin, cost_bounds)
                records.append(twin)
            if blind and "cheapest" in objectives:
                records.append(dict(record) | {"objective": "cheapest", "twin": True})
    for record in records:
        record["deadline_s"] = deadline if record["objective"] == "cost" else None
        record["default_makespan_s"] = deadline
        record["default_cost_usd"] = default.get("cost_usd")
        record["static_pool_default_usd"] = default.get("static_pool_usd")
    return records


# ---------------------------------------------------------------- summary


def _fmt(values: Iterable[float], how: Callable[[list[float]], float], digits: int = 3) -> str:
    items = [v for v in values if v is not None and math.isfinite(v)]
    return f"{how(items):.{digits}f}" if items else "-"


def _heft_makespans(records: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    return {
        (r["catalog"], r["workflow"]): r["makespan_s"]
        for r in records
        if r["planner"] == "heft" and r["objective"] == "time" and r.get("status") == "ok"
    }


def summary_rows(records: list[dict[str, Any]], planners: list[str]) -> list[str]:
    heft = _heft_makespans(records)
    rows = []
    groups = sorted({(r["catalog"], r["group"]) for r in records})
    for catalog, group in groups:
        for objective in ("time", "cost", "cheapest"):
            for planner in planners:
                chosen = [
                    r
                    for r in records
                    if (r["catalog"], r["group"], r["planner"], r["objective"]) == (catalog, group, planner, objective)
                ]
                if chosen:
                    rows.append(_summary_row(catalog, group, planner, objective, chosen, heft))
    return rows


def _summary_row(
    catalog: str,
    group: str,
    planner: str,
    objective: str,
    chosen: list[dict[str, Any]],
    heft: dict[tuple[str, str], float],
) -> str:
    ok = [r for r in chosen if r.get("status") == "ok"]
    valid = [r for r in ok if not r.get("violations")]
    vs_heft = [
        r["makespan_s"] / heft[(r["catalog"], r["workflow"])] for r in ok if (r["catalog"], r["workflow"]) in heft
    ]
    no_worse = sum(1 for v in vs_heft if v <= 1 + 1e-9)
    met = [r for r in ok if r.get("deadline_s") is None or r["makespan_s"] <= r["deadline_s"] + 1e-6]
    vs_default = [r["cost_usd"] / r["default_cost_usd"] for r in ok if r.get("default_cost_usd")]
    vs_static = [r["cost_usd"] / r["static_pool_default_usd"] for r in ok if r.get("static_pool_default_usd")]
    bound_vs_static = [
        r["cost_bound_usd"] / r["static_pool_default_usd"] for r in ok if r.get("static_pool_default_usd")
    ]
    cells = [
        catalog,
        group,
        planner,
        objective,
        f"{len(valid)}/{len(chosen)}",
        str(sum(1 for r in ok if r.get("violations"))),
        _fmt((r["t_ratio"] for r in ok), statistics.fmean),
        _fmt((r["t_ratio"] for r in ok), max),
        _fmt(vs_heft, statistics.fmean),
        f"{no_worse}/{len(vs_heft)}" if vs_heft else "-",
        _fmt((r["c_ratio"] for r in ok), statistics.median),
        _fmt(vs_default, statistics.median),
        _fmt(vs_static, statistics.median),
        _fmt(bound_vs_static, statistics.median),
        f"{len(met)}/{len(ok)}" if objective == "cost" else "",
        _fmt((r["wall_s"] for r in ok), statistics.fmean, 2),
        _fmt((r["wall_s"] for r in ok), max, 2),
        _fmt((r["rss_peak_mib"] for r in ok), max, 0),
    ]
    return "| " + " | ".join(cells) + " |"


SUMMARY_HEADER = (
    "| catalog | workflows | planner | objective | valid plans | invalid | mean T/T_lb | max T/T_lb "
    "| mean T/T_heft | T <= HEFT | median C/C_lb | median C/default | median C/static pool "
    "| median C_lb/static pool | deadline met | mean wall s | max wall s | max peak MiB |\n" + "|---" * 18 + "|"
)
DETAIL_HEADER = (
    "| catalog | workflow | tasks | planner | objective | status | makespan s | T/T_lb | cost USD | C/C_lb "
    "| wall s | peak MiB | planner +MiB | violations |\n" + "|---" * 14 + "|"
)


def detail_row(r: dict[str, Any]) -> str:
    if r.get("status") != "ok":
        cells = [r["catalog"], r["workflow"], str(r.get("tasks")), r["planner"], r["objective"], str(r.get("status"))]
        return "| " + " | ".join(cells + ["-"] * 8) + " |"
    cells = [
        r["catalog"],
        r["workflow"],
        str(r["tasks"]),
        r["planner"],
        r["objective"],
        "ok",
        f"{r['makespan_s']:,.1f}",
        f"{r['t_ratio']:.3f}",
        f"{r['cost_usd']:.4f}",
        f"{r['c_ratio']:.3f}",
        f"{r['wall_s']:.2f}",
        f"{r['rss_peak_mib']:.0f}",
        f"{r['rss_peak_mib'] - r['rss_setup_mib']:.0f}",
        str(r.get("violations", 0)),
    ]
    return "| " + " | ".join(cells) + " |"


def write_results(out: Path, records: list[dict[str, Any]], planners: list[str], command: str, notes: list[str]) -> str:
    violations = sum(1 for r in records if r.get("violations") and not r.get("twin"))
    summary = "\n".join(summary_rows(records, planners))
    text = (
        f"# Engines benchmark\n\nCommand: `{command}`\n\n"
        f"Machine: {os.cpu_count()} cores; one run at a time, each in its own process. "
        "T/T_lb and C/C_lb: makespan and cost over the lower bounds (the cost bound of the cost rows "
        "is the one under the deadline). T/T_heft: makespan over HEFT's on the same workflow. The cost rows "
        "use a deadline equal to the default's makespan; planners that ignore objectives are scored on their "
        "one plan, and 'deadline met' counts how often it met it; the cheapest rows minimise cost with no "
        "deadline. C/static pool: cost over the default's machines leased for its whole makespan; C_lb/static "
        "pool: the same for the cost lower bound, the most any plan could save. Wall time: the planner call "
        "alone. Peak: the maximum resident memory of the run's process (Python, numpy, scipy and agora loaded "
        "in every worker, plus the workflow); planner +MiB: how much the peak grew while the planner ran.\n\n"
        + "".join(f"- {note}\n" for note in notes)
        + f"\nPlans with violations: {violations}.\n\n{SUMMARY_HEADER}\n{summary}\n\n## Every run\n\n{DETAIL_HEADER}\n"
        + "\n".join(detail_row(r) for r in records)
        + "\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(text)
    out.with_suffix(".json").write_text(json.dumps({"command": command, "notes": notes, "runs": records}, indent=1))
    return f"{SUMMARY_HEADER}\n{summary}"


def _split(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip() and item.strip() != "none"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--catalogs", default=",".join(DEFAULT_CATALOGS))
    parser.add_argument(
        "--workflows", action="append", help=f"glob (repeatable; default {DEFAULT_WORKFLOWS}; none: no real workflows)"
    )
    parser.add_argument("--sizes", default="1k", help="generated sizes, e.g. 1k,10k,30k (none: no generated)")
    parser.add_argument("--planners", default=",".join(DEFAULT_PLANNERS))
    parser.add_argument("--time-limit-s", type=float, default=60.0)
    parser.add_argument("--kill-after-s", type=float, default=None, help="hard limit per run (default 10 x limit)")
    parser.add_argument("--objectives", default="time,cost", help="of time,cost,cheapest (time always runs)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "engines")
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return 0
    registry, notes = available_registry()
    planners = _split(args.planners)
    unknown = [p for p in planners if p not in registry]
    if unknown:
        raise SystemExit(f"unknown or unavailable planners: {', '.join(unknown)} (have: {', '.join(registry)})")
    if "default" not in planners:
        planners.insert(0, "default")  # the deadline and the static pool come from it
    objectives = tuple(_split(args.objectives))
    if not set(objectives) <= {"time", "cost", "cheapest"}:
        raise SystemExit(f"--objectives: expected some of time, cost, cheapest, got {args.objectives!r}")
    kill_after = args.kill_after_s or max(10 * args.time_limit_s, 120.0)
    cases = find_cases(args.workflows or [DEFAULT_WORKFLOWS], _split(args.sizes))
    records: list[dict[str, Any]] = []
    for catalog in [catalog_path(c) for c in _split(args.catalogs)]:
        for case in cases:
            records += run_case(case, catalog, planners, registry, args.time_limit_s, kill_after, objectives)
    command = "python bench/run_engines.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(write_results(args.out, records, planners, command, notes))
    bad = sum(1 for r in records if r.get("violations") and not r.get("twin"))
    if bad:
        print(f"\n!!! {bad} plans with violations: see {args.out.with_suffix('.md')}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

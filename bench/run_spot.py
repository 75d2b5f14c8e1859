"""Benchmark: spot capacity under a deadline, replayed with interruptions (issue 21, part 2).

Usage:
  python bench/run_spot.py [--workflows bench/data/cycles-1k.json,...] [--catalog catalogs/aws-us-east-1-spot.yaml]
      [--deadline-factor 2.0] [--rate-factors 1,100] [--runs 20] [--seed 21] [--time-limit-s 10]
      [--out bench/results/spot]

For every workflow the deadline is ``--deadline-factor`` times its makespan lower bound on the
catalog. Under it the cost objective is planned (the whole portfolio, ``--time-limit-s``) on the
catalog without its spot types (the on-demand plan) and, for each rate factor f, on the catalog
with every spot type's ``interruption_rate_per_hour`` multiplied by f (f = 1: the rates as
declared; a larger f stresses the model with more interruptions). Each spot plan is then replayed
``--runs`` times (:mod:`agora_optimizer.planning.spot_replay`): every spot task's first interruption
drawn from its type's Poisson process (seeded), an interrupted task re-run on a new machine of its
fallback type, later tasks started as the executor starts them (once their inputs and their turn
on their machine have come: idle time takes a delay up). Reported: the plan's claimed expected
cost against the mean cost of the replays (target: within 15 %), how many replays met the
deadline, the worst-case
makespans (one interruption, the plan's deadline check; every spot task interrupted) and the saving
of the mean replayed cost against the on-demand plan. Every plan is checked by
:func:`agora_optimizer.planning.validate.validate_plan`.

Results: ``OUT.md`` and ``OUT.json``, with the command and the date.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DEFAULT_WORKFLOWS = ",".join(
    [
        "bench/data/cycles-1k.json",
        "bench/data/genome-1k.json",
        "bench/data/soykb-1k.json",
        "bench/data/srasearch-1k.json",
        "/work/shared/data/wfinstances/montage-chameleon-2mass-005d-001.json",
        "/work/shared/data/wfinstances/epigenomics-chameleon-hep-1seq-100k-001.json",
    ]
)


def scaled_rates(catalog: Any, factor: float) -> Any:
    """The catalog with every spot type's interruption rate multiplied by ``factor``."""
    resources = tuple(
        replace(r, interruption_rate_per_hour=(r.interruption_rate_per_hour or 0.0) * factor) if r.spot else r
        for r in catalog.resources
    )
    return replace(catalog, resources=resources)


def run_case(workflow_path: str, args: argparse.Namespace) -> dict[str, Any]:
    from agora_optimizer.io.catalog_file import load_catalog
    from agora_optimizer.io.wfformat import load_workflow
    from agora_optimizer.model.plan import Objective
    from agora_optimizer.optimize.optimize import optimize
    from agora_optimizer.planning.problem import lower_bounds
    from agora_optimizer.planning.spot_replay import all_interrupted_makespan_s, replay, sample_interruptions
    from agora_optimizer.planning.validate import validate_plan

    workflow = load_workflow(workflow_path)
    catalog = load_catalog(args.catalog)
    deadline = args.deadline_factor * lower_bounds(workflow, catalog).makespan_s
    objective = Objective(kind="cost", deadline_s=deadline)
    on_demand_catalog = catalog.without_spot()
    on_demand = optimize(workflow, on_demand_catalog, objective, "on-demand", time_limit_s=args.time_limit_s)
    assert not validate_plan(on_demand, workflow, on_demand_catalog)
    case: dict[str, Any] = {
        "workflow": Path(workflow_path).name,
        "tasks": len(workflow.tasks),
        "deadline_s": deadline,
        "on_demand_cost_usd": on_demand.cost_usd,
        "on_demand_makespan_s": on_demand.makespan_s,
        "by_rate_factor": [],
    }
    for factor in args.rate_factors:
        rated = scaled_rates(catalog, factor)
        started = time.perf_counter()
        plan = optimize(workflow, rated, objective, args.catalog, time_limit_s=args.time_limit_s)
        wall_s = time.perf_counter() - started
        problems = validate_plan(plan, workflow, rated)
        assert not problems, problems[:3]
        rng = random.Random(f"{args.seed}:{workflow_path}:{factor}")
        runs = [
            replay(plan.assignments, workflow, rated, sample_interruptions(plan.assignments, rated, rng))
            for _ in range(args.runs)
        ]
        costs = [r.cost_usd for r in runs]
        spot = plan.spot
        expected = spot.expected_cost_usd if spot else plan.cost_usd
        mean = statistics.fmean(costs)
        case["by_rate_factor"].append(
            {
                "rate_factor": factor,
                "method": plan.solver.method,
                "wall_s": round(wall_s, 2),
                "spot_tasks": spot.spot_tasks if spot else 0,
                "planned_cost_usd": plan.cost_usd,
                "expected_cost_usd": expected,
                "expected_reruns": spot.expected_reruns if spot else 0.0,
                "mean_replayed_cost_usd": mean,
                "stdev_replayed_cost_usd": statistics.pstdev(costs),
                "claim_error": expected / mean - 1 if mean else 0.0,
                "mean_reruns": statistics.fmean(len(r.reruns) for r in runs),
                "makespan_s": plan.makespan_s,
                "worst_case_makespan_s": spot.worst_case_makespan_s if spot else plan.makespan_s,
                "all_interrupted_makespan_s": all_interrupted_makespan_s(plan.assignments, workflow, rated),
                "max_replayed_makespan_s": max(r.makespan_s for r in runs),
                "deadline_met_runs": sum(1 for r in runs if r.makespan_s <= deadline + 1e-6),
                "runs": args.runs,
                "saving_vs_on_demand": 1 - mean / on_demand.cost_usd if on_demand.cost_usd else 0.0,
            }
        )
        print(json.dumps(case["by_rate_factor"][-1]), file=sys.stderr)
    return case


def write_markdown(path: Path, results: dict[str, Any]) -> None:
    lines = [
        "# Spot capacity under a deadline, replayed with interruptions",
        "",
        f"Command: `{results['command']}`  ",
        f"Date: {results['date']}; catalog `{results['catalog']}` (illustrative spot prices and rates: see its header "
        f"and [docs/spot.md](../../docs/spot.md)); deadline {results['deadline_factor']} x the makespan lower bound; "
        f"cost objective, {results['time_limit_s']} s per plan; {results['runs']} replays per plan.",
        "",
        "Claim error = the plan's expected cost / the mean replayed cost - 1 (target within 15 %). Worst case: one "
        "spot task interrupted at the last moment (the planner's deadline check); all interrupted: every spot task "
        "at once. Saving: the mean replayed cost against the plan on the on-demand types alone, same deadline.",
        "",
        "| workflow | tasks | rate x | spot tasks | on-demand USD | expected USD | mean replayed USD (sd) "
        "| claim error | mean re-runs | deadline s | worst case s | all interrupted s | max replayed s "
        "| deadline met | saving |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in results["cases"]:
        for row in case["by_rate_factor"]:
            lines.append(
                f"| {case['workflow']} | {case['tasks']} | {row['rate_factor']:g} | {row['spot_tasks']} "
                f"| {case['on_demand_cost_usd']:.4f} | {row['expected_cost_usd']:.4f} "
                f"| {row['mean_replayed_cost_usd']:.4f} ({row['stdev_replayed_cost_usd']:.4f}) "
                f"| {row['claim_error'] * 100:+.2f} % | {row['mean_reruns']:.2f} | {case['deadline_s']:.0f} "
                f"| {row['worst_case_makespan_s']:.0f} | {row['all_interrupted_makespan_s']:.0f} "
                f"| {row['max_replayed_makespan_s']:.0f} | {row['deadline_met_runs']}/{row['runs']} "
                f"| {row['saving_vs_on_demand'] * 100:.1f} % |"
            )
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", default=DEFAULT_WORKFLOWS)
    parser.add_argument("--catalog", default="catalogs/aws-us-east-1-spot.yaml")
    parser.add_argument("--deadline-factor", type=float, default=2.0)
    parser.add_argument("--rate-factors", default="1,100")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--time-limit-s", type=float, default=10.0)
    parser.add_argument("--out", default="bench/results/spot")
    args = parser.parse_args(argv)
    args.rate_factors = [float(f) for f in args.rate_factors.split(",")]
    cases = [run_case(path, args) for path in args.workflows.split(",")]
    results = {
        "command": "python bench/run_spot.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "catalog": args.catalog,
        "deadline_factor": args.deadline_factor,
        "time_limit_s": args.time_limit_s,
        "runs": args.runs,
        "seed": args.seed,
        "cases": cases,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    write_markdown(out.with_suffix(".md"), results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

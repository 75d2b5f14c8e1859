"""Benchmark: many DAG runs on one platform, planned together or each alone (issue 20, part 2).

Usage:
  python bench/run_window.py [--runs 20] [--catalog catalogs/aws-us-east-1.yaml] [--factor 1.5]
      [--spacings 60,360] [--time-plan-s 5] [--time-limit-s 60] [--out bench/results/window-20]

The runs: the ``--runs`` smallest WfInstances of ``../shared/data/wfinstances`` (by task count),
one DAG run each, starting ``spacing`` seconds apart (a nightly batch: with 60 s they all start
within 20 minutes, with 360 s within two hours). Each run's deadline is ``--factor`` times the
makespan of its own time-objective plan on the whole catalog (``--time-plan-s``). The catalog's
counts are shared by all runs at every instant. Three ways, side by side in one run, each with
``--time-limit-s``:

- each alone: ``agora optimize`` per DAG on the whole catalog (the cheapest, but together the plans
  may lease more of a type at once than its count: the table says which types and how many);
- first come: each run alone, in the order they start, on what the runs before it left;
- joint: :func:`agora_optimizer.optimize.window.plan_jointly`.

Costs are divided by the window's cost lower bound (each run's bound under its own deadline,
summed). Every run's plan is checked with the spec's checker
(:func:`agora_optimizer.planning.validate.validate_plan`), its deadline and the shared counts with
:func:`agora_optimizer.optimize.window.over_counts`. Results: ``OUT.md`` and ``OUT.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WFINSTANCES = ROOT.parent / "shared" / "data" / "wfinstances"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--catalog", default=str(ROOT / "catalogs" / "aws-us-east-1.yaml"))
    parser.add_argument("--factor", type=float, default=1.5)
    parser.add_argument("--spacings", default="60,360")
    parser.add_argument("--time-plan-s", type=float, default=5.0)
    parser.add_argument("--time-limit-s", type=float, default=60.0)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "window-20"))
    args = parser.parse_args()

    from agora_optimizer.io.catalog_file import load_catalog
    from agora_optimizer.io.wfformat import load_workflow
    from agora_optimizer.model.plan import Objective
    from agora_optimizer.optimize.optimize import build_plan, optimize
    from agora_optimizer.optimize.window import (
        WindowRun,
        cost_lower_bound,
        over_counts,
        plan_each_alone,
        plan_first_come,
        plan_jointly,
    )
    from agora_optimizer.planning.validate import validate_plan

    catalog = load_catalog(args.catalog)
    workflows = sorted((load_workflow(path) for path in sorted(WFINSTANCES.glob("*.json"))), key=lambda w: len(w.tasks))
    workflows = workflows[: args.runs]
    fastest = {w.name: optimize(w, catalog, Objective(kind="time"), args.catalog, args.time_plan_s) for w in workflows}
    cases: list[dict[str, Any]] = []
    for spacing in (float(s) for s in args.spacings.split(",")):
        runs = [
            WindowRun(w.name, w, offset_s=spacing * i, deadline_s=args.factor * fastest[w.name].makespan_s)
            for i, w in enumerate(workflows)
        ]
        bound = cost_lower_bound(runs, catalog)
        case: dict[str, Any] = {"spacing_s": spacing, "runs": len(runs), "cost_bound_usd": bound, "ways": {}}
        for way, planner in (("each alone", plan_each_alone), ("first come", plan_first_come), ("joint", plan_jointly)):
            started = time.perf_counter()
            schedule = planner(runs, catalog, args.time_limit_s)
            wall = time.perf_counter() - started
            invalid = []
            for plan in schedule.plans:
                objective = Objective(kind="cost", deadline_s=plan.run.deadline_s)
                document = build_plan(
                    plan.run.workflow, catalog, objective, args.catalog, plan.assignments, way, started
                )
                invalid += [f"{plan.run.name}: {v}" for v in validate_plan(document, plan.run.workflow, catalog)]
            case["ways"][way] = {
                "cost_usd": schedule.cost_usd,
                "cost_over_bound": schedule.cost_usd / bound,
                "late_runs": schedule.late_runs,
                "over_counts": {name: peak for name, (peak, _) in over_counts(schedule.plans, catalog).items()},
                "invalid": invalid[:5],
                "wall_s": round(wall, 1),
            }
            print(spacing, way, json.dumps(case["ways"][way]), flush=True)
        cases.append(case)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {"args": vars(args), "peak_rss_mib": round(peak_mib), "cases": cases, "date": time.strftime("%Y-%m-%d")}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(_table(result))


def _table(result: dict[str, Any]) -> str:
    args = result["args"]
    lines = [
        f"# {args['runs']} DAG runs on one platform ({Path(args['catalog']).name}), {result['date']}",
        "",
        f"Command: `python bench/run_window.py --runs {args['runs']} --factor {args['factor']} "
        f"--spacings {args['spacings']} --time-limit-s {args['time_limit_s']:g}`. Deadline of each run: "
        f"{args['factor']}x its own time plan's makespan. Peak memory of the process: {result['peak_rss_mib']} MiB.",
        "",
        "| start spacing | way | cost (USD) | cost / bound | late runs | over count (peak) | invalid | wall (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case in result["cases"]:
        for way, row in case["ways"].items():
            over = ", ".join(f"{k} {v}" for k, v in row["over_counts"].items()) or "none"
            lines.append(
                f"| {case['spacing_s']:g} s | {way} | {row['cost_usd']:.4f} | {row['cost_over_bound']:.3f} | "
                f"{len(row['late_runs'])} | {over} | {len(row['invalid'])} | {row['wall_s']:g} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

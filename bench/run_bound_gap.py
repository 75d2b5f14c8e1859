"""Benchmark: how much of the cost gap under a deadline is the bound's (issue 36, item 1).

Usage:
  python bench/run_bound_gap.py [--sizes 1k,10k] [--recipes cycles,genome,soykb,srasearch,bwa]
      [--catalogs aws-us-east-1,hpc-36,memory-tight] [--factor 1.5] [--data bench/data]
      [--plans bench/results/deadline-cost-{size}.json] [--time-plan-s 20] [--time-limit-s 60]
      [--out bench/results/bound-gap]

For every (workflow, catalog) the deadline is ``factor`` x the time objective's makespan T and the plan
is agora's cost plan under it: either planned here (the time objective with ``--time-plan-s``, then the
cost objective with ``--time-limit-s``, each plan checked by the validator), or, with ``--plans``, read
from a recorded run of ``bench/run_deadline_cost.py`` (its ``deadline_s`` and agora's ``cost_usd`` at that
factor; ``{size}`` in the path is replaced by each size). Both bounds are computed here, on the whole
catalog, side by side: the old one, :func:`agora_optimizer.planning.bounds.cost_lower_bound_usd`, and the
new one, the larger of it and :func:`agora_optimizer.planning.windowed_cost_bound.windowed_cost_bound_usd`
(given all the time it takes), each with its wall time. Reported: plan / new bound, plan / old bound and
old bound / new bound (below 1: that much of the gap was the bound's).

Workflows: ``DATA/{recipe}-{size}.json`` from ``bench/generate_workflows.py`` (the same seeds as
``bench/run_deadline_cost.py``'s). Results: ``OUT.md`` (the command on top, medians, every case) and ``OUT.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def recorded_plans(path: Path, factor: float) -> dict[tuple[str, str], dict[str, float]]:
    """(workflow, catalog) -> the recorded deadline and agora's cost at ``factor`` in a run_deadline_cost result."""
    plans = {}
    for result in json.loads(path.read_text(encoding="utf-8")):
        for row in result["rows"]:
            if abs(row["factor"] - factor) < 1e-9 and row["agora"]["cost_usd"] is not None:
                plans[(result["workflow"], result["catalog"])] = {
                    "deadline_s": row["deadline_s"],
                    "cost_usd": row["agora"]["cost_usd"],
                    "met": row["agora"]["met"],
                    "violations": row["agora"]["violations"],
                    "method": row["agora"]["method"],
                }
    return plans


def plan_here(workflow: Any, catalog: Any, catalog_path: Path, args: argparse.Namespace) -> dict[str, Any]:
    from agora_optimizer.model.plan import Objective
    from agora_optimizer.optimize.optimize import optimize
    from agora_optimizer.planning.validate import validate_plan

    fastest = optimize(workflow, catalog, Objective(kind="time"), str(catalog_path), args.time_plan_s)
    deadline = args.factor * fastest.makespan_s
    plan = optimize(
        workflow, catalog, Objective(kind="cost", deadline_s=deadline), str(catalog_path), args.time_limit_s
    )
    return {
        "deadline_s": deadline,
        "cost_usd": plan.cost_usd,
        "met": plan.makespan_s <= deadline + 1e-6,
        "violations": len(validate_plan(plan, workflow, catalog)),
        "method": plan.solver.method,
    }


def bound_case(workflow: Any, catalog: Any, deadline_s: float) -> dict[str, float]:
    from agora_optimizer.planning.bounds import cost_lower_bound_usd, feasible_types
    from agora_optimizer.planning.windowed_cost_bound import windowed_cost_bound_usd

    began = time.perf_counter()
    old = cost_lower_bound_usd(workflow, catalog, deadline_s)
    old_s = time.perf_counter() - began
    began = time.perf_counter()
    windowed = windowed_cost_bound_usd(workflow, feasible_types(workflow, catalog), deadline_s)
    windowed_s = time.perf_counter() - began
    one_bucket = windowed_cost_bound_usd(workflow, feasible_types(workflow, catalog), deadline_s, max_buckets=1)
    return {"old_usd": old, "windowed_usd": windowed, "new_usd": max(old, windowed), "old_s": old_s,
            "windowed_s": windowed_s, "one_bucket_usd": one_bucket}  # fmt: skip


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.3f}" if values else "-"


def write_markdown(rows: list[dict[str, Any]], args: argparse.Namespace, out: Path) -> None:
    source = (
        f"recorded plans of `{args.plans}` (their deadlines and agora's costs), bounds computed in this run"
        if args.plans
        else f"plans made in this run (time plan {args.time_plan_s} s, cost plan {args.time_limit_s} s)"
    )
    lines = [
        "# How much of the cost gap under a deadline is the bound's",
        "",
        f"Command: `python bench/run_bound_gap.py {' '.join(sys.argv[1:])}`  ",
        f"Date: {time.strftime('%Y-%m-%d')}; 2 shared cores (busy with other runs: wall times are noisy).  ",
        f"Plans: {source}. Deadline: {args.factor} x the time plan's makespan T. Old bound:",
        "`cost_lower_bound_usd`; new bound: the larger of it and `windowed_cost_bound_usd` (time buckets, task",
        "windows, whole tasks), both on the whole catalog. old / new below 1: that much of the gap was the bound's.",
        "Old / one bucket: against the larger of the old and the bucket bound with one bucket (from 0, or each",
        "type's earliest start, to the deadline): the windows' choice of types and whole tasks alone.",
        "",
        "## Medians",
        "",
        "| catalog | tasks | plan / new bound | plan / old bound | old / new bound | old / one bucket | cases |",
        "|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["catalog"], row["size"]), []).append(row)
    for (catalog, size), group in sorted(groups.items(), key=lambda item: (item[0][0], int(item[0][1].rstrip("k")))):
        lines.append(
            f"| {catalog} | {size} | {median([r['cost_usd'] / r['new_usd'] for r in group])} | "
            f"{median([r['cost_usd'] / r['old_usd'] for r in group])} | "
            f"{median([r['old_usd'] / r['new_usd'] for r in group])} | "
            f"{median([r['old_usd'] / max(r['one_bucket_usd'], r['old_usd']) for r in group])} | {len(group)} |"
        )
    lines += [
        "",
        "## Every case",
        "",
        "| catalog | workflow | tasks | deadline (s) | plan (USD) | old bound (USD) | new bound (USD) "
        "| plan / new | plan / old | old / new | old / one bucket | old bound wall (s) | bucket bound wall (s) "
        "| plan method |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        late = "" if r["met"] else " LATE"
        bad = f" {r['violations']} VIOLATIONS" if r["violations"] else ""
        lines.append(
            f"| {r['catalog']} | {r['workflow']} | {r['tasks']} | {r['deadline_s']:,.0f} | {r['cost_usd']:.4f} | "
            f"{r['old_usd']:.4f} | {r['new_usd']:.4f} | {r['cost_usd'] / r['new_usd']:.3f} | "
            f"{r['cost_usd'] / r['old_usd']:.3f} | {r['old_usd'] / r['new_usd']:.3f} | "
            f"{r['old_usd'] / max(r['one_bucket_usd'], r['old_usd']):.3f} | {r['old_s']:.2f} | "
            f"{r['windowed_s']:.2f} | {r['method']}{late}{bad} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> int:
    from agora_optimizer.io.catalog_file import load_catalog
    from agora_optimizer.io.wfformat import load_workflow

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1k,10k")
    parser.add_argument("--recipes", default="cycles,genome,soykb,srasearch,bwa")
    parser.add_argument("--catalogs", default="aws-us-east-1,hpc-36,memory-tight")
    parser.add_argument("--factor", type=float, default=1.5)
    parser.add_argument("--data", default="bench/data")
    parser.add_argument("--plans", help="a run_deadline_cost.py result to read the plans from; {size} is each size")
    parser.add_argument("--time-plan-s", type=float, default=20.0)
    parser.add_argument("--time-limit-s", type=float, default=60.0)
    parser.add_argument("--out", default="bench/results/bound-gap")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for size in args.sizes.split(","):
        plans = recorded_plans(ROOT / args.plans.format(size=size), args.factor) if args.plans else {}
        for recipe in args.recipes.split(","):
            path = Path(args.data) / f"{recipe}-{size}.json"
            if not path.exists():
                print(f"{path} missing: python bench/generate_workflows.py --recipes {recipe} --out {args.data} ...")
                return 2
            workflow = load_workflow(str(path))
            for name in args.catalogs.split(","):
                catalog_path = ROOT / "catalogs" / f"{name}.yaml"
                catalog = load_catalog(str(catalog_path))
                plan = plans.get((path.stem, name)) if args.plans else plan_here(workflow, catalog, catalog_path, args)
                if plan is None:
                    print(f"no recorded plan of {path.stem} on {name} at factor {args.factor} in {args.plans}")
                    return 2
                row = {"catalog": name, "workflow": path.stem, "size": size, "tasks": len(workflow.tasks), **plan}
                row.update(bound_case(workflow, catalog, plan["deadline_s"]))
                rows.append(row)
                print(
                    f"{name} {path.stem}: plan/new {row['cost_usd'] / row['new_usd']:.3f} "
                    f"plan/old {row['cost_usd'] / row['old_usd']:.3f} old/new {row['old_usd'] / row['new_usd']:.3f} "
                    f"(bucket bound {row['windowed_s']:.2f} s)",
                    flush=True,
                )
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    write_markdown(rows, args, out)
    print(f"written {out}.md and {out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

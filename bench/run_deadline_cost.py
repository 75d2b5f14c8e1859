"""Benchmark: the cheapest plan under a real deadline, at scale (issue 20).

Usage:
  python bench/run_deadline_cost.py [--sizes 1k,10k] [--recipes cycles,genome,soykb,srasearch,bwa]
      [--catalogs aws-us-east-1,hpc-36,memory-tight] [--factors 1.2,1.5,2.0]
      [--time-plan-s 20] [--time-limit-s 60] [--objective cost|balanced] [--compare]
      [--out bench/results/deadline-cost]

Workflows: ``bench/data/{recipe}-{size}.json``, written by ``bench/generate_workflows.py`` (WfChef
recipes other than the engine benchmark's montage, blast, epigenomics and seismology). For every
(catalog, workflow) the time objective is planned first (``--time-plan-s``); its makespan T sets
the deadlines ``factor * T``. Under each deadline the cost objective (or the balanced one,
``--objective balanced``) is planned with the whole portfolio (``--time-limit-s``), and its cost is
divided by the cost lower bound under that same deadline
(:func:`agora_optimizer.planning.bounds.cost_lower_bound_usd`): 1.00 is the bound itself, which no
plan beats and few reach; its makespan is divided by T. ``--compare`` plans each case three times
more, side by side in the same run: with the portfolio without the cheapest-first fleets
(``engines/fleet_prefix.py``), without the deadline-aware list scheduler (``engines/deadline_list.py``),
and with that scheduler searching only with each type's count over the whole schedule (not also
with the count held at every instant). Each (catalog, workflow) runs in a subprocess of its own,
whose peak memory (``ru_maxrss``) is reported. Every plan is checked by
:func:`agora_optimizer.planning.validate.validate_plan`.

Results: ``OUT.md`` (medians per catalog, size and factor, then every case) and ``OUT.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COMPARED = ("without-fleet-prefix", "without-deadline-list", "whole-schedule-counts")
sys.path.insert(0, str(ROOT))


def plan_case(workflow_path: str, catalog_path: str, factors: list[float], args: argparse.Namespace) -> dict[str, Any]:
    from agora_optimizer.engines.deadline_list import DeadlineListEngine
    from agora_optimizer.engines.fleet_prefix import FleetPrefixEngine
    from agora_optimizer.errors import InfeasibleObjectiveError
    from agora_optimizer.io.catalog_file import load_catalog
    from agora_optimizer.io.wfformat import load_workflow
    from agora_optimizer.model.plan import Objective
    from agora_optimizer.optimize.optimize import optimize
    from agora_optimizer.optimize.portfolio import default_stages
    from agora_optimizer.planning.bounds import cost_lower_bound_usd
    from agora_optimizer.planning.validate import validate_plan

    workflow = load_workflow(workflow_path)
    catalog = load_catalog(catalog_path)
    started = time.perf_counter()
    fastest = optimize(workflow, catalog, Objective(kind="time"), catalog_path, args.time_plan_s)
    rows: list[dict[str, Any]] = []
    without = [s for s in default_stages() if not isinstance(s.engine, DeadlineListEngine)]
    without_fleet = [s for s in default_stages() if not isinstance(s.engine, FleetPrefixEngine)]
    whole_schedule_counts = [  # the deadline-aware scheduler's counts over the whole schedule only
        replace(s, engine=DeadlineListEngine(instant_counts=False)) if isinstance(s.engine, DeadlineListEngine) else s
        for s in default_stages()
    ]
    for factor in factors:
        deadline = factor * fastest.makespan_s
        bound = cost_lower_bound_usd(workflow, catalog, deadline)
        row: dict[str, Any] = {"factor": factor, "deadline_s": deadline, "cost_bound_usd": bound}
        compared = {
            "without-fleet-prefix": without_fleet,
            "without-deadline-list": without,
            "whole-schedule-counts": whole_schedule_counts,
        }
        variants = [("agora", None), *(((name, compared[name]) for name in COMPARED) if args.compare else [])]
        for name, stages in variants:
            began = time.perf_counter()
            goal = Objective(kind=args.objective, deadline_s=deadline)
            try:
                plan = optimize(workflow, catalog, goal, catalog_path, args.time_limit_s, stages)
            except InfeasibleObjectiveError as exc:  # no plan within the deadline found in the time limit
                wall_s = round(time.perf_counter() - began, 1)
                row[name] = {"cost_usd": None, "makespan_s": None, "ratio": None, "met": False, "method": "none",
                             "wall_s": wall_s, "violations": 0, "error": str(exc)}  # fmt: skip
                continue
            wall = time.perf_counter() - began
            violations = validate_plan(plan, workflow, catalog)
            row[name] = {
                "cost_usd": plan.cost_usd,
                "makespan_s": plan.makespan_s,
                "ratio": plan.cost_usd / bound if bound > 0 else None,
                "makespan_ratio": plan.makespan_s / fastest.makespan_s if fastest.makespan_s > 0 else None,
                "time_plan_ratio": plan.cost_usd / fastest.cost_usd if fastest.cost_usd > 0 else None,
                "met": plan.makespan_s <= deadline + 1e-6,
                "method": plan.solver.method,
                "wall_s": round(wall, 1),
                "violations": len(violations),
            }
        rows.append(row)
    return {
        "workflow": Path(workflow_path).stem,
        "tasks": len(workflow.tasks),
        "catalog": Path(catalog_path).stem,
        "time_makespan_s": fastest.makespan_s,
        "time_cost_usd": fastest.cost_usd,
        "rows": rows,
        "wall_s": round(time.perf_counter() - started, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def write_markdown(results: list[dict[str, Any]], args: argparse.Namespace, out: Path) -> None:
    variants = ["agora", *(COMPARED if args.compare else [])]
    lines = [
        f"# The {args.objective} objective under a deadline, at scale",
        "",
        f"Command: `python bench/run_deadline_cost.py {' '.join(sys.argv[1:])}`  ",
        f"Date: {time.strftime('%Y-%m-%d')}; 2 shared cores. The {args.objective} objective under the deadline factor",
        "x the time objective's own makespan T; cost over the cost lower bound under that deadline (1.00 = the",
        "bound) and over the time plan's own cost (a cost plan should never be dearer); makespan over T.",
        "",
        "## Medians",
        "",
        "| catalog | tasks | factor | "
        + " | ".join(f"{v}: cost / bound" for v in variants)
        + " | agora: cost / the time plan's | agora: dearer than the time plan | agora: makespan / T | deadlines met |",
        "|---|---|---|" + "---|" * len(variants) + "---|---|---|---|",
    ]
    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for result in results:
        size = f"{round(result['tasks'], -3) // 1000}k"
        for row in result["rows"]:
            groups.setdefault((result["catalog"], size, row["factor"]), []).append(row)
    for (catalog, size, factor), rows in sorted(groups.items()):
        medians = []
        for v in variants:
            m = median([r[v]["ratio"] for r in rows if r[v]["ratio"] is not None])
            medians.append("-" if m is None else f"{m:.3f}")
        met = sum(all(r[v]["met"] for v in variants) for r in rows)
        span = median([r["agora"]["makespan_ratio"] for r in rows if r["agora"].get("makespan_ratio") is not None])
        spans = "-" if span is None else f"{span:.3f}"
        against = [r["agora"]["time_plan_ratio"] for r in rows if r["agora"].get("time_plan_ratio") is not None]
        to_time = "-" if not against else f"{median(against):.3f}"
        dearer = sum(ratio > 1 + 1e-9 for ratio in against)
        lines.append(
            f"| {catalog} | {size} | {factor} | " + " | ".join(medians)
            + f" | {to_time} | {dearer} of {len(against)} | {spans} | {met} of {len(rows)} |"
        )  # fmt: skip
    lines += [
        "",
        "## Every case",
        "",
        "| catalog | workflow | tasks | factor | deadline (s) | bound (USD) | "
        + " | ".join(f"{v}: cost (USD), ratio, makespan, method, wall (s)" for v in variants)
        + " | peak RSS (MiB) |",
        "|---|---|---|---|---|---|" + "---|" * len(variants) + "---|",
    ]
    for result in results:
        for row in result["rows"]:
            cells = []
            for v in variants:
                r = row[v]
                if r["cost_usd"] is None:
                    cells.append(f"no plan within the deadline in {r['wall_s']} s ({r['error'].split('; ')[-1]})")
                    continue
                late = "" if r["met"] else " LATE"
                bad = f" {r['violations']} VIOLATIONS" if r["violations"] else ""
                span = "" if r.get("makespan_ratio") is None else f", T x {r['makespan_ratio']:.2f}"
                cells.append(f"{r['cost_usd']:.4f}, {r['ratio']:.3f}{span}, {r['method']}, {r['wall_s']}{late}{bad}")
            lines.append(
                f"| {result['catalog']} | {result['workflow']} | {result['tasks']} | {row['factor']} | "
                f"{row['deadline_s']:,.0f} | {row['cost_bound_usd']:.4f} | "
                + " | ".join(cells)
                + f" | {result['peak_rss_mib']} |"
            )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1k")
    parser.add_argument("--recipes", default="cycles,genome,soykb,srasearch,bwa")
    parser.add_argument("--catalogs", default="aws-us-east-1,hpc-36,memory-tight")
    parser.add_argument("--factors", default="1.2,1.5,2.0")
    parser.add_argument("--time-plan-s", type=float, default=20.0)
    parser.add_argument("--time-limit-s", type=float, default=60.0)
    parser.add_argument("--objective", choices=("cost", "balanced"), default="cost")
    parser.add_argument("--compare", action="store_true")
    parser.add_argument("--out", default="bench/results/deadline-cost")
    parser.add_argument("--worker", nargs=2, metavar=("WORKFLOW", "CATALOG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    factors = [float(f) for f in args.factors.split(",")]
    if args.worker:
        print(json.dumps(plan_case(args.worker[0], args.worker[1], factors, args)))
        return 0
    results = []
    for size in args.sizes.split(","):
        for recipe in args.recipes.split(","):
            workflow = ROOT / "bench" / "data" / f"{recipe}-{size}.json"
            if not workflow.exists():
                print(f"{workflow} missing: python bench/generate_workflows.py --recipes {recipe} --sizes ...")
                return 2
            for catalog in args.catalogs.split(","):
                argv = [
                    sys.executable,
                    __file__,
                    *sys.argv[1:],
                    "--worker",
                    str(workflow),
                    str(ROOT / "catalogs" / f"{catalog}.yaml"),
                ]
                done = subprocess.run(argv, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    print(done.stderr[-3000:], file=sys.stderr)
                    return 1
                result = json.loads(done.stdout.strip().splitlines()[-1])
                results.append(result)
                for row in result["rows"]:
                    shown = [f"{catalog} {workflow.stem} x{row['factor']}:"]
                    for variant in ("agora", *(COMPARED if args.compare else [])):
                        r = row[variant]
                        ratio = "no plan within the deadline" if r["ratio"] is None else f"{r['ratio']:.3f}"
                        shown.append(f"{variant} cost/bound {ratio} ({r['method']}, met {r['met']})")
                    print(" ".join(shown), flush=True)
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    write_markdown(results, args, out)
    print(f"written {out}.md and {out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

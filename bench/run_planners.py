"""Benchmark: agora's plans against the one-type default on real WfInstances workflows.

Usage: python bench/run_planners.py [--catalog catalogs/aws-us-east-1.yaml] [--instances DIR] [--out FILE.md]

For each workflow it reports, side by side in one run:
- default: every task on the cheapest type that fits all tasks, list-scheduled for time;
- static pool: the same default schedule, billed as a fixed pool of the machines it used
  leased for the whole makespan (what a standing Airflow worker pool costs);
- agora time: the time objective; agora cost: the cost objective under a deadline equal to
  the default's makespan; with makespan and cost over their lower bounds and wall time.
Every plan is checked with the project's validator; a violation aborts the run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model import Objective
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Plan
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.optimize import default_plan, lower_bounds, optimize
from agora_optimizer.validate import validate_plan

ROOT = Path(__file__).resolve().parents[1]


def static_pool_cost_usd(plan: Plan, catalog: Catalog) -> float:
    machines = {a.machine for a in plan.assignments}
    resource = catalog.by_name[plan.assignments[0].resource]
    return len(machines) * resource.lease_cost_usd(plan.makespan_s + resource.boot_s)


def checked(plan: Plan, workflow: Workflow, catalog: Catalog) -> Plan:
    violations = validate_plan(plan, workflow, catalog)
    if violations:
        raise SystemExit(f"{workflow.name}: invalid plan from {plan.solver.method}: {violations[0]}")
    return plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalog", type=Path, default=ROOT / "catalogs" / "aws-us-east-1.yaml")
    parser.add_argument("--instances", type=Path, default=ROOT.parent / "shared" / "data" / "wfinstances")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "planners.md")
    args = parser.parse_args()
    catalog = load_catalog(args.catalog)
    rows, ratios = [], {"t_time": [], "c_cost": [], "c_vs_default": [], "c_vs_static": [], "t_vs_default": []}
    for path in sorted(args.instances.glob("*.json")):
        workflow = load_workflow(path)
        bounds = lower_bounds(workflow, catalog)
        default = default_plan(workflow, catalog, str(args.catalog))
        if default is None:
            continue
        checked(default, workflow, catalog)
        started = time.perf_counter()
        fast = checked(optimize(workflow, catalog, Objective(kind="time"), str(args.catalog)), workflow, catalog)
        fast_wall = time.perf_counter() - started
        started = time.perf_counter()
        cheap = checked(
            optimize(workflow, catalog, Objective(kind="cost", deadline_s=default.makespan_s), str(args.catalog)),
            workflow,
            catalog,
        )
        cheap_wall = time.perf_counter() - started
        static = static_pool_cost_usd(default, catalog)
        ratios["t_time"].append(fast.makespan_s / bounds.makespan_s)
        ratios["c_cost"].append(cheap.cost_usd / bounds.cost_usd)
        ratios["c_vs_default"].append(cheap.cost_usd / default.cost_usd)
        ratios["c_vs_static"].append(cheap.cost_usd / static)
        ratios["t_vs_default"].append(fast.makespan_s / default.makespan_s)
        rows.append(
            f"| {workflow.name} | {len(workflow.tasks)} | {default.makespan_s:,.0f} | {default.cost_usd:.4f} "
            f"| {static:.4f} | {fast.makespan_s:,.0f} ({fast.makespan_s / bounds.makespan_s:.2f}) | {fast_wall:.2f} "
            f"| {cheap.cost_usd:.4f} ({cheap.cost_usd / bounds.cost_usd:.2f}) | {cheap_wall:.2f} |"
        )
        print(rows[-1], flush=True)
    header = (
        f"Catalog: `{args.catalog.relative_to(ROOT) if args.catalog.is_relative_to(ROOT) else args.catalog}`. "
        "Makespan in s, cost in USD; (x.xx) = ratio to the lower bound.\n\n"
        "| workflow | tasks | default makespan | default cost | static pool cost | agora time: makespan "
        "| wall s | agora cost (deadline = default makespan) | wall s |\n|---|---|---|---|---|---|---|---|---|"
    )
    summary = (
        f"\nWorkflows: {len(rows)}. Time objective: mean makespan / lower bound "
        f"{statistics.mean(ratios['t_time']):.3f}, "
        f"mean makespan / default {statistics.mean(ratios['t_vs_default']):.3f}."
        f" Cost objective: median cost / lower bound {statistics.median(ratios['c_cost']):.3f}, median cost / default "
        f"{statistics.median(ratios['c_vs_default']):.3f}, median cost / static pool "
        f"{statistics.median(ratios['c_vs_static']):.3f}.\n"
    )
    text = header + "\n" + "\n".join(rows) + "\n" + summary
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(summary)


if __name__ == "__main__":
    main()

"""Benchmark: on workflows of at most 12 tasks, the exact MILP's optimum against the heuristics.

Usage: python bench/run_small_exact.py [--tasks 12] [--milp-time-limit-s 10] [--heuristic-time-limit-s 2]
                                       [--out bench/results/small-exact.md]

Each real WfInstances workflow gives one small instance: its first N tasks in
topological order (a sub-DAG closed under parents). The catalog is four AWS types
(c6i.large, c7i.large, m6i.large, r6i.large) with two machines each, so that types,
memory and counts all matter. For each instance and objective (time; cost; balanced)
the MILP runs with the CBC time limit; the heuristic portfolio (every engine but the
MILP) runs alone, and the table reports the MILP status and wall time and the
heuristics' score over the MILP's. Every plan is checked with the validator.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path

from agora_optimizer.engines.milp import MilpEngine
from agora_optimizer.engines.portfolio import default_stages, run_portfolio
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model import Objective, Workflow
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.optimize import build_plan
from agora_optimizer.problem import Problem
from agora_optimizer.validate import validate_plan

ROOT = Path(__file__).resolve().parents[1]
TYPES = ("c6i.large", "c7i.large", "m6i.large", "r6i.large")


def head(workflow: Workflow, n: int) -> Workflow:
    """The first ``n`` tasks in topological order: every parent of a kept task is kept."""
    keep = set(workflow.topological_order[:n])
    tasks = [t for t in workflow.tasks if t.id in keep]
    edges = [e for e in workflow.edges if e.parent in keep and e.child in keep]
    return Workflow.create(f"{workflow.name}-head{n}", tasks, edges)


def small_catalog() -> Catalog:
    aws = load_catalog(ROOT / "catalogs" / "aws-us-east-1.yaml")
    return Catalog(
        resources=tuple(replace(r, count=2) for r in aws.resources if r.name in TYPES),
        bandwidth_bytes_per_s=aws.bandwidth_bytes_per_s,
    )


def check(problem: Problem, assignments: tuple, method: str) -> None:  # type: ignore[type-arg]
    plan = build_plan(problem.workflow, problem.catalog, problem.objective, "small", assignments, method, 0.0)
    violations = validate_plan(plan, problem.workflow, problem.catalog)
    if violations:
        raise SystemExit(f"{problem.workflow.name}: invalid {method} plan: {violations[0]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--milp-time-limit-s", type=float, default=10.0)
    parser.add_argument("--heuristic-time-limit-s", type=float, default=2.0)
    parser.add_argument("--instances", type=Path, default=ROOT.parent / "shared" / "data" / "wfinstances")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "small-exact.md")
    args = parser.parse_args()
    catalog = small_catalog()
    heuristics = [s for s in default_stages() if s.engine.name != "milp"]
    rows, gaps, walls, optimal, total = [], [], [], 0, 0
    for path in sorted(args.instances.glob("*.json")):
        workflow = head(load_workflow(path), args.tasks)
        for objective in (Objective(kind="time"), Objective(kind="cost"), Objective(kind="balanced")):
            problem = Problem.create(workflow, catalog, objective)
            started = time.perf_counter()
            exact = MilpEngine().solve(problem, args.milp_time_limit_s)
            wall = time.perf_counter() - started
            heuristic = run_portfolio(problem, args.heuristic_time_limit_s, heuristics).best
            check(problem, heuristic.assignments, heuristic.method)
            total += 1
            if exact is None:
                rows.append(f"| {workflow.name} | {len(workflow.tasks)} | {objective.kind} | none | {wall:.1f} | - |")
                continue
            check(problem, exact.assignments, "milp")
            exact_score = problem.score(exact.assignments)[0]
            ratio = problem.score(heuristic.assignments)[0] / exact_score
            optimal += exact.status == "optimal"
            walls.append(wall)
            if exact.status == "optimal":
                gaps.append(ratio)
            rows.append(
                f"| {workflow.name} | {len(workflow.tasks)} | {objective.kind} | {exact.status} | {wall:.1f} "
                f"| {ratio:.4f} |"
            )
            print(rows[-1], flush=True)
    within = sum(g <= 1.02 + 1e-9 for g in gaps)
    summary = (
        f"\nInstances: {total}. MILP proved optimality on {optimal} "
        f"(median wall {statistics.median(walls):.1f} s, max {max(walls):.1f} s). "
        f"Heuristics within 2 % of the proven optimum on {within} of {len(gaps)} "
        f"(median ratio {statistics.median(gaps):.4f}, worst {max(gaps):.4f}).\n"
    )
    header = (
        f"Command: `python bench/run_small_exact.py --tasks {args.tasks} --milp-time-limit-s "
        f"{args.milp_time_limit_s:g} --heuristic-time-limit-s {args.heuristic_time_limit_s:g}`. "
        f"Catalog: {', '.join(TYPES)}, two machines each. Ratio: the heuristics' objective value over the "
        "MILP's (1.0000 = optimal).\n\n| instance | tasks | objective | MILP status | MILP wall s | "
        "heuristics / MILP |\n|---|---|---|---|---|---|"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(header + "\n" + "\n".join(rows) + "\n" + summary)
    print(summary)


if __name__ == "__main__":
    main()

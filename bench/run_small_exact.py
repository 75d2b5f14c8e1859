"""Benchmark: on workflows of at most 12 tasks, the exact engines (MILP, CP-SAT) against the heuristics.

Usage: python bench/run_small_exact.py [--tasks 12] [--milp-time-limit-s 10] [--heuristic-time-limit-s 2]
                                       [--instances DIR] [--out bench/results/small-exact.md]

Each real WfInstances workflow gives one small instance: its first N tasks in
topological order (a sub-DAG closed under parents). The catalog is four AWS types
(c6i.large, c7i.large, m6i.large, r6i.large) with two machines each, so that types,
memory and counts all matter. For each instance and objective (time; cost; balanced)
the MILP (HiGHS, or CBC with ``--milp-solver cbc``) and the CP-SAT engine each run alone, cold, with the same time limit
(``--milp-time-limit-s``); the heuristic portfolio (every engine but the exact ones)
runs alone. The table reports each exact engine's status and wall time and the
heuristics' score over the exact score: the better of the two engines' plans ("exact").
Every plan is checked with the validator.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from agora_optimizer.engines.base import EngineResult
from agora_optimizer.engines.exact.cpsat.engine import CpSatEngine
from agora_optimizer.engines.exact.milp.engine import MilpEngine
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model import Assignment, Objective, Workflow
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.optimize.optimize import build_plan
from agora_optimizer.optimize.portfolio import default_stages, run_portfolio
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.validate import validate_plan

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


def check(problem: Problem, assignments: Sequence[Assignment], method: str) -> None:
    plan = build_plan(problem.workflow, problem.catalog, problem.objective, "small", assignments, method, 0.0)
    violations = validate_plan(plan, problem.workflow, problem.catalog)
    if violations:
        raise SystemExit(f"{problem.workflow.name}: invalid {method} plan: {violations[0]}")


def run_exact(
    problem: Problem, engine: MilpEngine | CpSatEngine, time_limit_s: float
) -> tuple[EngineResult | None, float]:
    """An exact engine's result (checked) and its wall time."""
    started = time.perf_counter()
    result = engine.solve(problem, time_limit_s)
    wall = time.perf_counter() - started
    if result is not None:
        check(problem, result.assignments, engine.name)
    return result, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=12)
    parser.add_argument("--milp-time-limit-s", type=float, default=10.0, help="each exact engine's time limit")
    parser.add_argument("--heuristic-time-limit-s", type=float, default=2.0)
    parser.add_argument("--milp-solver", choices=("auto", "highs", "cbc"), default="auto")
    parser.add_argument("--instances", type=Path, default=ROOT.parent / "shared" / "data" / "wfinstances")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "small-exact.md")
    args = parser.parse_args()
    catalog = small_catalog()
    heuristics = [s for s in default_stages() if s.engine.name not in ("milp", "cpsat")]
    rows, ratios = [], []
    proven = {"milp": 0, "cpsat": 0, "either": 0}
    walls: dict[str, list[float]] = {"milp": [], "cpsat": []}
    total = 0
    for path in sorted(args.instances.glob("*.json")):
        workflow = head(load_workflow(path), args.tasks)
        for objective in (Objective(kind="time"), Objective(kind="cost"), Objective(kind="balanced")):
            problem = Problem.create(workflow, catalog, objective)
            milp, milp_wall = run_exact(problem, MilpEngine(solver=args.milp_solver), args.milp_time_limit_s)
            cpsat, cpsat_wall = run_exact(problem, CpSatEngine(), args.milp_time_limit_s)
            heuristic = run_portfolio(problem, args.heuristic_time_limit_s, heuristics).best
            check(problem, heuristic.assignments, heuristic.method)
            total += 1
            walls["milp"].append(milp_wall)
            walls["cpsat"].append(cpsat_wall)
            found = [r for r in (milp, cpsat) if r is not None]
            for name, result in (("milp", milp), ("cpsat", cpsat)):
                proven[name] += result is not None and result.status == "optimal"
            optimal = any(r.status == "optimal" for r in found)
            proven["either"] += optimal
            cells = f"| {workflow.name} | {len(workflow.tasks)} | {objective.kind} "
            cells += f"| {milp.status if milp else 'none'} | {milp_wall:.1f} "
            cells += f"| {cpsat.status if cpsat else 'none'} | {cpsat_wall:.1f} "
            if not found:
                rows.append(cells + "| - | - |")
                print(rows[-1], flush=True)
                continue
            exact = min(found, key=lambda r: problem.score(r.assignments))
            ratio = problem.score(heuristic.assignments)[0] / problem.score(exact.assignments)[0]
            if optimal:
                ratios.append(ratio)
            rows.append(cells + f"| {problem.score(exact.assignments)[0]:.6f} | {ratio:.4f} |")
            print(rows[-1], flush=True)
    within = sum(r <= 1.02 + 1e-9 for r in ratios)
    summary = (
        f"\nInstances: {total}. Proven optimal within {args.milp_time_limit_s:g} s: MILP {proven['milp']} "
        f"(median wall {statistics.median(walls['milp']):.1f} s, max {max(walls['milp']):.1f} s), "
        f"CP-SAT {proven['cpsat']} (median wall {statistics.median(walls['cpsat']):.1f} s, "
        f"max {max(walls['cpsat']):.1f} s), either {proven['either']}. "
        f"Heuristics within 2 % of the proven optimum on {within} of {len(ratios)}"
        + (f" (median ratio {statistics.median(ratios):.4f}, worst {max(ratios):.4f}).\n" if ratios else ".\n")
    )
    header = (
        f"Command: `python bench/run_small_exact.py --tasks {args.tasks} --milp-time-limit-s "
        f"{args.milp_time_limit_s:g} --heuristic-time-limit-s {args.heuristic_time_limit_s:g}"
        f"{'' if args.instances.name == 'wfinstances' else f' --instances {args.instances.name}'}"
        f"{'' if args.milp_solver == 'auto' else f' --milp-solver {args.milp_solver}'}`. "
        f"MILP solver: {MilpEngine(solver=args.milp_solver).solver_name}. "
        f"Catalog: {', '.join(TYPES)}, two machines each. Each exact engine runs alone, cold, with the same time "
        "limit. Exact: the better of the two engines' plans; ratio: the heuristics' objective value over it "
        "(1.0000 = as good).\n\n| instance | tasks | objective | MILP status | MILP wall s | CP-SAT status "
        "| CP-SAT wall s | exact value | heuristics / exact |\n|---|---|---|---|---|---|---|---|---|"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(header + "\n" + "\n".join(rows) + "\n" + summary)
    print(summary)


if __name__ == "__main__":
    main()

"""Benchmark: workflows in which GPU tasks and CPU tasks share a DAG, on the AWS catalog (issue 21).

Usage:
  python bench/run_gpu_mix.py [--sizes 1k] [--recipes cycles,genome,soykb,srasearch,bwa]
      [--catalog aws-us-east-1] [--gpu-share 0.4] [--time-limit-s 20] [--out bench/results/gpu-mix]

No public workflow trace says which tasks ran on GPUs, so the GPU tasks are declared: in each
generated workflow (``bench/data/{recipe}-{size}.json``, written by ``bench/generate_workflows.py``)
the task category whose tasks' summed runtime is the largest share of the workflow's at or below
``--gpu-share`` (else the lightest category) is declared to need 1 GPU, as if that step had been
ported to a GPU; its runtimes are kept (the catalog's GPU types have CPU speeds near 1, and the spec
has no GPU speed yet: docs/accelerators.md). Every other task needs none.

For each workflow three plans, each within ``--time-limit-s``: the time objective (its makespan over
the makespan lower bound), the cost objective with no deadline (its cost over the cost lower
bound) and the cost objective under a deadline of 1.5 x the time plan's makespan (its cost over the
cost lower bound under that deadline). The bounds count GPU-seconds over the GPU types' GPUs
(:mod:`agora_optimizer.planning.bounds`). Every plan is checked by
:func:`agora_optimizer.planning.validate.validate_plan`, whose rules include each machine's GPUs at
every instant. Each workflow runs in a subprocess of its own, whose peak memory is reported.

Results: ``OUT.md`` (medians, then every case) and ``OUT.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEADLINE_FACTOR = 1.5


def gpu_category(tasks: list[Any], share: float) -> str:
    """The category to declare as GPU work: the heaviest whose runtime share is at most ``share``."""
    totals: dict[str, float] = defaultdict(float)
    for task in tasks:
        totals[task.category] += task.runtime_s
    whole = sum(totals.values()) or 1.0
    within = [c for c, total in totals.items() if total / whole <= share]
    if within:
        return max(within, key=lambda c: (totals[c], c))
    return min(totals, key=lambda c: (totals[c], c))


def plan_case(workflow_path: str, catalog_path: str, args: argparse.Namespace) -> dict[str, Any]:
    from agora_optimizer.errors import InfeasibleObjectiveError
    from agora_optimizer.io.catalog_file import load_catalog
    from agora_optimizer.io.wfformat import load_workflow
    from agora_optimizer.model.plan import Objective
    from agora_optimizer.model.workflow import Workflow
    from agora_optimizer.optimize.optimize import optimize
    from agora_optimizer.planning.bounds import cost_lower_bound_usd, makespan_lower_bound_s
    from agora_optimizer.planning.validate import validate_plan

    loaded = load_workflow(workflow_path)
    category = gpu_category(list(loaded.tasks), args.gpu_share)
    tasks = [replace(t, gpus=1) if t.category == category else t for t in loaded.tasks]
    workflow = Workflow.create(loaded.name, tasks, list(loaded.edges))
    catalog = load_catalog(catalog_path)
    gpu_types = {r.name for r in catalog.resources if r.gpus}
    started = time.perf_counter()

    def run(objective: Objective) -> dict[str, Any]:
        began = time.perf_counter()
        try:
            plan = optimize(workflow, catalog, objective, catalog_path, args.time_limit_s)
        except InfeasibleObjectiveError as exc:
            return {"error": str(exc), "wall_s": round(time.perf_counter() - began, 1)}
        on_gpu_types = [a for a in plan.assignments if a.resource in gpu_types]
        return {
            "makespan_s": plan.makespan_s,
            "cost_usd": plan.cost_usd,
            "method": plan.solver.method,
            "wall_s": round(time.perf_counter() - began, 1),
            "violations": len(validate_plan(plan, workflow, catalog)),
            "gpu_tasks_on_gpu_types": sum(1 for a in on_gpu_types if a.gpus),
            "cpu_tasks_on_gpu_types": sum(1 for a in on_gpu_types if not a.gpus),
        }

    fastest = run(Objective(kind="time"))
    cheapest = run(Objective(kind="cost"))
    deadline_s = DEADLINE_FACTOR * fastest["makespan_s"]
    timely = run(Objective(kind="cost", deadline_s=deadline_s))
    makespan_bound = makespan_lower_bound_s(workflow, catalog)
    cost_bound = cost_lower_bound_usd(workflow, catalog)
    deadline_bound = cost_lower_bound_usd(workflow, catalog, deadline_s)
    fastest["ratio"] = fastest["makespan_s"] / makespan_bound
    cheapest["ratio"] = cheapest["cost_usd"] / cost_bound
    if "cost_usd" in timely:
        timely["ratio"] = timely["cost_usd"] / deadline_bound
        timely["met"] = timely["makespan_s"] <= deadline_s + 1e-6
    return {
        "workflow": Path(workflow_path).stem,
        "tasks": len(workflow.tasks),
        "gpu_category": category,
        "gpu_tasks": sum(1 for t in workflow.tasks if t.gpus),
        "gpu_share": round(sum(t.runtime_s for t in workflow.tasks if t.gpus) / sum(t.runtime_s for t in tasks), 3),
        "catalog": Path(catalog_path).stem,
        "makespan_bound_s": makespan_bound,
        "cost_bound_usd": cost_bound,
        "deadline_s": deadline_s,
        "deadline_cost_bound_usd": deadline_bound,
        "time": fastest,
        "cost": cheapest,
        "cost_under_deadline": timely,
        "wall_s": round(time.perf_counter() - started, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})" if values else "-"


def write_markdown(results: list[dict[str, Any]], out: Path) -> None:
    ratios = {key: [r[key]["ratio"] for r in results if "ratio" in r[key]] for key in ("time", "cost")}
    timely = [r["cost_under_deadline"] for r in results]
    lines = [
        "# GPU and CPU tasks in one DAG",
        "",
        f"Command: `python bench/run_gpu_mix.py {' '.join(sys.argv[1:])}`  ",
        f"Date: {time.strftime('%Y-%m-%d')}; 2 shared cores. In each workflow one task category is declared to",
        "need 1 GPU (see the script); bounds count GPU-seconds. Median (smallest-largest) over the workflows.",
        "",
        "| time plan: makespan / makespan bound | cost plan: cost / cost bound | "
        f"cost under {DEADLINE_FACTOR} x the time plan's makespan: cost / bound | deadlines met | valid plans |",
        "|---|---|---|---|---|",
        f"| {_median(ratios['time'])} | {_median(ratios['cost'])} | "
        f"{_median([t['ratio'] for t in timely if 'ratio' in t])} | "
        f"{sum(1 for t in timely if t.get('met'))} of {len(timely)} | "
        f"{sum(1 for r in results for k in ('time', 'cost', 'cost_under_deadline') if r[k].get('violations') == 0)}"
        f" of {3 * len(results)} |",
        "",
        "## Every case",
        "",
        "| workflow | tasks | GPU tasks (category, share of runtime) | time: makespan (s), ratio, method | "
        "cost: USD, ratio, method | cost under deadline: USD, ratio, method | GPU types: GPU / CPU tasks "
        "(time, cost) | peak RSS (MiB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        t, c, d = r["time"], r["cost"], r["cost_under_deadline"]
        deadline = (
            f"{d['cost_usd']:.4f}, {d['ratio']:.3f}, {d['method']}{'' if d['met'] else ' LATE'}"
            if "ratio" in d
            else f"no plan ({d['error'][:80]})"
        )
        lines.append(
            f"| {r['workflow']} | {r['tasks']} | {r['gpu_tasks']} ({r['gpu_category']}, {r['gpu_share']:.2f}) | "
            f"{t['makespan_s']:,.0f}, {t['ratio']:.3f}, {t['method']} | "
            f"{c['cost_usd']:.4f}, {c['ratio']:.3f}, {c['method']} | {deadline} | "
            f"{t['gpu_tasks_on_gpu_types']} / {t['cpu_tasks_on_gpu_types']}, "
            f"{c['gpu_tasks_on_gpu_types']} / {c['cpu_tasks_on_gpu_types']} | {r['peak_rss_mib']} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1k")
    parser.add_argument("--recipes", default="cycles,genome,soykb,srasearch,bwa")
    parser.add_argument("--catalog", default="aws-us-east-1")
    parser.add_argument("--gpu-share", type=float, default=0.4)
    parser.add_argument("--time-limit-s", type=float, default=20.0)
    parser.add_argument("--out", default="bench/results/gpu-mix")
    parser.add_argument("--worker", nargs=2, metavar=("WORKFLOW", "CATALOG"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(plan_case(args.worker[0], args.worker[1], args)))
        return 0
    results = []
    for size in args.sizes.split(","):
        for recipe in args.recipes.split(","):
            workflow = ROOT / "bench" / "data" / f"{recipe}-{size}.json"
            if not workflow.exists():
                print(f"{workflow} missing: python bench/generate_workflows.py --recipes {recipe} --sizes ...")
                return 2
            catalog = ROOT / "catalogs" / f"{args.catalog}.yaml"
            argv = [sys.executable, __file__, *sys.argv[1:], "--worker", str(workflow), str(catalog)]
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            result = json.loads(done.stdout.strip().splitlines()[-1])
            results.append(result)
            d = result["cost_under_deadline"]
            print(
                f"{workflow.stem}: {result['gpu_tasks']} GPU tasks ({result['gpu_category']}); "
                f"time {result['time']['ratio']:.3f} x makespan bound, "
                f"cost {result['cost']['ratio']:.3f} x cost bound, "
                f"under deadline {d.get('ratio', float('nan')):.3f} (met {d.get('met')})",
                flush=True,
            )
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    write_markdown(results, out)
    print(f"written {out}.md and {out}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

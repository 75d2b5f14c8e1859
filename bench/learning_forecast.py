"""A run's forecast once a quarter of it has run, with and without learning during the run (planning only, no Airflow).

For each WfInstance of a family with two instances or more (``--dir``), a crude model predicts each task's runtime
as its category's median in another instance of the family (the overall median for a new category), and the run is
planned for cost from those predictions on ``--catalog``. The run itself is that plan shifted to the true runtimes
(:func:`agora_optimizer.planning.replan.replan` from the start, true workflow, plan order kept where it can be).
Once a quarter of its tasks has ended, the run's state (ended tasks with their true times, running ones) is re-planned
three ways, and each answer's makespan is a forecast of the run's end:

- *model*: the predicted runtimes, as a re-plan without learning would;
- *learned*: the predicted runtimes corrected per category by the tasks that ended
  (:mod:`agora_optimizer.executor.runs.learning`, as the executor does);
- *truth*: the true runtimes (the reference: what the rest would take, re-planned now with perfect knowledge).

Printed per run: the three forecasts and each forecast's error against the truth; at the end, the median and worst
absolute error of model and learned over the runs. Simulated: no executor, no platform latency.

    python bench/learning_forecast.py --dir ../shared/data/wfinstances --catalog catalogs/aws-us-east-1.yaml
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from agora_optimizer.executor.runs.learning import corrected_workflow
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Objective
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.optimize.optimize import optimize
from agora_optimizer.planning.replan import replan
from agora_optimizer.planning.run_state import Done, Running, TaskState
from agora_optimizer.predict.runtime_in_run import RunRuntimes

QUARTER = 0.25
TIME_LIMIT_S = 5.0


def predicted(run: Workflow, train: Workflow) -> Workflow:
    """``run`` with each runtime its category's median in ``train`` (the overall median for a new category)."""
    by_category: dict[str, list[float]] = defaultdict(list)
    for task in train.tasks:
        by_category[task.category].append(task.runtime_s)
    medians = {c: statistics.median(v) for c, v in by_category.items()}
    overall = statistics.median(t.runtime_s for t in train.tasks)
    return replace(run, tasks=tuple(replace(t, runtime_s=medians.get(t.category, overall)) for t in run.tasks))


def forecasts(truth: Workflow, model: Workflow, catalog: Catalog, label: str) -> tuple[float, float, float, float]:
    """(quarter time, model, learned, truth) forecasts of the run's end, on the plan clock."""
    plan = optimize(model, catalog, Objective(kind="cost"), label, TIME_LIMIT_S)
    actual = replan(truth, catalog, plan, {}, 0.0, time_limit_s=TIME_LIMIT_S).schedule
    ends = sorted(a.end_s for a in actual)
    now_s = ends[max(0, math.ceil(QUARTER * len(ends)) - 1)]
    state: dict[str, TaskState] = {}
    for a in actual:
        if a.end_s <= now_s:
            state[a.task] = Done(a.machine, a.end_s, a.start_s)
        elif a.start_s <= now_s:
            state[a.task] = Running(a.machine, a.start_s)
    learned = RunRuntimes()
    for a in actual:
        if isinstance(state.get(a.task), Done):
            task = model.by_id[a.task]
            planned_s = catalog.by_name[a.resource].runtime_s(task)
            if planned_s > 0 and a.end_s > a.start_s:
                learned.observe(task.category, (a.end_s - a.start_s) / planned_s)
    factors = learned.task_factors({t.id: t.category for t in model.tasks if not isinstance(state.get(t.id), Done)})
    answers = [
        replan(workflow, catalog, plan, state, now_s, time_limit_s=TIME_LIMIT_S).makespan_s
        for workflow in (model, corrected_workflow(model, factors), truth)
    ]
    return now_s, answers[0], answers[1], answers[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="a directory of WfFormat instances")
    parser.add_argument("--catalog", type=Path, required=True, help="the catalog the runs are planned on")
    parser.add_argument("--only", default="", help="families to run, comma-separated (default: every one)")
    args = parser.parse_args()
    catalog = load_catalog(args.catalog)
    families: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(args.dir.glob("*.json")):
        families[path.stem.split("-", 1)[0]].append(path)
    only = {f for f in args.only.split(",") if f}
    errors: dict[str, list[float]] = defaultdict(list)
    for name, paths in families.items():
        if len(paths) < 2 or (only and name not in only):
            continue
        for run_path in paths:
            train_path = next(p for p in paths if p != run_path)
            truth = load_workflow(run_path)
            model = predicted(truth, load_workflow(train_path))
            now_s, by_model, learned, reference = forecasts(truth, model, catalog, str(args.catalog))
            shown = []
            for what, value in (("model", by_model), ("learned", learned)):
                error = value / reference - 1
                errors[what].append(abs(error))
                shown.append(f"{what} {value:.0f} s ({100 * error:+.0f} %)")
            print(
                f"{run_path.stem} (model from {train_path.stem}): at {now_s:.0f} s, a quarter of the tasks ended; "
                f"forecast {', '.join(shown)}, truth {reference:.0f} s"
            )
    for what, values in errors.items():
        print(
            f"{what}: median |error| {100 * statistics.median(values):.1f} %, worst {100 * max(values):.1f} % "
            f"over {len(values)} runs"
        )


if __name__ == "__main__":
    main()

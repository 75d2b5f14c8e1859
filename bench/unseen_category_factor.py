"""How well the run's factor predicts a category a run has not seen yet, for ``RUN_SHRINK_K``.

During a run, a category none of whose tasks has ended takes the run's own factor
(:meth:`agora_optimizer.predict.runtime_in_run.RunRuntimes.run_factor`): every ended task's ratio of real over
predicted runtime pooled, shrunk in log with weight ``c / (c + k)`` over the ``c`` categories seen, never below 1.
This measures ``k`` on real traces. Each WfInstance of a family with two or more (``--dir``) is predicted by a
model trained on every other instance (as ``bench/run_learning_loop.py`` does). Its tasks are timed on the predicted
runtimes with no machine limit; when a category's first task starts, the tasks that ended by then are what the run
has seen, and the rule's factor for it (each ``--k``) is set against the category's true factor (its tasks' true
seconds over their predicted seconds). Per run, the error is ``|log(rule) - log(true)|`` weighed by the category's
predicted seconds; printed per ``k``: the median, mean and worst over runs, and the share of predicted seconds the
rule under-predicts by more than 20 % (a forecast too short, a deadline at risk), the run averaged.
``inf`` is no run factor (1).

    python bench/unseen_category_factor.py --dir ../shared/data/wfinstances --k 1,2,3,5,10,inf
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.predict.learning_loop import held_out_instances, trained_without
from agora_optimizer.predict.memory_in_run import category_of_task
from agora_optimizer.predict.runtime_in_run import RunRuntimes
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.wfformat_import import attempts_from_wfformat, read_workflow_shape

REPO = Path(__file__).resolve().parents[1]
UNDER = math.log(1.2)  # under-predicted by more than this: counted as too short

# One task as the run sees it: (predicted start, predicted end, category, predicted s, true s).
Timed = tuple[float, float, str, float, float]


def timed_tasks(path: Path, attempts: Mapping[Path, Sequence[TaskAttempt]], catalog: Catalog) -> list[Timed]:
    """``path``'s tasks timed on a model's predictions (trained on ``attempts`` but ``path``'s), unlimited machines."""
    predictor = trained_without(attempts, path)
    actual = load_workflow(path)
    shape = read_workflow_shape(path)
    predicted = {t.id: t.runtime_s for t in predictor.predicted_workflow(shape, catalog).tasks}
    parents: dict[str, list[str]] = defaultdict(list)
    for edge in actual.edges:
        parents[edge.child].append(edge.parent)
    start: dict[str, float] = {}
    for task_id in actual.topological_order:
        start[task_id] = max((start[p] + predicted[p] for p in parents[task_id]), default=0.0)
    return [
        (start[t.id], start[t.id] + predicted[t.id], category_of_task(t), predicted[t.id], t.runtime_s)
        for t in actual.tasks
        if predicted[t.id] > 0 and t.runtime_s > 0
    ]


def run_errors(tasks: Sequence[Timed], k: float) -> tuple[float, float] | None:
    """(weighted log error, share of predicted seconds under-predicted) over the categories first seen after a task
    ended, or None where no category is."""
    by_category: dict[str, list[Timed]] = defaultdict(list)
    for task in tasks:
        by_category[task[2]].append(task)
    error = under = weight = 0.0
    for own in by_category.values():
        first_start = min(t[0] for t in own)
        seen = [t for t in tasks if t[1] <= first_start]
        if not seen:
            continue
        learned = RunRuntimes()
        for t in seen:
            learned.observe(t[2], t[4] / t[3])
        rule = 0.0 if math.isinf(k) else math.log(learned.run_factor(k))
        true = math.log(sum(t[4] for t in own) / sum(t[3] for t in own))
        seconds = sum(t[3] for t in own)
        error += seconds * abs(rule - true)
        under += seconds * (true - rule > UNDER)
        weight += seconds
    return (error / weight, under / weight) if weight else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dir", type=Path, required=True, help="WfFormat instances")
    parser.add_argument("--k", default="1,2,3,5,10,inf", help="RUN_SHRINK_K values, comma-separated")
    parser.add_argument("--catalog", type=Path, default=REPO / "catalogs" / "local-priced.yaml")
    args = parser.parse_args(argv)
    files = sorted(args.dir.glob("*.json"))
    attempts = {path: attempts_from_wfformat(path) for path in files}
    catalog = load_catalog(args.catalog)
    runs = [timed_tasks(path, attempts, catalog) for path in held_out_instances(files)]
    print(f"{len(runs)} held-out runs of {args.dir}")
    print("| k | log error: median | mean | worst | share under-predicted by > 20 % |")
    print("|---|---:|---:|---:|---:|")
    for k in (float(value) for value in args.k.split(",")):
        found = [e for e in (run_errors(run, k) for run in runs) if e is not None]
        errors, unders = [e for e, _ in found], [u for _, u in found]
        print(
            f"| {k:g} | {statistics.median(errors):.3f} | {statistics.mean(errors):.3f} | {max(errors):.3f} "
            f"| {statistics.mean(unders):.3f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

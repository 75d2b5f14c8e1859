"""What learning during a run is worth on real traces: runtime errors of the tasks to come, before and after it.

For each WfInstance family with two instances or more (``--dir``), each instance in turn is the run and another of
its family the training data: the "model" predicts each task's runtime as its category's median in the training
instance (the overall median where the category is new), a crude model whose errors on new sizes are of the kind
issue 34 measured. The run's tasks then end in the order the workflow runs them (parents first, then by id); each
task of a category is predicted before it ends, once from the model alone and once corrected by what the category's
tasks ended so far taught (:func:`agora_optimizer.executor.runs.learning.shrunk_factor`, for each shrinkage ``k``
of ``--k``). Printed: the median absolute percentage error (MdAPE) of the tasks that had at least one, and at least
two, of their category ended before them, model alone against each ``k``, per pair and at the median over pairs.

    python bench/learning_in_run.py --dir ../shared/data/wfinstances --k 0.25,2
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import defaultdict
from pathlib import Path

from agora_optimizer.executor.runs.learning import shrunk_factor
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.workflow import Workflow


def family(path: Path) -> str:
    """``blast-chameleon-small-001`` -> ``blast``."""
    return path.stem.split("-", 1)[0]


def model_of(train: Workflow) -> tuple[dict[str, float], float]:
    by_category: dict[str, list[float]] = defaultdict(list)
    for task in train.tasks:
        by_category[task.category].append(task.runtime_s)
    overall = statistics.median(t.runtime_s for t in train.tasks)
    return {c: statistics.median(v) for c, v in by_category.items()}, overall


def errors(run: Workflow, train: Workflow, ks: list[float]) -> dict[str, dict[int, list[float]]]:
    """APEs by predictor ('model', 'k=...') and by how many of the task's category ended before it (1, 2)."""
    medians, overall = model_of(train)
    seen: dict[str, list[float]] = defaultdict(list)  # category -> log(actual / model) of its tasks ended
    found: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for task_id in run.topological_order:
        task = run.by_id[task_id]
        actual = task.runtime_s
        model = medians.get(task.category, overall)
        if actual <= 0 or model <= 0:
            continue
        observed = seen[task.category]
        for at_least in (1, 2):
            if len(observed) >= at_least:
                found["model"][at_least].append(abs(model - actual) / actual)
                for k in ks:
                    learned = model * shrunk_factor(observed, k)
                    found[f"k={k:g}"][at_least].append(abs(learned - actual) / actual)
        observed.append(math.log(actual / model))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="a directory of WfFormat instances")
    parser.add_argument("--k", default="0.25,2", help="the shrinkages to try, comma-separated")
    args = parser.parse_args()
    ks = [float(k) for k in args.k.split(",")]
    families: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(args.dir.glob("*.json")):
        families[family(path)].append(path)
    medians: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for paths in families.values():  # by name: the paths were sorted
        if len(paths) < 2:
            continue
        loaded = {p: load_workflow(p) for p in paths}
        for run_path in paths:
            train_path = next(p for p in paths if p != run_path)  # the family's first other instance
            found = errors(loaded[run_path], loaded[train_path], ks)
            cells = []
            for predictor, by_count in found.items():
                for at_least, apes in by_count.items():
                    if apes:
                        medians[predictor][at_least].append(statistics.median(apes))
                cells.append(
                    f"{predictor} "
                    + "/".join(f"{statistics.median(by_count[n]):.3f}" if by_count[n] else "-" for n in (1, 2))
                )
            shown = "; ".join(cells) or "no category with two tasks or more"
            print(f"{run_path.stem} (model from {train_path.stem}): MdAPE after 1/2 ended: {shown}")
    print("median over runs, MdAPE of the tasks with at least 1 / 2 of their category ended before them:")
    for predictor, by_count in medians.items():
        shown = "/".join(f"{statistics.median(by_count[n]):.3f}" for n in (1, 2) if by_count[n])
        print(f"  {predictor}: {shown} ({len(by_count[1])} runs)")


if __name__ == "__main__":
    main()

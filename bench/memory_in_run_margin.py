"""How often a task peaks above what learning memory during a run would reserve it, on real traces.

For each WfInstance of ``--dir``, each category's tasks with a recorded peak in a shuffled order (``--seeds`` orders),
each task after the first ``--after`` of its category reserves the upper quantile of the peaks before it
(:func:`agora_optimizer.predict.memory_in_run.upper_quantile`, the rule's own) times a margin, whether that is
above or below what a model would reserve. Printed for each ``--after`` and ``--margins``: the tasks counted, the share
that peaked above their reservation, and the median reservation over peak. The rule's constants
(``MEMORY_MARGIN``, ``LOWER_AFTER`` in ``predict/memory_in_run.py``) cite it:

    python bench/memory_in_run_margin.py --dir ../shared/data/wfinstances --after 5,10,20 --margins 1.1,1.2,1.3
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from collections import defaultdict
from pathlib import Path

from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.predict.memory_in_run import upper_quantile


def category_peaks(path: Path) -> list[list[int]]:
    """Each category's recorded peaks in one instance."""
    by_category: dict[str, list[int]] = defaultdict(list)
    for task in load_workflow(path).tasks:
        if task.memory_source == "recorded" and task.memory_bytes > 0:
            by_category[task.category].append(task.memory_bytes)
    return list(by_category.values())


def over_share(peaks: list[list[int]], after: int, margin: float, seeds: int) -> tuple[int, float, float]:
    """(tasks counted, share over their reservation, median reservation / peak) over ``seeds`` shuffled orders."""
    over, ratios = 0, []
    for seed in range(seeds):
        rng = random.Random(seed)
        for category in peaks:
            order = list(category)
            rng.shuffle(order)
            for i in range(max(after, 1), len(order)):
                reserved = upper_quantile(sorted(order[:i])) * margin
                over += order[i] > reserved
                ratios.append(reserved / order[i])
    return len(ratios), over / max(len(ratios), 1), statistics.median(ratios) if ratios else math.nan


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True, help="WfFormat instances")
    parser.add_argument("--after", default="10", help="tasks of a category before one counts, comma-separated")
    parser.add_argument("--margins", default="1.2", help="comma-separated")
    parser.add_argument("--seeds", type=int, default=5, help="shuffled orders of each category")
    args = parser.parse_args(argv)
    peaks = [category for path in sorted(args.dir.glob("*.json")) for category in category_peaks(path)]
    print("| after | margin | tasks | over their reservation | reservation / peak, median |")
    print("|---:|---:|---:|---:|---:|")
    for after in (int(a) for a in args.after.split(",")):
        for margin in (float(m) for m in args.margins.split(",")):
            tasks, over, median = over_share(peaks, after, margin, args.seeds)
            print(f"| {after} | {margin:g} | {tasks:,} | {over:.2%} | {median:.2f}x |")


if __name__ == "__main__":
    main()

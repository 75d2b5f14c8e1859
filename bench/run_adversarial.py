"""Benchmark: search small instances adversarially for agora's worst ratio to the optimum and to each baseline.

Usage: python bench/run_adversarial.py [--instances 2000] [--seed 0] [--targets scale-vs-optimum,vs-heft,...]
                                       [--time-limit-s 2] [--exact-time-limit-s 5] [--jobs 1] [--max-seconds S]
                                       [--out bench/results/adversarial] [--cases tests/engines/adversarial]

For each target (``bench/adversarial/targets.py``) a simulated-annealing chain
(``bench/adversarial/search.py``) evaluates ``--instances`` instances of up to 12 tasks and 4
resource types (``bench/adversarial/instances.py``), seeded by ``--seed`` and the target's name;
``--max-seconds`` stops each target's search after that long, with fewer instances searched (the table says
how many of those asked). ``--merge A.json B.json ...`` searches nothing: it writes one table of the rows of
earlier results (for each target, the last file's row), each row with the command and date of its search.
Writes ``<out>.json`` and ``<out>.md`` (the command and date on top; per target the worst ratio,
its case file, and how many instances were searched and counted), and the worst instance of each
target as ``<cases>/<target>.json``, which ``tests/engines/test_adversarial_cases.py`` re-checks.
Every plan compared (agora's, the baseline's, the exact engines') goes through the checker.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from multiprocessing import Pool
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.adversarial.instances import write_case  # noqa: E402
from bench.adversarial.search import TargetResult, bound_of, search  # noqa: E402
from bench.adversarial.targets import TARGETS, Settings  # noqa: E402


def _search(job: tuple[str, int, int, Settings, Path, dict[str, Any], float | None]) -> TargetResult:
    target, instances, seed, settings, cases, extra, max_seconds = job
    keep = lambda result: _keep_worst(result, cases, extra)  # noqa: E731
    return search(target, instances, seed, settings, keep=keep, max_seconds=max_seconds)


def summary(result: TargetResult, case: Path | None, asked: int) -> dict[str, Any]:
    worst = result.worst
    return {
        "target": result.target,
        "bound": bound_of(result.target),
        "seed": result.seed,
        "instances_asked": asked,
        "instances_searched": result.searched,
        "instances_counted": result.counted,
        "over_bound": result.over_bound,
        "missed_deadlines": result.missed,
        "invalid_plans": result.invalid,
        "worst_ratio": None if worst is None else worst.ratio,
        "worst_missed_deadline": None if worst is None else worst.missed,
        "worst_agora_method": None if worst is None else worst.agora,
        "worst_reference_method": None if worst is None else worst.reference,
        "worst_case": None if case is None else str(case.relative_to(ROOT) if case.is_relative_to(ROOT) else case),
        "lowest_ratio": result.best_ratio,
        "seconds": round(result.seconds, 1),
        "seconds_per_instance": round(result.seconds / max(result.searched, 1), 3),
    }


def markdown(command: str, date: str, rows: list[dict[str, Any]]) -> str:
    lines = [
        f"Command: `{command}`. Date: {date}.",
        "",
        "Ratio: agora's objective value over the reference's (Problem.score; counted only where the reference "
        "meets the deadline). scale-vs-optimum: agora with the stages of a 10,000-task workflow against the "
        "optimum CP-SAT or the MILP proved; vs-X: agora's whole portfolio against baseline X.",
        "",
        "| target | bound | searched | counted | over bound | missed deadlines | invalid plans | worst ratio "
        "| worst case | lowest ratio | s per instance |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        worst = "-" if row["worst_ratio"] is None else f"{row['worst_ratio']:.4f}"
        if row["worst_missed_deadline"]:
            worst += " (misses the deadline)"
        lowest = "-" if row["lowest_ratio"] is None else f"{row['lowest_ratio']:.4f}"
        searched = f"{row['instances_searched']}"
        if row.get("instances_asked", row["instances_searched"]) > row["instances_searched"]:
            searched += f" of {row['instances_asked']} (time limit)"
        lines.append(
            f"| {row['target']} | {row['bound']:.2f} | {searched} | {row['instances_counted']} "
            f"| {row['over_bound']} | {row['missed_deadlines']} | {len(row['invalid_plans'])} | {worst} "
            f"| {row['worst_case'] or '-'} | {lowest} | {row['seconds_per_instance']:.3f} |"
        )
    searches = [row for row in rows if "command" in row]
    if searches:
        lines += ["", "Each row's search:", ""]
        lines += [f"- {row['target']}: `{row['command']}` ({row['date']})" for row in searches]
    return "\n".join(lines) + "\n"


def merged(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of earlier results, one per target (the last document's), each with its search's command and date."""
    rows: dict[str, dict[str, Any]] = {}
    for document in documents:
        for row in document["targets"]:
            rows[row["target"]] = {"command": document["command"], "date": document["date"], **row}
    return sorted(rows.values(), key=lambda row: TARGETS.index(row["target"]))


def _keep_worst(result: TargetResult, cases: Path, extra: dict[str, Any]) -> Path | None:
    """The target's worst instance, written as ``<cases>/<target>.json`` (None when none counted)."""
    if result.worst is None or result.worst_case is None:
        return None
    case = cases / f"{result.target}.json"
    found = {"target": result.target, "ratio": result.worst.ratio, "missed": result.worst.missed}
    write_case(case, result.worst_case, {**extra, **found})
    return case


def write_results(out: Path, command: str, date: str, rows: list[dict[str, Any]]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {"command": command, "date": date, "targets": rows}
    out.with_suffix(".json").write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
    out.with_suffix(".md").write_text(markdown(command, date, rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=2000, help="instances searched per target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated, of {', '.join(TARGETS)}")
    parser.add_argument("--time-limit-s", type=float, default=2.0, help="agora's and each baseline's")
    parser.add_argument("--exact-time-limit-s", type=float, default=5.0, help="CP-SAT's, then the MILP's")
    parser.add_argument("--jobs", type=int, default=1, help="targets searched at once")
    parser.add_argument("--max-seconds", type=float, default=None, help="each target's search stops after this long")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "adversarial")
    parser.add_argument("--cases", type=Path, default=ROOT / "tests" / "engines" / "adversarial")
    parser.add_argument("--merge", type=Path, nargs="+", help="earlier results' JSON files: one table, no search")
    args = parser.parse_args(argv)
    command = "python bench/run_adversarial.py " + " ".join(argv if argv is not None else sys.argv[1:])
    date = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if args.merge:
        write_results(args.out, command, date, merged([json.loads(path.read_text()) for path in args.merge]))
        return 0
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in targets if t not in TARGETS]
    if unknown or args.instances < 1:
        parser.error(f"--targets: unknown {', '.join(unknown)}" if unknown else "--instances: at least 1")
    settings = Settings(time_limit_s=args.time_limit_s, exact_time_limit_s=args.exact_time_limit_s)
    found_by = {"command": command, "date": date}
    jobs = [(target, args.instances, args.seed, settings, args.cases, found_by, args.max_seconds) for target in targets]
    rows: list[dict[str, Any]] = []
    with Pool(max(args.jobs, 1)) as pool:
        for result in pool.imap_unordered(_search, jobs):  # each target's results written as soon as it ends
            row = summary(result, _keep_worst(result, args.cases, found_by), args.instances)
            print(json.dumps(row), flush=True)
            rows = sorted([*rows, row], key=lambda r: targets.index(r["target"]))
            write_results(args.out, command, date, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

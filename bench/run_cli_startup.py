"""How fast the ``agora`` commands that only read answer, and that they write nothing.

Usage:
  python bench/run_cli_startup.py [--repeat 5] [--checkout DIR ...] [--out bench/results/cli-startup]

Runs each command of :data:`COMMANDS` (``agora --help`` and every group's and command's
``--help``, ``runs list``, ``runs show nope nope``, ``traces list``, ``config show``, ``config``) ``--repeat`` times
as ``python -m agora_optimizer`` from each ``--checkout`` (this one by default; give another, such as
the main branch's, to compare: their runs alternate, so that both meet the same load), each run with
a fresh, empty ``AIRFLOW_HOME`` and ``HOME`` and no
``AIRFLOW_*`` variable, stdout and stderr to pipes (so the width is 80). It records each command's
median wall time, its exit code, and every file and directory the runs left in those homes, and writes
``OUT.json`` and ``OUT.md``. ``python -c pass`` is measured the same way: the interpreter's own start.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GROUPS = ("traces", "queue", "plans", "runs", "config", "aws")
PLANNING = ("optimize", "validate", "gantt", "pareto", "train", "predict", "simulate")
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("runs", "list"),
    ("runs", "show", "nope", "nope"),
    ("traces", "list"),
    ("config", "show"),
    ("config",),
    *((name, "--help") for name in (*PLANNING, *GROUPS)),
    ("runs", "list", "--help"),
    ("config", "show", "--help"),
)
BUDGET_S = 1.0  # issue 35: under a second on an empty home


def timed_run(argv: list[str], checkout: Path) -> tuple[float, int, list[str]]:
    """One run of ``argv`` in fresh homes: its wall time, exit code, and the files it left there."""
    with tempfile.TemporaryDirectory(prefix="agora-cli-startup-") as scratch:
        airflow_home, home = Path(scratch) / "airflow", Path(scratch) / "home"
        airflow_home.mkdir()
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW") and k not in ("COLUMNS", "LINES")}
        env |= {"AIRFLOW_HOME": str(airflow_home), "HOME": str(home), "PYTHONPATH": str(checkout)}
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, timeout=120, check=False)
        wall_s = time.perf_counter() - start
        made = set(Path(scratch).rglob("*")) - {airflow_home, home}
        left = sorted(str(path.relative_to(scratch)) + ("/" if path.is_dir() else "") for path in made)
    return wall_s, done.returncode, left


def measure(command: tuple[str, ...], checkouts: list[Path], repeat: int) -> dict[str, object]:
    """``command``'s runs from each checkout, alternating: per checkout, its median and slowest wall time,
    exit codes and what it left in the homes."""
    argv = [sys.executable, "-c", "pass"] if command == ("python -c pass",) else [
        sys.executable, "-m", "agora_optimizer", *command
    ]  # fmt: skip
    runs: dict[Path, list[tuple[float, int, list[str]]]] = {checkout: [] for checkout in checkouts}
    for _ in range(repeat):
        for checkout in checkouts:
            runs[checkout].append(timed_run(argv, checkout))
    return {
        "command": "python -c pass" if command == ("python -c pass",) else "agora " + shlex.join(command),
        "checkouts": {
            str(checkout): {
                "median_s": statistics.median(wall for wall, _, _ in done),
                "max_s": max(wall for wall, _, _ in done),
                "exit_codes": sorted({code for _, code, _ in done}),
                "files_written": sorted({name for _, _, left in done for name in left}),
            }
            for checkout, done in runs.items()
        },
    }


def markdown(result: dict[str, Any]) -> str:
    checkouts = result["checkouts"]
    lines = [
        f"# Start-up of the agora commands that only read ({result['date']})",
        "",
        f"`{result['invocation']}`",
        "",
        f"Python {result['python']}, {result['cpus']} CPUs, load average {result['load_average']} at the start "
        f"and {result['load_average_end']} at the end. Each command {result['repeat']} times from each "
        "checkout (alternating) as `python -m agora_optimizer`, each time in a fresh empty `AIRFLOW_HOME` and "
        "`HOME`, output to pipes: median and slowest wall time (s), exit codes, files and directories left "
        f"in the homes. Budget: {BUDGET_S:g} s (issue 35).",
        "",
        *(f"- checkout {i + 1}: `{c['path']}` at {c['commit']}" for i, c in enumerate(checkouts)),
        "",
        "| command | "
        + " | ".join(f"{i + 1}: median, max | {i + 1}: exit | {i + 1}: written" for i in range(len(checkouts)))
        + " |",
        "|---|" + "---|---|---|" * len(checkouts),
    ]
    for row in result["commands"]:
        cells = []
        for checkout in checkouts:
            found = row["checkouts"][checkout["path"]]
            written = ", ".join(f"`{name}`" for name in found["files_written"]) or "none"
            codes = ", ".join(map(str, found["exit_codes"]))
            cells.append(f"{found['median_s']:.2f}, {found['max_s']:.2f} | {codes} | {written}")
        lines.append(f"| `{row['command']}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="runs of each command (the median is kept)")
    parser.add_argument("--checkout", type=Path, action="append", help="an agora checkout to run (repeatable)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "cli-startup")
    args = parser.parse_args(argv)
    checkouts = [path.resolve() for path in args.checkout or [REPO]]
    result: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "invocation": "python bench/run_cli_startup.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "checkouts": [{"path": str(path), "commit": _commit(path)} for path in checkouts],
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": " ".join(f"{load:.2f}" for load in os.getloadavg()),
        "repeat": args.repeat,
        "commands": [measure(command, checkouts, args.repeat) for command in (("python -c pass",), *COMMANDS)],
    }
    result["load_average_end"] = " ".join(f"{load:.2f}" for load in os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result), end="")
    return 0


def _commit(checkout: Path) -> str:
    found = subprocess.run(["git", "log", "-1", "--format=%h %s"], cwd=checkout, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=checkout, capture_output=True, text=True).stdout
    commit, _, subject = found.stdout.strip().partition(" ")  # a git archive copy names its source in its subject
    shown = f"{commit} ({subject[:80]}{'...' if len(subject) > 80 else ''})" if commit else "?"
    return shown + (", with uncommitted changes" if dirty.strip() else "")


if __name__ == "__main__":
    raise SystemExit(main())

"""How fast the ``agora`` commands that only read answer, and that they write nothing.

Usage:
  python bench/run_cli_startup.py [--repeat 5] [--checkout DIR] [--out bench/results/cli-startup]

Runs each command of :data:`COMMANDS` (``agora --help`` and every group's and command's
``--help``, ``runs list``, ``runs show nope nope``, ``config show``, ``config``) ``--repeat`` times
as ``python -m agora_optimizer`` from ``--checkout`` (this one by default; another checkout, such as
the main branch's, to compare), each run with a fresh, empty ``AIRFLOW_HOME`` and ``HOME`` and no
``AIRFLOW_*`` variable, stdout and stderr to pipes (so the width is 80). It records each command's
median wall time, its exit code, and every file the runs left in those homes, and writes
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

REPO = Path(__file__).resolve().parents[1]
GROUPS = ("traces", "queue", "plans", "runs", "config", "aws")
PLANNING = ("optimize", "validate", "gantt", "pareto", "train", "predict", "simulate")
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("runs", "list"),
    ("runs", "show", "nope", "nope"),
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
        left = sorted(str(path.relative_to(scratch)) for path in Path(scratch).rglob("*") if path.is_file())
    return wall_s, done.returncode, left


def measure(command: tuple[str, ...], checkout: Path, repeat: int) -> dict[str, object]:
    argv = [sys.executable, "-c", "pass"] if command == ("python -c pass",) else [
        sys.executable, "-m", "agora_optimizer", *command
    ]  # fmt: skip
    runs = [timed_run(argv, checkout) for _ in range(repeat)]
    return {
        "command": "python -c pass" if command == ("python -c pass",) else "agora " + shlex.join(command),
        "median_s": statistics.median(wall for wall, _, _ in runs),
        "max_s": max(wall for wall, _, _ in runs),
        "exit_codes": sorted({code for _, code, _ in runs}),
        "files_written": sorted({name for _, _, left in runs for name in left}),
    }


def markdown(result: dict[str, object]) -> str:
    rows = result["commands"]
    assert isinstance(rows, list)
    lines = [
        f"# Start-up of the agora commands that only read ({result['date']})",
        "",
        f"`{result['invocation']}`",
        "",
        f"Checkout `{result['checkout']}` (commit {result['commit']}); Python {result['python']}, "
        f"{result['cpus']} CPUs, load average {result['load_average']} at the start. Each command "
        f"{result['repeat']} times as `python -m agora_optimizer`, each time in a fresh empty "
        "`AIRFLOW_HOME` and `HOME`, output to pipes; median and slowest wall time, exit codes, files left "
        f"in the homes. Budget: {BUDGET_S:g} s (issue 35).",
        "",
        "| command | median (s) | max (s) | exit | files written |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        written = ", ".join(f"`{name}`" for name in row["files_written"]) or "none"
        codes = ", ".join(map(str, row["exit_codes"]))
        lines.append(f"| `{row['command']}` | {row['median_s']:.2f} | {row['max_s']:.2f} | {codes} | {written} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="runs of each command (the median is kept)")
    parser.add_argument("--checkout", type=Path, default=REPO, help="the agora checkout to run")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "cli-startup")
    args = parser.parse_args(argv)
    checkout = args.checkout.resolve()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True, check=False
    ).stdout.strip()
    result: dict[str, object] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "invocation": "python bench/run_cli_startup.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "checkout": str(checkout),
        "commit": commit or "?",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": " ".join(f"{load:.2f}" for load in os.getloadavg()),
        "repeat": args.repeat,
        "commands": [measure(command, checkout, args.repeat) for command in (("python -c pass",), *COMMANDS)],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The progress line of the long commands: its text from the planners' numbers, and what a person sees.

The commands run as a person runs them: ``python -m agora_optimizer`` with stderr (and stdout) on a
pseudo-terminal, then piped and with ``--json``, where nothing of the progress may show.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from agora_optimizer.cli.progress import count_text, planning_text, progress_line_text, sweep_text, window_text
from agora_optimizer.model import Objective
from agora_optimizer.optimize.pareto import SweepProgress
from agora_optimizer.optimize.portfolio import PortfolioProgress
from agora_optimizer.optimize.window import WindowProgress
from tests.conftest import AWS_CATALOG, BUNDLED, REPO

BLAST = BUNDLED / "blast-chameleon-small-001.json"
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_a_planning_line_says_the_best_plan_its_value_and_its_gap_to_the_bound() -> None:
    state = PortfolioProgress("cp-sat", 3, 9, 1234.5, 0.5, 1.25, 1.0, True)
    assert planning_text(state, Objective(kind="time")) == (
        "best 1,234.5 s, 0.5000 USD; makespan/LB = 1.250, gap 20.0% to the LB; engine 4/9 cp-sat"
    )
    proven = PortfolioProgress("milp", 8, 9, 60.0, 0.0123, 1.25, 1.2, True)  # an exact engine's bound is tighter
    assert planning_text(proven, Objective(kind="cost")) == (
        "best 60.0 s, 0.0123 USD; cost/LB = 1.250, gap 4.0% to the proven bound 1.200; engine 9/9 milp"
    )
    late = PortfolioProgress("", 9, 9, 60.0, 0.0123, 2.0, 1.0, False)
    assert planning_text(late, Objective(kind="balanced", alpha=0.7)) == (  # a mixed objective says what it is
        "best 60.0 s, 0.0123 USD (misses the deadline or budget); 0.7 makespan/LB + 0.3 cost/LB = 2.000, "
        "gap 50.0% to the LB; engines done"
    )
    assert planning_text(PortfolioProgress("heft", 0, 4), Objective()) == "best: none yet; engine 1/4 heft"


def test_the_other_lines_count_points_runs_files_and_rows() -> None:
    assert (
        progress_line_text("planning 43 tasks", 2.26, "engine 1/4 heft")
        == "planning 43 tasks    2.3 s  engine 1/4 heft"
    )
    assert sweep_text(SweepProgress(3, 11, 52.04, 0.01191, 6)) == (
        "sweep 3/11; last best 52.0 s, 0.0119 USD; 6 points on the front"
    )
    assert sweep_text(SweepProgress(0, 11)) == "sweep 0/11"
    assert window_text(WindowProgress("joint search, step 4", 2.0, 1), 1.5) == (
        "best 2.0000 USD, 1 run(s) late, gap 25.0% to the cost LB; joint search, step 4"
    )
    assert window_text(WindowProgress("each run alone"), 1.5) == "best: none yet; each run alone"
    assert count_text(3, 10, "files read", rows=12345) == "3/10 files read, 12,345 rows"
    assert count_text(3, 10, "files read") == "3/10 files read"


def _env(tmp_path: Path) -> dict[str, str]:
    """A person's terminal, 200 columns wide, and an Airflow home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "FORCE_", "NO_COLOR", "TTY_"))}
    return env | {"AIRFLOW_HOME": str(tmp_path / "airflow"), "TERM": "xterm-256color", "COLUMNS": "200"}


def _on_a_terminal(tmp_path: Path, *argv: object, stdout_piped: bool = False) -> tuple[int, str, str]:
    """Run ``agora ARGV`` with stderr, and stdout unless ``stdout_piped``, on a pseudo-terminal: its exit code,
    all that was written to the terminal (escape codes and all) and the piped stdout."""
    terminal, process_side = os.openpty()
    fcntl.ioctl(process_side, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    out_file = tmp_path / "stdout.txt"
    with out_file.open("wb") as piped:
        process = subprocess.Popen(
            [sys.executable, "-m", "agora_optimizer", *map(str, argv)],
            cwd=REPO, env=_env(tmp_path), stdin=subprocess.DEVNULL,
            stdout=piped if stdout_piped else process_side, stderr=process_side,
        )  # fmt: skip
        os.close(process_side)
        written = bytearray()
        while True:
            try:
                chunk = os.read(terminal, 65536)
            except OSError:  # EIO: the process closed its side
                break
            if not chunk:
                break
            written += chunk
        code = process.wait(timeout=120)
    os.close(terminal)
    return code, written.decode(errors="replace"), out_file.read_text()


def _plain(written: str) -> str:
    """The terminal's bytes as text: escape codes removed, each redraw of the line on a line of its own."""
    return ESCAPES.sub("", written).replace("\r\n", "\n").replace("\r", "\n")


@pytest.mark.slow  # plans for seconds
def test_optimize_shows_the_best_plan_and_its_gap_on_a_terminal_and_erases_them_before_the_table(
    tmp_path: Path,
) -> None:
    argv = ("optimize", BLAST, "-c", AWS_CATALOG, "--objective", "cost", "--time-limit-s", "3")
    code, written, _ = _on_a_terminal(tmp_path, *argv, "-o", tmp_path / "p.json")
    shown = _plain(written)
    assert code == 0, shown[-2000:]
    best = [line for line in shown.splitlines() if line.startswith("planning 43 tasks") and "best " in line]
    assert best and all(re.search(r"cost/LB = [\d.]+, gap [\d.]+% to the ", line) for line in best), shown
    assert re.search(r"engine \d+/\d+ \S+", shown)
    # The line is erased (the cursor back up onto it, the line cleared) before the summary's table is printed
    title = written.index("blast-chameleon-small-001 (43 tasks)")
    last_drawn = written.rindex("planning 43 tasks", 0, title)
    assert "\x1b[1A\x1b[2K" in written[last_drawn:title]
    assert "planning 43 tasks" not in written[title:]


@pytest.mark.slow  # plans for seconds
def test_optimize_shows_no_progress_with_json_nor_when_piped(tmp_path: Path) -> None:
    argv = ("optimize", BLAST, "-c", AWS_CATALOG, "-o", tmp_path / "p.json", "--time-limit-s", "2")
    code, shown, stdout = _on_a_terminal(tmp_path, *argv, "--json", stdout_piped=True)
    shown = _plain(shown)
    assert code == 0, shown[-2000:]
    # stderr is a terminal, but the output is JSON (a loaded machine may add the one line "... went before planning")
    assert "planning 43 tasks" not in shown and "gap" not in shown, shown
    assert json.loads(stdout)["tasks"] == 43
    piped = subprocess.run(
        [sys.executable, "-m", "agora_optimizer", *map(str, argv)],
        cwd=REPO, env=_env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr[-2000:]
    assert "planning 43 tasks" not in piped.stderr and "gap" not in piped.stderr and "\x1b" not in piped.stderr
    assert "planning 43 tasks" not in piped.stdout and "against the one-type default" in piped.stdout


@pytest.mark.slow  # plans for seconds
def test_pareto_shows_each_run_of_its_sweep_on_a_terminal(tmp_path: Path) -> None:
    argv = ("pareto", BLAST, "-c", AWS_CATALOG, "-o", tmp_path / "f.json", "--deadlines", "2", "--time-limit-s", "4")
    code, written, _ = _on_a_terminal(tmp_path, *argv)
    shown = _plain(written)
    assert code == 0, shown[-2000:]
    assert re.search(
        r"pareto front of 43 tasks +[\d.]+ s  sweep \d/5; last best [\d,.]+ s, [\d.]+ USD; \d+ points", shown
    )
    front = json.loads((tmp_path / "f.json").read_text())
    assert f"{len(front['points'])} plans on the front" in shown


@pytest.mark.slow  # a process of its own
def test_traces_import_counts_the_files_and_rows_on_a_terminal(tmp_path: Path) -> None:
    files = sorted(BUNDLED.glob("blast-*.json"))
    store = f"sqlite:///{tmp_path / 'traces.db'}"
    code, written, _ = _on_a_terminal(tmp_path, "traces", "import", *files, "--store", store)
    shown = _plain(written)
    assert code == 0, shown[-2000:]
    assert re.search(rf"traces import +[\d.]+ s  0/{len(files)} files read, 0 rows", shown), shown
    assert f"{len(files)}/{len(files)} files read; writing " in shown


@pytest.mark.slow  # fits three predictors: seconds
def test_train_shows_the_files_read_and_each_predictor_fit_on_a_terminal(tmp_path: Path) -> None:
    files = sorted(BUNDLED.glob("blast-*.json"))[:2]  # two runs: the predictor, then one per held-out fold
    argv = ("train", *(x for f in files for x in ("-w", f)), "--out", tmp_path / "model")
    code, written, _ = _on_a_terminal(tmp_path, *argv)
    shown = _plain(written)
    assert code == 0, shown[-2000:]
    assert re.search(r"train +[\d.]+ s  0/2 files read, 0 rows", shown), shown
    assert re.search(r"train +[\d.]+ s  fitting the predictor on \d+ attempts", shown), shown
    assert "scoring on held-out runs: the predictor of fold 1/2" in shown
    assert "scoring on held-out runs: the predictor of fold 2/2" in shown
    assert shown.rstrip().splitlines()[-1].startswith("runtime quantiles: ")  # the summary is the last word

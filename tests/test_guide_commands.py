"""Every command of the user guide (docs/guide.md) works as written.

The guide's shell commands are the lines of its ```sh blocks (a line ending in ``\\`` continues
on the next). This test plays a reader who follows the guide from the top in a fresh checkout:
a temporary directory that holds the checkout's ``catalogs/``, ``dags/`` and ``workflows/`` and
its ``.venv``, with ``HOME`` in that directory (so ``AIRFLOW_HOME=~/airflow`` and every
``[agora]`` directory under it are the test's own). Each command runs with ``bash -c`` in that
directory, in the guide's order, with the environment the previous commands left (``source``
and ``export`` carry over, as in one shell); the files the guide asks the reader to write (the
DAG, the catalog, the ``[agora]`` settings) are written from the guide's own blocks when the
reading reaches them. Each command must exit 0, and :data:`CHECKS` asserts what it printed or
wrote. A command too slow or too demanding for this test (``bash scripts/demo.sh`` starts a real
Airflow) is in :data:`DELEGATED` with the test that runs exactly it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.plan_file import load_plan
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.planning.validate import validate_plan
from agora_optimizer.plans.store import PlanStore
from tests.conftest import REPO

GUIDE = REPO / "docs" / "guide.md"
WORKFLOW = "workflows/srasearch-chameleon-10a-001.json"
AWS = "catalogs/aws-us-east-1.yaml"
GIB = 2**30
COMMAND_TIMEOUT_S = 180
# The tour's commands (plan, trace the front, check, draw) print at most this many lines by default: the
# results and one line of what was assumed, the details under -v.
LINE_BUDGET = 15
BUDGETED = ("agora optimize ", "agora pareto ", "agora validate ", "agora gantt ")

# Commands another test runs exactly as written: command -> that test file (which must contain it).
DELEGATED = {
    "bash scripts/demo.sh": "tests/test_readme_commands.py",
}


# --- reading the guide ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    lang: str
    lines: tuple[str, ...]

    @property
    def header(self) -> str:
        """The first line, where a block the reader saves as a file names it (``# my-resources.yaml``)."""
        return self.lines[0].strip() if self.lines else ""


def fenced_blocks(text: str) -> list[Block]:
    blocks, lang, lines = [], None, []
    for line in text.splitlines():
        if lang is None:
            opening = re.match(r"^```(\w*)\s*$", line)
            if opening:
                lang, lines = opening.group(1), []
        elif line.strip() == "```":
            blocks.append(Block(lang, tuple(lines)))
            lang = None
        else:
            lines.append(line)
    assert lang is None, "docs/guide.md: a fenced block is not closed"
    return blocks


def sh_commands(block: Block) -> list[str]:
    """The commands of an sh block: comment and blank lines dropped, ``\\`` continuations joined."""
    commands, pending = [], ""
    for raw in block.lines:
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        commands.append(re.sub(r"\s+", " ", pending + line).strip())
        pending = ""
    assert not pending, f"docs/guide.md: an sh block ends in a continuation: {pending!r}"
    return commands


def guide_commands() -> list[str]:
    return [c for block in fenced_blocks(GUIDE.read_text()) if block.lang == "sh" for c in sh_commands(block)]


# --- the reader's shell --------------------------------------------------------------------------


@dataclass
class Result:
    command: str
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def show(self) -> str:
        head = f"$ {self.command}\n(exit {self.returncode}, {self.seconds:.1f} s)"
        return f"{head}\n{self.stdout[-3000:]}\n{self.stderr[-3000:]}"


@dataclass
class Shell:
    """One reader's shell: a working directory and the environment the commands so far left."""

    cwd: Path
    env: dict[str, str]
    timings: list[tuple[str, float]] = field(default_factory=list)

    def run(self, command: str) -> Result:
        env_file = self.cwd.parent / "env.after"
        script = f'{command}\nrc=$?\nenv -0 > "{env_file}"\nexit $rc\n'
        started = time.perf_counter()
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        seconds = time.perf_counter() - started
        self.timings.append((command, seconds))
        if env_file.exists():
            pairs = (item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
            self.env = {k: v for k, v in pairs if k not in {"_", "SHLVL", "PWD", "OLDPWD"}}
            env_file.unlink()
        return Result(command, done.returncode, done.stdout, done.stderr, seconds)

    def path(self, text: str) -> Path:
        """A path as the reader's shell expands it (``$AIRFLOW_HOME``, ``~``), relative to the checkout."""
        text = re.sub(r"\$\{?(\w+)\}?", lambda m: self.env[m.group(1)], text)
        if text.startswith("~"):
            text = self.env["HOME"] + text[1:]
        return self.cwd / text

    @property
    def airflow_home(self) -> Path:
        return Path(self.env["AIRFLOW_HOME"])


def fresh_checkout(root: Path) -> Shell:
    """The checkout a reader has after ``bash scripts/demo.sh``: its data, and ``.venv`` with agora installed."""
    checkout, home = root / "agora", root / "home"
    checkout.mkdir()
    home.mkdir()
    for name in ("catalogs", "dags", "workflows"):
        (checkout / name).symlink_to(REPO / name)
    venv = Path(sys.prefix)
    assert (venv / "bin" / "activate").is_file(), f"tests run in a virtualenv (scripts/test.sh's .venv), not {venv}"
    (checkout / ".venv").symlink_to(venv)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AGORA", "VIRTUAL_ENV"))}
    env |= {
        "HOME": str(home),
        "COLUMNS": "160",  # rich tables in full, as on a wide terminal
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",  # Airflow's example DAGs only slow the DAG-folder parse down
    }
    return Shell(checkout, env)


# --- blocks the reader saves as files ------------------------------------------------------------


def write_dag(shell: Shell, block: Block) -> None:
    path = shell.path(block.header.removeprefix("# "))
    assert path.parent.is_dir(), f"the guide writes {path} before making its folder"
    path.write_text("\n".join(block.lines) + "\n")


def write_catalog(shell: Shell, block: Block) -> None:
    path = shell.path(block.header.removeprefix("# "))
    path.write_text("\n".join(block.lines) + "\n")
    backends = {r.backend for r in load_catalog(path).resources}
    assert backends == {"local", "slurm", "aws"}, backends


def set_in_airflow_cfg(shell: Shell, block: Block) -> None:
    """Set the block's keys in the [agora] section that Airflow wrote (agora declares it as a provider)."""
    cfg = shell.airflow_home / "airflow.cfg"
    assert cfg.is_file(), "Airflow writes airflow.cfg on its first command"
    lines = cfg.read_text().splitlines()
    start = lines.index("[agora]")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    for line in block.lines[1:]:
        if not line.strip() or line.strip() == "[agora]":
            continue
        key = line.split("=", 1)[0].strip()
        at = next(i for i in range(start + 1, end) if re.match(rf"#?\s*{re.escape(key)}\s*=", lines[i]))
        lines[at] = line  # the default Airflow wrote for it, replaced
    cfg.write_text("\n".join(lines) + "\n")


FILE_BLOCKS: dict[str, Callable[[Shell, Block], None]] = {
    "# $AIRFLOW_HOME/dags/my_pipeline.py": write_dag,
    "# my-resources.yaml": write_catalog,
    "# in $AIRFLOW_HOME/airflow.cfg": set_in_airflow_cfg,
}


# --- what each command must do -------------------------------------------------------------------

Check = Callable[[Shell, Result], None]
CHECKS: dict[str, Check] = {}


def check(command: str) -> Callable[[Check], Check]:
    def register(function: Check) -> Check:
        assert command not in CHECKS, command
        CHECKS[command] = function
        return function

    return register


def table_row(stdout: str, label: str) -> list[str]:
    """The cells after ``label`` in a row of a rich table (``│ agora │ 803.7 │ ...``)."""
    for line in stdout.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
        if cells and cells[0] == label:
            return cells[1:]
    raise AssertionError(f"no row {label!r} in:\n{stdout}")


def valid_plan(shell: Shell, plan: str, workflow: str = WORKFLOW, catalog: str = AWS) -> dict:
    """The plan file, after the project's checker found no violation in it."""
    loaded = load_plan(shell.path(plan))
    violations = validate_plan(loaded, load_workflow(shell.path(workflow)), load_catalog(shell.path(catalog)))
    assert not violations, violations
    return json.loads(shell.path(plan).read_text())


@check("source .venv/bin/activate")
def _activate(shell: Shell, result: Result) -> None:
    assert shell.env.get("VIRTUAL_ENV"), "activate sets VIRTUAL_ENV"
    assert shell.env["PATH"].split(":")[0] == str(Path(shell.env["VIRTUAL_ENV"]) / "bin")
    assert (Path(shell.env["VIRTUAL_ENV"]) / "bin" / "agora").is_file()


@check("export AIRFLOW_HOME=~/airflow")
def _airflow_home(shell: Shell, result: Result) -> None:
    assert shell.airflow_home == Path(shell.env["HOME"]) / "airflow"


@check("airflow plugins")
def _plugins(shell: Shell, result: Result) -> None:
    assert re.search(r"^agora\s", result.stdout, re.MULTILINE), result.stdout
    assert "/agora" in result.stdout
    # The table wraps long module paths inside its cells: the listeners are checked in the JSON form.
    listed = shell.run("airflow plugins -o json")
    assert listed.returncode == 0, listed.show()
    (agora,) = [p for p in json.loads(listed.stdout[listed.stdout.index("[") :]) if p["name"] == "agora"]
    assert "agora_optimizer.integration.trace_listener.TraceListener" in str(agora["listeners"]), agora
    assert (shell.airflow_home / "airflow.cfg").is_file()  # Airflow's state went into the reader's AIRFLOW_HOME


@check('mkdir -p "$AIRFLOW_HOME/dags"')
def _dag_folder(shell: Shell, result: Result) -> None:
    assert (shell.airflow_home / "dags").is_dir()


@check(f"agora traces import {WORKFLOW}")
def _traces_import(shell: Shell, result: Result) -> None:
    store = shell.airflow_home / "agora" / "traces.db"
    assert f"imported 22 attempt(s) from 1 file(s) into sqlite:///{store}; 0 skipped" in result.stdout


@check("agora traces stats --dag srasearch-chameleon-10a-001")
def _traces_stats(shell: Shell, result: Result) -> None:
    assert "22 attempt(s) of 22 task(s)" in result.stdout
    assert "fasterq-dump_ID0000002" in result.stdout and "bowtie2_ID0000003" in result.stdout


@check('agora train --store "sqlite:///$AIRFLOW_HOME/agora/traces.db" --out my-model')
def _train(shell: Shell, result: Result) -> None:
    assert "trained on 22 attempts (22 with memory) from 1 runs; model written to my-model" in result.stdout
    metadata = json.loads((shell.cwd / "my-model" / "metadata.json").read_text())
    assert metadata["format"] == "agora-predictor/2"
    assert metadata["training_data"]["rows"]["runtime"] == 22
    assert (shell.cwd / "my-model" / "predictor.skops").is_file()


@check(
    "agora predict workflows/srasearch-chameleon-10a-002.json --catalog catalogs/aws-us-east-1.yaml "
    "--model my-model --type c5.large --type r5.large"
)
def _predict(shell: Shell, result: Result) -> None:
    assert "srasearch-chameleon-10a-002: 22 tasks, model my-model" in result.stdout
    rows = [line for line in result.stdout.splitlines() if re.search(r"\b[\w-]+_ID\d{7}\b", line)]
    assert len(rows) == 22, result.stdout
    # every task's category was seen in the training run: the category level answers, naming its model
    assert all(re.search(r"category( \((scaling|trees)\))?/category", row) for row in rows), result.stdout


def _optimize(objective: str, extra: str, out: str, limit_s: int) -> str:
    """``agora optimize`` of the bundled workflow on AWS (a deadline or budget gets a longer search)."""
    options = f"--objective {objective} {extra}--time-limit-s {limit_s} --out {out}"
    return f"agora optimize {WORKFLOW} --catalog {AWS} {options}"


@check(_optimize("time", "", "plan-time.json", 2))
def _time(shell: Shell, result: Result) -> None:
    plan = valid_plan(shell, "plan-time.json")
    assert plan["objective"]["kind"] == "time" and len(plan["assignments"]) == 22
    assert float(table_row(result.stdout, "agora")[2]) <= 1.05  # makespan / lower bound
    assert re.search(r"against the one-type default \(every task on \S+\): makespan -", result.stdout), result.stdout
    assert "plan written to plan-time.json" in result.stdout
    assert f"assumed: no platform latency (a workflow file planned without --store); runtimes: as {WORKFLOW}" in (
        result.stdout
    )


@check(_optimize("cost", "--deadline-s 900 ", "plan-cost.json", 4))
def _cost(shell: Shell, result: Result) -> None:
    plan = valid_plan(shell, "plan-cost.json")
    assert plan["objective"] == {"kind": "cost", "alpha": 0.5, "deadline_s": 900.0, "budget_usd": None}
    assert plan["makespan_s"] <= 900.0
    # cost / lower bound: 1.0x here when the machine is quiet; the margin is for a loaded CI machine (4 s)
    assert float(table_row(result.stdout, "agora")[3]) <= 1.25


@check(_optimize("balanced", "--alpha 0.8 ", "plan-balanced.json", 2))
def _balanced(shell: Shell, result: Result) -> None:
    plan = valid_plan(shell, "plan-balanced.json")
    assert plan["objective"]["kind"] == "balanced" and plan["objective"]["alpha"] == 0.8


@check(_optimize("time", "--budget-usd 0.075 ", "plan-budget.json", 4))
def _budget(shell: Shell, result: Result) -> None:
    plan = valid_plan(shell, "plan-budget.json")
    assert plan["objective"]["budget_usd"] == 0.075 and plan["cost_usd"] <= 0.075


@check(f"agora pareto {WORKFLOW} --catalog {AWS} --deadlines 3 --time-limit-s 3 --out front.json --plot front.png")
def _pareto(shell: Shell, result: Result) -> None:
    front = json.loads((shell.cwd / "front.json").read_text())
    points = sorted((p["makespan_s"], p["cost_usd"]) for p in front["points"])
    assert len(points) >= 2, front
    assert all(a[1] > b[1] for a, b in itertools.pairwise(points)), points  # no point dominates another
    assert (shell.cwd / "front.png").read_bytes().startswith(b"\x89PNG")
    assert "front written to front.json, chart to front.png" in result.stdout


@check("agora validate plan-cost.json")  # the workflow and the catalog the plan names
def _validate(shell: Shell, result: Result) -> None:
    assert re.search(r"^plan-cost\.json: valid \(22 tasks, makespan [\d.]+ s, cost [\d.]+ USD\)$", result.stdout, re.M)


@check("agora gantt plan-cost.json --out plan-cost.png")
def _gantt(shell: Shell, result: Result) -> None:
    assert (shell.cwd / "plan-cost.png").read_bytes().startswith(b"\x89PNG")
    assert "chart written to plan-cost.png" in result.stdout


@check(
    "agora optimize airflow:my_pipeline --catalog my-resources.yaml --objective cost --deadline-s 3600 "
    "--time-limit-s 5 --out my_pipeline.plan.json --apply"
)
def _optimize_dag(shell: Shell, result: Result) -> None:
    # the trace store holds the imported attempts, none of this DAG: its declared hints answer
    assert "agora: predictions: learned from 22 successful attempts in the trace store" in result.stderr
    assert "runtime: 2 from their hints (extract, train_model), 1 from the defaults (report)" in result.stderr
    plan = json.loads((shell.cwd / "my_pipeline.plan.json").read_text())
    by_task = {a["task"]: a for a in plan["assignments"]}
    assert set(by_task) == {"extract", "train_model", "report"}
    catalog = load_catalog(shell.cwd / "my-resources.yaml").by_name
    train = by_task["train_model"]
    assert train["memory_bytes"] == 24 * GIB and train["cores"] == 4  # the DAG's hints
    assert catalog[train["resource"]].memory_gib >= 24  # not the 16-GiB local pool
    assert by_task["report"]["start_s"] >= max(by_task["extract"]["end_s"], train["end_s"]) - 1e-6
    assert plan["makespan_s"] <= 3600.0
    current = shell.airflow_home / "agora" / "plans" / "my_pipeline"
    assert f"agora: plan in force for my_pipeline ({current}/history/" in result.stderr
    assert len(PlanStore(current.parent).history("my_pipeline")) == 1


@check("agora plans show my_pipeline")
def _plans_show(shell: Shell, result: Result) -> None:
    shown = json.loads(result.stdout)
    assert shown["workflow"] == "my_pipeline" and shown["format"] == "agora-plan/1"
    assert shown["assignments"] == json.loads((shell.cwd / "my_pipeline.plan.json").read_text())["assignments"]


@check('cp dags/agora_reoptimize.py "$AIRFLOW_HOME/dags/"')
def _copy_rerun_dag(shell: Shell, result: Result) -> None:
    assert (shell.airflow_home / "dags" / "agora_reoptimize.py").read_text() == (
        REPO / "dags" / "agora_reoptimize.py"
    ).read_text()


@check("agora config show")
def _config_show(shell: Shell, result: Result) -> None:
    shown = {
        key: (value, source) for key, value, source in re.findall(r"^(\w+) += (.*?)   \((.*)\)$", result.stdout, re.M)
    }
    cfg = "airflow.cfg"
    assert shown["catalog"] == ("/path/to/my-resources.yaml", cfg), shown
    assert shown["objective"] == ("cost", cfg)
    assert shown["reoptimize_schedule"] == ("0 3 * * *", cfg)
    assert shown["plan_time_limit_s"] == ("30", cfg)
    assert shown["trace_store_url"] == (f"sqlite:///{shell.airflow_home}/agora/traces.db", cfg)  # empty there


@check("agora plans history my_pipeline")
def _plans_history(shell: Shell, result: Result) -> None:
    lines = result.stdout.split()
    history = shell.airflow_home / "agora" / "plans" / "my_pipeline" / "history"
    assert len(lines) == 1 and Path(lines[0]).parent == history and Path(lines[0]).is_file(), result.stdout


# --- the tests -----------------------------------------------------------------------------------


def test_sh_blocks_are_read_as_commands() -> None:
    block = Block("sh", ("# a comment", "", "agora optimize w.json \\", "    --out p.json", "agora plans show d"))
    assert sh_commands(block) == ["agora optimize w.json --out p.json", "agora plans show d"]


def test_every_guide_command_is_run_here_or_in_the_test_named_for_it() -> None:
    commands = guide_commands()
    assert len(commands) == len(set(commands)), "a command appears twice in the guide"
    assert set(commands) == set(CHECKS) | set(DELEGATED), {
        "in the guide, run nowhere": sorted(set(commands) - set(CHECKS) - set(DELEGATED)),
        "run here, not in the guide": sorted(set(CHECKS) - set(commands)),
        "delegated, not in the guide": sorted(set(DELEGATED) - set(commands)),
    }
    assert not set(CHECKS) & set(DELEGATED)
    for command, test_file in DELEGATED.items():
        assert command in (REPO / test_file).read_text(), f"{test_file} does not run {command!r}"


def test_the_guide_points_to_what_exists() -> None:
    text = GUIDE.read_text()
    headers = {block.header for block in fenced_blocks(text)}
    assert set(FILE_BLOCKS) <= headers, set(FILE_BLOCKS) - headers
    folders = "agora_optimizer|catalogs|dags|docker|docs|models|plugins|scripts|tests|workflows"
    named = re.findall(rf"`((?:{folders})/[\w./-]*\w)`", text)
    linked = [str((GUIDE.parent / link).resolve().relative_to(REPO)) for link in re.findall(r"\]\(([^)#:]+)\)", text)]
    assert named and linked
    missing = {path for path in [*named, *linked] if not (REPO / path).exists()}
    assert not missing, missing


@pytest.mark.airflow  # runs the guide's airflow commands (and agora's, which load Airflow), about 100 s
def test_a_reader_runs_every_command_of_the_guide_in_order(tmp_path: Path) -> None:
    shell = fresh_checkout(tmp_path)
    ran = []
    for block in fenced_blocks(GUIDE.read_text()):
        if block.header in FILE_BLOCKS:
            FILE_BLOCKS[block.header](shell, block)
        if block.lang != "sh":
            continue
        for command in sh_commands(block):
            if command in DELEGATED:
                continue
            result = shell.run(command)
            assert result.returncode == 0, result.show()
            if command.startswith(BUDGETED):
                assert len(result.stdout.splitlines()) <= LINE_BUDGET, result.show()
            assert command in CHECKS, f"no check for {command!r}"
            try:
                CHECKS[command](shell, result)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{result.show()}") from None
            ran.append(command)
    assert ran == [c for c in guide_commands() if c not in DELEGATED]
    slowest = sorted(shell.timings, key=lambda t: -t[1])[:5]
    print("slowest guide commands:", *(f"{s:5.1f} s  {c}" for c, s in slowest), sep="\n")

"""``agora optimize --dags ... --window``: the runs of real DAG files planned together (issue 20, part 2); and one
of those DAGs alone (``airflow:DAG_ID``) where it shares their set-up.

Airflow 3.3 parses the DAG files below (in a subprocess, as a user runs the command); the runs come
from their schedules, the deadlines from a ``DeadlineAlert`` and from ``[agora] deadlines``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from agora_optimizer.io.plan_file import load_plan
from agora_optimizer.plans.store import PlanStore, plan_version

pytestmark = pytest.mark.airflow

DAGS = """
from datetime import datetime, timedelta, timezone

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, DeadlineAlert, DeadlineReference, SyncCallback


def notify(**kwargs):
    pass


def build(dag_id, schedule, tags, deadline=None, width=3):
    with DAG(dag_id, schedule=schedule, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), tags=tags,
             deadline=deadline) as dag:
        first = EmptyOperator(task_id="extract", executor_config={"agora": {"runtime_s": 300, "cores": 2}})
        for i in range(width):
            first >> EmptyOperator(task_id=f"work_{i}", executor_config={"agora": {"runtime_s": 600, "cores": 2}})
    return dag


one_hour_after_queued = DeadlineAlert(
    reference=DeadlineReference.DAGRUN_QUEUED_AT, interval=timedelta(hours=12), callback=SyncCallback(notify)
)
past_midnight = DeadlineAlert(  # for the run at 01:00 of 2026-12-03: 30 minutes before it starts
    reference=DeadlineReference.FIXED_DATETIME(datetime(2026, 12, 3, tzinfo=timezone.utc)),
    interval=timedelta(minutes=30), callback=SyncCallback(notify),
)
nightly_a = build("nightly_a", "0 1 * * *", ["nightly"], deadline=one_hour_after_queued)
late = build("late", "0 1 * * *", ["late"], deadline=past_midnight)
nightly_b = build("nightly_b", "10 1 * * *", ["nightly"])
hourly = build("hourly", "@hourly", ["often"])
"""

CATALOG = {
    "network": {"bandwidth_bytes_per_s": 1_000_000_000},
    "resources": [
        {"name": "fast", "backend": "aws", "vcpus": 4, "memory_gib": 16, "speed": 2.0, "price_per_hour_usd": 1.0,
         "count": 1, "billing": {"granularity_s": 1, "minimum_s": 60}, "boot_s": 0},
        {"name": "slow", "backend": "aws", "vcpus": 4, "memory_gib": 16, "speed": 1.0, "price_per_hour_usd": 0.4,
         "count": 2, "billing": {"granularity_s": 1, "minimum_s": 60}, "boot_s": 0},
    ],
}  # fmt: skip
START = "2026-12-03T00:00:00Z"


FREE_CATALOG = {**CATALOG, "resources": [{**r, "price_per_hour_usd": 0.0} for r in CATALOG["resources"]]}  # pools


def _agora(
    home: Path, *args: str, deadlines: str = "nightly_b=10h", catalog: dict[str, Any] = CATALOG
) -> subprocess.CompletedProcess[str]:
    folder = home / "dags"
    if not folder.exists():
        folder.mkdir(parents=True)
        (folder / "nightly.py").write_text(DAGS)
        (home / "catalog.yaml").write_text(yaml.safe_dump(catalog))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__AGORA__DEADLINES": deadlines}
    command = [
        sys.executable, "-m", "agora_optimizer", "optimize", "--catalog", str(home / "catalog.yaml"),
        "--dag-folder", str(folder), "--store", f"sqlite:///{home / 'traces.db'}", "--time-limit-s", "15", *args,
    ]  # fmt: skip
    command += [] if "--window-start" in args else ["--window-start", START]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)


def _leases_at_once(summary: dict[str, Any]) -> dict[str, int]:
    """The most machines of each type leased at once over all the window's plans (read from the files)."""
    events: dict[str, list[tuple[float, int]]] = {}
    for row in summary["runs"]:
        spans: dict[str, tuple[str, float, float]] = {}
        for a in load_plan(row["plan"]).assignments:
            kind, first, last = spans.get(a.machine, (a.resource, a.start_s, a.end_s))
            spans[a.machine] = (kind, min(first, a.start_s), max(last, a.end_s))
        for kind, first, last in spans.values():
            events.setdefault(kind, []).extend([(row["offset_s"] + first, 1), (row["offset_s"] + last, -1)])
    peaks = {}
    for kind, steps in events.items():
        running = peak = 0
        for _, step in sorted(steps):
            running += step
            peak = max(peak, running)
        peaks[kind] = peak
    return peaks


def test_the_nightly_dags_runs_are_planned_together_within_the_counts_and_put_in_force(tmp_path: Path) -> None:
    out = tmp_path / "window"
    done = _agora(tmp_path, "--dags", "tag:nightly", "--window", "24h", "-o", str(out), "--json",
                  "--gantt", str(tmp_path / "day.png"), "--apply", "--plan-dir", str(tmp_path / "plans"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary == json.loads((out / "window.json").read_text())
    assert "agora: deadlines: aimed 5% early (--deadline-margin)" in done.stderr  # the plans keep the deadlines
    runs = {row["dag_id"]: row for row in summary["runs"]}
    assert set(runs) == {"nightly_a", "nightly_b"}  # the hourly DAG is not tagged nightly
    assert (runs["nightly_a"]["offset_s"], runs["nightly_b"]["offset_s"]) == (3600.0, 4200.0)
    assert runs["nightly_a"]["deadline_s"] == 12 * 3600.0 and "DAGRUN_QUEUED_AT" in runs["nightly_a"]["deadline_source"]
    assert (
        runs["nightly_b"]["deadline_s"] == 10 * 3600.0 and "[agora] deadlines" in runs["nightly_b"]["deadline_source"]
    )
    latency = summary["platform_latency"]  # no traces yet: the measured defaults, planned into each hold
    assert latency["statistic"] == "median" and set(latency["resources"]) == {"fast", "slow"}
    added = {name: kind["added_s"] for name, kind in latency["resources"].items()}
    assert all(seconds > 0 for seconds in added.values())
    speed = {"fast": 2.0, "slow": 1.0}
    for row in runs.values():
        plan = load_plan(row["plan"])
        assert row["on_time"] and plan.makespan_s <= row["deadline_s"]
        assert plan.objective.deadline_s == row["deadline_s"] and plan.objective.kind == "cost"
        assert plan.runtime_quantile == row["runtime_quantile"] == "p90"  # auto, under a deadline: and it says so
        assert plan.workflow_source == f"airflow:{row['dag_id']}"  # what it was made from
        placed = {a.task: a for a in plan.assignments}
        assert set(placed) == {"extract", "work_0", "work_1", "work_2"}
        for a in placed.values():  # each task's own run written (runtime / speed), at the end of its hold
            runtime_s = 300 if a.task == "extract" else 600
            assert a.end_s - a.start_s == pytest.approx(runtime_s / speed[a.resource])
        for task in ("work_0", "work_1", "work_2"):  # the hold before a child's run: its type's latency
            child = placed[task]
            assert child.start_s >= placed["extract"].end_s + added[child.resource] - 1e-6
    peaks = _leases_at_once(summary)
    assert all(peaks[kind] <= {"fast": 1, "slow": 2}[kind] for kind in peaks), peaks
    assert set(summary["ways"]) == {"joint", "first come", "each alone"}
    assert summary["ways"]["joint"]["over_counts"] == {}
    assert summary["ways"]["joint"]["cost_usd"] >= summary["cost_lower_bound_usd"] - 1e-9
    assert (tmp_path / "day.png").stat().st_size > 0
    kept = json.loads((tmp_path / "plans" / "@platform" / "window.json").read_text())  # for the agora view
    assert kept["format"] == "agora-window/1" and kept["runs"] == summary["runs"]
    assert {m["dag_id"] for m in kept["machines"]} == {"nightly_a", "nightly_b"}
    for dag_id in ("nightly_a", "nightly_b"):  # in force: the plan store's current plan of each DAG
        current = json.loads((tmp_path / "plans" / dag_id / "current.json").read_text())
        assert current["objective"]["deadline_s"] == runs[dag_id]["deadline_s"]


def test_a_deadline_no_plan_can_meet_is_named_and_the_best_plans_are_written(tmp_path: Path) -> None:
    out = tmp_path / "window"
    done = _agora(tmp_path, "--dags", "nightly_a,nightly_b", "-o", str(out), deadlines="nightly_b=60s")
    assert done.returncode == 2, done.stderr[-3000:]
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("agora: error: 1 DAG run(s) miss their deadline")
    assert (
        "nightly_b@2026-12-03T01:10:00+00:00 (deadline 60.0 s" in message and "even alone it needs at least" in message
    )
    summary = json.loads((out / "window.json").read_text(), parse_constant=_no_constant)  # strict JSON
    assert [row["on_time"] for row in summary["runs"]] == [True, False]  # written all the same
    assert all(Path(row["plan"]).exists() for row in summary["runs"])
    on_time, late = summary["runs"]  # window.json says why, as the error does
    assert on_time["late_because"] is None and late["late_because"].startswith("even alone it needs at least ")
    assert f"deadline 60.0 s, best {late['makespan_s']:.1f} s: {late['late_because']})" in message


def _no_constant(name: str) -> float:
    raise AssertionError(f"{name} in window.json: not JSON")


def test_apply_over_several_runs_of_a_dag_keeps_each_runs_plan_and_puts_the_first_in_force(tmp_path: Path) -> None:
    out, plans = tmp_path / "window", tmp_path / "plans"
    done = _agora(tmp_path, "--dags", "hourly", "--window", "3h", "-o", str(out), "--json", "--apply",
                  "--plan-dir", str(plans))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)["runs"]
    assert [row["offset_s"] for row in rows] == [0.0, 3600.0, 7200.0]
    store = PlanStore(plans)
    for row in rows:  # each run's plan kept by its run_after, with the workflow the executor re-plans it from
        kept = store.run_plan("hourly", datetime.fromisoformat(row["run_after"]))
        assert kept is not None and kept.plan == load_plan(row["plan"])
        assert store.workflow("hourly", plan_version(kept.path.read_bytes())) is not None
        assert f"run hourly@{row['run_after']} follows {kept.path}" in done.stderr
    current = store.current("hourly")  # the policy's at parse time: the first run's
    assert current is not None and current.plan == load_plan(rows[0]["plan"])
    assert len(store.history("hourly")) == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--dags", "tag:nightly", "--window-start", "2025-01-01T00:00:00Z", "--window", "1h"],
            "no DAG run in the window",
        ),
        (["--dags", "tag:weekly"], "tag 'weekly'"),
        (["--dags", "tag:nightly", "--window", "soon"], "soon"),
        # These two ended in an OverflowError traceback, exit 1 (their windows end past year 9999):
        (["--dags", "tag:nightly", "--window", "99999999d"], "--window '99999999d': expected at most 366d"),
        (
            ["--dags", "tag:nightly", "--window-start", "9999-12-31T00:00:00Z"],
            "--window-start 9999-12-31T00:00:00+00:00: the window of 1d from it ends after 9999-01-01",
        ),
        (
            ["--dags", "late"],  # its plan's deadline once failed the plan writer, naming a file never written
            "1 DAG run(s) whose deadline is at or before their start: late@2026-12-03T01:00:00+00:00 "
            "(DeadlineAlert(FIXED_DATETIME(2026-12-03T00:00:00+00:00) + 30m): -1800 s); give their DAGs a deadline",
        ),
    ],
)
def test_a_window_that_cannot_be_planned_exits_2_with_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    done = _agora(tmp_path, *args, "-o", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("agora: error: ") and expected in last, done.stderr[-2000:]
    assert not (tmp_path / "out").exists()


def test_a_window_on_a_free_catalog_is_planned_applied_and_its_cost_ratio_is_n_a(tmp_path: Path) -> None:
    """On a catalog that costs nothing (local pools) the window's cost lower bound is 0: the report divided by it
    and ended in a ZeroDivisionError traceback, exit 1, after the plans were written and put in force."""
    out, plans = tmp_path / "window", tmp_path / "plans"
    done = _agora(tmp_path, "--dags", "nightly_a", "-o", str(out), "--apply", "--plan-dir", str(plans),
                  catalog=FREE_CATALOG)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("nightly_a@2026-12-03T01:00:00+00:00: +3600 s, deadline 43200 s, makespan ")
    ways = {line.split(":")[0]: line for line in lines[1:-1]}
    assert set(ways) == {"joint", "first come", "each alone"}
    assert all(line.endswith(": 0.0000 USD, cost / lower bound n/a") for line in ways.values()), ways
    assert json.loads((out / "window.json").read_text())["cost_lower_bound_usd"] == 0
    assert f"agora: 1 plan(s) and window.json written to {out}" in done.stderr
    assert (plans / "nightly_a" / "current.json").exists() and "agora: plan in force for nightly_a" in done.stderr


def test_a_failure_after_the_plans_are_written_says_they_were(tmp_path: Path) -> None:
    """A plan store that cannot be written (here a file) fails --apply after the window's plans are written:
    the error used to be the only line, and said nothing of the plans on disk."""
    out, blocker = tmp_path / "window", tmp_path / "plans"
    blocker.write_text("not a directory")
    done = _agora(tmp_path, "--dags", "nightly_a", "-o", str(out), "--apply", "--plan-dir", str(blocker))
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("agora: error: window not saved in ") and "Traceback" not in done.stderr
    assert f"agora: 1 plan(s) and window.json written to {out}" in lines[:-1]
    assert (out / "window.json").exists()


def test_one_dags_plan_that_cannot_be_put_in_force_says_the_plan_was_written(tmp_path: Path) -> None:
    """``optimize airflow:DAG_ID --apply`` with a plan store that cannot be written: the error was the only line,
    and said nothing of the plan file written before it."""
    out, blocker = tmp_path / "plan.json", tmp_path / "plans"
    blocker.write_text("not a directory")
    done = _agora(tmp_path, "airflow:nightly_a", "-o", str(out), "--apply", "--plan-dir", str(blocker))
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("agora: error: plan of DAG 'nightly_a' not saved") and "Traceback" not in done.stderr
    assert f"agora: plan written to {out}" in lines[:-1] and out.exists()


def test_a_limit_spent_before_planning_is_said_with_the_limit_that_would_leave_time(tmp_path: Path) -> None:
    done = _agora(
        tmp_path, "--dags", "tag:nightly", "--window", "24h", "-o", str(tmp_path / "w"), "--time-limit-s", "0.5"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = re.search(
        r"agora: ([\d.]+) s of --time-limit-s 0.5 went before planning .*a limit above (\d+) s", done.stderr
    )
    assert said is not None, done.stderr[-3000:]
    assert float(said.group(2)) >= float(said.group(1))

"""A mapped task of 50 planned instances on two pools, in a real Airflow 3.3, through the AgoraExecutor.

``work`` maps over an upstream task's output: its width is known only when the run expands it.
Three past runs in the trace store (widths 44, 50, 47) make agora plan 50 instances (their p90);
``agora optimize airflow:agora_fanout --apply`` spreads them over ``local-small`` (CPU 0) and
``local-large`` (CPU 1). The run then expands to 52: each of the 50 planned instances runs on its
planned machine's CPU, the two the plan did not expect on the mapped task's overflow resource,
and the trace store records each instance's planned machine (none for the overflow) and the run's width.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agora_optimizer.io.plan_file import load_plan
from agora_optimizer.plans.store import PlanStore
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore
from harness.local_airflow import agora_deployment
from tests.conftest import CATALOGS

pytestmark = pytest.mark.airflow

DAG_ID = "agora_fanout"
PAST_WIDTHS = (44, 50, 47)
RUN_WIDTH = 52
CPUS = {"local-small": [0], "local-large": [1]}
DAG = """
import json, os
from datetime import datetime
from pathlib import Path
from airflow.sdk import DAG, get_current_context, task

@task
def numbers(**context):
    return list(range(int(context["dag_run"].conf.get("width", 3))))

@task
def work(x, **context):
    index = get_current_context()["ti"].map_index
    report = Path(context["dag_run"].conf["report_dir"], f"work-{index}.json")
    report.write_text(json.dumps({"x": x, "cpus": sorted(os.sched_getaffinity(0))}))

@task
def done(values):
    return len(list(values))

with DAG(dag_id="agora_fanout", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    done(work.expand(x=numbers()))
"""


def past_runs() -> list[TaskAttempt]:
    rows = []
    for run, width in enumerate(PAST_WIDTHS):
        start = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(hours=run)
        for task_id, indexes in (("numbers", [-1]), ("work", list(range(width))), ("done", [-1])):
            for index in indexes:
                attempt = TaskAttempt.create(
                    dag_id=DAG_ID, task_id=task_id, run_id=f"manual__{run}", map_index=index,
                    resource_type="local-small", backend="local", started_at=start,
                    ended_at=start + timedelta(seconds=1), peak_rss_bytes=300 * 2**20,
                )  # fmt: skip
                rows.append(attempt)
    return rows


def test_each_planned_instance_runs_on_its_planned_machine_and_the_rest_on_the_overflow(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "agora_fanout.py").write_text(DAG)
    shutil.copy(CATALOGS / "local.yaml", tmp_path / "local.yaml")
    store = f"sqlite:///{tmp_path / 'traces.db'}"
    with TraceStore(store) as traces:
        traces.add(past_runs())
    airflow = agora_deployment(
        tmp_path,
        tmp_path / "local.yaml",
        store,
        extra_env={
            "AIRFLOW__AGORA__DEFAULT_RESOURCE": "local-large",
            "AIRFLOW__AGORA__REPLAN_SLACK": "0",  # no repair: each instance where the plan put it
        },
    )
    airflow.migrate()
    optimize = [
        sys.executable, "-m", "agora_optimizer", "optimize", f"airflow:{DAG_ID}",
        "--catalog", str(tmp_path / "local.yaml"), "--dag-folder", str(dags), "--store", store,
        "--time-limit-s", "30", "--apply", "-o", str(tmp_path / "plan.json"),
    ]  # fmt: skip
    result = subprocess.run(optimize, capture_output=True, text=True, env=airflow.env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "mapped work: 50 (p90 of 3 past runs, median 47)" in result.stderr
    plan = load_plan(tmp_path / "plan.json")
    planned = {a.task: a for a in plan.assignments if a.task.startswith("work[")}
    assert sorted(planned) == sorted(f"work[{i}]" for i in range(50))
    on = Counter(a.resource for a in planned.values())
    assert set(on) == set(CPUS), on  # both pools
    overflow = on.most_common(1)[0][0]
    assert PlanStore(tmp_path / "plans").current_path(DAG_ID).exists()

    reports = tmp_path / "reports"
    reports.mkdir()
    with airflow:
        airflow.start()
        airflow.wait_for_dag(DAG_ID)
        run_id = airflow.trigger(DAG_ID, {"report_dir": str(reports), "width": RUN_WIDTH})
        assert airflow.wait_for_run(DAG_ID, run_id, timeout_s=900) == "success"
    seen = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in reports.glob("work-*.json")}
    assert sorted(seen) == list(range(RUN_WIDTH))  # none lost
    for index in range(50):
        assert seen[index]["cpus"] == CPUS[planned[f"work[{index}]"].resource], index
    for index in range(50, RUN_WIDTH):
        assert seen[index]["cpus"] == CPUS[overflow], index
    with TraceStore(store) as traces:
        recorded = {a.map_index: a for a in traces.attempts(DAG_ID) if a.task_id == "work" and a.run_id == run_id}
    assert sorted(recorded) == list(range(RUN_WIDTH))
    for index, attempt in recorded.items():
        expected = planned[f"work[{index}]"] if index < 50 else None
        assert attempt.machine == (expected.machine if expected else ""), index
        assert attempt.resource_type == (expected.resource if expected else overflow), index
        assert attempt.map_width == RUN_WIDTH, index  # the listener asked Airflow how many the run expanded to

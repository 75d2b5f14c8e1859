"""One real Airflow 3.3 for every test of the agora view: api-server and dag-processor, no scheduler.

It is served under a sub-path (``[api] base_url`` = ``http://127.0.0.1:PORT/airflow/``), as behind
a reverse proxy: the harder case for the view's links (at the root every path works by accident).

Auth manager: FAB (``apache-airflow-providers-fab``, from PyPI), the auth manager of Airflow 3.3
that grants rights per DAG (``can_read`` / ``can_edit`` on ``DAG:<dag_id>``, what a DAG's
``access_control`` grants). The simple auth manager has roles only, no per-DAG rights.
Users (``tests/ui/fab_users.py``): ``admin`` (Admin); ``reader`` may read ``agora_example_etl``;
``editor`` may read and edit it; ``outsider`` may read and edit ``agora_other`` only.

Plans, traces and DAGs: ``agora_example_etl`` (the example pipeline, two plans made by the real
optimizer on the AWS catalog, three runs of traces, four run records: two unplanned, two placed by
its current plan); ``agora_other`` (a plan and traces whose
task names and error text are HTML); ``agora_big`` (5,000 tasks and a 5,000-task plan on 60
machines); and the rerun DAG ``agora_reoptimize``, which the re-optimize action queues (no
scheduler runs it: a queued run is what the tests check).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from agora_optimizer.cli.window import platform_plan, way_summary
from agora_optimizer.cli.window import window_document as platform_window_document
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.model.catalog import Catalog
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.model.workflow import Edge, Task, Workflow
from agora_optimizer.optimize.optimize import optimize
from agora_optimizer.optimize.window import WindowRun, cost_lower_bound, plan_first_come, plan_jointly
from agora_optimizer.plans.store import PlanStore, plan_version
from agora_optimizer.runs.record import Repair, RunRecord, RunTask
from agora_optimizer.runs.store import RunStore
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore
from harness.local_airflow import PASSWORD, AirflowDeployment, wait_until
from tests.conftest import AWS_CATALOG, REPO

FAB_AUTH_MANAGER = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
EXAMPLE, OTHER, BIG = "agora_example_etl", "agora_other", "agora_big"
UNICODE = "données_été"  # a DAG id Airflow accepts (Unicode letters): a plan, no DAG file
CORRUPT = "agora_corrupt"  # a current.json that is not a plan
BIG_TASKS = 5000
BIG_MACHINES = 60
SCRIPT_NAME = '<script>alert("agora")</script>'
ERROR_HTML = "<img src=x onerror=alert(1)>"
GIB = 2**30

OTHER_DAG = f"""
from datetime import datetime
from airflow.sdk import DAG
from airflow.providers.standard.operators.empty import EmptyOperator

with DAG("{OTHER}", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["agora"]):
    EmptyOperator(task_id="first") >> EmptyOperator(task_id="second")
"""

BIG_DAG = f"""
from datetime import datetime
from airflow.sdk import DAG
from airflow.providers.standard.operators.empty import EmptyOperator

with DAG("{BIG}", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, tags=["agora"]):
    steps = [EmptyOperator(task_id=f"step_{{i:04d}}") for i in range({BIG_TASKS})]
    for i in range(1, {BIG_TASKS}):
        steps[i].set_upstream(steps[(i - 1) // 2])
"""


SUB_PATH = "/airflow"


@dataclass
class AgoraUi:
    """The deployment, and requests to the agora app as one of the test users (or nobody)."""

    airflow: AirflowDeployment
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"{self.airflow.api_url}/agora"

    def token(self, user: str) -> str:
        if user not in self.tokens:
            answer = httpx.post(
                f"{self.airflow.api_url}/auth/token", json={"username": user, "password": PASSWORD}, timeout=30
            )
            answer.raise_for_status()
            self.tokens[user] = answer.json()["access_token"]
        return self.tokens[user]

    def request(self, method: str, path: str, user: str | None = None, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}))
        if user is not None:
            headers["Authorization"] = f"Bearer {self.token(user)}"
        return httpx.request(method, f"{self.base}{path}", headers=headers, timeout=120, **kwargs)

    def get(self, path: str, user: str | None = None, **kwargs: Any) -> httpx.Response:
        return self.request("GET", path, user, **kwargs)

    def post(self, path: str, user: str | None = None, **kwargs: Any) -> httpx.Response:
        return self.request("POST", path, user, **kwargs)

    def rerun_confs(self) -> list[dict[str, Any]]:
        """The conf of every run of agora_reoptimize, through Airflow's REST API."""
        runs = self.airflow.request("GET", "/dags/agora_reoptimize/dagRuns", params={"limit": 100})["dag_runs"]
        return [run["conf"] or {} for run in runs]


def example_workflow() -> Workflow:
    """The example pipeline's tasks and edges, scaled up so that its cost/makespan front has several points."""
    tasks = [
        Task("extract", 20.0, 1, GIB // 2, "extract"),
        Task("clean", 120.0, 1, GIB // 2, "clean"),
        Task("aggregate", 150.0, 1, 3 * GIB, "aggregate"),
        Task("profile", 100.0, 1, GIB // 2, "profile"),
        Task("load", 10.0, 1, GIB // 2, "load"),
    ]
    edges = [Edge("extract", "clean"), Edge("extract", "aggregate"), Edge("extract", "profile")]
    edges += [Edge(parent, "load") for parent in ("clean", "aggregate", "profile")]
    return Workflow.create(EXAMPLE, tasks, edges)


def html_plan() -> Plan:
    """A plan of agora_other whose task and machine names are HTML."""
    assignments = (
        Assignment("first", "c5.large", "c5.large#0", 0.0, 60.0, 1, GIB),
        Assignment("second", "m5.large", "m5.large#0", 60.0, 120.0, 1, GIB),
        Assignment(SCRIPT_NAME, "c5.large", '"><svg onload=alert(2)>#1', 0.0, 30.0, 1, GIB),
    )
    solver = SolverInfo("hand-made", "heuristic", None, 0.0)
    return Plan(OTHER, str(AWS_CATALOG), Objective(), 120.0, 0.01, assignments, solver, "2026-11-02T00:00:00Z")


def big_plan() -> Plan:
    """5,000 tasks on 60 machines of three types, back to back on each machine."""
    types = ("c5.large", "m5.large", "r5.large")
    clocks = [0.0] * BIG_MACHINES
    assignments = []
    for i in range(BIG_TASKS):
        machine = i % BIG_MACHINES
        kind = types[machine % len(types)]
        runtime = 10.0 + i % 7
        start = clocks[machine]
        clocks[machine] = start + runtime
        assignments.append(Assignment(f"step_{i:04d}", kind, f"{kind}#{machine}", start, start + runtime, 1, GIB))
    solver = SolverInfo("synthetic", "heuristic", None, 0.0)
    makespan = max(clocks)
    return Plan(BIG, str(AWS_CATALOG), Objective(), makespan, 1.0, tuple(assignments), solver, "2026-11-03T00:00:00Z")


def attempts() -> list[TaskAttempt]:
    start = datetime(2026, 11, 1, tzinfo=UTC)
    rows = []
    for run in range(3):
        for offset, (task, seconds, peak) in enumerate(
            [("extract", 18.0, 300), ("clean", 110.0, 350), ("aggregate", 160.0, 2600), ("profile", 95.0, 250)]
        ):
            begin = start + timedelta(hours=run, seconds=offset)
            rows.append(
                TaskAttempt(
                    dag_id=EXAMPLE,
                    task_id=task,
                    run_id=f"manual__run{run}",
                    resource_type="c5.large",
                    backend="aws",
                    started_at=begin,
                    ended_at=begin + timedelta(seconds=seconds),
                    runtime_s=seconds,
                    peak_rss_bytes=peak * 2**20,
                    state="success",
                )
            )
    rows.append(
        TaskAttempt(
            dag_id=OTHER,
            task_id="<b>bold</b>",
            run_id="manual__other",
            resource_type="c5.large",
            started_at=start,
            ended_at=start + timedelta(seconds=3),
            runtime_s=3.0,
            state="failed",
            error_text=ERROR_HTML,
        )
    )
    return rows


def example_run_records(plan: Plan, version: str) -> list[RunRecord]:
    """Runs of the example DAG, oldest first: two with default placement, then two placed by ``plan``
    (5 % and 25 % slower than planned, 2 % and 15 % dearer)."""
    start = datetime(2026, 11, 2, tzinfo=UTC)
    records = []
    for i, (makespan_s, cost_usd) in enumerate([(520.0, 0.050), (480.0, 0.046)]):
        task = RunTask(
            "extract",
            try_number=1,
            state="success",
            actual_resource="c5.large",
            actual_start_s=0.0,
            actual_end_s=makespan_s,
        )
        when = start + timedelta(hours=i)
        records.append(
            RunRecord(
                EXAMPLE,
                f"manual__unplanned{i}",
                "success",
                False,
                "",
                when,
                when + timedelta(seconds=makespan_s),
                None,
                makespan_s,
                None,
                cost_usd,
                (task,),
            )
        )
    for i, (slower, dearer) in enumerate([(1.05, 1.02), (1.25, 1.15)]):
        tasks = tuple(
            RunTask(
                a.task,
                -1,
                1,
                "success",
                a.resource,
                a.machine,
                a.start_s,
                a.end_s,
                a.resource,
                a.machine,
                a.start_s * slower,
                a.end_s * slower,
            )
            for a in plan.assignments
        )
        when = start + timedelta(hours=2 + i)
        records.append(
            RunRecord(
                EXAMPLE,
                f"scheduled__planned{i}",
                "success",
                True,
                version,
                when,
                when + timedelta(seconds=plan.makespan_s * slower),
                plan.makespan_s,
                plan.makespan_s * slower,
                plan.cost_usd,
                plan.cost_usd * dearer,
                tasks,
                notes=(f"note of planned run {i}",),
            )
        )
    return records


WINDOW_START = "2026-12-03T00:00:00+00:00"


def window_document(catalog: Catalog) -> dict[str, Any]:
    """A window in force (as ``agora optimize --dags ... --apply`` keeps it): a run of the example DAG and,
    ten minutes later, one of agora_other, planned together by the real planner."""
    other = Workflow.create(OTHER, [Task("first", 120.0, 1, GIB, "x"), Task("second", 60.0, 1, GIB, "x")],
                            [Edge("first", "second")])  # fmt: skip
    runs = [
        WindowRun(f"{EXAMPLE}@{WINDOW_START}", example_workflow(), 0.0, 3600.0),
        WindowRun(f"{OTHER}@2026-12-03T00:10:00+00:00", other, 600.0, None),
    ]
    joint = plan_jointly(runs, catalog, 2.0)
    rows = [
        {"run": p.run.name, "dag_id": p.run.name.split("@")[0], "run_after": p.run.name.split("@")[1],
         "offset_s": p.run.offset_s, "deadline_s": p.run.deadline_s, "deadline_source": "test",
         "makespan_s": p.makespan_s, "cost_usd": p.cost_usd, "on_time": p.on_time}
        for p in joint.plans
    ]  # fmt: skip
    summary = {
        "window": {"start": WINDOW_START, "length_s": 86400.0},
        "catalog": str(AWS_CATALOG),
        "runs": rows,
        "cost_lower_bound_usd": cost_lower_bound(runs, catalog),
        "ways": {s.method: way_summary(s, catalog) for s in (joint, plan_first_come(runs, catalog, 2.0))},
    }
    picture, dag_of = platform_plan(joint, catalog, str(AWS_CATALOG), 0.0)
    return platform_window_document(summary, picture, dag_of)


def write_data(root: Path) -> dict[str, str]:
    """Plans, traces and DAG files under ``root``; the [agora] settings that point at them."""
    dags = root / "dags"
    dags.mkdir()
    for name in (f"{EXAMPLE}.py", "agora_reoptimize.py"):
        shutil.copy(REPO / "dags" / name, dags)
    (dags / f"{OTHER}.py").write_text(OTHER_DAG)
    (dags / f"{BIG}.py").write_text(BIG_DAG)
    catalog = load_catalog(AWS_CATALOG)
    plans = PlanStore(root / "plans")
    for kind in ("cost", "balanced"):  # two plans: the history keeps the first
        plans.save(EXAMPLE, optimize(example_workflow(), catalog, Objective(kind=kind), str(AWS_CATALOG), 2.0))
    plans.save(OTHER, html_plan())
    plans.save(BIG, big_plan())
    plans.save(UNICODE, replace(html_plan(), workflow=UNICODE))
    plans.save_window(window_document(catalog))
    plans.current_path(CORRUPT).parent.mkdir()
    plans.current_path(CORRUPT).write_text('{"format": "agora-plan/1", "assignments": [', encoding="utf-8")
    store_url = f"sqlite:///{root / 'traces.db'}"
    with TraceStore(store_url) as store:
        store.add(attempts())
    current = plans.current(EXAMPLE)
    assert current is not None
    with RunStore(store_url) as runs:
        for record in example_run_records(current.plan, plan_version(current.path.read_bytes())):
            runs.put(record)
        runs.add_repair(EXAMPLE, "scheduled__planned1", Repair(30.0, "machine lost", ("clean",), "re-placed"))
    return {
        "AIRFLOW__AGORA__PLAN_DIR": str(root / "plans"),
        "AIRFLOW__AGORA__TRACE_STORE_URL": store_url,
        "AIRFLOW__AGORA__CATALOG": str(AWS_CATALOG),
        "AIRFLOW__AGORA__UI_PARETO_TIME_LIMIT_S": "4",
    }


def create_users(airflow: AirflowDeployment) -> None:
    script = Path(__file__).with_name("fab_users.py")
    result = subprocess.run(
        [sys.executable, str(script), PASSWORD], capture_output=True, text=True, env=airflow.env, timeout=600
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


def require_fab() -> None:
    """The FAB provider, without importing Airflow here; failing in CI, skipped elsewhere when absent."""
    try:
        importlib.metadata.version("apache-airflow-providers-fab")
    except importlib.metadata.PackageNotFoundError:
        reason = "apache-airflow-providers-fab is not installed (the UI tests need its per-DAG rights)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="package")
def agora_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgoraUi]:
    """The deployment, shared by every test of tests/ui (one api-server start for all of them)."""
    require_fab()
    root = tmp_path_factory.mktemp("agora-ui")
    settings = write_data(root)
    airflow = AirflowDeployment(
        home=root / "home",
        dags_folder=root / "dags",
        executor="LocalExecutor",
        base_path=SUB_PATH,
        extra_env={
            **settings,
            "AIRFLOW__CORE__AUTH_MANAGER": FAB_AUTH_MANAGER,
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "300",
            "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "400",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "600",
        },
    )
    airflow.migrate()
    create_users(airflow)
    try:
        airflow.start("dag-processor", "api-server")
        for dag_id in (EXAMPLE, OTHER, "agora_reoptimize", BIG):
            airflow.wait_for_dag(dag_id, timeout_s=400)
        ui = AgoraUi(airflow)
        wait_until(lambda: ui.get("/api/dags", "admin").status_code == 200, 60, "the agora app", airflow)
        yield ui
    finally:
        airflow.stop_all()

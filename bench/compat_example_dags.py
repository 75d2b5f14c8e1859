"""Compatibility suite: Airflow's own example DAGs under the LocalExecutor, then under the AgoraExecutor.

Usage:
  python bench/compat_example_dags.py [--dags all | ID,ID,...] [--catalog catalogs/local.yaml]
      [--out bench/results/compat-example-dags.json]

Every example DAG shipped with the installed Airflow (``airflow/example_dags``) and its standard
provider (``airflow/providers/standard/example_dags``) is listed by parsing both folders with
Airflow's ``DagBag``, and classified: run, or left out with the reason (:data:`LEFT_OUT`, and the
automatic rules of :func:`left_out_reason`: a file that does not import, a required param without
a value). A DAG scheduled by assets only (:data:`ASSET_TIMETABLES`) runs too: nothing in the suite
updates its assets, so it gets a manual run like any other, as ``airflow dags trigger`` would give
it (no partition key, no triggering asset events). The files of the DAGs that run are copied into
one DAG folder (a folder per origin, with their ``sql/`` templates) of one real Airflow 3.3
(api-server, dag-processor, scheduler, triggerer; SQLite, or PostgreSQL with ``--database-url``)
whose ``[core] executor`` is ``LocalExecutor,agora``; a plugin file registers what ``[core]
load_examples`` would (the example timetables, partition mappers and priority weight strategy,
:data:`EXAMPLE_PLUGINS`). ``[scheduler] use_job_schedule`` is off: the only runs
are the ones the suite triggers (and those its DAGs trigger themselves).

1. Local: no DAG has a plan, so the cluster policy leaves every task as written (the
   LocalExecutor). Each DAG gets one run, triggered through the REST API with a logical date
   of its own (a Monday, :func:`logical_date`; the conf of :data:`CONF` where the DAG needs
   one); the suite waits for all and records every task instance: task id, map index, state,
   try number, executor.
2. Agora: ``agora optimize airflow:ID --apply`` plans each DAG on ``--catalog`` (learning from
   the Local runs' traces) and puts the plan in force; once Airflow has serialized each DAG
   with its plan, each gets one more run, a week later in logical time (same weekday and time
   of day), ``--agora-parallel`` at a time.
3. Compared per DAG: the same task instances (task id and map index) in the same states with
   the same try numbers, and the run in the same state (:func:`compare`). Each task instance of
   the Agora run that ran a task process must have run where the plan says (:func:`routing`):
   routed to the AgoraExecutor and run in one of its jobs (a job directory in ``[agora]
   state_dir`` per try), except mapped tasks, which the policy leaves as written (their
   LocalExecutor). EmptyOperator tasks never reach an executor, in either phase.

Randomness: two example DAGs branch on ``random.choice``. Every Python process of the
deployment seeds ``random`` with 0 at start and after each fork (a ``sitecustomize`` on
``PYTHONPATH``), so a task draws the same number under either executor and the runs can be
compared task by task; the DAG files are not changed.

Output: ``--out`` (JSON: per DAG, whether it ran under Local and the same under Agora, its task
instances, mapped ones, times, differences; or why it was left out) and the same path with
``.md`` (the table, with this command).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agora_optimizer.executor.jobs.spec import job_key  # noqa: E402
from harness.local_airflow import AirflowDeployment, wait_until  # noqa: E402

# Where the example DAGs live inside the installed airflow package, by origin.
FOLDERS = {"core": "example_dags", "standard": "providers/standard/example_dags"}
# The first logical date of the Local runs: a Monday at midnight UTC. DAG number i of the inventory
# (sorted by id) runs at BASE_DATE + i minutes, its Agora run AGORA_SHIFT later: same weekday, hour
# and minute, so a DAG that branches on them takes the same branch, and no two DAGs share a date.
BASE_DATE = datetime(2026, 6, 1, tzinfo=UTC)
AGORA_SHIFT = timedelta(days=7)
TRIGGER_TRIES = 3  # a trigger answered 5xx (Airflow's SQLite busy under load) is tried again
# DAGs whose sensors wait for a task of another DAG at their own logical date: they run at that DAG's date.
SAME_DATE_AS = {"example_external_task_marker_child": "example_external_task_marker_parent"}
# DAGs that trigger or wait for another DAG: that DAG's file must be in the DAG folder too.
NEEDS = {
    "example_external_task": "child_dag",
    "example_external_task_marker_child": "example_external_task_marker_parent",
    "example_trigger_controller_dag": "example_trigger_target_dag",
}
# The conf a DAG needs to be triggered at all (a required param without a default).
CONF: dict[str, dict[str, Any]] = {
    "example_params_ui_tutorial": {"required_field": "compatibility suite"},
}
# Timetables that run a DAG only when assets get events. The suite triggers such a DAG by hand, as any other
# (no partition key, no triggering asset events); the results mark it.
ASSET_TIMETABLES = frozenset({"AssetTriggeredTimetable", "PartitionedAssetTimetable"})
# DAGs whose tasks install packages from PyPI into a new virtualenv (PythonVirtualenvOperator and
# @task.virtualenv): they run when PyPI is reachable; --offline leaves them out.
PYPI_DAGS = frozenset(
    {
        "example_branch_operator",
        "example_branch_python_operator_decorator",
        "example_python_decorator",
        "example_python_operator",
        "tutorial_taskflow_api_virtualenv",
    }
)
_ASSET_CLASH = (
    "declares asset s3://output/1.txt, which example_outlet_event_extra.py declares under another name: Airflow "
    "keeps one of the two active, whichever file it writes first, and the other file's tasks fail "
    "(AirflowInactiveAssetInInletOrOutletException); this file reads the other's events"
)
# Left out, and why: read from each DAG's code.
LEFT_OUT: dict[str, str] = {
    "example_dag_decorator": "calls an outside web service (GET https://httpbingo.org/get)",
    "example_retry_policy": "calls an outside web API (GET https://api.example.com/data), 5 retries minutes apart",
    "tutorial_objectstorage": "calls an outside web API (air quality) and writes to S3 (aws_default connection)",
    "example_hitl_operator": "human in the loop: its tasks wait for a person's answers in the UI",
    "read_asset_event": _ASSET_CLASH,
    "read_asset_event_from_classic": _ASSET_CLASH,
    "example_sensors": "waits an hour: its deferrable TimeSensor timeout_after_second_date_in_the_future_async "
    "defers to an hour after the file was parsed (its timeout of 1 s does not apply to a deferral); "
    "its FileSensors also need the fs_default connection",
}
# Left out by file, for files that define no DAG here.
FILE_LEFT_OUT: dict[str, str] = {
    "example_kubernetes_executor.py": "needs the cncf.kubernetes provider and a Kubernetes cluster "
    "(defines no DAG without the kubernetes package)",
    "example_local_kubernetes_executor.py": "needs the cncf.kubernetes provider and a Kubernetes cluster",
}
# What [core] load_examples registers besides the DAGs, which some example DAGs need to be serialized
# (a timetable, a partition mapper, a priority weight strategy are looked up by class in the plugins).
EXAMPLE_PLUGINS = """
# The example DAGs' plugins, as [core] load_examples would register them (not their listener).
from airflow.example_dags.plugins.business_day_window import BusinessDayWindowPlugin
from airflow.example_dags.plugins.custom_partition_mapper import PrefixStripMapperPlugin
from airflow.example_dags.plugins.custom_partition_timetable import ScheduledRuntimePartitionTimetablePlugin
from airflow.example_dags.plugins.decreasing_priority_weight_strategy import DecreasingPriorityWeightStrategyPlugin
from airflow.example_dags.plugins.workday import WorkdayTimetablePlugin
"""
SEED_RANDOM = """
# agora compatibility suite: the same random draws in every process (and forked child) of the deployment.
import os
import random

random.seed(0)
os.register_at_fork(after_in_child=lambda: random.seed(0))
"""
# SQLite under dozens of task processes on a shared 2-core machine: each connection waits up to a minute
# for a lock (Python's default is 5 s, past which the scheduler dies of "database is locked"). Imported
# by every Airflow process ([database] sql_alchemy_connect_args).
SQLITE_SETTINGS = """
CONNECT_ARGS = {"timeout": 60}
"""
INVENTORY = """
import json, os, sys
import airflow
from airflow.dag_processing.dagbag import DagBag

root = os.path.dirname(airflow.__file__)
out = {"dags": [], "errors": {}, "files": {}}
for origin, relative in json.loads(sys.argv[1]).items():
    folder = os.path.join(root, relative)
    out["files"][origin] = sorted(f for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py")
    bag = DagBag(dag_folder=folder, safe_mode=False, load_op_links=False)
    for path, error in bag.import_errors.items():
        lines = [line for line in str(error).strip().splitlines() if line.strip()]
        out["errors"][os.path.basename(path)] = lines[-1] if lines else "import failed"
    for dag_id, dag in bag.dags.items():
        params = dag.params.dump() if dag.params else {}
        out["dags"].append({
            "dag_id": dag_id,
            "origin": origin,
            "file": os.path.basename(dag.fileloc),
            "timetable": type(dag.timetable).__name__,
            "required_params": sorted(k for k, v in params.items() if v is None),
            "tasks": [
                {
                    "task_id": task.task_id,
                    "operator": task.task_type,
                    "mapped": bool(task.is_mapped or task.get_closest_mapped_task_group() is not None),
                    "empty": bool(task.inherits_from_empty_operator),
                }
                for task in dag.tasks
            ],
        })
print("INVENTORY" + json.dumps(out))
"""
FINISHED = ("success", "failed")
ASSETS_MARK = " *(assets)*"  # in the table: a DAG scheduled by assets only, triggered by hand


@dataclass(frozen=True)
class ExampleTask:
    task_id: str
    operator: str
    mapped: bool
    empty: bool  # an EmptyOperator: the scheduler marks it done without any executor


@dataclass(frozen=True)
class ExampleDag:
    dag_id: str
    origin: str  # a key of FOLDERS
    file: str
    timetable: str
    tasks: tuple[ExampleTask, ...]
    required_params: tuple[str, ...] = ()

    @property
    def mapped(self) -> tuple[str, ...]:
        return tuple(t.task_id for t in self.tasks if t.mapped)

    @property
    def placeable(self) -> tuple[str, ...]:
        """The tasks a plan routes to the AgoraExecutor: every task but the mapped ones."""
        return tuple(t.task_id for t in self.tasks if not t.mapped)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExampleDag:
        tasks = tuple(ExampleTask(**task) for task in data["tasks"])
        return cls(data["dag_id"], data["origin"], data["file"], data["timetable"], tasks,
                   tuple(data.get("required_params", ())))  # fmt: skip


def left_out_reason(dag: ExampleDag, offline: bool = False) -> str:
    """Why the suite does not run ``dag`` ("" when it runs it)."""
    if dag.dag_id in LEFT_OUT:
        return LEFT_OUT[dag.dag_id]
    if dag.file in FILE_LEFT_OUT:
        return FILE_LEFT_OUT[dag.file]
    missing = [name for name in dag.required_params if name not in CONF.get(dag.dag_id, {})]
    if missing:
        return f"needs params at trigger time: {', '.join(missing)}"
    if offline and dag.dag_id in PYPI_DAGS:
        return "installs packages from PyPI into a virtualenv (--offline)"
    return ""


def run_units(dag_ids: Sequence[str]) -> list[list[str]]:
    """The DAGs in the order given, grouped into the units that must run at once (a DAG with the DAG
    whose logical date it shares, :data:`SAME_DATE_AS`: its sensors wait for that DAG's run)."""
    units: dict[str, list[str]] = {}
    for dag_id in dag_ids:
        anchor = SAME_DATE_AS.get(dag_id, dag_id)
        units.setdefault(anchor if anchor in dag_ids else dag_id, []).append(dag_id)
    return list(units.values())


def logical_date(dag_id: str, order: Sequence[str], agora: bool) -> datetime:
    """The logical date of the DAG's run in the Local phase, or in the Agora phase (a week later)."""
    anchor = SAME_DATE_AS.get(dag_id, dag_id)
    index = order.index(anchor) if anchor in order else len(order)
    return BASE_DATE + timedelta(minutes=index) + (AGORA_SHIFT if agora else timedelta(0))


# -- task instances and their comparison ---------------------------------------------------------


@dataclass(frozen=True)
class TaskInstance:
    """What the suite keeps of one task instance, as Airflow's REST API gives it."""

    task_id: str
    map_index: int
    state: str | None
    try_number: int
    executor: str | None
    queue: str | None
    ran: bool  # a task process ran it (it has a hostname): not an EmptyOperator, not skipped by the scheduler

    @property
    def key(self) -> tuple[str, int]:
        return (self.task_id, self.map_index)

    @property
    def label(self) -> str:
        return self.task_id + (f"[{self.map_index}]" if self.map_index >= 0 else "")

    @classmethod
    def from_api(cls, row: Mapping[str, Any]) -> TaskInstance:
        return cls(
            task_id=str(row["task_id"]),
            map_index=int(row["map_index"]),
            state=row.get("state"),
            try_number=int(row.get("try_number") or 0),
            executor=row.get("executor"),
            queue=row.get("queue"),
            ran=bool(row.get("hostname")),
        )


def compare(local: Iterable[TaskInstance], agora: Iterable[TaskInstance]) -> list[str]:
    """How the Agora run's task instances differ from the Local run's (empty: the same).

    The same task instances (task id, map index), each in the same state after the same number of
    tries: what a user sees of a run.
    """
    before = {ti.key: ti for ti in local}
    after = {ti.key: ti for ti in agora}
    differences = []
    for key in sorted(before.keys() - after.keys()):
        differences.append(f"{before[key].label}: only under Local ({before[key].state})")
    for key in sorted(after.keys() - before.keys()):
        differences.append(f"{after[key].label}: only under Agora ({after[key].state})")
    for key in sorted(before.keys() & after.keys()):
        a, b = before[key], after[key]
        if a.state != b.state:
            differences.append(f"{a.label}: {a.state} under Local, {b.state} under Agora")
        elif a.try_number != b.try_number:
            differences.append(
                f"{a.label}: {a.state} after {a.try_number} tries under Local, {b.try_number} under Agora"
            )
    return differences


def routing(dag: ExampleDag, tis: Iterable[TaskInstance], has_job: Any, agora_name: str = "agora") -> list[str]:
    """What in the Agora run did not run where its plan says ([] when all did).

    ``has_job(ti)`` says whether the AgoraExecutor ran that try of the task instance. A task
    instance that ran a task process ran in an AgoraExecutor job exactly when Airflow routed it
    there (its ``executor``), and every task (mapped task instances too) must have been routed
    there. One that never reached an executor (an EmptyOperator, a task skipped by a branch) says
    nothing.
    """
    problems = []
    for ti in tis:
        if not ti.ran:
            continue
        in_job = has_job(ti)
        if ti.executor == agora_name and not in_job:
            problems.append(f"{ti.label}: routed to the AgoraExecutor but no job of it ran try {ti.try_number}")
        elif ti.executor != agora_name and in_job:
            problems.append(f"{ti.label}: ran in an AgoraExecutor job but its executor is {ti.executor!r}")
        elif ti.executor != agora_name:
            problems.append(f"{ti.label}: not routed to the AgoraExecutor (executor {ti.executor!r})")
    return problems


def local_routing(tis: Iterable[TaskInstance], has_job: Any, agora_name: str = "agora") -> list[str]:
    """Task instances of a Local run (no plan yet) that went to the AgoraExecutor: there must be none."""
    return [
        f"{ti.label}: on the AgoraExecutor without a plan" for ti in tis if ti.executor == agora_name or has_job(ti)
    ]


# -- the suite -----------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One DAG's result."""

    dag_id: str
    origin: str
    file: str
    tasks: int
    mapped_tasks: list[str]
    left_out: str = ""
    asset_scheduled: str = ""  # the timetable of a DAG scheduled by assets only (run by a manual trigger)
    local_run: str = ""
    local_state: str = ""
    local_s: float | None = None
    local_tis: list[dict[str, Any]] = field(default_factory=list)
    plan: str = ""  # the plan file put in force, or why there is none
    planned_tasks: int = 0
    agora_run: str = ""
    agora_state: str = ""
    agora_s: float | None = None
    agora_tis: list[dict[str, Any]] = field(default_factory=list)
    agora_jobs: int = 0  # task instances of the Agora run that ran in an AgoraExecutor job
    differences: list[str] = field(default_factory=list)
    routing: list[str] = field(default_factory=list)
    error: str = ""

    @property
    def verdict(self) -> str:
        if self.left_out:
            return "left out"
        if self.error and not self.local_state:
            return "error"
        if self.local_state not in FINISHED:
            return "did not finish under Local"
        if self.differences or self.routing or self.error or self.agora_state != self.local_state:
            return "differs"
        return "same"


class Suite:
    def __init__(
        self, args: argparse.Namespace, root: Path, dags: list[ExampleDag], order: list[str],
        files: Iterable[tuple[str, str]] = (), database_url: str = "",
    ) -> None:  # fmt: skip
        """Run ``dags``; ``files`` (origin, file name): more files the DAG folder needs (see :data:`NEEDS`);
        ``database_url``: Airflow's metadata database (empty: SQLite in the Airflow home)."""
        self.args = args
        self.root = root
        self.dags = dags
        self.order = order
        self.files = {(d.origin, d.file) for d in dags} | set(files)
        self.agora = str(Path(sys.executable).with_name("agora"))
        self.state_dir = root / "jobs"
        self.airflow = AirflowDeployment(
            home=root / "home",
            dags_folder=root / "dags",
            extra_env={
                "AIRFLOW__AGORA__CATALOG": str(args.catalog.resolve()),
                "AIRFLOW__AGORA__PLAN_DIR": str(root / "plans"),
                "AIRFLOW__AGORA__STATE_DIR": str(self.state_dir),
                "AIRFLOW__AGORA__TRACE_STORE_URL": f"sqlite:///{root / 'traces.db'}",
                "AIRFLOW__AGORA__REOPTIMIZE_SCHEDULE": "",  # no re-planning behind the suite's back
                "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "plugins"),
                "AIRFLOW__CORE__PARALLELISM": str(args.local_parallelism),
                "AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "5",
                # Each file parsed every 20 s, not 5: dozens of files would keep a core busy. Plans are all
                # put in force, then waited for, so this costs the suite one wait of 20 s.
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "20",
                "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",  # only the runs the suite (or a DAG) triggers
                "PYTHONPATH": os.pathsep.join(filter(None, [str(root / "site"), os.environ.get("PYTHONPATH")])),
                **database_env(database_url),
            },
        )
        self.metadata_url = database_url or f"sqlite:///{self.airflow.home / 'airflow.db'}"
        self.outcomes: dict[str, Outcome] = {}

    # setup

    def prepare(self) -> None:
        import airflow

        package = Path(airflow.__file__).parent
        for origin, relative in FOLDERS.items():
            source, target = package / relative, self.root / "dags" / origin
            target.mkdir(parents=True)
            for name in sorted(name for where, name in self.files if where == origin):
                shutil.copy(source / name, target / name)
            if (source / "sql").is_dir():
                shutil.copytree(source / "sql", target / "sql", ignore=shutil.ignore_patterns("__pycache__"))
        (self.root / "plugins").mkdir()
        (self.root / "plugins" / "agora_compat_example_plugins.py").write_text(EXAMPLE_PLUGINS)
        (self.root / "site").mkdir()
        (self.root / "site" / "sitecustomize.py").write_text(SEED_RANDOM)
        (self.root / "site" / "agora_compat_sqlite.py").write_text(SQLITE_SETTINGS)
        self.airflow.migrate()

    # phases

    def local_phase(self) -> None:
        for dag in self.dags:
            self.airflow.wait_for_dag(dag.dag_id, timeout_s=600)
        self._run_all(run_units([dag.dag_id for dag in self.dags]), agora=False, parallel=self.args.local_parallel)

    def agora_phase(self) -> None:
        ready = [d for d in self.dags if self.outcomes[d.dag_id].local_state in FINISHED]
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.args.optimize_parallel) as pool:
            versions = dict(zip([d.dag_id for d in ready], pool.map(self._optimize, ready), strict=True))
        for dag in ready:
            version = versions[dag.dag_id]
            if version:
                try:
                    self._wait_in_force(dag.dag_id, version)
                except AssertionError as exc:
                    self.outcomes[dag.dag_id].error = f"plan not in force: {str(exc).splitlines()[0]}"
        runnable = [d.dag_id for d in ready if not self.outcomes[d.dag_id].error]
        self._run_all(run_units(runnable), agora=True, parallel=self.args.agora_parallel)

    def _optimize(self, dag: ExampleDag) -> str:
        """Plan the DAG and put the plan in force; the plan's version ("" when no task of the DAG is placed)."""
        from agora_optimizer.plans.store import plan_version

        outcome = self.outcomes[dag.dag_id]
        plan_path = self.root / "plans-made" / f"{dag.dag_id}.json"
        plan_path.parent.mkdir(parents=True, exist_ok=True)
        dag_file = self.root / "dags" / dag.origin / dag.file
        command = [self.agora, "optimize", f"airflow:{dag.dag_id}", "--catalog", str(self.args.catalog.resolve()),
                   "--dag-folder", str(dag_file), "--time-limit-s", f"{self.args.optimize_time_limit_s:g}",
                   "-o", str(plan_path), "--json", "--apply"]  # fmt: skip
        answer = subprocess.run(command, env=self.airflow.env, capture_output=True, text=True, check=False)
        if answer.returncode != 0:
            outcome.error = f"agora optimize failed ({answer.returncode}): {answer.stderr.strip()[-500:]}"
            return ""
        outcome.plan = str(plan_path.relative_to(self.root))
        plan = json.loads(plan_path.read_text())
        outcome.planned_tasks = len(plan["assignments"])
        return plan_version(plan_path.read_bytes()) if dag.placeable else ""

    def _wait_in_force(self, dag_id: str, version: str) -> None:
        """Until Airflow's newest serialization of the DAG carries the plan's version in its placements."""
        import sqlalchemy

        engine = sqlalchemy.create_engine(self.metadata_url)
        query = sqlalchemy.text(
            "SELECT data, data_compressed FROM serialized_dag WHERE dag_id = :dag_id ORDER BY last_updated DESC"
        )

        def serialized() -> bool:
            with engine.connect() as connection:
                row = connection.execute(query, {"dag_id": dag_id}).first()
            if row is None:
                return False
            data = row[0] if row[0] is not None else zlib.decompress(row[1]).decode()
            text = data if isinstance(data, str) else json.dumps(data)  # PostgreSQL's JSON comes parsed
            return f'"plan_version": "{version}"' in text

        try:
            wait_until(serialized, self.args.in_force_timeout_s, f"Airflow to serialize {dag_id} with its plan")
        finally:
            engine.dispose()

    def _run_all(self, units: list[list[str]], agora: bool, parallel: int) -> None:
        """Trigger the DAGs, at most ``parallel`` units (DAGs that run together) at once, and record
        each run's task instances."""
        pending = list(units)
        running: dict[str, tuple[str, float]] = {}  # dag id -> (run id, when triggered)
        active = 0
        while pending or running:
            while pending and active < max(1, parallel):
                triggered = [self._trigger(dag_id, agora) for dag_id in pending.pop(0)]
                running.update((dag_id, (run_id, time.monotonic())) for dag_id, run_id in triggered if run_id)
                active += any(run_id for _, run_id in triggered)
            time.sleep(2)
            self._check_alive()
            for unit in units:
                members = [dag_id for dag_id in unit if dag_id in running]
                if not members:
                    continue
                states = {dag_id: self.airflow.run_state(dag_id, running[dag_id][0]) for dag_id in members}
                timed_out = any(time.monotonic() - running[d][1] > self.args.run_timeout_s for d in members)
                if not (timed_out or all(state in FINISHED for state in states.values())):
                    continue
                active -= 1
                for dag_id in members:
                    run_id, started = running.pop(dag_id)
                    tis = self.task_instances(dag_id, run_id)
                    state = states[dag_id]
                    error = "" if state in FINISHED else f"still {state} after {self.args.run_timeout_s:g} s"
                    self._record(dag_id, agora, run_id, state, time.monotonic() - started, tis, error)
                    print(f"{'agora' if agora else 'local'} {dag_id}: {state} ({len(tis)} TIs)", flush=True)
                if timed_out:
                    self._fail_leftovers([*members, *(NEEDS[d] for d in members if d in NEEDS)])

    def _fail_leftovers(self, dag_ids: Iterable[str]) -> None:
        """Mark the unfinished runs of these DAGs failed (recorded already), so that their waiting tasks
        end and free their slots: a run that hangs must not hold a pool the next runs need."""
        for dag_id in dict.fromkeys(dag_ids):
            try:
                runs = self.airflow.request("GET", f"/dags/{dag_id}/dagRuns", params={"limit": 100})["dag_runs"]
                for run in runs:
                    if run["state"] not in FINISHED:
                        path = f"/dags/{dag_id}/dagRuns/{run['dag_run_id']}"
                        self.airflow.request("PATCH", path, json={"state": "failed"})
                        print(f"marked {dag_id} {run['dag_run_id']} failed: it outlived --run-timeout-s", flush=True)
            except Exception as exc:  # the suite goes on; the next runs may wait for these slots
                print(f"could not fail the runs of {dag_id} left running: {exc}", flush=True)

    def _trigger(self, dag_id: str, agora: bool) -> tuple[str, str]:
        """Trigger one run of the DAG at its logical date of the phase: (dag id, run id, "" if it failed)."""
        date = logical_date(dag_id, self.order, agora)
        body = {"logical_date": date.isoformat(), "conf": CONF.get(dag_id, {})}
        for attempt in range(TRIGGER_TRIES):
            try:
                return dag_id, str(self.airflow.request("POST", f"/dags/{dag_id}/dagRuns", json=body)["dag_run_id"])
            except httpx.HTTPStatusError as exc:  # a 5xx: SQLite busy under load; the run was not made
                if exc.response.status_code < 500 or attempt == TRIGGER_TRIES - 1:
                    error = exc
                    break
                time.sleep(2.0 * (attempt + 1))
            except Exception as exc:  # recorded, the suite goes on
                error = exc
                break
        self._record(dag_id, agora, "", "", None, [], f"trigger failed: {error}")
        return dag_id, ""

    def _check_alive(self) -> None:
        for component, process in self.airflow.processes.items():
            if process.poll() is not None:
                tail = self.airflow.log(component)[-3000:]
                raise SystemExit(f"airflow {component} exited with {process.returncode}:\n{tail}")

    def task_instances(self, dag_id: str, run_id: str) -> list[TaskInstance]:
        rows: list[dict[str, Any]] = []
        while True:
            page = self.airflow.request(
                "GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 100, "offset": len(rows)}
            )
            rows += page["task_instances"]
            if len(rows) >= page["total_entries"] or not page["task_instances"]:
                break
        return sorted((TaskInstance.from_api(row) for row in rows), key=lambda ti: ti.key)

    def has_job(self, dag_id: str, run_id: str) -> Any:
        def check(ti: TaskInstance) -> bool:
            return (self.state_dir / job_key(dag_id, ti.task_id, run_id, ti.try_number, ti.map_index)).is_dir()

        return check

    def _record(
        self, dag_id: str, agora: bool, run_id: str, state: str, seconds: float | None,
        tis: list[TaskInstance], error: str,
    ) -> None:  # fmt: skip
        outcome = self.outcomes[dag_id]
        rows = [asdict(ti) for ti in tis]
        if not agora:
            outcome.local_run, outcome.local_state, outcome.local_s, outcome.local_tis = run_id, state, seconds, rows
            outcome.routing = local_routing(tis, self.has_job(dag_id, run_id))
        else:
            outcome.agora_run, outcome.agora_state, outcome.agora_s, outcome.agora_tis = run_id, state, seconds, rows
            before = [TaskInstance(**row) for row in outcome.local_tis]
            outcome.differences = compare(before, tis)
            if state != outcome.local_state:
                outcome.differences.insert(0, f"run {outcome.local_state} under Local, {state} under Agora")
            dag = next(d for d in self.dags if d.dag_id == dag_id)
            has_job = self.has_job(dag_id, run_id)
            outcome.routing += routing(dag, tis, has_job)
            outcome.agora_jobs = sum(1 for ti in tis if ti.ran and has_job(ti))
        if error:
            outcome.error = "; ".join(filter(None, [outcome.error, error]))


def database_env(url: str) -> dict[str, str]:
    """Airflow's settings for its metadata database: PostgreSQL at ``url``, else SQLite (``url`` empty)."""
    if url:
        return {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": url}
    return {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": "agora_compat_sqlite.CONNECT_ARGS",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": "agora_compat_sqlite.CONNECT_ARGS",
    }


@contextlib.contextmanager
def fresh_database(server_url: str | None) -> Iterator[str]:
    """A new, empty PostgreSQL database on ``server_url``'s server (its URL), dropped afterwards; "" without one."""
    if not server_url:
        yield ""
        return
    import sqlalchemy

    server = sqlalchemy.engine.make_url(server_url)
    name = f"agora_compat_{os.getpid()}_{int(time.time())}"
    admin = sqlalchemy.create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
        try:
            yield server.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as connection:
                connection.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def inventory(env: Mapping[str, str]) -> tuple[list[ExampleDag], dict[str, str], dict[str, list[str]]]:
    """Every example DAG of the installed Airflow and standard provider, the files that failed, all files."""
    answer = subprocess.run(
        [sys.executable, "-c", INVENTORY, json.dumps(FOLDERS)], capture_output=True, text=True, env=dict(env),
        timeout=600, check=False,
    )  # fmt: skip
    line = next((line for line in answer.stdout.splitlines() if line.startswith("INVENTORY")), None)
    if answer.returncode != 0 or line is None:
        raise SystemExit(f"listing the example DAGs failed: {answer.stderr[-3000:]}")
    data = json.loads(line.removeprefix("INVENTORY"))
    dags = sorted((ExampleDag.from_json(d) for d in data["dags"]), key=lambda d: d.dag_id)
    return dags, data["errors"], data["files"]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="agora-compat-", dir=args.work_dir))
    signal.signal(signal.SIGTERM, _exit_once)  # kill(1) unwinds too: Airflow is stopped
    probe = AirflowDeployment(home=root / "inventory-home", dags_folder=root / "none")
    dags, errors, files = inventory(probe.env)
    order = [d.dag_id for d in dags]
    wanted = None if args.dags == "all" else {name.strip() for name in args.dags.split(",") if name.strip()}
    unknown = sorted((wanted or set()) - set(order))
    if unknown:
        raise SystemExit(f"--dags: not example DAGs: {', '.join(unknown)}")
    outcomes = {}
    for dag in dags:
        if wanted is not None and dag.dag_id not in wanted:
            continue
        by_assets = dag.timetable if dag.timetable in ASSET_TIMETABLES else ""
        outcomes[dag.dag_id] = Outcome(dag.dag_id, dag.origin, dag.file, len(dag.tasks), list(dag.mapped),
                                       left_out_reason(dag, args.offline), by_assets)  # fmt: skip
    selected = [d for d in dags if d.dag_id in outcomes and not outcomes[d.dag_id].left_out]
    needed = {NEEDS[d.dag_id] for d in selected if d.dag_id in NEEDS}
    with fresh_database(args.database_url) as database_url:
        suite = Suite(args, root, selected, order, files=[(d.origin, d.file) for d in dags if d.dag_id in needed],
                      database_url=database_url)  # fmt: skip
        suite.outcomes = outcomes
        suite.prepare()
        print(f"agora compat: {len(selected)} DAGs to run of {len(outcomes)}; Airflow home {suite.airflow.home}",
              flush=True)  # fmt: skip
        with suite.airflow:
            suite.airflow.start("api-server", "dag-processor", "scheduler", "triggerer")
            suite.local_phase()
            suite.agora_phase()
    document = _document(args, argv, outcomes, errors, files, dags, time.perf_counter() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    table = markdown(document)
    args.out.with_suffix(".md").write_text(table)
    print(table)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if all(o.verdict in ("same", "left out") for o in outcomes.values()) else 1


def _exit_once(*_: object) -> None:
    """SIGTERM: unwind (stopping Airflow); a second SIGTERM must not cut that short."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(143)


def _document(
    args: argparse.Namespace, argv: list[str] | None, outcomes: Mapping[str, Outcome], errors: Mapping[str, str],
    files: Mapping[str, list[str]], dags: list[ExampleDag], wall_s: float,
) -> dict[str, Any]:  # fmt: skip
    from importlib.metadata import version

    with_dags = {d.file for d in dags}
    files_without_dags = {
        name: errors.get(name) or FILE_LEFT_OUT.get(name) or "defines no DAG"
        for names in files.values()
        for name in names
        if name not in with_dags
    }
    counts: dict[str, int] = {}
    for outcome in outcomes.values():
        counts[outcome.verdict] = counts.get(outcome.verdict, 0) + 1
    return {
        "command": shown_command(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "airflow": version("apache-airflow"),
        "standard_provider": version("apache-airflow-providers-standard"),
        "catalog": str(
            args.catalog.resolve().relative_to(REPO) if args.catalog.resolve().is_relative_to(REPO) else args.catalog
        ),
        "wall_s": round(wall_s, 1),
        "counts": counts,
        "files_without_dags": files_without_dags,
        "dags": [{**asdict(o), "verdict": o.verdict} for o in outcomes.values()],
    }


def shown_command(argv: Sequence[str]) -> str:
    """The suite's command line as the results show it: a database URL's password hidden."""
    shown = list(argv)
    for index, argument in enumerate(shown):
        for prefix in ("--database-url=", ""):
            if argument.startswith(prefix) and (prefix or (index and shown[index - 1] == "--database-url")):
                url = argument.removeprefix(prefix)
                shown[index] = prefix + re.sub(r"(//[^:/@]+):[^@/]*@", r"\1:***@", url)
                break
    return " ".join(["python", "bench/compat_example_dags.py", *shown])


def markdown(document: Mapping[str, Any]) -> str:
    """The results as a Markdown table, with the command that made them."""
    counts = ", ".join(f"{n} {verdict}" for verdict, n in sorted(document["counts"].items()))
    lines = [
        f"# Example DAGs under the LocalExecutor and the AgoraExecutor ({document['date']})",
        "",
        f"`{document['command']}`",
        "",
        f"Airflow {document['airflow']}, standard provider {document['standard_provider']}, catalog "
        f"`{document['catalog']}`; {document['wall_s'] / 60:.0f} min in all. {counts}.",
        "",
        "Per DAG: its tasks and mapped tasks (with their task instances), each run's state and task instances, how "
        "many task instances of the Agora run ran in an AgoraExecutor job, and each run's seconds from trigger to "
        "end (Local runs go several at once, Agora runs one at a time). A DAG marked *(assets)* is scheduled by "
        "assets only: the suite triggers it by hand under both executors (no partition key, no triggering events).",
        "",
        "| DAG | file | tasks | mapped | Local run | TIs | Agora run | TIs | agora jobs | s Local / Agora | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in document["dags"]:
        if d["verdict"] == "left out":
            continue
        mapped_tis = sum(1 for ti in d["local_tis"] if ti["map_index"] >= 0)
        seconds = f"{_num(d['local_s'])} / {_num(d['agora_s'])}"
        name = d["dag_id"] + (ASSETS_MARK if d.get("asset_scheduled") else "")
        lines.append(
            f"| {name} | {d['origin']}/{d['file']} | {d['tasks']} | {len(d['mapped_tasks'])} ({mapped_tis} TIs) "
            f"| {d['local_state'] or '-'} | {len(d['local_tis'])} | {d['agora_state'] or '-'} | {len(d['agora_tis'])} "
            f"| {d['agora_jobs']} | {seconds} | {d['verdict']} |"
        )
    problems = [d for d in document["dags"] if d["verdict"] not in ("same", "left out")]
    if problems:
        lines += ["", "## Differences", ""]
        for d in problems:
            for line in [*d["differences"], *d["routing"], *([d["error"]] if d["error"] else [])]:
                lines.append(f"- {d['dag_id']}: {line}")
    left = [d for d in document["dags"] if d["verdict"] == "left out"]
    if left or document["files_without_dags"]:
        lines += ["", "## Left out", "", "| DAG | file | why |", "|---|---|---|"]
        lines += [f"| {d['dag_id']} | {d['origin']}/{d['file']} | {d['left_out']} |" for d in left]
        lines += [f"| (none) | {name} | {why} |" for name, why in sorted(document["files_without_dags"].items())]
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dags", default="all", help="all, or comma-separated example DAG ids")
    parser.add_argument("--catalog", type=Path, default=REPO / "catalogs" / "local.yaml")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "compat-example-dags.json")
    parser.add_argument("--offline", action="store_true", help="leave out the DAGs that install from PyPI")
    parser.add_argument("--local-parallel", type=int, default=4, help="Local runs at once (SQLite copes with few)")
    parser.add_argument("--agora-parallel", type=int, default=1, help="Agora runs at once")
    parser.add_argument("--optimize-parallel", type=int, default=2, help="agora optimize processes at once")
    parser.add_argument("--optimize-time-limit-s", type=float, default=5.0)
    parser.add_argument("--local-parallelism", type=int, default=6, help="[core] parallelism (LocalExecutor)")
    parser.add_argument("--run-timeout-s", type=float, default=900.0)
    parser.add_argument("--in-force-timeout-s", type=float, default=300.0)
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL server's URL (postgresql+psycopg://..., a role that may create databases; "
        "scripts/start_postgres.sh prints one): Airflow's metadata goes to a new database there, dropped after. "
        "Default: SQLite, which dozens of concurrent task processes may lock up",
    )
    parser.add_argument("--work-dir", type=Path, help="where the Airflow home, DAGs and jobs go (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the Airflow home and job directories")
    return parser


if __name__ == "__main__":
    sys.exit(main())

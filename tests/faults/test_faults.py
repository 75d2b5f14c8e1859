"""Faults injected on purpose into a running Airflow with the AgoraExecutor, on real services.

One Airflow (module scope, see ``conftest.py``) runs every fault: a worker killed with SIGKILL
mid-task (local pool and SLURM), ``slurmctld`` stopped for 10 s mid-run, the trace store
(a private PostgreSQL) stopped for 30 s mid-run, the state directory's file system filled, the
plan in force overwritten with garbage mid-run, and SLURM clients that answer garbage. For
each: no task lost, none run twice (the task's own marks, one per try, and SLURM's accounting),
every failure named in the trace row, and the scheduler alive with its heartbeat advancing.
Each test records a figure (time from fault to recovery, tasks affected, retries) in
``bench/results/faults.json`` (``docs/reliability.md``).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psutil
import pytest

from agora_optimizer.executor.backends.slurm import job_name
from agora_optimizer.executor.jobs.spec import job_key, lease_key
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.plans.store import PlanStore
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore
from harness.local_airflow import AirflowDeployment, wait_until
from tests.conftest import CATALOGS
from tests.faults.conftest import Figures, PrivatePostgres, SmallDisk
from tests.slurm_cluster import START_SCRIPT, STATE_DIR, slurm_cluster_or_skip

pytestmark = pytest.mark.airflow
MIB = 2**20

DAGS = '''
import os
import time
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG, get_current_context, task

MARKS = Path({marks!r})


def mark(seconds):
    """Note this try's start (with the task process's pid) and end in MARKS/<dag>.<task>.<run>."""
    ti = get_current_context()["ti"]
    path = MARKS / f"{{ti.dag_id}}.{{ti.task_id}}.{{ti.run_id}}".replace(":", "_").replace("+", "_")
    with open(path, "a") as out:
        out.write(f"start {{ti.try_number}} {{os.getpid()}} {{time.time()}}\\n")
    time.sleep(seconds)
    with open(path, "a") as out:
        out.write(f"end {{ti.try_number}} {{os.getpid()}} {{time.time()}}\\n")


def dag(dag_id):
    return DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False)


with dag("fault_kill"):
    @task(retries=1, retry_delay=timedelta(seconds=1))
    def victim_local():
        mark(15)

    @task(retries=1, retry_delay=timedelta(seconds=1))
    def victim_slurm():
        mark(15)

    victim_local()
    victim_slurm()

with dag("fault_ctld"):
    for index in range(4):
        task(task_id=f"job{{index}}", retries=0)(mark)(12)

with dag("fault_pg"):
    for chain in range(2):
        first = task(task_id=f"c{{chain}}_first", retries=0)(mark)(6)
        second = task(task_id=f"c{{chain}}_second", retries=0)(mark)(6)
        first >> second
    task(task_id="on_slurm", retries=0)(mark)(10)

with dag("fault_disk"):
    task(task_id="needs_disk", retries=0)(mark)(1)

with dag("fault_plan"):
    a = task(task_id="a", retries=0)(mark)(10)
    b = task(task_id="b", retries=0)(mark)(1)
    c = task(task_id="c", retries=0)(mark)(1)
    a >> b >> c

with dag("fault_garbage"):
    task(task_id="polled", retries=0)(mark)(20)

with dag("fault_garbage_submit"):
    task(task_id="submitted", retries=0)(mark)(1)
'''

PLANS: dict[str, dict[str, str]] = {
    "fault_kill": {"victim_local": "local-small", "victim_slurm": "slurm-debug"},
    "fault_ctld": {"job0": "slurm-debug", "job1": "slurm-debug", "job2": "slurm-compute", "job3": "slurm-compute"},
    "fault_pg": {
        "c0_first": "local-small",
        "c0_second": "local-small",
        "c1_first": "local-large",
        "c1_second": "local-large",
        "on_slurm": "slurm-compute",
    },
    "fault_disk": {"needs_disk": "local-small"},
    "fault_plan": {"a": "local-small", "b": "local-large", "c": "local-small"},
    "fault_garbage": {"polled": "slurm-debug"},
    "fault_garbage_submit": {"submitted": "slurm-compute"},
}


def _plan(dag_id: str, tasks: dict[str, str]) -> Plan:
    assignments = tuple(Assignment(t, r, f"{r}#0", 0.0, 30.0, 1, 256 * MIB) for t, r in tasks.items())
    return Plan(
        dag_id,
        "catalogs/local.yaml",
        Objective(),
        30.0,
        0.0,
        assignments,
        SolverInfo("test", "heuristic", None, 0.0),
        "2026-12-01T00:00:00Z",
    )


@dataclass
class Mark:
    what: str  # start or end
    try_number: int
    pid: int
    at: float


@dataclass
class Rig:
    airflow: AirflowDeployment
    store_url: str
    postgres: PrivatePostgres
    disk: SmallDisk
    marks: Path
    fakebin: Path
    plans: PlanStore

    def marks_of(self, dag_id: str, task_id: str, run_id: str) -> list[Mark]:
        path = self.marks / f"{dag_id}.{task_id}.{run_id}".replace(":", "_").replace("+", "_")
        if not path.exists():
            return []
        rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
        return [Mark(row[0], int(row[1]), int(row[2]), float(row[3])) for row in rows]

    def attempts(self, dag_id: str) -> dict[tuple[str, int], TaskAttempt]:
        with TraceStore(self.store_url) as store:
            return {(a.task_id, a.try_number): a for a in store.attempts(dag_id=dag_id)}

    def wait_for_rows(self, dag_id: str, tries: int, timeout_s: float = 90) -> dict[tuple[str, int], TaskAttempt]:
        """The DAG's rows once ``tries`` of them carry the executor's part (its backend)."""
        wait_until(
            lambda: sum(1 for a in self.attempts(dag_id).values() if a.backend) >= tries,
            timeout_s,
            f"{tries} executor trace rows of {dag_id}",
            self.airflow,
        )
        return self.attempts(dag_id)

    def heartbeat(self) -> datetime:
        answer = self.airflow.request("GET", "/monitor/health")
        return datetime.fromisoformat(answer["scheduler"]["latest_scheduler_heartbeat"])

    def assert_scheduler_lives(self, since: datetime) -> None:
        """The scheduler process runs and has beaten its heart after ``since``."""
        scheduler = self.airflow.processes["scheduler"]
        assert scheduler.poll() is None, f"the scheduler died:\n{self.airflow.log('scheduler')[-3000:]}"
        wait_until(lambda: self.heartbeat() > since, 30, "a scheduler heartbeat after the fault", self.airflow)


def assert_each_try_ran_once(rig: Rig, dag_id: str, run_id: str, task_id: str) -> list[Mark]:
    """Every try of the task started once, and no try started before the one before it had stopped."""
    marks = rig.marks_of(dag_id, task_id, run_id)
    starts = [m for m in marks if m.what == "start"]
    assert [m.try_number for m in starts] == sorted({m.try_number for m in starts}), (task_id, marks)
    for earlier, later in itertools.pairwise(starts):
        ended = [m.at for m in marks if m.what == "end" and m.try_number == earlier.try_number]
        gone = not psutil.pid_exists(earlier.pid) or ended
        assert gone, f"{task_id}: try {earlier.try_number} (pid {earlier.pid}) runs beside try {later.try_number}"
        if ended:
            assert ended[0] <= later.at, f"{task_id}: try {later.try_number} began before {earlier.try_number} ended"
    return marks


def sacct_names(prefix: str) -> list[dict[str, str]]:
    fields = ["JobID", "JobName%200", "State"]
    done = subprocess.run(
        ["sacct", "-X", "-n", "-P", "--starttime", "now-2hours", "-o", ",".join(fields)],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    rows = [dict(zip(["JobID", "JobName", "State"], line.split("|"), strict=True)) for line in done.stdout.splitlines()]
    return [row for row in rows if row["JobName"].startswith(prefix)]


def allocations_of(dag_id: str, run_id: str, task_id: str) -> list[dict[str, str]]:
    """SLURM's accounting of the allocation that ran the task: its planned machine's lease."""
    machine = f"{PLANS[dag_id][task_id]}#0"
    return sacct_names(job_name(lease_key(dag_id, run_id, machine)))


@pytest.fixture(scope="module")
def rig(fault_root: Path, private_postgres: PrivatePostgres, figures: Figures) -> Iterator[Rig]:
    slurm_cluster_or_skip()
    root = fault_root / "airflow"
    root.mkdir()
    dags, marks, fakebin = root / "dags", root / "marks", root / "fakebin"
    for directory in (dags, marks, fakebin):
        directory.mkdir()
    (dags / "fault_dags.py").write_text(DAGS.format(marks=str(marks)))
    disk = SmallDisk(root / "state", size_mib=64)
    disk.mount()
    catalogs = f"{CATALOGS / 'local.yaml'},{CATALOGS / 'slurm-loopback.yaml'}"
    airflow = AirflowDeployment(
        home=root / "home",
        dags_folder=dags,
        extra_env={
            "PATH": f"{fakebin}:{os.environ['PATH']}",
            "AIRFLOW__AGORA__CATALOG": catalogs,
            "AIRFLOW__AGORA__PLAN_DIR": str(root / "plans"),
            "AIRFLOW__AGORA__STATE_DIR": str(disk.path),
            "AIRFLOW__AGORA__TRACE_STORE_URL": private_postgres.url,
            "AIRFLOW__AGORA__BACKOFF_MAX_S": "2",
            "AIRFLOW__AGORA__SUBMIT_RETRIES": "4",
        },
    )
    airflow.migrate()
    plans = PlanStore(root / "plans")
    for dag_id, tasks in PLANS.items():
        plans.save(dag_id, _plan(dag_id, tasks))
    try:
        airflow.start()
        for dag_id in PLANS:
            airflow.wait_for_dag(dag_id)
        yield Rig(airflow, private_postgres.url, private_postgres, disk, marks, fakebin, plans)
    finally:
        airflow.stop_all()
        disk.unmount()


# -- 1. kill -9 a worker mid-task --------------------------------------------------------------


def _worker_pid(rig: Rig, job_dir: Path) -> int:
    """The agora worker of a job: the local pool's record, else the process running it in SLURM."""
    local = job_dir / "local.json"
    if local.exists():
        return int(json.loads(local.read_text())["pid"])
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "agora_optimizer.executor.worker" in cmdline and str(job_dir) in cmdline:
            return int(process.pid)
    raise AssertionError(f"no agora worker runs for {job_dir}")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_kill_9_a_worker_mid_task_retries_it_once_and_names_the_kill(rig: Rig, figures: Figures) -> None:
    airflow = rig.airflow
    run_id = airflow.trigger("fault_kill")
    tasks = ("victim_local", "victim_slurm")
    wait_until(lambda: all(rig.marks_of("fault_kill", t, run_id) for t in tasks), 120, "both victims to start", airflow)
    before = rig.heartbeat()
    killed_at = time.monotonic()
    task_pids = {t: rig.marks_of("fault_kill", t, run_id)[0].pid for t in tasks}
    for task_id in tasks:
        job_dir = rig.disk.path / job_key("fault_kill", task_id, run_id, 1, -1)
        os.kill(_worker_pid(rig, job_dir), signal.SIGKILL)
    gone_at: dict[str, float] = {}  # when the killed worker's task process was gone too

    def orphans_gone() -> bool:
        gone_at.update({t: time.time() for t, pid in task_pids.items() if t not in gone_at and not _alive(pid)})
        return len(gone_at) == len(tasks)

    wait_until(orphans_gone, 60, "the killed workers' task processes to end", airflow)
    assert airflow.wait_for_run("fault_kill", run_id, timeout_s=240) == "success"
    recovered_s = time.monotonic() - killed_at
    rig.assert_scheduler_lives(before)
    rows = rig.wait_for_rows("fault_kill", 4)
    for task_id in tasks:
        assert [t["try_number"] for t in airflow.tries("fault_kill", run_id, task_id)] == [1, 2], task_id
        marks = assert_each_try_ran_once(rig, "fault_kill", run_id, task_id)
        assert [m.try_number for m in marks if m.what == "end"] == [2], (task_id, marks)  # try 1 never finished
        (retry,) = [m for m in marks if m.what == "start" and m.try_number == 2]
        assert retry.at >= gone_at[task_id] - 1.5, f"{task_id}: try 2 ran beside the killed worker's task"
        first, second = rows[(task_id, 1)], rows[(task_id, 2)]
        assert first.state != "success" and "SIGKILL" in first.error_text, (task_id, first)
        assert second.state == "success", (task_id, second)
    # Both tries ran in the one allocation of the planned machine: none was submitted twice.
    assert len(allocations_of("fault_kill", run_id, "victim_slurm")) == 1
    figures.record(
        "kill -9 a worker mid-task",
        tasks_affected=len(tasks),
        retries=sum(len(airflow.tries("fault_kill", run_id, t)) - 1 for t in tasks),
        fault_to_dag_success_s=round(recovered_s, 1),
        orphan_lifetime_s=round(max(gone_at.values()) - (time.time() - (time.monotonic() - killed_at)), 1),
        errors={t: rows[(t, 1)].error_text for t in tasks},
    )


# -- 2. restart slurmctld mid-run --------------------------------------------------------------


def _slurmctld(action: str) -> None:
    if action == "stop":
        pid = int((STATE_DIR / "run" / "slurmctld.pid").read_text())
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not psutil.pid_exists(pid), 30, "slurmctld to stop")
    else:
        done = subprocess.run(["bash", str(START_SCRIPT), "start", str(STATE_DIR)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]


def test_restart_slurmctld_mid_run_every_task_ends_once(rig: Rig, figures: Figures) -> None:
    airflow = rig.airflow
    run_id = airflow.trigger("fault_ctld")
    tasks = [f"job{i}" for i in range(4)]
    wait_until(lambda: any(rig.marks_of("fault_ctld", t, run_id) for t in tasks), 120, "a SLURM task to run", airflow)
    before = rig.heartbeat()
    _slurmctld("stop")
    stopped_at = time.monotonic()
    try:
        time.sleep(10)
    finally:
        _slurmctld("start")
    restarted_at = time.monotonic()
    assert airflow.wait_for_run("fault_ctld", run_id, timeout_s=240) == "success"
    restart_to_success_s = time.monotonic() - restarted_at
    rig.assert_scheduler_lives(before)
    rows = rig.wait_for_rows("fault_ctld", 4)
    for task_id in tasks:
        assert [t["try_number"] for t in airflow.tries("fault_ctld", run_id, task_id)] == [1], task_id
        assert [m.what for m in assert_each_try_ran_once(rig, "fault_ctld", run_id, task_id)] == ["start", "end"]
        assert len(allocations_of("fault_ctld", run_id, task_id)) == 1, task_id  # the machine's one allocation
        assert rows[(task_id, 1)].state == "success"
    figures.record(
        "restart slurmctld mid-run",
        slurmctld_down_s=round(restarted_at - stopped_at, 1),
        tasks_affected=len(tasks),
        lost=0,
        duplicated=0,
        restart_to_dag_success_s=round(restart_to_success_s, 1),
        retries=0,
    )


# -- 3. stop the trace store (PostgreSQL) for 30 s mid-run ------------------------------------


def test_stop_the_trace_store_for_30_s_mid_run_loses_no_row(rig: Rig, figures: Figures) -> None:
    airflow = rig.airflow
    run_id = airflow.trigger("fault_pg")
    tasks = sorted(PLANS["fault_pg"])
    wait_until(lambda: bool(rig.marks_of("fault_pg", "c0_first", run_id)), 120, "the first task to run", airflow)
    before = rig.heartbeat()
    rig.postgres.stop()
    stopped_at = time.time()
    try:
        assert airflow.wait_for_run("fault_pg", run_id, timeout_s=120) == "success"  # tasks run without it
        time.sleep(max(0.0, 30 - (time.time() - stopped_at)))
    finally:
        rig.postgres.start()
    restarted_at = time.time()
    rig.assert_scheduler_lives(before)
    ended_while_down = [
        t
        for t in tasks
        if any(m.what == "end" and stopped_at < m.at < restarted_at for m in rig.marks_of("fault_pg", t, run_id))
    ]
    assert ended_while_down  # the fault did hit rows
    rows = rig.wait_for_rows("fault_pg", len(tasks), timeout_s=90)
    recovered_s = time.time() - restarted_at
    for task_id in tasks:
        row = rows[(task_id, 1)]
        # both halves of the row: the listener's (operator) and the executor's (backend, requests)
        assert row.state == "success" and row.operator and row.backend and row.requested_memory_bytes, row
        assert [m.what for m in assert_each_try_ran_once(rig, "fault_pg", run_id, task_id)] == ["start", "end"]
    spooled = rig.disk.path / ".trace-spool"
    assert not list(spooled.glob("*.json")), "rows still wait in the spool"
    assert "waits in" in airflow.log("scheduler")  # the executor said where its rows waited
    figures.record(
        "stop the trace store for 30 s",
        store_down_s=round(restarted_at - stopped_at, 1),
        tasks_ended_while_down=len(ended_while_down),
        rows_lost=0,
        rows_written_after_restart_within_s=round(recovered_s, 1),
    )


# -- 4. fill the state directory's file system -------------------------------------------------


def test_a_full_state_directory_fails_the_task_naming_enospc(rig: Rig, figures: Figures) -> None:
    if not rig.disk.mounted:
        pytest.skip("needs root to mount a small tmpfs as the state directory")
    airflow = rig.airflow
    before = rig.heartbeat()
    filler = rig.disk.fill()
    try:
        filled_at = time.monotonic()
        run_id = airflow.trigger("fault_disk")
        assert airflow.wait_for_run("fault_disk", run_id, timeout_s=120) == "failed"
        failed_s = time.monotonic() - filled_at
        rig.assert_scheduler_lives(before)
    finally:
        shutil.rmtree(filler)
    wait_until(lambda: ("needs_disk", 1) in rig.attempts("fault_disk"), 60, "the trace row of needs_disk", airflow)
    row = rig.attempts("fault_disk")[("needs_disk", 1)]
    assert row.state == "failed" and "No space left on device" in row.error_text, row
    assert str(rig.disk.path) in row.error_text and "needs_disk" in row.error_text, row
    assert not rig.marks_of("fault_disk", "needs_disk", run_id)  # it never ran
    assert [t["try_number"] for t in airflow.tries("fault_disk", run_id, "needs_disk")] == [1]
    # space is back: the same DAG runs again
    again = airflow.trigger("fault_disk")
    assert airflow.wait_for_run("fault_disk", again, timeout_s=120) == "success"
    figures.record(
        "fill the state directory's file system",
        tasks_affected=1,
        fault_to_task_failed_s=round(failed_s, 1),
        error=row.error_text,
        next_run_after_space_returns="success",
    )


# -- 5. corrupt the plan in force mid-run ------------------------------------------------------


def test_a_corrupt_plan_mid_run_keeps_the_dag_working(rig: Rig, figures: Figures) -> None:
    airflow = rig.airflow
    run_id = airflow.trigger("fault_plan")
    wait_until(lambda: bool(rig.marks_of("fault_plan", "a", run_id)), 120, "task a to run", airflow)
    before = rig.heartbeat()
    plan_file = rig.plans.current_path("fault_plan")
    good = plan_file.read_bytes()
    plan_file.write_text('{"this is": not a plan')
    try:
        assert airflow.wait_for_run("fault_plan", run_id, timeout_s=180) == "success"
        rig.assert_scheduler_lives(before)
        instances = airflow.task_instances("fault_plan", run_id)
        for task_id in ("a", "b", "c"):
            assert [m.what for m in assert_each_try_ran_once(rig, "fault_plan", run_id, task_id)] == ["start", "end"]
            assert instances[task_id]["try_number"] == 1
        assert instances["a"]["executor"] == "agora"  # it was running on its planned pool
        later = airflow.trigger("fault_plan")  # parsed with the corrupt plan in force
        assert airflow.wait_for_run("fault_plan", later, timeout_s=180) == "success"
    finally:
        plan_file.write_bytes(good)
    logs = airflow.log("dag-processor") + airflow.log("scheduler")
    complaints = [line for line in logs.splitlines() if "agora policy" in line and "fault_plan" in line]
    assert complaints and str(plan_file) in complaints[0], complaints[:3]
    figures.record(
        "corrupt the plan in force mid-run",
        tasks_affected=3,
        runs_succeeded=2,
        retries=0,
        policy_log_lines=len(complaints),
        placement_after_fault={
            t: ti["executor"] or "default" for t, ti in airflow.task_instances("fault_plan", later).items()
        },
    )


# -- 6. a backend that answers garbage ---------------------------------------------------------

GARBAGE = "#!/bin/sh\necho '}}garbage{{ 4|2 no such field'\necho 'x|y|z' >&2\nexit 0\n"


def _garbage(rig: Rig, *commands: str) -> None:
    for command in commands:
        path = rig.fakebin / command
        path.write_text(GARBAGE)
        path.chmod(0o755)


def _sane(rig: Rig) -> None:
    for path in rig.fakebin.iterdir():
        path.unlink()


def test_slurm_clients_that_answer_garbage_fail_or_delay_tasks_with_a_named_error(rig: Rig, figures: Figures) -> None:
    airflow = rig.airflow
    run_id = airflow.trigger("fault_garbage")
    wait_until(lambda: bool(rig.marks_of("fault_garbage", "polled", run_id)), 120, "the SLURM task to run", airflow)
    before = rig.heartbeat()
    started = time.monotonic()
    _garbage(rig, "squeue", "sacct", "sbatch")
    try:
        submit_run = airflow.trigger("fault_garbage_submit")  # its sbatch answers garbage
        assert airflow.wait_for_run("fault_garbage_submit", submit_run, timeout_s=120) == "failed"
        refused_s = time.monotonic() - started
    finally:
        _sane(rig)
    garbage_s = time.monotonic() - started
    assert airflow.wait_for_run("fault_garbage", run_id, timeout_s=120) == "success"
    rig.assert_scheduler_lives(before)
    assert [t["try_number"] for t in airflow.tries("fault_garbage", run_id, "polled")] == [1]
    assert [m.what for m in assert_each_try_ran_once(rig, "fault_garbage", run_id, "polled")] == ["start", "end"]
    assert len(allocations_of("fault_garbage", run_id, "polled")) == 1
    wait_until(
        lambda: ("submitted", 1) in rig.attempts("fault_garbage_submit"), 60, "the row of the refused task", airflow
    )
    row = rig.attempts("fault_garbage_submit")[("submitted", 1)]
    assert row.state == "failed" and "sbatch printed no job id" in row.error_text and "garbage" in row.error_text, row
    assert rig.wait_for_rows("fault_garbage", 1)[("polled", 1)].state == "success"
    assert "AgoraExecutor sync failed" not in airflow.log("scheduler")  # sync() handled it, never raised
    figures.record(
        "a backend that answers garbage",
        garbage_s=round(garbage_s, 1),
        running_task="polled: kept, succeeded on its first job",
        submitted_task_failed_after_s=round(refused_s, 1),
        error=row.error_text,
    )

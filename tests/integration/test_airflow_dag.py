"""``agora optimize airflow:DAG_ID``: a real DAG folder, parsed by Airflow's DagBag, planned from predictions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agora_optimizer.io.plan_file import load_plan
from agora_optimizer.plans.store import PlanStore
from agora_optimizer.predict.latency import summarize
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore
from tests.conftest import REPO

pytestmark = pytest.mark.airflow

DAG_ID = "agora_example_etl"
GIB = 2**30


def _agora(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    command = [sys.executable, "-m", "agora_optimizer", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)


def _attempts(runs: int, resource_type: str = "local-small") -> list[TaskAttempt]:
    """Past runs of the example DAG: aggregate takes 40 s and 700 MB, the others 2 s and 100 MB."""
    rows = []
    start = datetime(2026, 11, 1, tzinfo=UTC)
    for run in range(runs):
        for task in ("extract", "clean", "aggregate", "profile", "load"):
            seconds, peak = (40.0, 700 * 2**20) if task == "aggregate" else (2.0, 100 * 2**20)
            attempt = TaskAttempt.create(
                dag_id=DAG_ID, task_id=task, run_id=f"manual__{run}", operator="_PythonDecoratedOperator",
                resource_type=resource_type, backend="local", started_at=start,
                ended_at=start + timedelta(seconds=seconds * (1 + 0.05 * run)), peak_rss_bytes=peak,
            )  # fmt: skip
            rows.append(attempt)
    return rows


def _plan(home: Path, store: str, out: Path) -> tuple[dict[str, dict[str, object]], str]:
    result = _agora(
        home, "optimize", f"airflow:{DAG_ID}", "--catalog", str(REPO / "catalogs" / "local.yaml"),
        "--dag-folder", str(REPO / "dags"), "--store", store, "-o", str(out), "--time-limit-s", "30", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    plan = json.loads(out.read_text())
    return {a["task"]: a for a in plan["assignments"]}, result.stderr


def test_a_dag_with_no_history_is_planned_from_its_declared_hints(tmp_path: Path) -> None:
    by_task, err = _plan(tmp_path, f"sqlite:///{tmp_path / 'empty.db'}", tmp_path / "plan.json")
    assert set(by_task) == {"extract", "clean", "aggregate", "profile", "load"}
    assert "runtime: 5 from their hints" in err
    assert by_task["aggregate"]["memory_bytes"] == 1 * GIB  # executor_config={"agora": {"memory_gib": 1, ...}}
    assert by_task["load"]["start_s"] >= max(by_task[t]["end_s"] for t in ("clean", "aggregate", "profile")) - 1e-9


def test_traces_of_past_runs_replace_the_hints(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'traces.db'}"
    killed = TaskAttempt.create(
        dag_id=DAG_ID, task_id="profile", run_id="manual__9", resource_type="local-small", backend="local",
        state="oom_killed", requested_memory_bytes=3 * GIB, started_at=datetime(2026, 11, 2, tzinfo=UTC),
        ended_at=datetime(2026, 11, 2, 0, 0, 1, tzinfo=UTC),
    )  # fmt: skip
    with TraceStore(store) as traces:
        assert traces.add([*_attempts(4), killed]).written == 21
    by_task, err = _plan(tmp_path, store, tmp_path / "plan.json")
    assert "learned from 20 successful attempts in the trace store (of 21)" in err
    assert by_task["profile"]["memory_bytes"] >= 3 * GIB  # killed at 3 GiB once: it needs more than that
    aggregate = by_task["aggregate"]
    assert 35.0 <= aggregate["end_s"] - aggregate["start_s"] <= 50.0  # local-small runs at speed 1.0
    assert aggregate["memory_bytes"] >= 700 * 2**20  # never below the task's own largest peak
    extract = by_task["extract"]
    assert extract["end_s"] - extract["start_s"] < 5.0  # the hint said 2 s, the traces 2 to 2.3 s


def test_a_deadline_plans_from_the_p90_runtimes_and_says_so(tmp_path: Path) -> None:
    """auto: p90 under a deadline, so the plan is no shorter than the p50 plan; each plan and the CLI say which."""
    store = f"sqlite:///{tmp_path / 'traces.db'}"
    with TraceStore(store) as traces:
        traces.add(_attempts(10))  # aggregate takes 40 s growing 5 % a run: its p90 is above its p50
    plans, lines = {}, {}
    for quantile in ("p50", "auto"):
        out = tmp_path / f"{quantile}.json"
        result = _agora(
            tmp_path, "optimize", f"airflow:{DAG_ID}", "--catalog", str(REPO / "catalogs" / "local.yaml"),
            "--dag-folder", str(REPO / "dags"), "--store", store, "-o", str(out), "--time-limit-s", "30",
            "--objective", "time", "--deadline-s", "600", "--runtime-quantile", quantile,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        plans[quantile] = load_plan(out)
        lines[quantile] = [line.split("; ")[-1] for line in result.stdout.splitlines() if line.startswith("assumed:")]
    assert lines == {
        "p50": ["runtimes: predicted, at p50, as asked"],
        "auto": ["runtimes: predicted, at p90, auto: a deadline is set"],
    }
    assert (plans["p50"].runtime_quantile, plans["auto"].runtime_quantile) == ("p50", "p90")
    assert plans["auto"].makespan_s >= plans["p50"].makespan_s
    aggregate = {q: next(a for a in plan.assignments if a.task == "aggregate") for q, plan in plans.items()}
    assert aggregate["auto"].end_s - aggregate["auto"].start_s > aggregate["p50"].end_s - aggregate["p50"].start_s


def test_a_task_most_runs_skip_is_left_out_of_the_plan_and_named(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'traces.db'}"
    rows = [a for a in _attempts(4) if a.task_id != "profile" or a.run_id == "manual__0"]  # a branch skips it
    with TraceStore(store) as traces:
        traces.add(rows)
    by_task, err = _plan(tmp_path, store, tmp_path / "plan.json")
    assert set(by_task) == {"extract", "clean", "aggregate", "load"}
    assert "planned on the path its runs take most often, without profile (ran in 1 of 4 runs)" in err


def test_traces_only_from_resources_the_catalog_dropped_leave_the_hints_in_charge(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'traces.db'}"
    with TraceStore(store) as traces:
        traces.add(_attempts(2, resource_type="retired-pool"))  # a pool since removed from the catalog
    by_task, err = _plan(tmp_path, store, tmp_path / "plan.json")
    assert "nothing to learn from for this catalog" in err and "unknown resource type" in err
    assert "runtime: 5 from their hints" in err
    assert by_task["aggregate"]["memory_bytes"] == 1 * GIB  # the declared hint, as with no history


def test_unknown_dags_and_bad_hints_are_named(tmp_path: Path) -> None:
    result = _agora(
        tmp_path, "optimize", "airflow:no_such_dag", "--catalog", str(REPO / "catalogs" / "local.yaml"),
        "--dag-folder", str(REPO / "dags"), "--store", f"sqlite:///{tmp_path / 't.db'}", "-o", str(tmp_path / "p.json"),
    )  # fmt: skip
    assert result.returncode == 2
    assert "DAG 'no_such_dag' is not in" in result.stderr and DAG_ID in result.stderr
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "bad_hint.py").write_text(
        "from datetime import datetime\n"
        "from airflow.sdk import DAG\n"
        "from airflow.providers.standard.operators.empty import EmptyOperator\n"
        "with DAG('bad_hint', schedule=None, start_date=datetime(2026, 1, 1)):\n"
        "    EmptyOperator(task_id='t', executor_config={'agora': {'memory_gb': 4}})\n"
    )
    result = _agora(
        tmp_path, "optimize", "airflow:bad_hint", "--catalog", str(REPO / "catalogs" / "local.yaml"),
        "--dag-folder", str(folder), "--store", f"sqlite:///{tmp_path / 't.db'}", "-o", str(tmp_path / "p.json"),
    )  # fmt: skip
    assert result.returncode == 2
    assert "t.executor_config.agora.memory_gb" in result.stderr and "unknown key" in result.stderr
    assert not (tmp_path / "p.json").exists()


def test_a_declared_category_groups_tasks_and_a_bad_one_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "cats.py").write_text(
        "from datetime import datetime\n"
        "from airflow.sdk import DAG\n"
        "from airflow.providers.standard.operators.empty import EmptyOperator\n"
        "with DAG('cats', schedule=None, start_date=datetime(2026, 1, 1)):\n"
        "    EmptyOperator(task_id='fit_small', executor_config={'agora': {'category': 'train'}})\n"
        "    EmptyOperator(task_id='fit_large', executor_config={'agora': {'category': 'train'}})\n"
        "    EmptyOperator(task_id='report_3')\n"
        "with DAG('bad_cat', schedule=None, start_date=datetime(2026, 1, 1)):\n"
        "    EmptyOperator(task_id='t', executor_config={'agora': {'category': 7}})\n"
    )
    script = (
        "import json, sys\n"
        "from agora_optimizer.integration.airflow_dag import load_dag, workflow_shape\n"
        "shape = workflow_shape(load_dag('cats', sys.argv[1]))\n"
        "print('CATEGORIES' + json.dumps({t.task_id: t.category for t in shape.tasks}))\n"
        "load_dag('bad_cat', sys.argv[1])\n"
    )
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    result = subprocess.run(
        [sys.executable, "-c", script, str(folder)], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("CATEGORIES")]
    categories = json.loads(line.removeprefix("CATEGORIES"))
    assert categories == {"fit_small": "train", "fit_large": "train", "report_3": "report"}
    assert result.returncode != 0 and "t.executor_config.agora.category" in result.stderr


def test_a_dag_with_no_tasks_gets_the_empty_plan_and_it_can_be_put_in_force(tmp_path: Path) -> None:
    """Airflow runs a DAG with no tasks to success; ``agora optimize airflow:ID`` on one ended in a traceback."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "empty_dag.py").write_text(
        "from airflow.sdk import DAG\n\nwith DAG(dag_id='agora_empty', schedule=None):\n    pass\n", encoding="utf-8"
    )
    out, plans = tmp_path / "plan.json", tmp_path / "plans"
    result = _agora(
        tmp_path, "optimize", "airflow:agora_empty", "--catalog", str(REPO / "catalogs" / "local.yaml"),
        "--dag-folder", str(dags), "--store", f"sqlite:///{tmp_path / 'traces.db'}", "-o", str(out),
        "--time-limit-s", "30", "--json", "--apply", "--plan-dir", str(plans),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    summary = json.loads(result.stdout)  # JSON alone: Airflow's log lines while parsing go to stderr
    assert summary["tasks"] == 0 and summary["solver"]["status"] == "optimal"
    plan = load_plan(out)
    assert plan.workflow == "agora_empty" and plan.assignments == ()
    assert plan.makespan_s == 0.0 and plan.cost_usd == 0.0
    stored = PlanStore(plans).current("agora_empty")
    assert stored is not None and stored.plan == plan


def test_a_declared_gpus_need_is_planned_onto_a_gpu_type_and_reserved(tmp_path: Path) -> None:
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "train.py").write_text(
        "from datetime import datetime\n"
        "from airflow.sdk import DAG\n"
        "from airflow.providers.standard.operators.empty import EmptyOperator\n"
        "with DAG('train', schedule=None, start_date=datetime(2026, 1, 1)):\n"
        "    prep = EmptyOperator(task_id='prep', executor_config={'agora': {'runtime_s': 10}})\n"
        "    fit = EmptyOperator(task_id='fit', executor_config={'agora': {'runtime_s': 60, 'gpus': 2}})\n"
        "    prep >> fit\n"
    )
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        "network: {bandwidth_bytes_per_s: 1.0e9}\nresources:\n"
        "  - {name: cpu, backend: aws, vcpus: 2, memory_gib: 8, speed: 1, price_per_hour_usd: 0.1, count: 2}\n"
        "  - {name: gpu, backend: aws, vcpus: 8, memory_gib: 32, speed: 1, price_per_hour_usd: 1.0, count: 1,"
        " gpus: 4, gpu_model: NVIDIA L4, gpu_memory_gib: 24}\n"
    )
    out = tmp_path / "plan.json"
    result = _agora(
        tmp_path, "optimize", "airflow:train", "--catalog", str(catalog), "--dag-folder", str(folder),
        "--store", f"sqlite:///{tmp_path / 't.db'}", "-o", str(out), "--objective", "cost", "--time-limit-s", "30",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    by_task = {a["task"]: a for a in json.loads(out.read_text())["assignments"]}
    assert (by_task["fit"]["resource"], by_task["fit"]["gpus"]) == ("gpu", 2)
    assert by_task["prep"]["resource"] == "cpu" and "gpus" not in by_task["prep"]
    (folder / "train.py").write_text((folder / "train.py").read_text().replace("'gpus': 2", "'gpus': 'two'"))
    result = _agora(
        tmp_path, "optimize", "airflow:train", "--catalog", str(catalog), "--dag-folder", str(folder),
        "--store", f"sqlite:///{tmp_path / 't.db'}", "-o", str(tmp_path / "bad.json"),
    )  # fmt: skip
    assert result.returncode == 2 and "fit.executor_config.agora.gpus" in result.stderr


def _scan(run: int, size: int, seconds: float) -> TaskAttempt:
    """A past run of a task of category ``scan`` that read ``size`` bytes in about ``seconds``."""
    start = datetime(2026, 11, 1, tzinfo=UTC)
    return TaskAttempt.create(
        dag_id="sized", task_id="scan_before", run_id=f"r{run}_{size}", category="scan", operator="EmptyOperator",
        resource_type="local-small", backend="local", input_bytes=size, started_at=start,
        ended_at=start + timedelta(seconds=seconds * (1 + 0.02 * run)), peak_rss_bytes=100 * 2**20,
    )  # fmt: skip


def test_what_a_task_reads_is_planned_with_and_the_prediction_follows_its_size(tmp_path: Path) -> None:
    """A declared ``input_bytes`` and a file inlet reach the predictor as they do for WfFormat tasks: trained on
    a category's runs that read 1 MB in 10 s and 100 MB in 100 s, a task declaring 100 MB is planned at about
    100 s and one declaring 1 MB at about 10 s; a task whose inlet file grows from 1 MB to 100 MB between two
    plans goes from about 10 s to about 100 s (the runtime model answers by size, not by the category's median)."""
    folder = tmp_path / "dags"
    folder.mkdir()
    data = tmp_path / "data.bin"
    (folder / "sized.py").write_text(
        "from datetime import datetime\n"
        "from airflow.sdk import DAG, Asset\n"
        "from airflow.providers.standard.operators.empty import EmptyOperator\n"
        "with DAG('sized', schedule=None, start_date=datetime(2026, 1, 1)):\n"
        "    EmptyOperator(task_id='small', executor_config={'agora': {'category': 'scan', 'input_bytes': 10**6}})\n"
        "    EmptyOperator(task_id='large', executor_config={'agora': {'category': 'scan', 'input_bytes': 10**8}})\n"
        f"    EmptyOperator(task_id='reads_file', inlets=[Asset('file://{data}')],\n"
        "                  executor_config={'agora': {'category': 'scan'}})\n"
    )
    past = [_scan(run, size, seconds) for run in range(4) for size, seconds in ((10**6, 10.0), (10**8, 100.0))]
    store = f"sqlite:///{tmp_path / 'traces.db'}"
    with TraceStore(store) as traces:
        assert traces.add(past).written == 8

    def planned_runtimes_s(out: Path) -> tuple[dict[str, float], str]:
        result = _agora(
            tmp_path, "optimize", "airflow:sized", "--catalog", str(REPO / "catalogs" / "local.yaml"),
            "--dag-folder", str(folder), "--store", store, "-o", str(out), "--time-limit-s", "30",
            "--runtime-quantile", "p50",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assignments = json.loads(out.read_text())["assignments"]
        return {a["task"]: a["end_s"] - a["start_s"] for a in assignments}, result.stderr

    with data.open("wb") as file:
        file.truncate(10**6)  # sparse: its size is what the inlet reads
    before, err = planned_runtimes_s(tmp_path / "before.json")
    assert "inputs: small 1000000 bytes (declared), large 100000000 bytes (declared)" in err
    assert "reads_file 1000000 bytes in 1 file (inlets)" in err
    assert 8.0 <= before["small"] <= 12.5 and 80.0 <= before["large"] <= 125.0
    assert 8.0 <= before["reads_file"] <= 12.5
    with data.open("wb") as file:
        file.truncate(10**8)
    after, err = planned_runtimes_s(tmp_path / "after.json")
    assert "reads_file 100000000 bytes in 1 file (inlets)" in err
    assert 80.0 <= after["reads_file"] <= 125.0
    assert after["small"] == pytest.approx(before["small"]) and after["large"] == pytest.approx(before["large"])
    (folder / "sized.py").write_text((folder / "sized.py").read_text().replace("10**8", "-1"))
    result = _agora(
        tmp_path, "optimize", "airflow:sized", "--catalog", str(REPO / "catalogs" / "local.yaml"),
        "--dag-folder", str(folder), "--store", store, "-o", str(tmp_path / "bad.json"),
    )  # fmt: skip
    assert result.returncode == 2 and not (tmp_path / "bad.json").exists()
    assert "(DAG 'sized'): field 'large.executor_config.agora.input_bytes': must be >= 0, got -1" in result.stderr


def test_the_sizes_a_plan_used_are_named_for_a_few_tasks_and_counted_for_the_rest() -> None:
    from agora_optimizer.integration.airflow_dag import inputs_note
    from agora_optimizer.integration.dag_shape import DagShape, DagTask
    from agora_optimizer.integration.task_inputs import TaskInputs

    tasks = tuple(DagTask(task_id=f"t{i}", operator="EmptyOperator", upstream=()) for i in range(5))
    tasks += (
        DagTask(task_id="mapped[0]", operator="x", upstream=()),
        DagTask(task_id="mapped[1]", operator="x", upstream=()),
    )
    planned = {task.task_id: TaskInputs(100 * i, 1, "inlets") for i, task in enumerate(tasks)}
    planned["t0"] = TaskInputs()  # unknown, and nothing to say of it
    shape = DagShape(dag_id="d", fileloc="d.py", tasks=tasks)
    assert (
        inputs_note(shape, planned, most=2)
        == "inputs: t1 100 bytes in 1 file (inlets), t2 200 bytes in 1 file (inlets) and 3 more tasks"
    )
    assert inputs_note(shape, planned).endswith("t4 400 bytes in 1 file (inlets), mapped 600 bytes in 1 file (inlets)")
    assert inputs_note(shape, dict.fromkeys(planned, TaskInputs())) == ""


def test_planning_a_dag_says_nothing_of_airflow_unless_verbose(tmp_path: Path) -> None:
    """The issue: optimize airflow:DAG, which only plans, printed Airflow's log lines and a warning that plans
    are not applied (the executor is not configured); that warning matters only with --apply."""
    common = (
        "optimize", f"airflow:{DAG_ID}", "--catalog", str(REPO / "catalogs" / "local.yaml"),
        "--dag-folder", str(REPO / "dags"), "--store", f"sqlite:///{tmp_path / 'traces.db'}", "--time-limit-s", "3",
    )  # fmt: skip
    not_applied = "[agora] executor 'agora' is not in [core] executor; plans are not applied"
    quiet = _agora(tmp_path, *common, "-o", str(tmp_path / "quiet.json"))
    assert quiet.returncode == 0, quiet.stderr
    assert len(quiet.stdout.splitlines()) <= 15
    # where the predictions came from, and nothing else (but that the limit went on them, on a loaded machine)
    (predictions,) = [line for line in quiet.stderr.splitlines() if "went before planning" not in line]
    assert predictions.startswith("agora: predictions: ")
    verbose = _agora(tmp_path, *common, "-o", str(tmp_path / "verbose.json"), "-v")
    assert verbose.returncode == 0, verbose.stderr
    assert "Filling up the DagBag" in verbose.stderr and not_applied in verbose.stderr  # the warning is real
    plans = ("--apply", "--plan-dir", str(tmp_path / "plans"))
    applied = _agora(tmp_path, *common, "-o", str(tmp_path / "applied.json"), *plans)
    assert applied.returncode == 0, applied.stderr
    assert not_applied in applied.stderr and "Filling up the DagBag" not in applied.stderr
    assert load_plan(tmp_path / "quiet.json").workflow_source == f"airflow:{DAG_ID}"  # what the plan was made from


def test_pareto_traces_the_front_of_a_dag_read_as_optimize_reads_it(tmp_path: Path) -> None:
    """The issue: agora pareto airflow:agora_example_etl said "no such file"."""
    result = _agora(
        tmp_path, "pareto", f"airflow:{DAG_ID}", "--catalog", str(REPO / "catalogs" / "local.yaml"),
        "--dag-folder", str(REPO / "dags"), "--store", f"sqlite:///{tmp_path / 'traces.db'}", "--deadlines", "2",
        "--time-limit-s", "3", "--out", str(tmp_path / "front.json"), "--save-plans", str(tmp_path / "front"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    front = json.loads((tmp_path / "front.json").read_text())
    assert front["workflow"] == DAG_ID and front["points"]
    assert "runtimes: predicted, at p50, auto: no deadline" in result.stdout  # the hints, as optimize reads them
    # where the predictions came from, and nothing else (but that the limit went on them, on a loaded machine)
    said = [line for line in result.stderr.splitlines() if "left the sweep no time" not in line]
    assert [line.split(":")[1] for line in said] == [" predictions"]
    first = load_plan(tmp_path / "front" / "pareto-01.json")
    assert first.workflow_source == f"airflow:{DAG_ID}"
    assert {a.task for a in first.assignments} == {"extract", "clean", "aggregate", "profile", "load"}


TWO_DAGS = """
from datetime import datetime
from airflow.sdk import DAG
from airflow.providers.standard.operators.empty import EmptyOperator

for dag_id, (parent, child) in {"first": ("a", "b"), "second": ("c", "d")}.items():
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1)):
        EmptyOperator(task_id=parent) >> EmptyOperator(task_id=child)
"""
LEARN = """
import json, sys
from agora_optimizer.integration.airflow_dag import learned_platform_latency
latency = learned_platform_latency(sys.argv[1], {"first": [("a", "b")]}, "median", sys.argv[2])
starts = {"/".join(key): [s.median_s, s.p90_s, s.samples] for key, (s, _) in latency.learned.items()}
print("LEARNED" + json.dumps(starts))
"""


def test_the_platform_latency_is_learned_with_the_edges_of_every_dag_of_the_folder(tmp_path: Path) -> None:
    # Planning "first" (its edges given) learns from "second"'s traces too, each child counted from its parent's
    # end: d started 0.9 s after c ended, though its queued time (set when the executor let it go) was 0.1 s before.
    def row(dag_id: str, task: str, run: int, queued: float, started: float, ended: float) -> TaskAttempt:
        at = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(hours=run)
        return TaskAttempt.create(
            dag_id=dag_id, task_id=task, run_id=f"manual__{run}", resource_type="local-small", backend="local",
            machine=f"local-small#{task}", queued_at=at + timedelta(seconds=queued),
            started_at=at + timedelta(seconds=started), ended_at=at + timedelta(seconds=ended),
        )  # fmt: skip

    rows = []
    for run in range(3):  # roots 0.1 s from queued; b 0.5 s after a's end, d 0.9 s after c's
        rows += [row("first", "a", run, 0.0, 0.1, 1.0), row("first", "b", run, 1.05, 1.5, 2.0)]
        rows += [row("second", "c", run, 0.0, 0.1, 1.0), row("second", "d", run, 1.8, 1.9, 2.5)]
    store = f"sqlite:///{tmp_path / 'traces.db'}"
    with TraceStore(store) as traces:
        traces.add(rows)
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "two.py").write_text(TWO_DAGS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {"AIRFLOW_HOME": str(tmp_path / "home"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    result = subprocess.run(
        [sys.executable, "-c", LEARN, store, str(tmp_path / "dags")], capture_output=True, text=True, env=env,
        timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("LEARNED"))
    median_s, p90_s, samples = json.loads(line.removeprefix("LEARNED"))["local/local-small"]
    expected = summarize([0.1] * 6 + [0.5] * 3 + [0.9] * 3)  # before: d's 0.1 s from its queued time, not 0.9
    assert samples == 12 and (median_s, p90_s) == pytest.approx((expected.median_s, expected.p90_s))

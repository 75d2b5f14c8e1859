"""``dags/agora_wfinstance.py``: a real WfInstances workflow replayed as an Airflow DAG, scaled down.

Airflow runs only in subprocesses with their own ``AIRFLOW_HOME`` (as in ``test_airflow_dag.py``).
One module fixture parses the DAG folder with Airflow's ``DagBag`` under several environments,
plans the DAG through ``agora_optimizer.integration.airflow_dag`` and runs the replay callable
of a few tasks, measuring their peak RSS and CPU time; another runs a whole DAG with
``dag.test()``. What the DAG should be is read here from the WfFormat files with ``json``.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.traces.wfformat_import import read_workflow_shape
from harness.local_airflow import migrate_database
from tests.conftest import REPO

pytestmark = pytest.mark.airflow

MIB = 2**20
WORKFLOWS = REPO / "workflows"
DEFAULT = "blast-chameleon-small-001"  # the DAG file's default workflow
SECOND = "bacass-dirt02-001"  # nf-core ids with dots; the smallest bundled workflow (11 tasks)
DEFAULT_TIME_SCALE, DEFAULT_MEMORY_SCALE = 0.02, 0.25  # the DAG file's defaults
SECOND_TIME_SCALE, SECOND_MEMORY_SCALE = 0.01, 0.5  # set through the environment
MIN_RUNTIME_S, MAX_RUNTIME_S, MAX_MEMORY_BYTES = 0.05, 3.0, 256 * MIB  # the DAG file's floor and caps
TASK_PROCESS_BYTES = 160 * MIB  # what the DAG file adds to each hint for Airflow's task process itself
E2E_TIME_SCALE = 0.002  # the whole of bacass in dag.test(): about 8 s of replay plus Airflow's own time

PROBE = textwrap.dedent(
    """
    import importlib.util, json, os, resource, sys, time
    from pathlib import Path

    from airflow.dag_processing.dagbag import DagBag

    from agora_optimizer.integration.airflow_dag import load_dag, predicted_dag_workflow, workflow_shape
    from agora_optimizer.io.catalog_file import load_catalog

    dags, catalog, store, scenarios = Path(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    base = dict(os.environ)
    out = {}
    for name, env in scenarios.items():
        os.environ.clear()
        os.environ.update(base, **env)
        bag = DagBag(dag_folder=str(dags), safe_mode=False, load_op_links=False)
        out[name] = {
            "errors": {Path(k).name: v for k, v in bag.import_errors.items()},
            "dags": {
                dag_id: {
                    t.task_id: {
                        "upstream": sorted(t.upstream_task_ids),
                        "executor_config": t.executor_config,
                        "op_kwargs": t.op_kwargs,
                        "do_xcom_push": t.do_xcom_push,
                        "retries": t.retries,
                    }
                    for t in dag.tasks
                }
                for dag_id, dag in bag.dags.items()
                if dag_id.startswith("agora_wfinstance_")
            },
        }
    os.environ.clear()
    os.environ.update(base)

    dag_id = "agora_wfinstance_" + os.environ["WANT_WORKFLOW"]
    shape = workflow_shape(load_dag(dag_id, dags))
    workflow, origin = predicted_dag_workflow(dag_id, load_catalog(catalog), folder=dags, store_url=store)
    out["shape_edges"] = sorted([e.parent, e.child] for e in shape.edges)
    out["workflow_edges"] = sorted([e.parent, e.child] for e in workflow.edges)
    out["workflow_tasks"] = sorted(t.id for t in workflow.tasks)
    out["shape_inputs"] = {t.task_id: {"input_bytes": t.input_bytes, "input_files": t.input_files} for t in shape.tasks}

    spec = importlib.util.spec_from_file_location("agora_wfinstance_probe", dags / "agora_wfinstance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out["ids"] = module.airflow_task_ids(json.loads(os.environ["WANT_IDS"]))

    def status(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

    def cpu_s():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    bag = DagBag(dag_folder=str(dags), safe_mode=False, load_op_links=False)
    dag = bag.dags[dag_id]
    out["runs"], out["sleeps"] = {}, {}  # each task with the CPU load, then with the sleep load
    for task_id in json.loads(os.environ["WANT_RUNS"]):
        op = dag.get_task(task_id)
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM, the peak RSS, to the RSS of now
        rss_before, cpu_before, wall_before = status("VmRSS"), cpu_s(), time.monotonic()
        op.python_callable(*op.op_args, **op.op_kwargs)
        out["runs"][task_id] = {
            "wall_s": time.monotonic() - wall_before,
            "cpu_s": cpu_s() - cpu_before,
            "peak_rss_above_start_bytes": status("VmHWM") - rss_before,
        }
        load = os.environ.get("AGORA_WFINSTANCE_LOAD")
        os.environ["AGORA_WFINSTANCE_LOAD"] = "sleep"  # the same block written, no busy loop: its pages' cost now
        cpu_before, wall_before = cpu_s(), time.monotonic()
        op.python_callable(*op.op_args, **op.op_kwargs)
        out["sleeps"][task_id] = {"wall_s": time.monotonic() - wall_before, "cpu_s": cpu_s() - cpu_before}
        os.environ.pop("AGORA_WFINSTANCE_LOAD")
        if load is not None:
            os.environ["AGORA_WFINSTANCE_LOAD"] = load
    longest = dag.get_task(json.loads(os.environ["WANT_RUNS"])[1])
    os.environ["AGORA_WFINSTANCE_LOAD"] = "gpu"
    try:
        longest.python_callable(*longest.op_args, **longest.op_kwargs)
    except ValueError as exc:
        out["bad_load"] = str(exc)
    print("PROBE " + json.dumps(out))
    """
)

E2E = textwrap.dedent(
    """
    import importlib.util, json, sys
    from pathlib import Path

    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    spec = importlib.util.spec_from_file_location("agora_wfinstance_e2e", Path(sys.argv[1]) / "agora_wfinstance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag = getattr(module, sys.argv[2])
    run = dag.test(run_conf=json.loads(sys.argv[3]))
    with create_session() as session:
        rows = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == dag.dag_id)).all()
        tis = {ti.task_id: [str(ti.state), ti.duration] for ti in rows}
    print("E2E " + json.dumps({"state": str(run.state), "tis": tis}))
    """
)


@dataclass(frozen=True)
class Expected:
    """What the DAG of one WfFormat file must be, read with ``json`` alone."""

    tasks: dict[str, dict[str, Any]]  # id -> runtime_s, memory_bytes, cores, name (as recorded)
    edges: set[tuple[str, str]]
    inputs: dict[str, dict[str, int]]  # id -> input_bytes, input_files: as the predictor sizes the WfFormat task


def _inputs(name: str) -> dict[str, dict[str, int]]:
    shape = read_workflow_shape(WORKFLOWS / f"{name}.json")
    return {t.task_id: {"input_bytes": t.input_bytes, "input_files": t.input_files} for t in shape.tasks}


def _expected(name: str) -> Expected:
    workflow = json.loads((WORKFLOWS / f"{name}.json").read_text())["workflow"]
    records = {r["id"]: r for r in workflow["execution"]["tasks"]}
    tasks, edges = {}, set()
    for item in workflow["specification"]["tasks"]:
        record = records[item["id"]]
        assert record.get("memoryInBytes"), "these files record every task's memory; no fallback rule to mirror"
        tasks[item["id"]] = {
            "runtime_s": record["runtimeInSeconds"],
            "memory_bytes": record["memoryInBytes"],
            "cores": math.ceil(record.get("coreCount") or 1),
            "name": item["name"],
        }
        edges |= {(parent, item["id"]) for parent in item.get("parents", [])}
        edges |= {(item["id"], child) for child in item.get("children", [])}
    return Expected(tasks, edges, _inputs(name))


def _scaled(task: dict[str, Any], time_scale: float, memory_scale: float) -> tuple[float, int]:
    runtime_s = min(max(task["runtime_s"] * time_scale, MIN_RUNTIME_S), MAX_RUNTIME_S)
    return runtime_s, min(round(task["memory_bytes"] * memory_scale), MAX_MEMORY_BYTES)


def _airflow_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AGORA_"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__AGORA__TRACE_STORE_URL": f"sqlite:///{home / 'traces.db'}",
            **extra,
        }
    )
    return env


def _run(script: str, args: list[str], env: dict[str, str], marker: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=240, check=False
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-5000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith(marker + " ")]
    assert lines, (result.stdout + result.stderr)[-5000:]
    found: dict[str, Any] = json.loads(lines[-1][len(marker) + 1 :])
    return found


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("wfinstance-probe")
    own_dir = home / "workflows"
    own_dir.mkdir()
    shutil.copy(WORKFLOWS / f"{SECOND}.json", own_dir / "my run+1.json")
    second = {
        "AGORA_WFINSTANCE": SECOND,
        "AGORA_WFINSTANCE_TIME_SCALE": str(SECOND_TIME_SCALE),
        "AGORA_WFINSTANCE_MEMORY_SCALE": str(SECOND_MEMORY_SCALE),
    }
    scenarios = {
        "default": {},
        "second": second,
        "both": {"AGORA_WFINSTANCE": f"{DEFAULT}, {SECOND}"},
        "missing": {"AGORA_WFINSTANCE": "no-such-workflow"},
        "own_dir": {"AGORA_WFINSTANCE": "my run+1", "AGORA_WORKFLOWS_DIR": str(own_dir)},
        "bad_scale": {"AGORA_WFINSTANCE_TIME_SCALE": "fast"},
        "clamped": {"AGORA_WFINSTANCE_TIME_SCALE": "1", "AGORA_WFINSTANCE_MIN_RUNTIME_S": "1.5",
                    "AGORA_WFINSTANCE_MAX_RUNTIME_S": "2", "AGORA_WFINSTANCE_MAX_MEMORY_BYTES": str(64 * MIB)},
        "bad_clamps": {"AGORA_WFINSTANCE_MIN_RUNTIME_S": "5", "AGORA_WFINSTANCE_MAX_RUNTIME_S": "2"},
        "no_hints": {"AGORA_WFINSTANCE_HINTS": "none"},
        "bad_hints": {"AGORA_WFINSTANCE_HINTS": "some"},
    }  # fmt: skip
    expected = _expected(DEFAULT).tasks
    biggest = max(expected, key=lambda t: expected[t]["memory_bytes"])
    longest = max(expected, key=lambda t: expected[t]["runtime_s"])
    shortest = min(expected, key=lambda t: expected[t]["runtime_s"])
    env = _airflow_env(
        home,
        WANT_WORKFLOW=DEFAULT,
        WANT_RUNS=json.dumps([biggest, longest, shortest]),
        WANT_IDS=json.dumps(["a b", "a_b", "a:b", "c/d", "x" * 300, "ok.id-1"]),
    )
    args = [str(REPO / "dags"), str(REPO / "catalogs" / "local.yaml"), f"sqlite:///{home / 'empty.db'}"]
    return _run(PROBE, [*args, json.dumps(scenarios)], env, "PROBE")


def _check_dag(found: dict[str, Any], name: str, time_scale: float, memory_scale: float) -> None:
    expected = _expected(name)
    tasks = found["dags"][f"agora_wfinstance_{name}"]
    assert set(tasks) == set(expected.tasks)  # these files' ids are valid Airflow ids: kept as they are
    edges = {(parent, child) for child, task in tasks.items() for parent in task["upstream"]}
    assert edges == expected.edges
    for task_id, task in tasks.items():
        runtime_s, memory_bytes = _scaled(expected.tasks[task_id], time_scale, memory_scale)
        hints = task["executor_config"]["agora"]
        about = task["executor_config"]["agora_wfinstance"]
        # Its own category: the shipped model knows the recorded task's, whose runtime is not the replay's.
        assert hints == {"cores": expected.tasks[task_id]["cores"], "runtime_s": pytest.approx(runtime_s),
                         "memory_bytes": memory_bytes + TASK_PROCESS_BYTES,
                         "category": f"replay:{about['category']}", **expected.inputs[task_id]}  # fmt: skip
        assert task["op_kwargs"] == {"runtime_s": pytest.approx(runtime_s), "memory_bytes": memory_bytes}
        assert about["wf_task_id"] == task_id and about["wf_task_name"] == expected.tasks[task_id]["name"]
        assert about["category"] and about["category"] in about["wf_task_name"]
        assert task["do_xcom_push"] is False
        assert task["retries"] == 0  # with the recorded values declared, a failure is a failure


def test_the_default_dag_is_the_workflow_scaled_by_the_default_scales(probe: dict[str, Any]) -> None:
    assert "agora_wfinstance.py" not in probe["default"]["errors"]
    assert list(probe["default"]["dags"]) == [f"agora_wfinstance_{DEFAULT}"]
    _check_dag(probe["default"], DEFAULT, DEFAULT_TIME_SCALE, DEFAULT_MEMORY_SCALE)
    hints = [t["executor_config"]["agora"] for t in probe["default"]["dags"][f"agora_wfinstance_{DEFAULT}"].values()]
    assert min(h["runtime_s"] for h in hints) == pytest.approx(MIN_RUNTIME_S)  # blast has 0.01 s tasks: floored
    assert max(h["memory_bytes"] for h in hints) - TASK_PROCESS_BYTES < MAX_MEMORY_BYTES  # 902 MiB * 0.25: not capped


def test_a_second_workflow_and_scales_come_from_the_environment(probe: dict[str, Any]) -> None:
    assert "agora_wfinstance.py" not in probe["second"]["errors"]
    assert list(probe["second"]["dags"]) == [f"agora_wfinstance_{SECOND}"]
    _check_dag(probe["second"], SECOND, SECOND_TIME_SCALE, SECOND_MEMORY_SCALE)
    hints = [t["executor_config"]["agora"] for t in probe["second"]["dags"][f"agora_wfinstance_{SECOND}"].values()]
    assert max(h["runtime_s"] for h in hints) == pytest.approx(MAX_RUNTIME_S)  # 1385 s * 0.01: capped
    assert max(h["memory_bytes"] for h in hints) - TASK_PROCESS_BYTES == MAX_MEMORY_BYTES  # 1061 MiB * 0.5: capped
    assert sorted(probe["both"]["dags"]) == [f"agora_wfinstance_{SECOND}", f"agora_wfinstance_{DEFAULT}"]
    _check_dag(probe["both"], SECOND, DEFAULT_TIME_SCALE, DEFAULT_MEMORY_SCALE)


def test_the_workflows_folder_can_be_moved_and_odd_file_names_give_valid_dag_ids(probe: dict[str, Any]) -> None:
    assert "agora_wfinstance.py" not in probe["own_dir"]["errors"]
    assert list(probe["own_dir"]["dags"]) == ["agora_wfinstance_my_run_1"]
    assert set(probe["own_dir"]["dags"]["agora_wfinstance_my_run_1"]) == set(_expected(SECOND).tasks)


def test_a_missing_workflow_is_an_import_error_naming_the_file_and_the_variable(probe: dict[str, Any]) -> None:
    assert probe["missing"]["dags"] == {}
    error = probe["missing"]["errors"]["agora_wfinstance.py"]
    assert str(WORKFLOWS / "no-such-workflow.json") in error and "$AGORA_WFINSTANCE='no-such-workflow'" in error
    assert DEFAULT in error  # the workflows that are there
    bad = probe["bad_scale"]["errors"]["agora_wfinstance.py"]
    assert "$AGORA_WFINSTANCE_TIME_SCALE must be a number, got 'fast'" in bad


def test_without_hints_a_task_declares_its_cores_recorded_category_and_input_only(probe: dict[str, Any]) -> None:
    """``AGORA_WFINSTANCE_HINTS=none`` (bench/run_learning_loop.py): the plan alone knows what a task takes;
    the task still runs its scaled runtime and memory, and says what it reads (a size, not a hint)."""
    expected = _expected(DEFAULT)
    tasks = probe["no_hints"]["dags"][f"agora_wfinstance_{DEFAULT}"]
    for task_id, task in tasks.items():
        about = task["executor_config"]["agora_wfinstance"]
        assert task["executor_config"]["agora"] == {"cores": expected.tasks[task_id]["cores"],
                                                    "category": about["category"],
                                                    **expected.inputs[task_id]}  # fmt: skip
        runtime_s, memory_bytes = _scaled(expected.tasks[task_id], DEFAULT_TIME_SCALE, DEFAULT_MEMORY_SCALE)
        assert task["op_kwargs"] == {"runtime_s": pytest.approx(runtime_s), "memory_bytes": memory_bytes}
        assert task["retries"] == 2  # a task killed at a predicted reservation tries again, with more memory
    bad = probe["bad_hints"]["errors"]["agora_wfinstance.py"]
    assert "$AGORA_WFINSTANCE_HINTS must be one of all, none, got 'some'" in bad


def test_the_clamps_are_options_and_refused_when_they_make_no_range(probe: dict[str, Any]) -> None:
    hints = [t["executor_config"]["agora"] for t in probe["clamped"]["dags"][f"agora_wfinstance_{DEFAULT}"].values()]
    runtimes = [h["runtime_s"] for h in hints]
    assert min(runtimes) == pytest.approx(1.5) and max(runtimes) == pytest.approx(2.0)
    assert max(h["memory_bytes"] for h in hints) - TASK_PROCESS_BYTES == 64 * MIB
    bad = probe["bad_clamps"]["errors"]["agora_wfinstance.py"]
    assert "$AGORA_WFINSTANCE_MIN_RUNTIME_S (5) must be > 0 and <= $AGORA_WFINSTANCE_MAX_RUNTIME_S (2)" in bad


def test_task_ids_are_made_valid_without_collisions(probe: dict[str, Any]) -> None:
    ids = probe["ids"]
    assert ids["a_b"] == "a_b" and ids["ok.id-1"] == "ok.id-1"  # valid ids are kept
    assert ids["a b"].startswith("a_b-") and ids["a:b"].startswith("a_b-") and ids["a b"] != ids["a:b"]
    assert ids["c/d"] == "c_d"  # changed but unique: no suffix needed
    assert len(ids["x" * 300]) == 250
    assert len(set(ids.values())) == len(ids)
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]{1,250}", i) for i in ids.values())


def test_agora_plans_the_dag_with_the_workflows_edges(probe: dict[str, Any]) -> None:
    expected = _expected(DEFAULT)
    assert {tuple(e) for e in probe["shape_edges"]} == expected.edges
    assert {tuple(e) for e in probe["workflow_edges"]} == expected.edges
    assert set(probe["workflow_tasks"]) == set(expected.tasks)


def test_agora_plans_each_replayed_task_with_what_the_recorded_task_read(probe: dict[str, Any]) -> None:
    """The plan's task shapes carry the sizes the predictor gives the WfFormat tasks (read_workflow_shape)."""
    expected = _expected(DEFAULT)
    assert probe["shape_inputs"] == expected.inputs
    assert all(sizes["input_files"] > 0 for sizes in expected.inputs.values())  # blast: every task lists its inputs
    assert sum(sizes["input_bytes"] for sizes in expected.inputs.values()) > 10**9  # blastall's 5 GB each


def test_a_replayed_task_holds_its_scaled_memory_and_burns_its_scaled_cpu_time(probe: dict[str, Any]) -> None:
    expected = _expected(DEFAULT).tasks
    assert len(probe["runs"]) == 3  # the biggest-memory, the longest and the shortest task
    for task_id, run in probe["runs"].items():
        runtime_s, memory_bytes = _scaled(expected[task_id], DEFAULT_TIME_SCALE, DEFAULT_MEMORY_SCALE)
        assert memory_bytes - 2 * MIB <= run["peak_rss_above_start_bytes"] <= memory_bytes + 16 * MIB, (task_id, run)
        assert run["wall_s"] + 0.01 >= run["cpu_s"] >= runtime_s - 0.01, (task_id, run)  # a busy loop, not a sleep
        # Writing every page of the block costs CPU of its own before the busy loop starts: about 0.05 s for
        # 225 MiB on a free core, 0.77 s once on a loaded CI machine. The probe measures it beside each run (the
        # same task with the sleep load); the run burns its runtime on top, and not much more.
        write_cpu_s = probe["sleeps"][task_id]["cpu_s"]
        assert run["cpu_s"] <= 1.2 * runtime_s + 0.1 + 2 * write_cpu_s, (task_id, run, write_cpu_s)
    biggest = max(expected, key=lambda t: expected[t]["memory_bytes"])
    assert probe["runs"][biggest]["peak_rss_above_start_bytes"] > 200 * MIB  # blastall_ID000009: 902 MiB * 0.25


def test_with_the_sleep_load_a_replayed_task_waits_its_runtime_instead_of_burning_it(probe: dict[str, Any]) -> None:
    expected = _expected(DEFAULT).tasks
    longest = max(expected, key=lambda t: expected[t]["runtime_s"])
    runtime_s, _ = _scaled(expected[longest], DEFAULT_TIME_SCALE, DEFAULT_MEMORY_SCALE)
    run = probe["sleeps"][longest]
    assert run["wall_s"] >= runtime_s - 0.01, run
    # A sleep, not a busy loop: against the same task's run with the CPU load, at least half its runtime
    # of CPU saved (both write the task's memory block, whose cost grows under load: 0.12 s once in CI).
    burned = probe["runs"][longest]
    assert run["cpu_s"] < burned["cpu_s"] - 0.5 * runtime_s, (run, burned)
    assert probe["bad_load"] == "$AGORA_WFINSTANCE_LOAD must be one of cpu, sleep, got 'gpu'"


def test_the_smallest_workflow_runs_end_to_end_in_airflow(tmp_path: Path) -> None:
    env = _airflow_env(tmp_path, AGORA_WFINSTANCE=SECOND, AGORA_WFINSTANCE_TIME_SCALE=str(E2E_TIME_SCALE))
    migrate_database(env)
    expected = _expected(SECOND).tasks
    slowed = max(expected, key=lambda t: expected[t]["runtime_s"])
    conf = {"agora_slow": {slowed: 3.0}}  # this run only: the task burns three times its CPU time
    found = _run(E2E, [str(REPO / "dags"), f"agora_wfinstance_{SECOND}", json.dumps(conf)], env, "E2E")
    assert found["state"] == "success"
    assert set(found["tis"]) == set(expected)
    for task_id, (state, duration_s) in found["tis"].items():
        runtime_s, _ = _scaled(expected[task_id], E2E_TIME_SCALE, DEFAULT_MEMORY_SCALE)
        factor = 3.0 if task_id == slowed else 1.0
        assert state == "success" and duration_s >= factor * runtime_s - 0.01, (task_id, state, duration_s)

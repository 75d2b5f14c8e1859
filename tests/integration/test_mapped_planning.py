"""``agora optimize airflow:DAG_ID`` on a DAG with mapped tasks: each expected instance is planned.

The width of a mapped task comes from the trace store (the 90th percentile of its past runs'
widths), else a literal list at parse time, else ``[agora] default_map_width``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore
from tests.conftest import REPO

pytestmark = pytest.mark.airflow

DAG_ID = "agora_mapped"
FOLDER = Path(__file__).parent / "mapped_dags"


def optimize(home: Path, store: str, default_width: str = "5") -> tuple[dict[str, dict[str, object]], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__AGORA__DEFAULT_MAP_WIDTH": default_width,
    }
    out = home / "plan.json"
    command = [
        sys.executable, "-m", "agora_optimizer", "optimize", f"airflow:{DAG_ID}", "--catalog",
        str(REPO / "catalogs" / "local.yaml"), "--dag-folder", str(FOLDER), "--store", store, "-o", str(out),
        "--time-limit-s", "30", "--json",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    plan = json.loads(out.read_text())
    return {a["task"]: a for a in plan["assignments"]}, result.stderr


def past_runs(widths: list[int]) -> list[TaskAttempt]:
    """One run per width: ``square`` expanded to that many instances, each 3 s."""
    rows = []
    for run, width in enumerate(widths):
        start = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(hours=run)
        for index in range(width):
            attempt = TaskAttempt.create(
                dag_id=DAG_ID, task_id="square", run_id=f"manual__{run}", map_index=index,
                operator="_PythonDecoratedOperator", resource_type="local-small", backend="local",
                started_at=start, ended_at=start + timedelta(seconds=3), peak_rss_bytes=50 * 2**20,
            )  # fmt: skip
            rows.append(attempt)
    return rows


def instances(by_task: dict[str, dict[str, object]], task_id: str) -> list[str]:
    return sorted((t for t in by_task if t.startswith(f"{task_id}[")), key=lambda t: int(t[len(task_id) + 1 : -1]))


def starts_after(by_task: dict[str, dict[str, object]], child: str, parents: list[str]) -> bool:
    return all(float(by_task[child]["start_s"]) >= float(by_task[p]["end_s"]) - 1e-9 for p in parents)  # type: ignore[arg-type]


def test_with_no_history_literal_lists_and_the_default_width_are_planned(tmp_path: Path) -> None:
    by_task, err = optimize(tmp_path, f"sqlite:///{tmp_path / 'empty.db'}")
    assert instances(by_task, "square") == [f"square[{i}]" for i in range(5)]  # [agora] default_map_width
    assert instances(by_task, "echo") == [f"echo[{i}]" for i in range(3)]  # the literal list
    assert instances(by_task, "per_item.scale") == ["per_item.scale[0]", "per_item.scale[1]"]
    assert instances(by_task, "per_item.report") == ["per_item.report[0]", "per_item.report[1]"]
    assert {"numbers", "total"} <= set(by_task) and not {"square", "echo", "per_item.scale"} & set(by_task)
    squares = instances(by_task, "square")
    assert all(starts_after(by_task, s, ["numbers"]) for s in squares)
    assert starts_after(by_task, "total", squares)  # after every instance of its mapped parent
    assert all(starts_after(by_task, f"echo[{i}]", squares) for i in range(3))
    # Within a mapped task group, instance i follows instance i only.
    assert starts_after(by_task, "per_item.report[1]", ["per_item.scale[1]"])
    assert "mapped square: 5 ([agora] default_map_width)" in err
    assert "mapped echo: 3 (a literal list at parse time)" in err


def test_after_three_runs_the_planned_width_is_the_p90_of_the_past_widths(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'traces.db'}"
    with TraceStore(store) as traces:
        traces.add(past_runs([4, 9, 6]))
    by_task, err = optimize(tmp_path, store)
    assert instances(by_task, "square") == [f"square[{i}]" for i in range(9)]
    assert "mapped square: 9 (p90 of 3 past runs, median 6)" in err
    assert instances(by_task, "echo") == [f"echo[{i}]" for i in range(3)]  # no history: still its literal list


@pytest.mark.parametrize("value", ["0", "many"])
def test_a_bad_default_map_width_is_named(tmp_path: Path, value: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env |= {
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__AGORA__DEFAULT_MAP_WIDTH": value,
    }
    command = [
        sys.executable, "-m", "agora_optimizer", "optimize", f"airflow:{DAG_ID}", "--catalog",
        str(REPO / "catalogs" / "local.yaml"), "--dag-folder", str(FOLDER), "--store", f"sqlite:///{tmp_path / 't.db'}",
        "-o", str(tmp_path / "p.json"),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "[agora] default_map_width" in result.stderr and repr(value) in result.stderr
    assert not (tmp_path / "p.json").exists()

"""``bench/compat_example_dags.py``: which example DAGs run, how runs are compared, where tasks must have run.

No Airflow here: the suite's pure parts, on task instances as Airflow's REST API gives them.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

from tests.bench import bench_script

compat = bench_script("compat_example_dags")


def ti(task_id: str, state: str | None = "success", map_index: int = -1, **fields: Any) -> Any:
    row = {"task_id": task_id, "map_index": map_index, "state": state, "try_number": 1, "executor": None,
           "queue": "default", "ran": True} | fields  # fmt: skip
    return compat.TaskInstance(**row)


def dag(*tasks: tuple[str, bool, bool], timetable: str = "NullTimetable", **fields: Any) -> Any:
    """An example DAG of (task id, mapped, empty) tasks."""
    defaults = {"dag_id": "example", "origin": "core", "file": "example.py", "timetable": timetable}
    return compat.ExampleDag(
        **(defaults | fields), tasks=tuple(compat.ExampleTask(t, "PythonOperator", m, e) for t, m, e in tasks)
    )


# -- compare -------------------------------------------------------------------------------------


def test_the_same_task_instances_in_the_same_states_are_the_same_whatever_ran_them() -> None:
    local = [ti("a"), ti("b", "skipped", ran=False), ti("m", map_index=0), ti("m", map_index=1)]
    agora = [ti("m", map_index=1), ti("a", executor="agora", queue="local-small"), ti("m", map_index=0),
             ti("b", "skipped", ran=False, executor="agora")]  # fmt: skip
    assert compat.compare(local, agora) == []


def test_a_state_a_try_count_or_a_missing_map_index_is_a_difference() -> None:
    local = [ti("a"), ti("b", "failed"), ti("r", try_number=2), ti("m", map_index=0), ti("m", map_index=1)]
    agora = [ti("a", "failed"), ti("b", "failed"), ti("r", try_number=3), ti("m", map_index=0), ti("x")]
    assert compat.compare(local, agora) == [
        "m[1]: only under Local (success)",
        "x: only under Agora (success)",
        "a: success under Local, failed under Agora",
        "r: success after 2 tries under Local, 3 under Agora",
    ]


def test_a_mapped_task_that_never_expanded_is_compared_at_map_index_minus_one() -> None:
    local = [ti("m", "upstream_failed", ran=False)]
    assert compat.compare(local, [ti("m", "skipped", ran=False)]) == [
        "m: upstream_failed under Local, skipped under Agora"
    ]


# -- routing -------------------------------------------------------------------------------------


def test_every_task_that_ran_ran_in_an_agora_job_mapped_instances_too() -> None:
    example = dag(("plain", False, False), ("empty", False, True), ("placed", True, False))
    tis = [
        ti("plain", executor="agora", try_number=2),
        ti("empty", executor="agora", ran=False),  # the scheduler finished it: no executor ever saw it
        ti("placed", map_index=0, executor="agora"),
        ti("placed", map_index=1, executor="agora"),
    ]
    jobs = {("plain", 2, -1), ("placed", 1, 0), ("placed", 1, 1)}
    assert compat.routing(example, tis, lambda t: (t.task_id, t.try_number, t.map_index) in jobs) == []
    left = [*tis[:3], ti("placed", map_index=1)]  # one instance left on its own executor
    assert compat.routing(example, left, lambda t: (t.task_id, t.try_number, t.map_index) in jobs) == [
        "placed[1]: ran in an AgoraExecutor job but its executor is None"
    ]


def test_a_task_left_on_its_executor_one_without_its_job_and_one_in_a_job_it_was_not_routed_to_are_named() -> None:
    example = dag(("stayed", False, False), ("lost", False, False), ("mapped", True, False))
    tis = [ti("stayed"), ti("lost", executor="agora", try_number=2), ti("mapped", map_index=3)]
    jobs = {("lost", 1, -1), ("mapped", 1, 3)}  # lost's first try ran in a job, its second did not
    assert compat.routing(example, tis, lambda t: (t.task_id, t.try_number, t.map_index) in jobs) == [
        "stayed: not routed to the AgoraExecutor (executor None)",
        "lost: routed to the AgoraExecutor but no job of it ran try 2",
        "mapped[3]: ran in an AgoraExecutor job but its executor is None",
    ]


def test_a_local_run_must_not_touch_the_agora_executor() -> None:
    tis = [ti("a"), ti("b", executor="agora"), ti("c")]
    assert compat.local_routing(tis, lambda t: t.task_id == "c") == [
        "b: on the AgoraExecutor without a plan",
        "c: on the AgoraExecutor without a plan",
    ]
    assert compat.local_routing([ti("a")], lambda t: False) == []


# -- which DAGs run ------------------------------------------------------------------------------


def test_left_out_dags_have_their_reason_and_runnable_ones_none() -> None:
    assert compat.left_out_reason(dag(("t", False, False))) == ""
    assert "outside web service" in compat.left_out_reason(dag(("t", False, False), dag_id="example_dag_decorator"))
    assert "Kubernetes" in compat.left_out_reason(dag(file="example_local_kubernetes_executor.py"))
    # scheduled by assets only: triggered by hand like any other DAG
    assert compat.left_out_reason(dag(timetable="AssetTriggeredTimetable")) == ""
    assert compat.left_out_reason(dag(timetable="PartitionedAssetTimetable")) == ""
    assert compat.left_out_reason(dag(timetable="AssetOrTimeSchedule")) == ""  # a time schedule too: runs by hand
    assert compat.left_out_reason(dag(required_params=("who",))) == "needs params at trigger time: who"
    # the suite supplies the conf a DAG needs
    assert compat.left_out_reason(dag(dag_id="example_params_ui_tutorial", required_params=("required_field",))) == ""
    pypi = dag(dag_id="example_python_operator")
    assert compat.left_out_reason(pypi) == ""
    assert "PyPI" in compat.left_out_reason(pypi, offline=True)


def test_the_named_dags_and_files_are_airflows_examples() -> None:
    """Each id the suite names is a DAG id (or a file) of the installed examples: a rename shows here."""
    found = importlib.util.find_spec("airflow")  # not imported: that takes seconds
    assert found is not None and found.origin is not None
    package = Path(found.origin).parent
    sources = {
        path.name: path.read_text() for folder in compat.FOLDERS.values() for path in (package / folder).glob("*.py")
    }
    text = "\n".join(sources.values())
    named = {*compat.LEFT_OUT, *compat.PYPI_DAGS, *compat.CONF, *compat.SAME_DATE_AS, *compat.SAME_DATE_AS.values(),
             *compat.NEEDS, *compat.NEEDS.values()}  # fmt: skip
    for dag_id in named:
        stem_id = f"{dag_id}.py" in sources and "Path(__file__).stem" in sources[f"{dag_id}.py"]
        assert stem_id or re.search(rf"\b{re.escape(dag_id)}\b", text), dag_id
    assert set(compat.FILE_LEFT_OUT) <= set(sources)


def test_each_dag_has_a_monday_date_of_its_own_and_its_agora_run_a_week_later() -> None:
    order = [f"dag_{i:03d}" for i in range(150)] + ["example_external_task_marker_parent"]
    order += ["example_external_task_marker_child"]
    dates = {d: compat.logical_date(d, order, agora=False) for d in order}
    child, parent = "example_external_task_marker_child", "example_external_task_marker_parent"
    assert dates[child] == dates[parent]  # its sensors wait for the parent's task at their own date
    others = [date for d, date in dates.items() if d != child]
    assert len(set(others)) == len(others)
    assert all(date.weekday() == 0 for date in dates.values())  # a Monday: no DAG sleeps in on a weekend
    for dag_id, date in dates.items():
        later = compat.logical_date(dag_id, order, agora=True)
        assert later - date == compat.AGORA_SHIFT and later.weekday() == 0
        assert (later.hour, later.minute) == (date.hour, date.minute)


def test_dags_that_wait_for_each_other_run_as_one_unit() -> None:
    ids = ["a", "example_external_task_marker_child", "b", "example_external_task_marker_parent"]
    assert compat.run_units(ids) == [
        ["a"],
        ["example_external_task_marker_child", "example_external_task_marker_parent"],
        ["b"],
    ]
    assert compat.run_units(["example_external_task_marker_child"]) == [["example_external_task_marker_child"]]


# -- verdicts and the report ---------------------------------------------------------------------


def _outcome(**fields: Any) -> Any:
    return compat.Outcome("d", "core", "d.py", 2, [], **fields)


@pytest.mark.parametrize(
    ("fields", "verdict"),
    [
        ({"left_out": "needs S3"}, "left out"),
        ({"local_state": "success", "agora_state": "success"}, "same"),
        ({"local_state": "failed", "agora_state": "failed"}, "same"),  # a DAG that fails by design, both times
        ({"local_state": "success", "agora_state": "failed"}, "differs"),
        ({"local_state": "success", "agora_state": "success", "differences": ["a: x"]}, "differs"),
        ({"local_state": "success", "agora_state": "success", "routing": ["a: y"]}, "differs"),
        ({"local_state": "success", "error": "agora optimize failed (1): boom"}, "differs"),
        ({"local_state": "running", "error": "still running after 900 s"}, "did not finish under Local"),
        ({"error": "trigger failed: 400"}, "error"),
    ],
)
def test_a_dag_is_the_same_only_when_nothing_differs(fields: dict[str, Any], verdict: str) -> None:
    assert _outcome(**fields).verdict == verdict


def test_the_table_names_the_command_each_difference_and_each_left_out_dag_with_its_reason() -> None:
    same = _outcome(local_state="success", agora_state="success", local_tis=[{"map_index": 0}, {"map_index": -1}])
    asset = compat.Outcome("g", "core", "g.py", 1, [], asset_scheduled="AssetTriggeredTimetable",
                           local_state="success", agora_state="success")  # fmt: skip
    differs = compat.Outcome("e", "standard", "e.py", 1, [], local_state="success", agora_state="failed",
                             differences=["run success under Local, failed under Agora"])  # fmt: skip
    left = compat.Outcome("f", "core", "f.py", 1, [], left_out="calls an outside web API")
    outcomes = [same, differs, left, asset]
    document = {
        "command": "python bench/compat_example_dags.py --dags d,e,f",
        "date": "2026-12-02",
        "airflow": "3.3.2",
        "standard_provider": "1.21.0",
        "catalog": "catalogs/local.yaml",
        "wall_s": 120.0,
        "counts": {"same": 1, "differs": 1, "left out": 1},
        "files_without_dags": {"k8s.py": "needs Kubernetes"},
        "dags": [{**compat.asdict(o), "verdict": o.verdict} for o in outcomes],
    }
    table = compat.markdown(document)
    assert "`python bench/compat_example_dags.py --dags d,e,f`" in table
    assert "| d | core/d.py | 2 | 0 (1 TIs) | success | 2 |" in table
    assert "| g *(assets)* | core/g.py | 1 | 0 (0 TIs) | success |" in table
    assert "- e: run success under Local, failed under Agora" in table
    assert "| f | core/f.py | calls an outside web API |" in table and "| (none) | k8s.py | needs Kubernetes |" in table
    assert "1 differs, 1 left out, 1 same" in table


def test_the_shown_command_hides_a_database_password() -> None:
    url = "postgresql+psycopg://agora:s3cret@127.0.0.1:54351/agora"
    assert compat.shown_command(["--dags", "a,b", "--database-url", url]) == (
        "python bench/compat_example_dags.py --dags a,b --database-url postgresql+psycopg://agora:***@127.0.0.1:54351/agora"
    )
    assert compat.shown_command([f"--database-url={url}"]).endswith(
        "--database-url=postgresql+psycopg://agora:***@127.0.0.1:54351/agora"
    )
    assert compat.shown_command(["--out", "x:y@z"]) == "python bench/compat_example_dags.py --out x:y@z"

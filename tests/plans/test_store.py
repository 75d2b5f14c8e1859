"""The plan store: readable by another user, history in the order plans were put in force, no lost entry."""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from agora_optimizer.errors import InputFileError
from agora_optimizer.io.plan_file import load_plan, write_plan
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.model.workflow import Edge, Task, Workflow
from agora_optimizer.plans import store as store_module
from agora_optimizer.plans.store import InvalidDagIdError, PlanStore, PlanStoreError, applied_at
from tests.executor.test_policy import parse
from tests.executor.test_policy import plan as policy_plan


def plan(label: str, created_at: str = "2026-11-01T00:00:00Z", machine: str = "") -> Plan:
    """A one-task plan whose solver method is ``label`` (to tell plans apart), on a machine named after it
    unless ``machine`` is given (plans on the same machine are the same plan, whoever made them)."""
    one = Assignment("a", "c5.large", f"c5.large#{machine or label}", 0.0, 5.0, 1, 2**30)
    return Plan("etl", "aws", Objective(), 5.0, 1.0, (one,), SolverInfo(label, "heuristic", None, 0.0), created_at)


def methods(store: PlanStore, dag_id: str = "etl") -> list[str]:
    return [load_plan(path).solver.method for path in store.history(dag_id)]


def save_at_once(store: PlanStore, threads_n: int, saves_n: int, **save: Any) -> None:
    """``threads_n`` threads, started at one instant, each save ``saves_n`` plans ``w<thread>-<i>`` in order (all
    with the same created_at), passing ``save`` on to :meth:`PlanStore.save`; none may raise."""
    start = threading.Barrier(threads_n)
    errors: list[BaseException] = []

    def saver(worker: int) -> None:
        try:
            start.wait()
            for i in range(saves_n):
                store.save("etl", plan(f"w{worker}-{i}"), **save)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=saver, args=(w,)) for w in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors


def test_files_are_readable_by_other_users_whatever_the_umask(tmp_path: Path) -> None:
    store = PlanStore(tmp_path / "plans")
    old = os.umask(0o077)
    try:
        stored = store.save("etl", plan("first"))
    finally:
        os.umask(old)
    for directory in (store.root, store.root / "etl", store.root / "etl" / "history"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o755, directory
    for path in (stored.path, store.current_path("etl")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_history_is_in_the_order_plans_were_put_in_force_and_a_rollback_comes_last(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    old = store.save("etl", plan("old", "2026-11-01T00:00:00Z"))
    store.save("etl", plan("new", "2026-11-02T00:00:00Z"))
    store.save("etl", load_plan(old.path))  # a rollback: the older plan again, its created_at unchanged
    assert methods(store) == ["old", "new", "old"]
    current = store.current("etl")
    assert current is not None and current.plan.solver.method == "old"
    stamps = [applied_at(path) for path in store.history("etl")]
    assert None not in stamps and stamps == sorted(stamps)  # type: ignore[type-var]


def test_saves_at_the_same_instant_each_keep_their_entry(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    threads_n, saves_n = 8, 5
    save_at_once(store, threads_n, saves_n)
    saved = methods(store)
    assert sorted(saved) == sorted(f"w{w}-{i}" for w in range(threads_n) for i in range(saves_n))
    for w in range(threads_n):  # each thread's saves in its own order
        mine = [m for m in saved if m.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{i}" for i in range(saves_n)]
    current = store.current("etl")
    assert current is not None and current.plan.solver.method == saved[-1]


def test_a_failed_write_leaves_no_temporary_and_the_current_plan_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PlanStore(tmp_path)
    store.save("etl", plan("first"))
    flushed: list[int] = []

    def disk_full(fd: int) -> None:
        flushed.append(fd)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(PlanStoreError, match=r"plan of DAG 'etl' not saved.*No space left on device"):
        store.save("etl", plan("second"))
    assert flushed  # the new plan was to be flushed to disk before it took effect
    monkeypatch.undo()
    leftovers = [p.name for p in tmp_path.rglob("*") if p.name.startswith(".") or p.suffix == ".tmp"]
    assert leftovers == []
    assert methods(store) == ["first"]
    current = store.current("etl")
    assert current is not None and current.plan.solver.method == "first"


def test_a_failure_after_the_history_entry_takes_it_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = PlanStore(tmp_path)
    store.save("etl", plan("first"))

    def cannot_write(path: Path, *args: object, **kwargs: object) -> None:
        raise InputFileError(path, "cannot be written: Read-only file system")

    monkeypatch.setattr(store_module, "write_text_atomically", cannot_write)  # current.json, after the entry
    with pytest.raises(PlanStoreError, match=r"current\.json: cannot be written: Read-only file system"):
        store.save("etl", plan("second"))
    assert methods(store) == ["first"]
    assert [p.name for p in (store.root / "etl" / "history").iterdir() if p.name.startswith(".")] == []


def test_history_of_the_old_layout_is_still_read_and_new_plans_come_after_it(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    history = tmp_path / "etl" / "history"
    history.mkdir(parents=True)
    # the old layout named entries by created_at; the later-created plan was applied first
    write_plan(plan("applied-first", "2026-11-02T00:00:00Z"), history / "20261102T000000Z-000.json")
    write_plan(plan("applied-second", "2026-11-01T00:00:00Z"), history / "20261101T000000Z-000.json")
    os.utime(history / "20261102T000000Z-000.json", ns=(1_000_000_000, 1_000_000_000))
    os.utime(history / "20261101T000000Z-000.json", ns=(2_000_000_000, 2_000_000_000))
    write_plan(plan("applied-second"), store.current_path("etl"))
    assert methods(store) == ["applied-first", "applied-second"]
    store.save("etl", plan("applied-third", "2026-10-01T00:00:00Z"))
    assert methods(store) == ["applied-first", "applied-second", "applied-third"]
    assert store.history("etl")[-1].name.startswith("000003-applied-")


UNICODE_DAGS = """
from datetime import datetime
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

for dag_id in ("données_été", "日本語_パイプライン"):
    with DAG(dag_id=dag_id, schedule=None, start_date=datetime(2026, 1, 1)):
        EmptyOperator(task_id="a") >> EmptyOperator(task_id="b")
"""


@pytest.mark.parametrize("dag_id", ["données_été", "日本語_パイプライン", "a..b", "x" * 250])
def test_every_dag_id_airflow_accepts_gets_its_own_directory(tmp_path: Path, dag_id: str) -> None:
    store = PlanStore(tmp_path)
    store.save(dag_id, plan("first"))
    assert store.dag_ids() == [dag_id] and store.current_path(dag_id).parent == tmp_path / dag_id
    assert methods(store, dag_id) == ["first"]


@pytest.mark.parametrize(
    "dag_id", ["..", ".", "a/b", "../etc", "a\\b", "%2e%2e", "", "a b", "a\n", "x" * 251, "é" * 200]
)
def test_a_dag_id_that_airflow_refuses_or_that_is_a_path_is_refused(tmp_path: Path, dag_id: str) -> None:
    store = PlanStore(tmp_path / "plans")
    with pytest.raises(InvalidDagIdError, match="DAG id"):
        store.save(dag_id, plan("first"))
    with pytest.raises(InvalidDagIdError, match="DAG id"):
        store.current(dag_id)
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere


@pytest.mark.slow  # Airflow parses the DAGs in a Python of its own
def test_the_policy_routes_a_unicode_dag_by_its_plan_and_logs_no_error_for_one_without(tmp_path: Path) -> None:
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "unicode.py").write_text(UNICODE_DAGS, encoding="utf-8")
    PlanStore(tmp_path / "plans").save("données_été", policy_plan({"a": "local-small", "b": "local-large"}))
    report = parse(tmp_path)
    assert report["errors"] == {}
    assert (report["tasks"]["données_été.a"]["executor"], report["tasks"]["données_été.a"]["queue"]) == (
        "agora",
        "local-small",
    )
    assert report["tasks"]["日本語_パイプライン.a"]["executor"] is None
    assert "not a valid Airflow DAG id" not in report["log"] and "ERROR" not in report["log"]


def test_a_plan_is_found_by_its_version_after_a_newer_one_is_in_force(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    first = store.save("etl", plan("first", "2026-11-01T00:00:00Z"))
    version = store_module.plan_version(store.current_path("etl").read_bytes())
    assert version == store_module.plan_version(first.path.read_bytes())  # current and entry: one version
    store.save("etl", plan("second", "2026-11-02T00:00:00Z"))
    found = store.find("etl", version)
    assert found is not None and found.plan.solver.method == "first"
    newest = store.find("etl", store_module.plan_version(store.current_path("etl").read_bytes()))
    assert newest is not None and newest.plan.solver.method == "second"
    assert store.find("etl", "0" * 12) is None and store.find("etl", "") is None


# The workflow a plan was made from, kept beside its history entry for the executor's re-plan.

ETL = Workflow.create(
    "etl",
    [Task("a", 5.0, 1, 2**30, "extract", "category-median"), Task("b", 2.5, 2, 3 * 2**30, "load", "predicted")],
    [Edge("a", "b", 123_456)],
)


def version_of(path: Path) -> str:
    return store_module.plan_version(path.read_bytes())


def test_the_workflow_saved_with_a_plan_is_read_back_by_the_plan_version(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    first = store.save("etl", plan("first"), workflow=ETL)
    sidecar = store_module.workflow_path(first.path)
    assert sidecar.name == first.path.name.removesuffix(".json") + ".workflow.json"
    assert stat.S_IMODE(sidecar.stat().st_mode) == 0o644
    second = store.save("etl", plan("second", "2026-11-02T00:00:00Z"))  # a newer plan, saved without one
    assert methods(store) == ["first", "second"]  # the workflow file is no history entry
    found = store.workflow("etl", version_of(first.path))
    assert found == ETL  # tasks (runtime, cores, memory, category, memory source) and edges with bytes
    assert found is not None and found.parents["b"] == [Edge("a", "b", 123_456)]
    assert store.workflow("etl", version_of(second.path)) is None
    assert store.workflow("etl", version_of(store.current_path("etl"))) is None  # the current plan is 'second'
    assert store.workflow("etl", "0" * 12) is None and store.workflow("etl", "") is None
    assert store.workflow("other", version_of(first.path)) is None


def test_an_entry_of_the_old_layout_has_no_workflow(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    history = tmp_path / "etl" / "history"
    history.mkdir(parents=True)
    write_plan(plan("old"), history / "20261101T000000Z-000.json")
    assert store.workflow("etl", version_of(history / "20261101T000000Z-000.json")) is None


def test_an_unreadable_workflow_names_its_file(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    stored = store.save("etl", plan("first"), workflow=ETL)
    sidecar = store_module.workflow_path(stored.path)
    sidecar.write_text('{"format": "agora-workflow/1", "name": "etl", "tasks": [{"id": "a"}], "edges": []}')
    with pytest.raises(PlanStoreError, match=rf"{sidecar}: field 'tasks\[0\]\.runtime_s': is required"):
        store.workflow("etl", version_of(stored.path))
    sidecar.write_text("{not json")
    with pytest.raises(PlanStoreError, match=rf"{sidecar}: invalid JSON"):
        store.workflow("etl", version_of(stored.path))


def test_a_workflow_of_another_plan_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    other = Workflow.create("reports", list(ETL.tasks), list(ETL.edges))
    with pytest.raises(PlanStoreError, match="plan is for workflow 'etl', not 'reports'"):
        store.save("etl", plan("first"), workflow=other)
    assert not (tmp_path / "etl").exists()


def test_a_workflow_that_cannot_be_written_leaves_no_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = PlanStore(tmp_path)
    store.save("etl", plan("first"), workflow=ETL)
    real = store_module.write_text_atomically

    def no_room_for_workflows(path: Path, *args: Any, **kwargs: Any) -> None:
        if str(path).endswith(".workflow.json"):
            raise InputFileError(path, "cannot be written: No space left on device")
        real(path, *args, **kwargs)

    monkeypatch.setattr(store_module, "write_text_atomically", no_room_for_workflows)
    with pytest.raises(PlanStoreError, match=r"\.workflow\.json: cannot be written: No space left on device"):
        store.save("etl", plan("second"), workflow=ETL)
    assert methods(store) == ["first"]
    current = store.current("etl")
    assert current is not None and current.plan.solver.method == "first"
    history = store.root / "etl" / "history"
    assert sorted(p.name.endswith(".workflow.json") for p in history.iterdir()) == [False, True]  # first's two


# A run's own plan (a window of many runs put in force), by its run_after.

RUN_AT = datetime(2026, 12, 3, 1, 0, tzinfo=UTC)


def test_a_run_plan_is_kept_by_its_run_after_and_found_by_version_with_its_workflow(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    store.save("etl", plan("current"), workflow=ETL)
    later = RUN_AT + timedelta(hours=1)
    kept = store.save_run("etl", later, plan("second run"), workflow=ETL)
    store.save_run("etl", RUN_AT.astimezone(timezone(timedelta(hours=2))), plan("first run"))  # any zone: UTC
    assert kept.path == tmp_path / "etl" / "runs" / "20261203T020000000000Z.json"
    assert store.run_plans("etl") == [store.run_path("etl", RUN_AT), kept.path]  # by run_after
    first = store.run_plan("etl", RUN_AT)
    assert first is not None and first.plan.solver.method == "first run"
    assert store.run_plan("etl", RUN_AT + timedelta(seconds=1)) is None and store.run_plan("other", RUN_AT) is None
    assert methods(store) == ["current"]  # a run plan is no history entry, nor the current plan
    found = store.find("etl", version_of(kept.path))
    assert found is not None and found.path == kept.path
    assert store.workflow("etl", version_of(kept.path)) == ETL  # the executor's re-plan of that run
    assert store.workflow("etl", version_of(first.path)) is None  # saved without one


def test_a_run_plan_saved_again_replaces_the_first_and_its_workflow(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    store.save_run("etl", RUN_AT, plan("first"), workflow=ETL)
    again = store.save_run("etl", RUN_AT, plan("again"))
    assert store.run_plans("etl") == [again.path]
    assert not store_module.workflow_path(again.path).exists()  # the first plan's workflow went with it
    found = store.run_plan("etl", RUN_AT)
    assert found is not None and found.plan.solver.method == "again"


def test_a_broken_run_plan_names_its_file_and_a_time_without_zone_is_refused(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    path = store.save_run("etl", RUN_AT, plan("first")).path
    path.write_text("{not json")
    with pytest.raises(PlanStoreError, match=rf"run 2026-12-03T01:00:00\+00:00 unreadable: {path}"):
        store.run_plan("etl", RUN_AT)
    with pytest.raises(PlanStoreError, match="has no time zone"):
        store.save_run("etl", datetime(2026, 12, 3), plan("first"))


# The history stays bounded: the rerun DAG puts a plan in force at every rerun.


def entries(store: PlanStore, dag_id: str = "etl") -> list[str]:
    return [path.name for path in store.history(dag_id)]


def test_a_plan_identical_to_the_current_one_adds_no_entry(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    first = store.save("etl", plan("first"), workflow=ETL)
    current = store.current_path("etl").read_bytes()
    again = store.save("etl", plan("first"))  # the same bytes
    assert again.unchanged and again.path == first.path
    # a re-plan that found the same placements: made later, by another solver, in another time
    replanned = store.save("etl", plan("other solver", "2026-11-05T00:00:00Z", machine="first"), workflow=ETL)
    assert replanned.unchanged and replanned.path == first.path
    assert replanned.plan.solver.method == "first"  # the plan in force, unchanged
    assert entries(store) == [first.path.name]
    assert store.current_path("etl").read_bytes() == current  # its version too
    moved = Assignment("a", "c5.xlarge", "c5.xlarge#0", 0.0, 5.0, 1, 2**30)
    changed = store.save("etl", replace(plan("first"), assignments=(moved,)), workflow=ETL)
    assert not changed.unchanged and len(entries(store)) == 2


def test_the_same_plan_with_another_workflow_is_a_new_entry(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    store.save("etl", plan("first"), workflow=ETL)
    slower = Workflow.create("etl", [replace(t, runtime_s=t.runtime_s * 2) for t in ETL.tasks], list(ETL.edges))
    saved = store.save("etl", plan("first"), workflow=slower)
    assert not saved.unchanged and len(entries(store)) == 2
    assert store.workflow("etl", version_of(saved.path)) == slower
    rollback = store.save("etl", plan("second", "2026-11-02T00:00:00Z"))
    assert not rollback.unchanged and methods(store) == ["first", "first", "second"]


def test_the_limit_removes_the_oldest_entries_and_their_workflows(tmp_path: Path) -> None:
    store = PlanStore(tmp_path, history_max=3)
    saved = [store.save("etl", plan(f"p{i}"), workflow=ETL, in_use=set()) for i in range(5)]
    assert methods(store) == ["p2", "p3", "p4"]
    assert saved[3].pruned == (saved[0].path,) and saved[4].pruned == (saved[1].path,)
    history = tmp_path / "etl" / "history"
    assert sorted(p.name for p in history.iterdir()) == sorted(
        name for s in saved[2:] for name in (s.path.name, store_module.workflow_path(s.path).name)
    )
    store.save("etl", plan("p5"))  # a save told nothing of the runs removes nothing
    assert methods(store) == ["p2", "p3", "p4", "p5"]
    assert store.save("etl", plan("p6"), in_use=set()).pruned == (saved[2].path, saved[3].path)
    assert methods(store) == ["p4", "p5", "p6"]
    assert store.history("etl")[-1].name.startswith("000007-")  # the numbers go on
    assert PlanStore(tmp_path).save("etl", plan("p7"), in_use=set()).pruned == ()  # 0: keep all


def test_an_entry_a_recorded_run_names_survives_the_limit(tmp_path: Path) -> None:
    store = PlanStore(tmp_path, history_max=2)
    oldest = store.save("etl", plan("p0"), workflow=ETL)
    named = version_of(oldest.path)
    for i in range(1, 5):
        store.save("etl", plan(f"p{i}"), in_use={named, "0" * 12})
    assert methods(store) == ["p0", "p3", "p4"]
    assert store.workflow("etl", named) == ETL  # the executor can still re-plan the run that names it
    found = store.find("etl", named)
    assert found is not None and found.plan.solver.method == "p0"
    store.save("etl", plan("p5"), in_use=set())  # no run names it any more
    assert methods(store) == ["p4", "p5"]


def test_an_identical_save_still_prunes_and_the_current_entry_is_never_pruned(tmp_path: Path) -> None:
    store = PlanStore(tmp_path)
    for i in range(4):
        store.save("etl", plan(f"p{i}"))
    kept = PlanStore(tmp_path, history_max=1).save("etl", plan("p3"), in_use=set())  # the limit lowered
    assert kept.unchanged and len(kept.pruned) == 3 and methods(store) == ["p3"]
    current = store.current("etl")
    assert current is not None and store.find("etl", version_of(current.path)) is not None


def test_concurrent_saves_under_a_limit_number_in_order_and_keep_the_newest(tmp_path: Path) -> None:
    store = PlanStore(tmp_path, history_max=4)
    threads_n, saves_n = 6, 5
    save_at_once(store, threads_n, saves_n, in_use=set())
    numbers = [int(name.split("-", 1)[0]) for name in entries(store)]
    assert numbers == list(range(threads_n * saves_n - 3, threads_n * saves_n + 1))  # the last 4 of 30
    current = store.current("etl")
    assert current is not None and current.plan.solver.method == methods(store)[-1]


def test_a_limit_below_0_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PlanStoreError, match="plan history of -1 entries"):
        PlanStore(tmp_path, history_max=-1)
    assert store_module.history_max_setting("100") == 100 and store_module.history_max_setting("0") == 0
    for bad in ("-1", "2.5", "many"):
        with pytest.raises(PlanStoreError, match=rf"\[agora\] plan_history_max must be a whole number.*{bad!r}"):
            store_module.history_max_setting(bad)

"""The platform latency: learned from trace rows, planned into every duration, shown by ``agora optimize``."""

from __future__ import annotations

import itertools
import json
import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agora_optimizer.cli import main
from agora_optimizer.io.catalog_file import load_catalog
from agora_optimizer.io.plan_file import write_plan
from agora_optimizer.io.wfformat import load_workflow
from agora_optimizer.model.plan import Objective
from agora_optimizer.optimize.optimize import optimize
from agora_optimizer.planning.validate import validate_plan
from agora_optimizer.predict.latency import (
    MEASURED_DEFAULTS,
    PlatformLatency,
    PlatformLatencyError,
    default_latency,
    latency_samples,
    learn_latency,
    statistic_of,
    summarize,
    with_platform_latency,
)
from agora_optimizer.traces.records import TaskAttempt
from agora_optimizer.traces.store import TraceStore
from tests import spec_checker
from tests.conftest import resource, wfformat_15, write_json, write_yaml

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DAG = "etl"
EDGES = {DAG: [("extract", "clean"), ("extract", "load"), ("clean", "load")]}


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _attempt(task: str, run: str, queued: float, started: float, ended: float, **fields: object) -> TaskAttempt:
    values: dict[str, object] = {
        "dag_id": DAG,
        "task_id": task,
        "run_id": run,
        "resource_type": "pool-a",
        "backend": "local",
        "queued_at": _at(queued),
        "started_at": _at(started),
        "ended_at": _at(ended),
    }
    values.update(fields)
    return TaskAttempt.create(**values)


def _run(run: str, offset: float = 0.0) -> list[TaskAttempt]:
    """extract -> clean -> load, each on its own machine: clean waits 1.5 s, load 0.5 s after its last parent."""
    return [
        _attempt("extract", run, offset, offset + 4.0, offset + 5.0, machine="pool-a#0"),
        _attempt("clean", run, offset + 5.2, offset + 6.5, offset + 8.0, machine="pool-a#1"),
        _attempt("load", run, offset + 8.1, offset + 8.5, offset + 9.0, machine="pool-a#2"),
    ]


def test_with_edges_a_task_is_ready_when_its_last_parent_ends() -> None:
    starts, ends = latency_samples(_run("r1"), EDGES)[("local", "pool-a")]
    # extract is a root: from its queued time (4 s); clean from extract's end (1.5 s); load from clean's end
    # (0.5 s), not from extract's, which ended earlier.
    assert sorted(starts) == pytest.approx([0.5, 1.5, 4.0])
    assert ends == []  # no slot release known


def test_without_edges_a_task_is_ready_when_it_was_queued() -> None:
    starts, _ = latency_samples(_run("r1"))[("local", "pool-a")]
    assert sorted(starts) == pytest.approx([0.4, 1.3, 4.0])


def _split_work_merge() -> list[TaskAttempt]:
    """One run of split -> work[0], work[1] (a mapped task) -> merge, each on a machine of pool-a."""
    return [
        _attempt("split", "r1", 0.0, 1.0, 2.0, machine="pool-a#0"),
        _attempt("work", "r1", 2.1, 2.5, 4.0, map_index=0, machine="pool-a#1"),
        _attempt("work", "r1", 2.1, 3.0, 6.0, map_index=1, machine="pool-a#2"),
        _attempt("merge", "r1", 6.1, 6.25, 7.0, machine="pool-a#3"),
    ]


def test_a_mapped_tasks_instances_are_matched_to_the_plans_edges_by_map_index() -> None:
    edges = {DAG: [("split", "work[0]"), ("split", "work[1]"), ("work[0]", "merge"), ("work[1]", "merge")]}
    rows = _split_work_merge()
    starts, _ = latency_samples(rows, edges)[("local", "pool-a")]
    # split from its queued time (1 s); work[0] 0.5 s and work[1] 1 s after split's end; merge 0.25 s
    # after work[1]'s end, the later of its two parents.
    assert sorted(starts) == pytest.approx([0.25, 0.5, 1.0, 1.0])


def test_a_mapped_task_named_alone_as_a_dag_folder_names_it_counts_from_its_parents_and_its_last_instance() -> None:
    # A DAG folder's edges name the mapped task, not its instances (another DAG than the one planned).
    edges = {DAG: [("split", "work"), ("work", "merge")]}
    rows = _split_work_merge()
    starts, _ = latency_samples(rows, edges)[("local", "pool-a")]
    # as with the plan's instance names: each instance from split's end, merge from work[1]'s, the last one (before:
    # the instances from their queued time, 0.4 and 0.9 s, and merge none, its parent "work" never seen to end)
    assert sorted(starts) == pytest.approx([0.25, 0.5, 1.0, 1.0])


def test_parents_are_matched_within_the_same_dag_run() -> None:
    rows = [*_run("r1"), _attempt("clean", "r2", 100.0, 101.0, 102.0)]  # r2's extract is not in the store
    starts, _ = latency_samples(rows, EDGES)[("local", "pool-a")]
    assert len(starts) == 3  # r2's clean has no parent end to count from, so no sample


def test_a_retry_and_a_busy_machine_give_no_start_sample() -> None:
    retry = _attempt("clean", "r1", 20.0, 30.0, 31.0, try_number=2, machine="pool-a#1")
    busy = [  # clean runs on extract's machine, which the trace cannot say when it freed
        _attempt("extract", "r3", 0.0, 1.0, 5.0, machine="pool-a#0"),
        _attempt("clean", "r3", 5.0, 9.0, 10.0, machine="pool-a#0"),
    ]
    starts, _ = latency_samples([retry, *busy], EDGES)[("local", "pool-a")]
    assert starts == [pytest.approx(1.0)]  # r3's extract only


def test_a_machine_freed_at_its_tasks_end_gives_its_next_task_a_start_sample_from_that_end() -> None:
    """The executor frees a machine at its task's end (the worker's task-ended mark): with ``freed_at_end``
    every task of a machine gives a start sample, not only the first (which, under a plan, is one a run)."""
    extract = _attempt("extract", "r3", 0.0, 1.0, 5.0, machine="pool-a#0")
    clean = _attempt("clean", "r3", 5.0, 9.0, 10.0, machine="pool-a#0")
    starts, ends = latency_samples([extract, clean], EDGES, freed_at_end=True)[("local", "pool-a")]
    assert sorted(starts) == pytest.approx([1.0, 4.0]) and ends == []  # clean: 4 s after extract's end
    given = latency_samples([extract, clean], EDGES, {extract.key: _at(8.0)}, freed_at_end=True)
    assert sorted(given[("local", "pool-a")][0]) == pytest.approx([1.0, 1.0])  # a known release still wins
    learned = learn_latency([extract, clean] * 3, EDGES, min_samples=5, freed_at_end=True)
    assert learned.learned[("local", "pool-a")][0] is not None  # 6 samples, where 3 would not be enough


def test_a_known_slot_release_gives_the_end_latency_and_moves_the_next_tasks_ready_time() -> None:
    extract = _attempt("extract", "r3", 0.0, 1.0, 5.0, machine="pool-a#0")
    clean = _attempt("clean", "r3", 5.0, 9.0, 10.0, machine="pool-a#0")
    freed = {extract.key: _at(8.0), clean.key: _at(12.5)}
    starts, ends = latency_samples([extract, clean], EDGES, freed)[("local", "pool-a")]
    assert sorted(ends) == pytest.approx([2.5, 3.0])
    assert sorted(starts) == pytest.approx([1.0, 1.0])  # clean: from the slot's release (8 s), not extract's end


def test_a_sample_far_below_zero_is_clock_skew_and_dropped() -> None:
    early = _attempt("extract", "r1", 0.0, 0.0, 1.0)
    freed = {early.key: _at(-5.0)}
    _, ends = latency_samples([early], None, freed)[("local", "pool-a")]
    assert ends == []


def test_median_and_p90() -> None:
    samples = [float(x) for x in range(1, 11)]
    measured = summarize(samples)
    assert measured.median_s == statistics.median(samples)
    # p90 between the 9th and 10th of ten samples, by linear interpolation over the closed range
    assert 9.0 < measured.p90_s < 10.0
    assert measured.p90_s == pytest.approx(9.1)
    assert measured.samples == 10
    assert summarize([3.0]).p90_s == 3.0


def test_too_few_samples_fall_back_to_the_measured_defaults() -> None:
    cat = load_catalog(Path("catalogs/local.yaml"))
    pool = cat.resources[0]
    rows = [
        _attempt(
            t.task_id,
            t.run_id,
            0,
            0,
            0,
            resource_type=pool.name,
            machine="",
            queued_at=t.queued_at,
            started_at=t.started_at,
            ended_at=t.ended_at,
        )
        for run in range(2)
        for t in _run(f"r{run}", offset=100.0 * run)
    ]  # 6 start samples of the first pool
    few = learn_latency(rows, EDGES, min_samples=7).for_resource(pool)
    assert few.start is None and few.start_used == MEASURED_DEFAULTS["local"].start
    enough = learn_latency(rows, EDGES, min_samples=6).for_resource(pool)
    assert enough.start is not None and enough.start.samples == 6
    assert enough.start_used.median_s == pytest.approx(statistics.median([4.0, 1.5, 0.5] * 2))
    assert enough.end is None and enough.end_used == MEASURED_DEFAULTS["local"].end  # no slot release known
    other = learn_latency(rows, EDGES, min_samples=6).for_resource(cat.resources[1])
    assert other.start is None  # the samples belong to the first pool only
    assert enough.added_s("median") == pytest.approx(enough.start.median_s + MEASURED_DEFAULTS["local"].end.median_s)
    assert enough.added_s("p90") > enough.added_s("median")
    assert enough.added_s("none") == 0.0


def test_a_backend_never_measured_gets_the_local_numbers() -> None:
    assert default_latency("aws_batch") == MEASURED_DEFAULTS["local"]
    assert default_latency("slurm").start.median_s > 3 * default_latency("local").start.median_s  # measured apart


def test_bad_options_are_refused() -> None:
    with pytest.raises(PlatformLatencyError, match="--platform-latency must be one of median, p90, none, got 'mean'"):
        statistic_of("mean")
    with pytest.raises(PlatformLatencyError, match="min_samples"):
        learn_latency([], min_samples=0)


def _chain(tmp_path: Path) -> tuple[Path, Path]:
    """Three 2-second tasks in a chain, two independent 3-second ones; two machine types."""
    workflow = wfformat_15(
        [
            {"id": "a", "runtime": 2.0},
            {"id": "b", "runtime": 2.0, "parents": ["a"]},
            {"id": "c", "runtime": 2.0, "parents": ["b"]},
            {"id": "d", "runtime": 3.0},
            {"id": "e", "runtime": 3.0},
        ]
    )
    catalog = {
        "network": {"bandwidth_bytes_per_s": 1e9},
        "resources": [
            resource("pool-a", backend="local", vcpus=1, count=1, price_per_hour_usd=0.0),
            resource("pool-b", backend="local", vcpus=1, count=1, speed=2.0, price_per_hour_usd=0.0),
        ],
    }
    return write_json(tmp_path / "wf.json", workflow), write_yaml(tmp_path / "cat.yaml", catalog)


def test_the_optimizer_plans_with_the_latency_and_writes_a_valid_plan(tmp_path: Path) -> None:
    wf_path, cat_path = _chain(tmp_path)
    wf, cat = load_workflow(wf_path), load_catalog(cat_path)
    latency = PlatformLatency({})  # the measured defaults for both types
    added = {r.name: latency.for_resource(r).added_s("median") for r in cat.resources}
    planned = with_platform_latency(cat, latency, "median")
    assert all(
        planned.by_name[r.name].runtime_s(wf.tasks[0]) == r.runtime_s(wf.tasks[0]) + added[r.name]
        for r in cat.resources
    )
    plan = optimize(wf, planned, Objective(kind="time"), str(cat_path), time_limit_s=5.0)
    without = optimize(wf, cat, Objective(kind="time"), str(cat_path), time_limit_s=5.0)
    assert validate_plan(plan, wf, cat) == []  # the catalog file, as a user checks it
    write_plan(plan, tmp_path / "plan.json")
    assert spec_checker.check_plan(json.loads((tmp_path / "plan.json").read_text()), wf_path, cat_path) == []
    # Each task holds its machine for its run plus its type's latency: on one machine, consecutive runs
    # are at least the latency apart, and a child starts at least its own type's latency after its parent.
    by_task = {a.task: a for a in plan.assignments}
    for a in plan.assignments:
        assert a.end_s - a.start_s == pytest.approx(cat.by_name[a.resource].runtime_s(wf.by_id[a.task]))
        assert a.start_s >= added[a.resource] - 1e-6
    for parent, child in (("a", "b"), ("b", "c")):
        assert by_task[child].start_s >= by_task[parent].end_s + added[by_task[child].resource] - 1e-6
    for machine in {a.machine for a in plan.assignments}:
        runs = sorted((a for a in plan.assignments if a.machine == machine), key=lambda a: a.start_s)
        for before, after in itertools.pairwise(runs):
            assert after.start_s >= before.end_s + added[after.resource] - 1e-6
    assert plan.makespan_s > without.makespan_s + min(added.values())


def test_agora_optimize_shows_the_latency_of_each_resource(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wf_path, cat_path = _chain(tmp_path)
    url = f"sqlite:///{tmp_path / 'traces.db'}"
    with TraceStore(url) as store:  # 6 runs on pool-a, each starting 0.25 s after it was queued
        store.add(
            _attempt("t", f"r{i}", 10.0 * i, 10.0 * i + 0.25, 10.0 * i + 1.0, resource_type="pool-a") for i in range(6)
        )
    argv = ["optimize", str(wf_path), "-c", str(cat_path), "-o", str(tmp_path / "p.json"), "--time-limit-s", "2"]

    assert main([*argv, "--store", url]) == 0  # one line of what was assumed
    (assumed,) = [line for line in capsys.readouterr().out.splitlines() if "latency" in line]
    assert assumed.startswith("assumed: platform latency +")
    assert "(median; types: 1 learned from the trace store, 1 from the measured defaults; -v for each)" in assumed
    assert main([*argv, "--store", url, "-v"]) == 0  # and each type's
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("platform latency:")]
    end = MEASURED_DEFAULTS["local"].end
    assert lines[0].startswith(f"platform latency: pool-a: +{0.25 + end.median_s:.2f} s per task (median)")
    assert "start 6 samples, end default (measured:" in lines[0]
    assert lines[1].startswith("platform latency: pool-b:") and "start default, end default" in lines[1]

    assert main([*argv, "--store", url, "--platform-latency", "p90", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    pool_a = summary["platform_latency"]["resources"]["pool-a"]
    assert summary["platform_latency"]["statistic"] == "p90"
    assert pool_a["start"] == {"median_s": 0.25, "p90_s": 0.25, "samples": 6, "source": "learned"}
    assert pool_a["end"]["source"] == "default" and pool_a["added_s"] == pytest.approx(0.25 + end.p90_s)
    with_latency = summary["agora"]["makespan_s"]

    assert main([*argv, "--platform-latency", "none", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert all(r["added_s"] == 0.0 for r in summary["platform_latency"]["resources"].values())
    assert summary["agora"]["makespan_s"] < with_latency
    assert main(["validate", str(tmp_path / "p.json"), "-w", str(wf_path), "-c", str(cat_path)]) == 0

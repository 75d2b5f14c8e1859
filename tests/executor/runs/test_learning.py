"""Learning during a run (executor/runs/learning.py): the run machine, driven with its events alone (no executor,
no backend, no Airflow), corrects a category's runtimes from its tasks that ended and re-plans the rest from them,
through the real re-planner over a real plan store."""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from agora_optimizer.executor.config import ExecutorConfig
from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import JobStatus
from agora_optimizer.executor.runs.events import (
    FeedJob,
    HeldJob,
    HeldWaiting,
    LeaseOpened,
    LeaseWanted,
    OpenLease,
    RecordRepair,
    RepairsDue,
    Replan,
    Replanned,
    StatusRead,
)
from agora_optimizer.executor.runs.learning import (
    SHRINK_K,
    corrected_workflow,
    correction_note,
    shrunk_factor,
    task_category,
)
from agora_optimizer.executor.runs.machine import RunMachine
from agora_optimizer.executor.runs.machine_order import MachineOrder, RunBook
from agora_optimizer.executor.runs.plans import PlanReader
from agora_optimizer.executor.runs.replanner import Replanner
from agora_optimizer.model.placement import Placement
from agora_optimizer.model.plan import Assignment, Objective, Plan, SolverInfo
from agora_optimizer.model.workflow import Task, Workflow
from agora_optimizer.plans.store import PlanStore, plan_version
from agora_optimizer.predict.runtime_in_run import RUN_SHRINK_K
from agora_optimizer.settings import SETTINGS
from tests.conftest import write_yaml
from tests.executor.runs.test_machine import CONFIG, GIB, RESOURCES, RUN, T0, now
from tests.executor.runs.test_repair import Sleeping, executor, hand_over_planned, plans, run_store
from tests.executor.runs.test_repair import save_plan as save_pool_plan
from tests.executor.test_executor_machines import heartbeat_until

__all__ = ["executor", "plans"]  # the fixtures, shared

# A time plan (its machines open as soon as their first task may start). prep on small#0 for 20 s; four
# simulations of 10 s each, two per machine, planned after prep's 20 s. The first
# two are let go at once (first on their machines) and take 20 s: twice their plan, yet they end at 20 s, before
# their planned end (30 s), so none of them is late; only what they teach moves the plan.
PLANNED = {
    "prep": ("small#0", 0.0, 20.0),
    "sim_1": ("small#1", 20.0, 30.0),
    "sim_2": ("small#2", 20.0, 30.0),
    "sim_3": ("small#1", 30.0, 40.0),
    "sim_4": ("small#2", 30.0, 40.0),
}
CATEGORIES = {"prep": "prepare", **{f"sim_{i}": "simulate" for i in range(1, 5)}}


def save_plan(plans: Path) -> tuple[PlanStore, str, MachineOrder]:
    """The plan above and the workflow it was made from, in a real plan store; its version and machine order."""
    tasks = [Task(t, end - start, 1, GIB, CATEGORIES[t]) for t, (_, start, end) in PLANNED.items()]
    workflow = Workflow.create("sims", tasks, [])
    assignments = tuple(Assignment(t, "small", m, start, end, 1, GIB) for t, (m, start, end) in PLANNED.items())
    solver = SolverInfo("t", "heuristic", None, 0)
    plan = Plan("sims", "test", Objective(kind="time"), 40.0, 0.0, assignments, solver, "2026-12-05T00:00:00Z")
    store = PlanStore(plans)
    store.save("etl", plan, workflow)
    version = plan_version(store.current_path("etl").read_bytes())
    parents = {task.id: frozenset(edge.parent for edge in workflow.parents[task.id]) for task in tasks}
    order = replace(MachineOrder.from_plan(plan, RESOURCES), categories=CATEGORIES, parents=parents)
    return store, version, order


Planned = dict[str, tuple[str, float, float]]  # task -> machine, planned start and end


def record(task: str, version: str, planned: Planned = PLANNED) -> JobRecord:
    return JobRecord("etl", task, "r1", 1, -1, "small", "local", 1, GIB, "", planned[task][0], version)


def let_go(
    machine: RunMachine, order: MachineOrder, version: str, task: str, at_s: float, planned: Planned = PLANNED
) -> None:
    """The task's job is built in its machine's lease and let go to it."""
    placement = Placement("small", 1, GIB, machine=planned[task][0], plan_version=version)
    for action in machine.handle(LeaseWanted(RUN, task, placement, order, "local"), now(at_s)):
        if isinstance(action, OpenLease):
            opened = LeaseOpened(RUN, action.lease, action.backend, action.order, action.plan_version)
            machine.handle(opened, now(at_s))
    [released] = machine.handle(HeldWaiting(HeldJob(task, record(task, version, planned), True, at_s)), now(at_s))
    assert isinstance(released, FeedJob) and type(released.event).__name__ == "Released"


def ends(machine: RunMachine, task: str, version: str, started_s: float, ended_s: float) -> None:
    status = JobStatus(
        "finished",
        exit_code=0,
        started_at=T0 + timedelta(seconds=started_s),
        ended_at=T0 + timedelta(seconds=ended_s),
    )
    assert machine.handle(StatusRead(record(task, version), True, status), now(ended_s + 1)) == []


def catalog_file(tmp_path: Path) -> Path:
    small = {
        "name": "small", "backend": "local", "vcpus": 2, "memory_gib": 4, "speed": 1.0, "price_per_hour_usd": 0.1,
        "billing": {"granularity_s": 1, "minimum_s": 0}, "boot_s": 0,
    }  # fmt: skip
    return write_yaml(tmp_path / "catalog.yaml", {"network": {"bandwidth_bytes_per_s": 1e9}, "resources": [small]})


# -- the rule, pure --------------------------------------------------------------------------------


def test_one_observation_moves_a_category_less_than_two_and_neither_all_the_way() -> None:
    twice = math.log(2.0)
    assert shrunk_factor([]) == 1.0
    one, two = shrunk_factor([twice]), shrunk_factor([twice, twice])
    assert 1.0 < one < two < 2.0
    assert one == pytest.approx(2 ** (1 / (1 + SHRINK_K))) and two == pytest.approx(2 ** (2 / (2 + SHRINK_K)))
    assert shrunk_factor([twice], k=2.0) == pytest.approx(2 ** (1 / 3))  # a stronger prior moves it less
    assert shrunk_factor([math.log(0.5), math.log(0.5)]) == pytest.approx(1 / two)  # as fast either way


def test_a_tasks_category_is_its_workflows_else_its_stem() -> None:
    order = MachineOrder.from_assignments([], RESOURCES)
    book = RunBook(replace(order, categories={"a_1": "align"}), origin_s=0.0)
    assert task_category(book, "a_1") == "align"
    assert [task_category(book, t) for t in ("sim_3", "mProject_ID0000007", "load[3]", "g.extract")] == [
        "sim", "mProject", "load", "extract",
    ]  # fmt: skip


def test_a_corrected_workflow_lasts_its_factor_longer_and_the_note_says_so_by_category() -> None:
    tasks = [Task(t, 10.0, 1, GIB, CATEGORIES[t]) for t in PLANNED]
    workflow = Workflow.create("sims", tasks, [])
    corrected = corrected_workflow(workflow, {"sim_3": 1.85, "sim_4": 1.85})
    assert [t.runtime_s for t in corrected.tasks] == [10.0, 10.0, 10.0, 18.5, 18.5]
    assert corrected_workflow(workflow, {}) is workflow
    assert correction_note(workflow, {"sim_3": 1.85, "sim_4": 1.85}) == (
        "runtimes corrected from this run: simulate x1.85 (2 tasks)"
    )


# -- the machine -----------------------------------------------------------------------------------


def test_a_category_that_ran_twice_its_plan_is_re_planned_at_about_twice_before_its_tasks_to_come_drift(
    tmp_path: Path,
) -> None:
    store, version, order = save_plan(tmp_path / "plans")
    machine = RunMachine(CONFIG, RESOURCES)
    for task in ("prep", "sim_1", "sim_2"):
        let_go(machine, order, version, task, 0.0)
    ends(machine, "sim_1", version, 0.0, 20.0)
    ends(machine, "sim_2", version, 0.0, 20.0)
    drifts = machine.repair_state(RUN).drifts
    assert drifts and all(d.reason.startswith("category simulate runs ") for d in drifts)  # no task was late
    assert "1.85x its planned time (2 tasks ended, the last 2.00x); its 2 tasks to come" in drifts[-1].reason

    [replan] = machine.handle(RepairsDue(), now(21))
    assert isinstance(replan, Replan)
    factor = 2 ** (2 / (2 + SHRINK_K))
    # prep (running, its category not seen) takes the run's factor: 2x over one category seen, shrunk by half in log
    run_factor = 2 ** (1 / (1 + RUN_SHRINK_K))
    assert replan.runtime_factors == pytest.approx({"prep": run_factor, "sim_3": factor, "sim_4": factor})
    assert 1.8 < factor < 2.0

    replanner = Replanner(str(catalog_file(tmp_path)), RESOURCES, lambda: store)
    plain = replanner.replan(replan.book, replan.repair, replan.now_s, list(replan.drifts))
    fixed = replanner.replan(replan.book, replan.repair, replan.now_s, list(replan.drifts), replan.runtime_factors)
    for task in ("sim_3", "sim_4"):  # planned from the corrected runtimes: 10 s more x (factor - 1)
        longer_s = fixed.order.by_task[task].duration_s - plain.order.by_task[task].duration_s
        assert longer_s == pytest.approx(10.0 * (factor - 1), abs=1e-6)
    assert fixed.order.categories == CATEGORIES and fixed.runtime_factors == replan.runtime_factors
    assert fixed.order.parents == replan.book.order.parents and set(fixed.order.parents) == set(PLANNED)  # kept
    assert "runtimes corrected from this run: simulate x1.85 (2 tasks)" in fixed.repair.detail

    # the forecast moves with the correction, and the record says when on the wall clock too
    assert plain.repair.forecast_end_s is not None and fixed.repair.forecast_end_s is not None
    assert fixed.repair.forecast_end_s > plain.repair.forecast_end_s + 8.0
    assert fixed.repair.forecast_cost_usd is not None and plain.repair.forecast_cost_usd is not None
    assert fixed.repair.forecast_cost_usd > plain.repair.forecast_cost_usd
    actions = machine.handle(Replanned(RUN, fixed), now(21))
    [recorded] = [a for a in actions if isinstance(a, RecordRepair)]
    assert recorded.repair.forecast_end_at == T0 + timedelta(seconds=fixed.repair.forecast_end_s)

    # sim_3 takes twice its model's runtime too: compared with the model, not with its corrected plan (which it
    # kept), it confirms the category's factor, which grows toward 2; nothing moves enough to re-plan again
    let_go(machine, fixed.order, version, "sim_3", 21.0)
    ends(machine, "sim_3", version, 21.0, 21.0 + 2 * fixed.order.by_task["sim_3"].duration_s / factor)
    assert machine.repair_state(RUN).drifts == []
    assert machine.runtime_factors(RUN) == pytest.approx({"prep": run_factor, "sim_4": 2 ** (3 / (3 + SHRINK_K))})


def test_run_shrink_k_sets_how_far_a_category_not_seen_follows_the_run(tmp_path: Path) -> None:
    _, version, order = save_plan(tmp_path / "plans")
    factors = {}
    for run_k in (1.0, RUN_SHRINK_K, 9.0):  # [agora] run_shrink_k; its default is the rule's own
        machine = RunMachine(replace(CONFIG, run_shrink_k=run_k), RESOURCES)
        for task in ("prep", "sim_1", "sim_2"):
            let_go(machine, order, version, task, 0.0)
        ends(machine, "sim_1", version, 0.0, 20.0)
        ends(machine, "sim_2", version, 0.0, 20.0)
        factors[run_k] = machine.runtime_factors(RUN)["prep"]  # running, its category not seen
    # both tasks at 2x, pooled: 2x over one category seen, shrunk in log by 1 / (1 + k)
    assert factors == pytest.approx({k: 2 ** (1 / (1 + k)) for k in factors})
    assert factors[1.0] > factors[RUN_SHRINK_K] > factors[9.0] > 1.0
    setting = next(s for s in SETTINGS if s.key == "run_shrink_k")
    assert ExecutorConfig().run_shrink_k == RUN_SHRINK_K == float(setting.default)


def test_one_task_moves_its_category_less_than_two_and_on_time_within_the_jitter_is_on_time(tmp_path: Path) -> None:
    _, version, order = save_plan(tmp_path / "plans")
    machine = RunMachine(CONFIG, RESOURCES)
    for task in ("prep", "sim_1"):
        let_go(machine, order, version, task, 0.0)
    ends(machine, "sim_1", version, 0.0, 20.0)
    [replan] = machine.handle(RepairsDue(), now(21))
    assert isinstance(replan, Replan)
    assert replan.runtime_factors["sim_2"] == pytest.approx(2 ** (1 / (1 + SHRINK_K)))  # below the 1.85 of two

    jittery = RunMachine(replace(CONFIG, replan_min_late_s=15.0), RESOURCES)  # 10 s more is the platform's jitter
    for task in ("prep", "sim_1"):
        let_go(jittery, order, version, task, 0.0)
    ends(jittery, "sim_1", version, 0.0, 20.0)
    assert jittery.repair_state(RUN).drifts == [] and jittery.handle(RepairsDue(), now(21)) == []


def test_a_category_with_no_task_to_come_or_repair_off_brings_no_re_plan(tmp_path: Path) -> None:
    _, version, order = save_plan(tmp_path / "plans")
    machine = RunMachine(CONFIG, RESOURCES)
    let_go(machine, order, version, "prep", 0.0)
    ends(machine, "prep", version, 0.0, 19.0)  # prepare: 0.95x, and its only task
    assert machine.repair_state(RUN).drifts == []

    off = RunMachine(replace(CONFIG, replan_slack=0.0), RESOURCES)
    for task in ("prep", "sim_1"):
        let_go(off, order, version, task, 0.0)
    ends(off, "sim_1", version, 0.0, 20.0)
    assert off.repair_state(RUN).drifts == [] and off.handle(RepairsDue(), now(21)) == []


def test_a_task_whose_job_failed_teaches_nothing(tmp_path: Path) -> None:
    _, version, order = save_plan(tmp_path / "plans")
    machine = RunMachine(CONFIG, RESOURCES)
    for task in ("prep", "sim_1"):
        let_go(machine, order, version, task, 0.0)
    failed = JobStatus("finished", exit_code=3, started_at=T0, ended_at=T0 + timedelta(seconds=2))
    machine.handle(StatusRead(record("sim_1", version), True, failed), now(3))
    [drift] = machine.repair_state(RUN).drifts
    assert drift.reason == "task sim_1 failed (exit code 3)"
    [replan] = machine.handle(RepairsDue(), now(3))
    assert isinstance(replan, Replan) and replan.runtime_factors == {}


# -- memory, learned during the run ---------------------------------------------------------------


def ends_with(machine: RunMachine, task: str, version: str, at_s: float, **status: object) -> None:
    """The task's job, let go at 0, ends at ``at_s`` (its planned runtime: no runtime drift) with ``status``."""
    ended = JobStatus("finished", started_at=T0, ended_at=T0 + timedelta(seconds=at_s), **status)  # type: ignore[arg-type]
    machine.handle(StatusRead(record(task, version), True, ended), now(at_s + 1))


def test_a_category_whose_first_tasks_peak_at_3x_their_prediction_reserves_that_for_the_rest(tmp_path: Path) -> None:
    store, version, order = save_plan(tmp_path / "plans")
    machine = RunMachine(CONFIG, RESOURCES)
    for task in ("prep", "sim_1", "sim_2"):
        let_go(machine, order, version, task, 0.0)
    # sim_1's worker marks its task's end first (on time: nothing to learn of its runtime), then its job finishes
    mark = JobStatus("running", started_at=T0, task_ended_at=T0 + timedelta(seconds=10.0))
    machine.handle(StatusRead(record("sim_1", version), True, mark), now(10.5))
    assert machine.repair_state(RUN).drifts == []
    for task in ("sim_1", "sim_2"):  # on time, each peaking at 3 GiB where 1 GiB was predicted (and reserved)
        ends_with(machine, task, version, 10.0, exit_code=0, peak_rss_bytes=3 * GIB)
    drifts = machine.repair_state(RUN).drifts
    assert drifts and all(d.reason.startswith("category simulate's 2 tasks to come reserve 3.60x") for d in drifts)
    assert drifts[-1].reason.endswith(
        "their predicted memory, not 1.00x (2 tasks ended; task sim_2 peaked at 3.00x)"
    )  # no task was late

    [replan] = machine.handle(RepairsDue(), now(12))
    assert isinstance(replan, Replan)
    assert replan.memory_factors == pytest.approx({"sim_3": 3.6, "sim_4": 3.6}) and replan.runtime_factors == {}
    replanner = Replanner(str(catalog_file(tmp_path)), RESOURCES, lambda: store)
    fixed = replanner.replan(
        replan.book, replan.repair, replan.now_s, list(replan.drifts), replan.runtime_factors, replan.memory_factors
    )
    assert {t: fixed.overrides[t].memory_bytes for t in ("sim_3", "sim_4")} == {
        "sim_3": math.ceil(3.6 * GIB), "sim_4": math.ceil(3.6 * GIB)
    }  # fmt: skip
    assert "memory raised from this run: simulate x3.60 (2 tasks)" in fixed.repair.detail
    machine.handle(Replanned(RUN, fixed), now(12))
    # sim_3 peaks at 3.2 GiB under its raised 3.6: 3.84 is within 10 % of what the plan carries, nothing to re-plan
    let_go(machine, fixed.order, version, "sim_3", 12.0)
    ends_with(machine, "sim_3", version, 22.0, exit_code=0, peak_rss_bytes=int(3.2 * GIB))
    assert machine.repair_state(RUN).drifts == []


def test_a_task_killed_for_memory_has_its_retry_and_its_categorys_tasks_to_come_raised(tmp_path: Path) -> None:
    store, version, order = save_plan(tmp_path / "plans")
    machine = RunMachine(CONFIG, RESOURCES)
    for task in ("prep", "sim_1", "sim_2"):
        let_go(machine, order, version, task, 0.0)
    ends_with(machine, "sim_1", version, 4.0, exit_code=137, oom_killed=True)  # killed at its 1 GiB
    reasons = [d.reason for d in machine.repair_state(RUN).drifts]
    assert "task sim_1 was killed for memory (OOM)" in reasons
    assert (
        "category simulate's 2 tasks to come reserve 2.40x their predicted memory, not 1.00x (1 tasks ended; "
        + (f"task sim_1 killed at {GIB} bytes)")
        in reasons
    )
    [replan] = machine.handle(RepairsDue(), now(6))
    assert isinstance(replan, Replan)
    # the retry of sim_1, and the tasks to come; sim_2 runs (and keeps what it reserved)
    assert replan.memory_factors == pytest.approx({task: 2.4 for task in ("sim_1", "sim_3", "sim_4")})
    replanner = Replanner(str(catalog_file(tmp_path)), RESOURCES, lambda: store)
    fixed = replanner.replan(
        replan.book, replan.repair, replan.now_s, list(replan.drifts), replan.runtime_factors, replan.memory_factors
    )
    raised = math.ceil(2.4 * GIB)  # its limit doubled, with the margin: above the executor's own retry growth
    assert {t: fixed.overrides[t].memory_bytes for t in ("sim_1", "sim_3", "sim_4")} == dict.fromkeys(
        ("sim_1", "sim_3", "sim_4"), raised
    )
    assert "sim_2" not in fixed.overrides and fixed.order.by_task["prep"].memory_bytes == GIB


def test_two_tasks_under_their_prediction_lower_nothing_yet_and_bring_no_re_plan(tmp_path: Path) -> None:
    _, version, order = save_plan(tmp_path / "plans")
    machine = RunMachine(CONFIG, RESOURCES)
    for task in ("prep", "sim_1", "sim_2"):
        let_go(machine, order, version, task, 0.0)
    for task in ("sim_1", "sim_2"):
        ends_with(machine, task, version, 10.0, exit_code=0, peak_rss_bytes=GIB // 4)
    assert machine.repair_state(RUN).drifts == [] and machine.handle(RepairsDue(), now(12)) == []


@pytest.mark.parametrize("coming_source", ["predicted", "declared"])
def test_a_category_peaking_at_a_third_lowers_its_predicted_tasks_to_come_but_never_a_declared_one(
    tmp_path: Path, coming_source: str
) -> None:
    # thirteen tasks of one category on three machines of "small", 10 s each, one after another; the first ten
    # end at a third of the 1 GiB they reserve, the three to come reserve what their workflow says they need
    planned: Planned = {f"sim_{i}": (f"small#{i % 3}", 10.0 * (i // 3), 10.0 * (i // 3 + 1)) for i in range(13)}
    tasks = [
        Task(t, 10.0, 1, GIB, "simulate", memory_source="predicted" if i < 10 else coming_source)  # type: ignore[arg-type]
        for i, t in enumerate(planned)
    ]
    assignments = tuple(Assignment(t, "small", m, start, end, 1, GIB) for t, (m, start, end) in planned.items())
    plan = Plan("sims", "test", Objective(kind="time"), 40.0, 0.0, assignments, SolverInfo("t", "heuristic", None, 0),
                "2026-12-05T00:00:00Z")  # fmt: skip
    store = PlanStore(tmp_path / "plans")
    store.save("etl", plan, Workflow.create("sims", tasks, []))
    version = plan_version(store.current_path("etl").read_bytes())
    machine = RunMachine(CONFIG, RESOURCES)
    order = PlanReader(lambda: store, lambda *_: None, RESOURCES, logging.getLogger(__name__)).order("etl", version)
    assert order is not None and order.categories == {t: "simulate" for t in planned}
    assert order.fixed_memory == (frozenset() if coming_source == "predicted" else {"sim_10", "sim_11", "sim_12"})
    for task, (_, start, end) in list(planned.items())[:10]:
        let_go(machine, order, version, task, start, planned)
        ended = JobStatus("finished", exit_code=0, started_at=T0 + timedelta(seconds=start),
                          ended_at=T0 + timedelta(seconds=end), peak_rss_bytes=GIB // 3)  # fmt: skip
        machine.handle(StatusRead(record(task, version, planned), True, ended), now(end + 1))
    drifts = machine.repair_state(RUN).drifts
    if coming_source == "predicted":  # ten exact peaks and no kill: the factor goes below 1, and a re-plan lowers
        assert drifts and "category simulate's 3 tasks to come reserve 0." in drifts[-1].reason
    else:  # the three to come keep their declared reservation: a re-plan would move nothing, so none is called
        assert drifts == []


# -- the executor on real pools (no Airflow: the real worker runs each job's command) -----------------------------

# Four tasks of one category, 3 s each, two per pool; the first two are planned at 10 s but let go at once (first on
# their machines) and take 9 s: they end before their planned end (13 s), so neither is late.
ON_POOLS = {
    "sim_1": ("local-small#0", 10.0, 13.0, 3.0),
    "sim_2": ("local-large#0", 10.0, 13.0, 3.0),
    "sim_3": ("local-small#0", 13.0, 16.0, 3.0),
    "sim_4": ("local-large#0", 13.0, 16.0, 3.0),
}


@pytest.mark.slow
def test_the_executor_re_plans_a_run_whose_category_runs_slow_and_records_its_forecast(
    executor: object, plans: Path, tmp_path: Path
) -> None:
    version = save_pool_plan(plans, ON_POOLS, category="cat")
    executor.backends.use("local", Sleeping({"sim_1": 9.0, "sim_2": 9.0}))  # type: ignore[attr-defined]
    hand_over_planned(executor, version, tmp_path, ON_POOLS)
    heartbeat_until(executor, lambda: not executor.jobs, timeout_s=120)  # type: ignore[attr-defined]
    executor.sync()  # type: ignore[attr-defined]  # the repairs reach the run store
    repairs = run_store(tmp_path).repairs("unit", "r1")
    assert repairs, "no repair recorded"
    first = repairs[0]
    assert first.reason.startswith("category cat runs ") and "later than planned" not in first.reason
    assert "runtimes corrected from this run: cat x" in first.detail and {"sim_3", "sim_4"} & set(first.tasks)
    assert first.forecast_end_s is not None and first.forecast_end_at is not None and first.forecast_cost_usd == 0.0
    assert first.forecast_end_s > 16.0  # past the plan's 16 s: the two to come are expected to run slow too

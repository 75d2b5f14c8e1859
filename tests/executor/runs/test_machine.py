"""The run machine (executor/runs/machine.py), driven with its events alone: no executor, no backend, no Airflow.

Each test feeds events at moments of its choosing and checks the actions the machine returns and the
state it shows (its books, repairs, replaced machines, spot fallbacks).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from agora_optimizer.executor.config import ExecutorConfig
from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import JobStatus, lease_key
from agora_optimizer.executor.lifecycle import Heartbeat, LifecycleConfig, Log, Now, PollFailed, Released
from agora_optimizer.executor.runs.events import (
    AdoptedOnMachine,
    AskAheadDue,
    CloseLease,
    FeedJob,
    HeldJob,
    HeldWaiting,
    Interrupted,
    JobLeft,
    LeaseGranted,
    LeaseOpened,
    LeaseRefused,
    LeasesDue,
    LeaseWanted,
    MoveHeld,
    OpenLease,
    PollAnswered,
    PollUnanswered,
    ReadStates,
    RecordLeases,
    RecordRepair,
    RepairsDue,
    Replan,
    ReplanFailed,
    Replanned,
    Reprioritize,
    Requeue,
    Requeued,
    RerunOnFallback,
    StatesDue,
    StatesRead,
    StatusRead,
    TryEnded,
)
from agora_optimizer.executor.runs.machine import RunMachine, RunMachineError
from agora_optimizer.executor.runs.machine_order import MachineOrder, ReplacedMachine
from agora_optimizer.executor.runs.repair import Drift, Repaired
from agora_optimizer.model.catalog import Resource
from agora_optimizer.model.placement import Placement
from agora_optimizer.model.plan import Assignment
from agora_optimizer.runs.record import Repair

GIB = 2**30
T0 = datetime(2026, 12, 3, 7, 0, tzinfo=UTC)
RUN = ("etl", "r1")
VERSION = "v1"
SMALL = Resource("small", "local", vcpus=2, memory_gib=4, speed=1.0, price_per_hour_usd=0.1)
SPOT = Resource(
    "spot", "local", vcpus=2, memory_gib=4, speed=1.0, price_per_hour_usd=0.03, spot=True,
    interruption_rate_per_hour=0.01, fallback="small",
)  # fmt: skip
RESOURCES = {"small": SMALL, "spot": SPOT}
CONFIG = ExecutorConfig(replan_slack=0.2, replan_min_late_s=0.0, lifecycle=LifecycleConfig(backend_outage_s=60.0))


def now(s: float) -> Now:
    """``s`` seconds into the test, on the monotonic clock and on the wall clock (from :data:`T0`)."""
    return Now(s, T0 + timedelta(seconds=s))


def order(*assignments: Assignment) -> MachineOrder:
    return MachineOrder.from_assignments(assignments, RESOURCES)


def on(task: str, machine: str, start_s: float, end_s: float, cores: int = 1) -> Assignment:
    return Assignment(task, machine.split("#")[0], machine, start_s, end_s, cores, GIB)


def placed(task_order: MachineOrder, task: str, cores: int = 1) -> Placement:
    planned = task_order.by_task[task]
    return Placement("small", cores, GIB, machine=planned.machine, plan_version=VERSION)


def record(task: str, resource: str = "small", machine: str = "small#0", external_id: str = "") -> JobRecord:
    return JobRecord("etl", task, "r1", 1, -1, resource, "local", 1, GIB, external_id, machine, VERSION)


def leased(machine: RunMachine, task_order: MachineOrder, task: str, at_s: float = 0.0) -> list[object]:
    """Want the task's lease and, if the machine asks for it, have the backend give it; the actions in all."""
    actions: list[object] = list(
        machine.handle(LeaseWanted(RUN, task, placed(task_order, task), task_order, "local"), now(at_s))
    )
    for action in list(actions):
        if isinstance(action, OpenLease):
            opened = LeaseOpened(RUN, action.lease, action.backend, action.order, action.plan_version, action.ahead_s)
            actions += machine.handle(opened, now(at_s))
    return actions


def test_a_machines_first_task_opens_its_lease_and_its_other_tasks_share_it() -> None:
    two = order(on("a", "small#0", 0, 10), on("b", "small#0", 10, 20))
    machine = RunMachine(CONFIG, RESOURCES)
    [ask] = machine.handle(LeaseWanted(RUN, "a", placed(two, "a"), two, "local"), now(0))
    assert isinstance(ask, OpenLease) and machine.book(RUN) is None  # nothing is booked before the backend holds it
    assert (ask.lease.key, ask.lease.machine, ask.lease.tasks, ask.backend) == (
        lease_key("etl", "r1", "small#0"), "small#0", 2, "local",
    )  # fmt: skip
    granted = machine.handle(LeaseOpened(RUN, ask.lease, "local", two, VERSION), now(3))
    assert granted == [LeaseGranted(ask.lease)]
    book = machine.book(RUN)
    assert book is not None and (book.origin_s, book.plan_version) == (3, VERSION)  # its plan clock starts now
    assert machine.handle(LeaseWanted(RUN, "b", placed(two, "b"), two, "local"), now(4)) == [LeaseGranted(ask.lease)]
    assert machine.book(RUN) is book


def test_a_machine_its_backend_refuses_is_replaced_recorded_once_and_not_asked_for_again() -> None:
    two = order(on("a", "small#0", 0, 10), on("b", "small#0", 10, 20))
    machine = RunMachine(CONFIG, RESOURCES)
    [ask] = machine.handle(LeaseWanted(RUN, "a", placed(two, "a"), two, "local"), now(0))
    assert isinstance(ask, OpenLease)
    record_repair, log = machine.handle(LeaseRefused(RUN, ask.machine, VERSION, "node down"), now(1))
    assert record_repair == RecordRepair(
        RUN,
        Repair(0.0, "machine small#0 could not be had: node down", ("a", "b"), "its 2 tasks run on small's pool "
               "without a lease, unordered"),
    )  # fmt: skip
    assert isinstance(log, Log) and log.level == "warning" and "small#0 of etl run r1 cannot be had" in log.message
    assert machine.replaced == [ReplacedMachine("etl", "r1", "small#0", "small", "node down")]
    assert machine.handle(LeaseWanted(RUN, "b", placed(two, "b"), two, "local"), now(2)) == []


def test_a_task_that_reserves_more_than_its_machine_runs_beside_it_with_a_warning() -> None:
    one = order(on("a", "small#0", 0, 10))
    machine = RunMachine(CONFIG, RESOURCES)
    [log] = machine.handle(LeaseWanted(RUN, "a", placed(one, "a", cores=3), one, "local"), now(0))
    assert log == Log(
        "warning",
        f"agora: etl.a reserves 3 cores and {GIB} bytes, more than its machine small#0 has; it runs beside it",
    )
    assert machine.book(RUN) is None


def test_held_jobs_go_in_their_machines_order_and_the_next_one_once_the_first_tasks_process_ended() -> None:
    two = order(on("a", "small#0", 0, 10, cores=2), on("b", "small#0", 10, 20, cores=2))  # never side by side
    machine = RunMachine(CONFIG, RESOURCES)
    leased(machine, two, "b")  # Airflow hands b over first
    leased(machine, two, "a")
    a, b = (HeldJob(task, record(task), True, 0.0) for task in ("a", "b"))
    assert machine.release_order([b, a]) == [a, b]
    assert machine.handle(HeldWaiting(a), now(1)) == [FeedJob("a", Released("its turn on small#0"))]
    assert machine.handle(HeldWaiting(b), now(1)) == [FeedJob("b", Heartbeat())]
    running = JobStatus("running", task_ended_at=T0 + timedelta(seconds=8))  # its supervisor still reports
    assert machine.handle(StatusRead(record("a"), True, running), now(9)) == []
    [released] = machine.handle(HeldWaiting(b), now(9))
    assert isinstance(released, FeedJob) and isinstance(released.event, Released)
    book = machine.book(RUN)
    assert book is not None and book.started == {"a", "b"} and book.ended_s == {"a": 8.0}


def test_a_held_job_whose_run_is_no_longer_known_goes_at_once() -> None:
    machine = RunMachine(CONFIG, RESOURCES)
    [feed] = machine.handle(HeldWaiting(HeldJob("a", record("a"), True, 0.0)), now(1))
    assert feed == FeedJob("a", Released("its run's plan is no longer known"))


def test_states_are_read_every_few_seconds_per_run_and_a_task_that_never_comes_holds_its_machine_no_longer() -> None:
    two = order(on("a", "small#0", 0, 10, cores=2), on("b", "small#0", 10, 20, cores=2))
    machine = RunMachine(CONFIG, RESOURCES)
    leased(machine, two, "b")
    assert machine.handle(StatesDue(frozenset({RUN})), now(0)) == [ReadStates(RUN)]
    assert machine.handle(StatesDue(frozenset({RUN})), now(1)) == []  # read 1 s ago
    assert machine.handle(StatesDue(frozenset({("etl", "other")})), now(6)) == [ReadStates(RUN)]  # a lease is open
    b = HeldJob("b", record("b"), True, 0.0)
    assert machine.handle(HeldWaiting(b), now(6)) == [FeedJob("b", Heartbeat())]  # waits for a
    assert machine.handle(StatesRead(RUN, {"a": "upstream_failed", "b": "queued"}), now(6)) == []
    assert machine.handle(HeldWaiting(b), now(7)) == [FeedJob("b", Released("its turn on small#0"))]


def test_a_lease_closes_once_its_machines_tasks_are_over_and_no_job_holds_it() -> None:
    one = order(on("a", "small#0", 0, 10))
    machine = RunMachine(CONFIG, RESOURCES)
    [granted] = [action for action in leased(machine, one, "a") if isinstance(action, LeaseGranted)]
    machine.handle(HeldWaiting(HeldJob("a", record("a"), True, 0.0)), now(1))
    assert machine.handle(LeasesDue(frozenset()), now(2)) == []  # a runs
    assert machine.handle(JobLeft(record("a"), True), now(5)) == []  # its job is reported and forgotten
    assert machine.handle(LeasesDue(frozenset({granted.lease.key})), now(6)) == []  # a supervisor still reports
    assert machine.handle(LeasesDue(frozenset()), now(7)) == [
        CloseLease(granted.lease, "local"),
        Log("info", "agora: released machine small#0 of etl run r1"),
    ]
    assert machine.handle(LeasesDue(frozenset()), now(8)) == []


def test_a_machine_whose_backend_predicts_a_wait_is_asked_for_that_long_before_its_planned_start() -> None:
    plan = order(on("a", "small#0", 0, 10), on("c", "small#1", 10, 15))
    machine = RunMachine(CONFIG, RESOURCES)
    leased(machine, plan, "a")
    machine.handle(HeldWaiting(HeldJob("a", record("a"), True, 0.0)), now(0))
    assert machine.unused_machine_resources() == {"small"}  # small#1's
    assert machine.handle(AskAheadDue({"small": 5.0}), now(4.9)) == []
    assert machine.handle(AskAheadDue({"small": 0.0}), now(9.9)) == []  # no wait predicted: with its task
    [ask] = machine.handle(AskAheadDue({"small": 5.0}), now(5.0))
    assert isinstance(ask, OpenLease) and (ask.lease.machine, ask.ahead_s) == ("small#1", 5.0)
    opened = LeaseOpened(RUN, ask.lease, ask.backend, ask.order, ask.plan_version, ask.ahead_s)
    assert machine.handle(opened, now(5.1)) == [
        Log("info", "agora: asked for machine small#1 of etl run r1 5.0 s ahead of its planned start (its wait)")
    ]
    assert machine.handle(AskAheadDue({"small": 5.0}), now(5.2)) == []  # open now


def test_a_late_end_is_a_drift_the_next_repair_re_plans_and_its_answer_moves_the_runs_held_tasks() -> None:
    two = order(on("a", "small#0", 0, 10), on("b", "small#0", 10, 20))
    machine = RunMachine(CONFIG, RESOURCES)
    leased(machine, two, "a")
    machine.handle(HeldWaiting(HeldJob("a", record("a"), True, 0.0)), now(0))
    ended = JobStatus("finished", exit_code=0, started_at=T0, ended_at=T0 + timedelta(seconds=30))
    assert machine.handle(StatusRead(record("a"), True, ended), now(31)) == []
    late = Drift("a", "task a ended 200 % later than planned (at 30.0 s, planned 10.0 s)")
    assert machine.repair_state(RUN).drifts == [late]
    [replan] = machine.handle(RepairsDue(), now(31))
    assert isinstance(replan, Replan) and (replan.run, replan.now_s, replan.drifts) == (RUN, 31.0, (late,))
    assert machine.handle(RepairsDue(), now(40)) == []  # its drifts are taken

    moved_b = on("b", "small#1", 31, 41)
    answer = Repaired(
        order(on("a", "small#0", 0, 30), moved_b), {"b": moved_b}, {"b": moved_b}, Repair(31.0, "r", ("b",), "d")
    )
    actions = machine.handle(Replanned(RUN, answer), now(31))
    assert actions[:2] == [MoveHeld(RUN, {"b": moved_b}, "repair at 31.0 s"), RecordRepair(RUN, answer.repair)]
    assert actions[2] == Log("warning", "agora: repaired etl run r1 at 31.0 s: r; d")
    book = machine.book(RUN)
    assert book is not None and book.order is answer.order and machine.repair_state(RUN).repairs == 1
    moved = machine.repaired_placement(RUN, "b", placed(two, "b"))
    assert (moved.resource, moved.machine, moved.planned_start_s) == ("small", "small#1", 31)
    assert machine.repaired_placement(RUN, "b", replace(placed(two, "b"), plan_version="v2")).machine == "small#0"

    [log] = machine.handle(ReplanFailed(RUN, (late,), "no workflow"), now(45))
    assert log == Log(
        "warning", f"agora: cannot repair etl run r1 after {late.reason} (no workflow); it goes on as planned"
    )


def test_a_repair_that_reorders_the_run_gives_the_tasks_not_started_their_new_priority_weights() -> None:
    """Airflow queues a run's ready tasks by priority weight, the plan's (the cluster policy's): a task a repair
    now starts early would otherwise wait behind the tasks the executor holds for their turns."""
    planned = order(on("a", "small#0", 0, 10), on("c", "small#0", 10, 20), on("b", "small#0", 20, 30))
    machine = RunMachine(CONFIG, RESOURCES)
    leased(machine, planned, "a")
    machine.handle(HeldWaiting(HeldJob("a", record("a"), True, 0.0)), now(0))  # a starts: weight 3, then c 2, b 1

    def repaired(*assignments: Assignment) -> Repaired:
        moved = {x.task: x for x in assignments if x.task != "a"}
        return Repaired(order(*assignments), moved, {}, Repair(5.0, "r", tuple(moved), "d"))

    swapped = repaired(on("a", "small#0", 0, 10), on("b", "small#0", 10, 20), on("c", "small#0", 20, 30))
    actions = machine.handle(Replanned(RUN, swapped), now(5))
    assert Reprioritize(RUN, {"b": (1, 2), "c": (2, 1)}) in actions  # a started: its weight no longer matters
    again = machine.handle(Replanned(RUN, swapped), now(6))
    assert not any(isinstance(action, Reprioritize) for action in again)  # nothing to change
    as_planned = repaired(on("a", "small#0", 0, 10), on("c", "small#0", 10, 20), on("b", "small#0", 20, 30))
    back = machine.handle(Replanned(RUN, as_planned), now(7))
    assert Reprioritize(RUN, {"b": (2, 1), "c": (1, 2)}) in back  # from the weights the last repair gave


def test_with_repair_off_a_late_end_is_no_drift_and_nothing_is_re_planned() -> None:
    one = order(on("a", "small#0", 0, 10))
    machine = RunMachine(replace(CONFIG, replan_slack=0.0), RESOURCES)
    leased(machine, one, "a")
    machine.handle(HeldWaiting(HeldJob("a", record("a"), True, 0.0)), now(0))
    failed = JobStatus("finished", exit_code=3, ended_at=T0 + timedelta(seconds=30))
    machine.handle(StatusRead(record("a"), True, failed), now(31))
    assert machine.repair_state(RUN).drifts == [] and machine.handle(RepairsDue(), now(40)) == []


SPOT_RECORD = record("t", resource="spot", machine="", external_id="job-0")
RECLAIMED = JobStatus(
    "finished", exit_code=1, reason="reclaimed", interrupted=True, started_at=T0, ended_at=T0 + timedelta(seconds=42)
)
INSTANCE = ("etl", "t", "r1", -1)


def test_an_interrupted_spot_try_is_put_back_in_airflows_queue_and_re_run_once_on_its_fallback() -> None:
    machine = RunMachine(CONFIG, RESOURCES)
    assert machine.handle(Interrupted(SPOT_RECORD, RECLAIMED, "ti-1"), now(50)) == [
        Requeue(SPOT_RECORD, RECLAIMED, "small", "ti-1")
    ]
    assert machine.on_fallback == {INSTANCE: "small"}
    on_spot = Placement("spot", 1, GIB, time_limit_s=60.0, plan_version=VERSION)
    assert machine.fallback_placement(INSTANCE, on_spot) == Placement(
        "small", 1, GIB, time_limit_s=60.0, source="fallback", plan_version=VERSION
    )
    repair, lease, rerun = machine.handle(Requeued(SPOT_RECORD, RECLAIMED, "small", ""), now(50))
    assert isinstance(repair, RecordRepair) and repair.repair.reason == "task t interrupted on spot spot: reclaimed"
    assert repair.repair.detail.endswith("re-run on small (on demand), the same try 1")
    assert isinstance(lease, RecordLeases) and [(r.resource, r.source, r.seconds) for r in lease.leases] == [
        ("spot", "interrupted job", 42.0)
    ]
    assert rerun == RerunOnFallback(SPOT_RECORD, "small")
    rerun_record = replace(SPOT_RECORD, resource="small")
    assert machine.handle(Interrupted(rerun_record, RECLAIMED, "ti-1"), now(60)) == []  # a failure as any other
    assert machine.handle(TryEnded(rerun_record, JobStatus("finished", exit_code=0)), now(61)) == []
    assert machine.on_fallback == {}  # later runs of the task follow their plan again


def test_an_interruption_that_cannot_be_re_run_now_is_recorded_and_left_to_airflows_next_try() -> None:
    machine = RunMachine(CONFIG, RESOURCES)
    adopted = machine.handle(Interrupted(SPOT_RECORD, RECLAIMED, None), now(50))  # no workload of the executor's
    refused = RunMachine(CONFIG, RESOURCES).handle(
        Requeued(SPOT_RECORD, RECLAIMED, "small", "Airflow no longer has try 1 running or queued"), now(50)
    )
    for (repair, log), why in ((adopted, "it was adopted"), (refused, "Airflow no longer has try 1")):
        assert isinstance(repair, RecordRepair) and "its next try runs on small (on demand)" in repair.repair.detail
        assert isinstance(log, Log) and f"not re-run on small now ({why}" in log.message
    assert machine.on_fallback == {INSTANCE: "small"}  # Airflow's next try runs there
    assert machine.handle(Interrupted(replace(SPOT_RECORD, resource="small"), RECLAIMED, "ti-2"), now(9)) == []


def test_a_backend_that_does_not_answer_tells_its_jobs_how_long_it_has_been_down_until_the_outage_limit() -> None:
    machine = RunMachine(CONFIG, RESOURCES)

    def down_s(at_s: float) -> float:
        """How long the backend has been down, as its job hears it at ``at_s``."""
        [_, feed] = machine.handle(PollUnanswered("slurm", ("j1",), "timeout"), now(at_s))
        assert isinstance(feed, FeedJob) and isinstance(feed.event, PollFailed)
        return feed.event.down_s

    assert machine.handle(PollUnanswered("slurm", ("j1", "j2"), "timeout"), now(0)) == [
        Log("warning", "Cannot poll slurm for 2 jobs (timeout); down for 0 s"),
        FeedJob("j1", PollFailed("timeout", 0.0)),
        FeedJob("j2", PollFailed("timeout", 0.0)),
    ]
    assert down_s(30) == 30.0
    machine.handle(PollAnswered("slurm"), now(31))
    assert down_s(40) == 0.0  # a new outage
    assert down_s(101) == 61.0  # past [agora] backend_outage_s (60 s): its jobs are lost
    assert down_s(102) == 0.0  # and the next outage starts anew


def test_an_adopted_job_starts_its_runs_plan_clock_where_the_earlier_scheduler_had_it() -> None:
    two = order(on("a", "small#0", 0, 10), on("b", "small#0", 10, 20))
    machine = RunMachine(CONFIG, RESOURCES)
    leased(machine, two, "b", at_s=100.0)
    started = T0 + timedelta(seconds=95)  # Airflow's start date of b: 5 s before now
    assert machine.handle(AdoptedOnMachine(RUN, "b", started, new_book=True), now(100)) == []
    book = machine.book(RUN)
    assert book is not None and book.origin_s == 85.0 and book.started == {"b"} and book.started_s == {"b": 10.0}


def test_an_event_the_machine_has_no_handler_for_is_a_bug_it_names() -> None:
    with pytest.raises(RunMachineError, match="no handler for object"):
        RunMachine(CONFIG, RESOURCES).handle(object(), now(0))  # type: ignore[arg-type]  # not an event

"""The executor's job lifecycle as a pure state machine: every transition, with no cluster and no Airflow."""

from __future__ import annotations

import ast
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agora_optimizer.executor import lifecycle
from agora_optimizer.executor.jobs.records import JobRecord, attempt_state
from agora_optimizer.executor.jobs.spec import JobSpec, JobStatus, MachineLease
from agora_optimizer.executor.lifecycle import (
    ON_BACKEND,
    TRANSITIONS,
    Accepted,
    Action,
    Adopted,
    Cancel,
    Forget,
    Heartbeat,
    Job,
    JobState,
    LifecycleConfig,
    LifecycleError,
    Log,
    Moved,
    Now,
    PollFailed,
    RefuseRevoke,
    Released,
    RenewToken,
    Report,
    ReportQueued,
    Revoked,
    StatusPolled,
    Submit,
    SubmitFailed,
    Submitted,
    TokenRenewed,
    WriteRecord,
    parse_external_id,
    transition,
)

KEY = ("unit", "t", "r1", 1, -1)  # stands for Airflow's TaskInstanceKey: the machine only hashes it
WALL = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
CONFIG = LifecycleConfig(
    submit_retries=5,
    backoff_max_s=5.0,
    backend_outage_s=60.0,
    backend_queue_timeout_s=300.0,
    token_refresh_s=30.0,
    task_queued_timeout_s=600.0,
)


def at(monotonic_s: float) -> Now:
    """A moment ``monotonic_s`` into the test, on both clocks."""
    return Now(monotonic_s, WALL + timedelta(seconds=monotonic_s))


def new_job(workload: object = "workload") -> Job:
    record = JobRecord("unit", "t", "r1", 1, -1, "debug", "slurm", 1, 2**30)
    spec = JobSpec("unit.t.try1-k", record.label, "debug", 1, 2**30, None, ("worker",), Path("/jobs/unit.t.try1-k"))
    return Job(KEY, spec, record, workload)


def step(job: Job, event: object, now_s: float, config: LifecycleConfig = CONFIG) -> tuple[Job, list[Action]]:
    return transition(job, event, at(now_s), config)  # type: ignore[arg-type]


def kinds(actions: list[Action]) -> list[str]:
    return [type(action).__name__ for action in actions]


def on_backend(state: str = "queued", now_s: float = 0.0, workload: object = "workload") -> Job:
    """A job submitted at ``now_s`` as job 42, then polled into ``state``."""
    job, _ = step(new_job(workload), Accepted(), now_s)
    job, _ = step(job, Submitted("42"), now_s)
    if state != "submitted":
        job, _ = step(job, StatusPolled(JobStatus("pending" if state == "queued" else "running")), now_s)
    assert job.state == state
    return job


def the(kind: type, actions: list[Action]) -> object:
    (found,) = [action for action in actions if isinstance(action, kind)]
    return found


# -- submitting ------------------------------------------------------------------------------


def test_a_workload_is_submitted_at_once_and_queued_in_airflow_with_its_external_id() -> None:
    job, actions = step(new_job(), Accepted(), 10.0)
    assert (job.state, job.attempts, actions) == ("pending_submit", 1, [Submit(KEY)])
    job, actions = step(job, Submitted("42"), 11.0)
    assert (job.state, job.external_id, job.record.external_id, job.submitted_at_s) == ("submitted", "42", "42", 11.0)
    assert kinds(actions) == ["WriteRecord", "ReportQueued", "Log"]
    write = the(WriteRecord, actions)
    assert isinstance(write, WriteRecord) and write.record.external_id == "42"  # what a restart adopts by
    assert the(ReportQueued, actions) == ReportQueued(KEY, "agora|slurm|debug|42")
    assert parse_external_id("agora|slurm|debug|42") == ("slurm", "debug", "42")


def test_transient_submit_errors_back_off_exponentially_up_to_the_cap_then_fail_with_the_reason() -> None:
    job, _ = step(new_job(), Accepted(), 0.0)
    now_s, delays = 0.0, []
    while True:
        job, actions = step(job, SubmitFailed("slurm: throttled", "throttled", transient=True), now_s)
        if any(isinstance(action, Forget) for action in actions):
            break
        delays.append(job.next_try_at_s - now_s)
        assert job.state == "pending_submit" and job.last_reason == "throttled"
        assert step(job, Heartbeat(), job.next_try_at_s - 0.01)[1] == []  # not due yet
        now_s = job.next_try_at_s
        job, actions = step(job, Heartbeat(), now_s)
        assert actions == [Submit(KEY)]
    assert delays == [1.0, 2.0, 4.0, 5.0]  # 2 ** (attempt - 1) s, capped at backoff_max_s
    assert job.attempts == CONFIG.submit_retries and job.state == "done"
    assert kinds(actions) == ["Forget", "Report"]
    report = the(Report, actions)
    assert isinstance(report, Report) and report.status.exit_code == 1
    assert report.status.reason == "agora could not submit: slurm: throttled (after 5 attempts)"


def test_a_refused_submit_fails_at_once() -> None:
    job, _ = step(new_job(), Accepted(), 0.0)
    job, actions = step(job, SubmitFailed("slurm: no such partition", "no such partition", transient=False), 0.0)
    report = the(Report, actions)
    assert job.state == "done" and kinds(actions) == ["Forget", "Report"] and isinstance(report, Report)
    assert report.status.reason == "agora could not submit: slurm: no such partition"
    assert attempt_state(report.status) == "failed"


# -- polling ---------------------------------------------------------------------------------


def test_polls_move_a_job_between_queued_and_running_and_keep_what_the_backend_said() -> None:
    job = on_backend("submitted", now_s=0.0)
    queued_at = WALL - timedelta(seconds=5)
    job, actions = step(job, StatusPolled(JobStatus("pending", reason="Priority", queued_at=queued_at)), 1.0)
    assert (job.state, job.last_reason, job.queued_at, actions) == ("queued", "Priority", queued_at, [])
    job, actions = step(job, StatusPolled(JobStatus("running", host="node1")), 7.0)
    assert (job.state, job.running_since_s, job.last_reason, actions) == ("running", 7.0, "Priority", [])
    job, _ = step(job, StatusPolled(JobStatus("running")), 9.0)
    assert job.running_since_s == 7.0  # the first poll that saw it running


@pytest.mark.parametrize("state", ON_BACKEND)
@pytest.mark.parametrize(
    "status", [JobStatus("finished", exit_code=0), JobStatus("finished", exit_code=137, oom_killed=True)]
)
def test_a_job_that_ended_is_reported_and_forgotten(state: str, status: JobStatus) -> None:
    before = on_backend(state)
    job, actions = step(before, StatusPolled(status), 5.0)
    assert job.state == "done" and actions == [Forget(KEY), Report(before, status)]


def test_a_job_the_backend_lost_is_reported_lost() -> None:
    job, actions = step(on_backend("running"), StatusPolled(JobStatus("lost", reason="node failure")), 5.0)
    report = the(Report, actions)
    assert job.state == "done" and isinstance(report, Report) and attempt_state(report.status) == "lost"


def test_a_job_pending_longer_than_the_queue_timeout_is_cancelled_and_fails_with_why() -> None:
    job = on_backend("queued", now_s=0.0)
    job, actions = step(job, StatusPolled(JobStatus("pending", reason="Resources")), CONFIG.backend_queue_timeout_s)
    assert job.state == "queued" and not any(isinstance(action, Cancel) for action in actions)  # at the limit: kept
    job, actions = step(job, StatusPolled(JobStatus("pending", reason="Resources")), CONFIG.backend_queue_timeout_s + 1)
    assert job.state == "done" and kinds(actions) == ["Cancel", "Forget", "Report"]
    assert the(Cancel, actions) == Cancel("slurm", "42")
    report = the(Report, actions)
    assert isinstance(report, Report) and report.status.exit_code == 143
    assert "waiting 301 s in debug's queue (Resources)" in report.status.reason
    assert "backend_queue_timeout_s = 300 s" in report.status.reason
    assert attempt_state(report.status) == "cancelled"


def test_the_queue_wait_is_the_backends_when_it_says_when_the_job_was_queued() -> None:
    job = on_backend("submitted", now_s=1000.0)  # just submitted by the executor's clock ...
    long_ago = WALL - timedelta(hours=1)  # ... but queued an hour before by the backend's (a restart adopted it)
    job, actions = step(job, StatusPolled(JobStatus("pending", queued_at=long_ago.replace(tzinfo=None))), 1000.0)
    assert job.state == "done" and the(Cancel, actions) == Cancel("slurm", "42")


def test_a_job_waiting_in_its_queue_gets_a_fresh_token_every_renew_interval() -> None:
    pending = StatusPolled(JobStatus("pending"))
    job = on_backend("queued", now_s=0.0)
    assert step(job, pending, CONFIG.token_refresh_s - 1)[1] == []
    job, actions = step(job, pending, CONFIG.token_refresh_s)
    assert actions == [RenewToken(KEY)]
    unpublished, _ = step(job, TokenRenewed("workload-2", published=False), 31.0)
    assert unpublished.workload == "workload-2" and unpublished.token_at_s == 0.0  # tried again at the next poll
    job, _ = step(job, TokenRenewed("workload-2", published=True), 31.0)
    assert job.token_at_s == 31.0 and step(job, pending, 32.0)[1] == []
    short = replace(CONFIG, task_queued_timeout_s=30.0)  # a token lives that long: renewed within a third of it
    assert short.token_renew_interval_s == 10.0 and step(job, pending, 41.0, short)[1] == [RenewToken(KEY)]


def test_a_backend_outage_fails_its_jobs_as_lost_only_past_the_outage_limit() -> None:
    job = on_backend("running")
    assert step(job, PollFailed("slurm: controller unreachable", CONFIG.backend_outage_s), 60.0) == (job, [])
    job, actions = step(job, PollFailed("slurm: controller unreachable", 61.0), 61.0)
    report = the(Report, actions)
    assert job.state == "done" and kinds(actions) == ["Forget", "Report"] and isinstance(report, Report)
    assert report.status.phase == "lost"
    assert report.status.reason == "slurm unreachable for 61 s: slurm: controller unreachable"


# -- adoption --------------------------------------------------------------------------------


def test_an_adopted_job_is_watched_but_its_token_is_not_renewed() -> None:
    job, actions = step(new_job(), Adopted("42"), 0.0)
    assert (job.state, job.external_id, job.attempts, job.workload) == ("submitted", "42", 1, None)
    assert kinds(actions) == ["Log"] and "Adopted unit.t run r1 try 1: slurm job 42" in the(Log, actions).message  # type: ignore[attr-defined]
    job, actions = step(job, StatusPolled(JobStatus("pending")), 10 * CONFIG.token_refresh_s)
    assert job.state == "queued" and actions == []
    job, actions = step(job, StatusPolled(JobStatus("finished", exit_code=0)), 11 * CONFIG.token_refresh_s)
    assert kinds(actions) == ["Forget", "Report"]


# -- revoke ----------------------------------------------------------------------------------


def test_revoke_keeps_a_job_waiting_in_its_queue_within_the_queue_timeout() -> None:
    job = on_backend("queued", now_s=0.0)
    kept, actions = step(job, Revoked(JobStatus("pending", reason="Priority")), 100.0)
    assert kept.state == "queued" and kept.last_reason == "Priority"
    refusal = the(RefuseRevoke, actions)
    assert isinstance(refusal, RefuseRevoke) and refusal.reason.startswith("unit.t run r1 try 1 waits in debug's queue")
    assert not any(isinstance(action, Forget | Cancel) for action in actions)
    gone, actions = step(job, Revoked(None), CONFIG.backend_queue_timeout_s + 1)  # no answer: judged by the last poll
    assert gone.state == "done" and kinds(actions) == ["Forget", "Cancel", "Log"]
    assert "last seen pending" in the(Log, actions).message  # type: ignore[attr-defined]


def test_revoke_keeps_a_job_that_has_just_started_until_its_task_had_time_to_report() -> None:
    job = on_backend("running", now_s=0.0)
    _, actions = step(job, Revoked(JobStatus("running")), CONFIG.task_queued_timeout_s - 1)
    assert "started on debug 599 s ago" in the(RefuseRevoke, actions).reason  # type: ignore[attr-defined]
    gone, actions = step(job, Revoked(JobStatus("running")), CONFIG.task_queued_timeout_s)
    assert gone.state == "done" and the(Cancel, actions) == Cancel("slurm", "42")


def test_revoke_cancels_a_job_not_yet_polled_or_that_ended_meanwhile() -> None:
    gone, actions = step(on_backend("submitted"), Revoked(None), 1.0)
    assert gone.state == "done" and "last seen not yet polled" in the(Log, actions).message  # type: ignore[attr-defined]
    gone, actions = step(on_backend("queued"), Revoked(JobStatus("finished", exit_code=0)), 1.0)
    assert gone.state == "done" and kinds(actions) == ["Forget", "Cancel", "Log"]
    assert "last seen finished" in the(Log, actions).message  # type: ignore[attr-defined]


def test_revoke_forgets_a_job_not_yet_on_its_backend_without_cancelling() -> None:
    job, _ = step(new_job(), Accepted(), 0.0)
    job, _ = step(job, SubmitFailed("slurm: throttled", "throttled", transient=True), 0.0)
    gone, actions = step(job, Revoked(None), 0.5)
    assert gone.state == "done" and actions == [Forget(KEY)]


# -- the table -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "event"),
    [
        ("submitted", Submitted("43")),  # a second submit of a job already on its backend
        ("queued", Accepted()),
        ("pending_submit", StatusPolled(JobStatus("running"))),  # nothing on the backend to poll
        ("new", Revoked(None)),
    ],
)
def test_an_event_the_state_has_no_transition_for_is_a_clear_error(state: str, event: object) -> None:
    job = (
        new_job() if state == "new" else on_backend(state) if state in ON_BACKEND else step(new_job(), Accepted(), 0)[0]
    )
    with pytest.raises(LifecycleError, match=rf"job unit\.t run r1 try 1: no transition from '{state}' on"):
        step(job, event, 1.0)


def test_a_done_job_has_no_transitions_and_every_live_state_has_some() -> None:
    states = {state for state, _ in TRANSITIONS}
    assert states == set(JobState) - {JobState.DONE}
    assert new_job().state is JobState.NEW and JobState.PENDING_SUBMIT == "pending_submit"  # values stay strings
    with pytest.raises(LifecycleError, match="from 'done'"):
        step(replace(new_job(), state=JobState.DONE), Heartbeat(), 0.0)


def test_the_machine_imports_no_airflow() -> None:
    """Read from the sources (no interpreter started): the machine and every agora module it imports."""
    package = Path(lifecycle.__file__).parents[2]
    todo, seen, imported = ["agora_optimizer.executor.lifecycle"], set(), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = package / (name.replace(".", "/") + ".py")
        if not path.is_file():
            path = package / name.replace(".", "/") / "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            imported.update(names)
            ours = [n for n in names if n.split(".")[0] == "agora_optimizer"]
            todo += [
                ".".join(n.split(".")[:depth]) for n in ours for depth in range(1, n.count(".") + 2)
            ]  # packages too
    assert not {name for name in imported if name.split(".")[0] == "airflow"}, sorted(seen)


# -- held for a planned machine's turn -------------------------------------------------------

LEASE = MachineLease("lease-unit.small_0-k", "unit", "r1", "small#0", "small", 2, 4 * 2**30, tasks=2)


def planned_job(workload: object = "workload") -> Job:
    job = new_job(workload)
    return replace(job, spec=replace(job.spec, lease=LEASE))


def test_a_task_of_a_planned_machine_is_held_until_released_then_submitted() -> None:
    job, actions = step(planned_job(), Accepted(), 10.0)
    assert (job.state, job.held_since_s, job.attempts) == ("held", 10.0, 0)
    assert kinds(actions) == ["Log"] and "small#0" in the(Log, actions).message  # type: ignore[attr-defined]
    assert step(job, Heartbeat(), 11.0) == (job, [])  # nothing to submit while held
    job, actions = step(job, Released("its turn on small#0"), 14.0)
    assert (job.state, job.attempts) == ("pending_submit", 1)
    assert kinds(actions) == ["Log", "Submit"]
    assert "4.0 s held: its turn on small#0" in the(Log, actions).message  # type: ignore[attr-defined]
    job, _ = step(job, Submitted("42"), 14.5)
    assert job.state == "submitted"


def test_a_task_without_a_lease_is_never_held() -> None:
    job, actions = step(new_job(), Accepted(), 0.0)
    assert job.state == "pending_submit" and actions == [Submit(KEY)]
    with pytest.raises(LifecycleError, match="no transition from 'pending_submit' on Released"):
        step(job, Released("x"), 1.0)


def test_a_held_tasks_token_is_renewed_like_a_queued_ones() -> None:
    job, _ = step(planned_job(), Accepted(), 0.0)
    assert step(job, Heartbeat(), CONFIG.token_renew_interval_s - 1)[1] == []
    _, actions = step(job, Heartbeat(), CONFIG.token_renew_interval_s)
    assert actions == [RenewToken(KEY)]
    renewed, _ = step(job, TokenRenewed("fresh", published=True), CONFIG.token_renew_interval_s)
    assert (renewed.state, renewed.workload, renewed.token_at_s) == ("held", "fresh", CONFIG.token_renew_interval_s)
    adopted_like, _ = step(planned_job(workload=None), Accepted(), 0.0)
    assert step(adopted_like, Heartbeat(), 10_000.0)[1] == []  # no workload, no token of its own


def test_airflow_may_not_revoke_a_held_task_within_the_hold_bound() -> None:
    config = replace(CONFIG, machine_hold_s=100.0)
    job, _ = step(planned_job(), Accepted(), 0.0, config)
    kept, actions = step(job, Revoked(None), 99.0, config)
    assert kept.state == "held" and kinds(actions) == ["Log", "RefuseRevoke"]
    assert "small#0" in the(RefuseRevoke, actions).reason  # type: ignore[attr-defined]
    gone, actions = step(job, Revoked(None), 100.0, config)
    assert gone.state == "done" and actions == [Forget(KEY)]


def test_a_repair_moves_a_held_job_to_its_new_machine_and_it_keeps_its_place_in_time() -> None:
    job, _ = step(planned_job(), Accepted(), 10.0)
    lease = replace(LEASE, key="lease-unit.large_0-k", machine="large#0", resource="large")
    record = replace(job.record, resource="large", machine="large#0")
    moved, actions = step(job, Moved(replace(job.spec, resource="large", lease=lease), record, "repair at 5.0 s"), 12.0)
    assert (moved.state, moved.held_since_s, moved.spec.lease, moved.record.resource) == ("held", 10.0, lease, "large")
    assert kinds(actions) == ["WriteRecord", "Log"]
    assert "to large#0: repair at 5.0 s" in the(Log, actions).message  # type: ignore[attr-defined]
    gone, actions = step(job, Moved(replace(job.spec, lease=None), job.record, "repair"), 12.0)
    assert gone.state == "pending_submit" and kinds(actions) == ["WriteRecord", "Log", "Log", "Submit"]
    with pytest.raises(LifecycleError, match="no transition from 'pending_submit' on Moved"):
        step(gone, Moved(job.spec, job.record, "repair"), 13.0)

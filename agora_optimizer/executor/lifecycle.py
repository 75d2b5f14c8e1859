"""The life of one job in the AgoraExecutor, as a pure state machine (no I/O, no Airflow).

Why one module of some 540 lines: the states, the events, the actions and the transition table
are one vocabulary, read together; each handler is a few lines against it, and the table at the
end is the whole machine at a glance. Split, a reader would follow one transition across files.

A :class:`Job` is in one :class:`JobState`; an event (a workload arrived, a submit came back,
a poll answered, Airflow revoked the task ...) moves it through :func:`transition`, which
returns the job's next version and the :class:`Action` list the executor carries out: submit,
cancel, renew a token, report to Airflow, log, forget. The executor does every bit of I/O;
this module only decides. The states::

    new ─Accepted─▶ pending_submit ─Submitted─▶ submitted ─StatusPolled─▶ queued ◀─▶ running
    new ─Accepted (a planned machine's task)─▶ held ─Released─▶ pending_submit
    held ─Moved (a repair re-placed it)─▶ held on its new machine, or pending_submit when it has none
    new ─Adopted──────────────────────────────▶ submitted
    pending_submit ─SubmitFailed (transient, retries left)─▶ pending_submit (backoff), else done
    submitted/queued/running ─StatusPolled finished|lost, queue timeout, PollFailed past outage─▶ done
    any ─Revoked─▶ done (or kept, with RefuseRevoke, while it waits in its queue or has just started)
    held ─Revoked─▶ kept (RefuseRevoke) within [agora] machine_hold_s, else done

A job is ``held`` when its ``JobSpec.lease`` names a planned machine: it waits for its machine's
turn (the run machine, :mod:`~agora_optimizer.executor.runs.machine`, decides by the machine order
and has the executor feed ``Released``).
A job without a lease goes straight to ``pending_submit``, as before planned machines existed.

``done`` jobs leave the executor's table through the one :class:`Forget` action. Times are
the executor's monotonic clock (``*_s``) except the backend's ``queued_at``, a wall-clock
moment compared with :attr:`Now.wall`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal, TypeAlias

from agora_optimizer.errors import AgoraError
from agora_optimizer.executor.jobs.records import JobRecord
from agora_optimizer.executor.jobs.spec import JobSpec, JobStatus


class JobState(StrEnum):
    """Where a job is in its life; each value is a string, as it was before states were an enum."""

    NEW = "new"
    HELD = "held"  # waiting for its planned machine's turn
    PENDING_SUBMIT = "pending_submit"  # not on its backend yet (first try, or waiting out a backoff)
    SUBMITTED = "submitted"  # on it, not polled yet (also a job just adopted)
    QUEUED = "queued"  # what the last poll said
    RUNNING = "running"
    DONE = "done"  # out of the executor's table (its Forget action)


ON_BACKEND: tuple[JobState, ...] = (JobState.SUBMITTED, JobState.QUEUED, JobState.RUNNING)
_POLLED_STATE: dict[str, JobState] = {
    "pending": JobState.QUEUED,
    "running": JobState.RUNNING,
}  # a poll's phase -> state
_LAST_PHASE: dict[JobState, str] = {state: phase for phase, state in _POLLED_STATE.items()}  # and back
ID_PREFIX = "agora"


class LifecycleError(AgoraError):
    """An event the job's state has no transition for (a bug in the executor, not in the input)."""


# -- configuration ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LifecycleConfig:
    """The ``[agora]`` and ``[scheduler]`` values the machine decides by, read once when the executor starts."""

    submit_retries: int = 5
    backoff_max_s: float = 60.0
    backend_outage_s: float = 600.0
    backend_queue_timeout_s: float = 86400.0
    token_refresh_s: float = 120.0
    task_queued_timeout_s: float = 600.0
    machine_hold_s: float = 600.0

    @property
    def token_renew_interval_s(self) -> float:
        """``token_refresh_s``, but well within a token's life (``[scheduler] task_queued_timeout``)."""
        return min(self.token_refresh_s, self.task_queued_timeout_s / 3)

    def backoff_s(self, attempts: int) -> float:
        """The wait before submit attempt ``attempts + 1``: 1, 2, 4 ... seconds, capped at ``backoff_max_s``."""
        return min(self.backoff_max_s, 2.0 ** (attempts - 1))


@dataclass(frozen=True)
class Now:
    """The moment of an event: the executor's monotonic clock, and the wall clock for backends' timestamps."""

    monotonic_s: float
    wall: datetime


# -- the job ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """A workload the executor is responsible for. ``workload`` is Airflow's (opaque here): None once
    adopted, as the token of an adopted job is no longer the executor's to renew."""

    key: Hashable
    spec: JobSpec
    record: JobRecord
    workload: Any = None
    state: JobState = JobState.NEW
    external_id: str = ""
    attempts: int = 0
    next_try_at_s: float = 0.0
    token_at_s: float = 0.0
    submitted_at_s: float = 0.0
    last_reason: str = ""
    queued_at: datetime | None = None  # when the backend says the job entered its queue
    running_since_s: float | None = None  # the first poll that saw it running
    held_since_s: float | None = None  # when it began to wait for its planned machine's turn

    @property
    def full_external_id(self) -> str:
        return format_external_id(self.record.backend, self.record.resource, self.external_id)

    def queue_wait_s(self, now: Now) -> float:
        """How long the job has waited in its backend's queue (by the backend's clock where it says)."""
        if self.queued_at is not None:
            queued_at = self.queued_at if self.queued_at.tzinfo else self.queued_at.replace(tzinfo=UTC)
            return max(0.0, (now.wall - queued_at).total_seconds())
        return now.monotonic_s - self.submitted_at_s


def format_external_id(backend: str, resource: str, external_id: str) -> str:
    return f"{ID_PREFIX}|{backend}|{resource}|{external_id}"


def parse_external_id(value: str) -> tuple[str, str, str] | None:
    """``(backend, resource, id)`` of an id this executor wrote, None for anything else."""
    parts = value.split("|", 3)
    if len(parts) != 4 or parts[0] != ID_PREFIX or not all(parts[1:]):
        return None
    return parts[1], parts[2], parts[3]


# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Accepted:
    """Airflow handed the workload over; its job directory is written."""


@dataclass(frozen=True)
class Adopted:
    """A restarted scheduler took over a job an earlier one submitted."""

    external_id: str


@dataclass(frozen=True)
class Released:
    """A held job's planned machine has room for it (``reason`` says why, for the log)."""

    reason: str


@dataclass(frozen=True)
class Moved:
    """A repair re-placed a held job's task (:mod:`~agora_optimizer.executor.runs.repair`): ``spec`` and ``record``
    are its new placement (resource, reservation, machine lease); ``reason`` says why, for the log."""

    spec: JobSpec
    record: JobRecord
    reason: str


@dataclass(frozen=True)
class Heartbeat:
    """The executor's sync: a submit waiting out its backoff may be due."""


@dataclass(frozen=True)
class Submitted:
    external_id: str


@dataclass(frozen=True)
class SubmitFailed:
    """``error`` names the backend and the reason; ``transient`` errors are retried with backoff."""

    error: str
    reason: str
    transient: bool


@dataclass(frozen=True)
class StatusPolled:
    status: JobStatus


@dataclass(frozen=True)
class PollFailed:
    """The job's backend did not answer a poll, and has not since ``down_s`` seconds."""

    error: str
    down_s: float


@dataclass(frozen=True)
class TokenRenewed:
    """A fresh token is in ``workload`` (and its file); ``published``: the job can read it too."""

    workload: Any
    published: bool


@dataclass(frozen=True)
class Revoked:
    """Airflow found the task QUEUED longer than its ``task_queued_timeout``; ``status``: the backend's answer now."""

    status: JobStatus | None = None


Event: TypeAlias = (
    Accepted
    | Adopted
    | Released
    | Moved
    | Heartbeat
    | Submitted
    | SubmitFailed
    | StatusPolled
    | PollFailed
    | TokenRenewed
    | Revoked
)


# -- actions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Submit:
    key: Hashable


@dataclass(frozen=True)
class WriteRecord:
    """Write ``job.json`` (now with the external id a restarted scheduler adopts by)."""

    spec: JobSpec
    record: JobRecord


@dataclass(frozen=True)
class ReportQueued:
    """Tell Airflow the task is QUEUED on the backend, with the external id it stores."""

    key: Hashable
    full_external_id: str


@dataclass(frozen=True)
class Cancel:
    backend: str
    external_id: str


@dataclass(frozen=True)
class RenewToken:
    key: Hashable


@dataclass(frozen=True)
class Report:
    """The job ended: write its trace and report success or failure (with why) to Airflow."""

    job: Job
    status: JobStatus


@dataclass(frozen=True)
class RefuseRevoke:
    """Airflow must not revoke this task now; ``reason`` says why (the executor raises NotImplementedError)."""

    reason: str


@dataclass(frozen=True)
class Log:
    level: Literal["info", "warning", "error"]
    message: str


@dataclass(frozen=True)
class Forget:
    """The job leaves the executor's table (the only way it does)."""

    key: Hashable


Action: TypeAlias = Submit | WriteRecord | ReportQueued | Cancel | RenewToken | Report | RefuseRevoke | Log | Forget
Outcome: TypeAlias = tuple[Job, list[Action]]
Handler: TypeAlias = Callable[[Job, Any, Now, LifecycleConfig], Outcome]


# -- handlers --------------------------------------------------------------------------------


def _accept(job: Job, event: Accepted, now: Now, config: LifecycleConfig) -> Outcome:
    if job.spec.lease is not None:
        held = replace(job, state=JobState.HELD, token_at_s=now.monotonic_s, held_since_s=now.monotonic_s)
        return held, [Log("info", f"Holding {job.record.label} for its turn on {job.spec.lease.machine}")]
    job = replace(job, state=JobState.PENDING_SUBMIT, token_at_s=now.monotonic_s, submitted_at_s=now.monotonic_s)
    return _submit(job, now)


def _release(job: Job, event: Released, now: Now, config: LifecycleConfig) -> Outcome:
    job = replace(job, state=JobState.PENDING_SUBMIT, submitted_at_s=now.monotonic_s)
    held_s = now.monotonic_s - (job.held_since_s if job.held_since_s is not None else now.monotonic_s)
    job, actions = _submit(job, now)
    return job, [Log("info", f"Releasing {job.record.label} after {held_s:.1f} s held: {event.reason}"), *actions]


def _move_held(job: Job, event: Moved, now: Now, config: LifecycleConfig) -> Outcome:
    """A held job takes its new placement and keeps its place in time (``held_since_s``: the hold's bound
    counts from when it first waited); without a machine to wait for it goes on as any job."""
    where = event.spec.lease.machine if event.spec.lease is not None else f"{event.spec.resource} (no machine)"
    moved = replace(job, spec=event.spec, record=event.record)
    actions: list[Action] = [
        WriteRecord(event.spec, event.record),
        Log("info", f"Moving {job.record.label} to {where}: {event.reason}"),
    ]
    if event.spec.lease is not None:
        return moved, actions
    released, more = _release(moved, Released("its repair left it no machine to wait for"), now, config)
    return released, [*actions, *more]


def _held_heartbeat(job: Job, event: Heartbeat, now: Now, config: LifecycleConfig) -> Outcome:
    """A held job's Execution API token is renewed as a queued one's is: the hold may outlast it."""
    if job.workload is not None and now.monotonic_s - job.token_at_s >= config.token_renew_interval_s:
        return job, [RenewToken(job.key)]
    return job, []


def _revoke_held(job: Job, event: Revoked, now: Now, config: LifecycleConfig) -> Outcome:
    """A held job waits for its machine's turn, which ``machine_hold_s`` bounds: Airflow's revoke waits too."""
    held_s = now.monotonic_s - (job.held_since_s if job.held_since_s is not None else now.monotonic_s)
    if held_s < config.machine_hold_s:
        machine = job.spec.lease.machine if job.spec.lease is not None else "?"
        why = (
            f"waits {held_s:.0f} s for its turn on its planned machine {machine}; "
            f"[agora] machine_hold_s ({config.machine_hold_s:.0f} s) bounds that wait"
        )
        return job, [
            Log("info", f"Not revoking {job.record.label}: it {why}"),
            RefuseRevoke(f"{job.record.label} {why}"),
        ]
    return replace(job, state=JobState.DONE), [Forget(job.key)]


def _adopt(job: Job, event: Adopted, now: Now, config: LifecycleConfig) -> Outcome:
    adopted = replace(
        job,
        state=JobState.SUBMITTED,
        external_id=event.external_id,
        attempts=1,
        workload=None,
        token_at_s=now.monotonic_s,
        submitted_at_s=now.monotonic_s,
    )
    return adopted, [Log("info", f"Adopted {job.record.label}: {job.record.backend} job {event.external_id}")]


def _submit_if_due(job: Job, event: Heartbeat, now: Now, config: LifecycleConfig) -> Outcome:
    return _submit(job, now) if now.monotonic_s >= job.next_try_at_s else (job, [])


def _submit(job: Job, now: Now) -> Outcome:
    job = replace(job, attempts=job.attempts + 1)
    return job, [Submit(job.key)]


def _submitted(job: Job, event: Submitted, now: Now, config: LifecycleConfig) -> Outcome:
    record = replace(job.record, external_id=event.external_id)
    job = replace(
        job, state=JobState.SUBMITTED, external_id=event.external_id, submitted_at_s=now.monotonic_s, record=record
    )
    return job, [
        WriteRecord(job.spec, record),
        ReportQueued(job.key, job.full_external_id),
        Log("info", f"Submitted {record.label} to {record.resource} as {job.full_external_id}"),
    ]


def _submit_failed(job: Job, event: SubmitFailed, now: Now, config: LifecycleConfig) -> Outcome:
    job = replace(job, last_reason=event.reason)
    retries = config.submit_retries
    if event.transient and job.attempts < retries:
        delay_s = config.backoff_s(job.attempts)
        message = (
            f"Submitting {job.record.label} failed ({event.error}); retry {job.attempts}/{retries} in {delay_s:.0f} s"
        )
        return replace(job, next_try_at_s=now.monotonic_s + delay_s), [Log("warning", message)]
    why = f"{event.error} (after {job.attempts} attempts)" if event.transient else event.error
    return _end(job, JobStatus("finished", exit_code=1, reason=f"agora could not submit: {why}"))


def _end(job: Job, status: JobStatus, *before: Action) -> Outcome:
    return replace(job, state=JobState.DONE), [*before, Forget(job.key), Report(job, status)]


def _note(job: Job, status: JobStatus, now: Now) -> Job:
    """Keep what a poll said about a job that is still on its backend."""
    state = _POLLED_STATE.get(status.phase, job.state)
    running_since_s = job.running_since_s
    if status.phase == "running" and running_since_s is None:
        running_since_s = now.monotonic_s
    return replace(
        job,
        state=state,
        last_reason=status.reason or job.last_reason,
        queued_at=status.queued_at or job.queued_at,
        running_since_s=running_since_s,
    )


def _polled(job: Job, event: StatusPolled, now: Now, config: LifecycleConfig) -> Outcome:
    status = event.status
    if status.phase in ("finished", "lost"):
        return _end(job, status)
    job = _note(job, status, now)
    if status.phase != "pending":
        return job, []
    waited_s, limit_s = job.queue_wait_s(now), config.backend_queue_timeout_s
    if waited_s > limit_s:
        reason = (
            f"cancelled by agora after waiting {waited_s:.0f} s in {job.record.resource}'s queue "
            f"({status.reason or 'pending'}), over [agora] backend_queue_timeout_s = {limit_s:.0f} s"
        )
        cancelled = replace(status, phase="finished", exit_code=143, reason=reason)
        return _end(job, cancelled, Cancel(job.record.backend, job.external_id))
    if job.workload is not None and now.monotonic_s - job.token_at_s >= config.token_renew_interval_s:
        return job, [RenewToken(job.key)]
    return job, []


def _poll_failed(job: Job, event: PollFailed, now: Now, config: LifecycleConfig) -> Outcome:
    if event.down_s <= config.backend_outage_s:
        return job, []
    reason = f"{job.record.backend} unreachable for {event.down_s:.0f} s: {event.error}"
    return _end(job, JobStatus("lost", reason=reason))


def _token_renewed(job: Job, event: TokenRenewed, now: Now, config: LifecycleConfig) -> Outcome:
    token_at_s = now.monotonic_s if event.published else job.token_at_s
    return replace(job, workload=event.workload, token_at_s=token_at_s), []


def _revoke_unsubmitted(job: Job, event: Revoked, now: Now, config: LifecycleConfig) -> Outcome:
    return replace(job, state=JobState.DONE), [Forget(job.key)]


def _revoke(job: Job, event: Revoked, now: Now, config: LifecycleConfig) -> Outcome:
    """Keep a job that waits in its backend's queue (within ``backend_queue_timeout_s``) or has just
    started (within ``task_queued_timeout``): Airflow's revoke would cost it its place; cancel the rest."""
    ended = event.status is not None and event.status.phase in ("finished", "lost")
    if event.status is not None and not ended:
        job = _note(job, event.status, now)
    why = "" if ended else _why_not_stuck(job, now, config)
    if why:
        label = job.record.label
        return job, [
            Log("info", f"Not revoking {label}: {job.record.backend} job {job.external_id} {why}"),
            RefuseRevoke(f"{label} {why}"),
        ]
    last_seen = (
        event.status.phase if ended and event.status is not None else _LAST_PHASE.get(job.state, "not yet polled")
    )
    message = (
        f"Revoked {job.record.label} ({job.record.backend} job {job.external_id}, last seen {last_seen}): Airflow "
        "found its task QUEUED longer than [scheduler] task_queued_timeout, and the job was neither waiting in "
        f"{job.record.resource}'s queue (within [agora] backend_queue_timeout_s) nor just started"
    )
    return replace(job, state=JobState.DONE), [
        Forget(job.key),
        Cancel(job.record.backend, job.external_id),
        Log("warning", message),
    ]


def _why_not_stuck(job: Job, now: Now, config: LifecycleConfig) -> str:
    """Why a job whose task Airflow sees QUEUED too long is not stuck ('' if it is)."""
    if job.state == JobState.QUEUED:
        waited_s, limit_s = job.queue_wait_s(now), config.backend_queue_timeout_s
        if waited_s <= limit_s:  # the wait _polled allows
            return (
                f"waits in {job.record.resource}'s queue ({job.last_reason or 'pending'}) for {waited_s:.0f} s; "
                f"[agora] backend_queue_timeout_s ({limit_s:.0f} s) bounds that wait, not task_queued_timeout"
            )
    if job.state == JobState.RUNNING and job.running_since_s is not None:
        running_s = now.monotonic_s - job.running_since_s
        if running_s < config.task_queued_timeout_s:
            return f"started on {job.record.resource} {running_s:.0f} s ago; its task has yet to report to Airflow"
    return ""


def _unchanged(job: Job, event: Any, now: Now, config: LifecycleConfig) -> Outcome:
    return job, []


TRANSITIONS: dict[tuple[JobState, type[Any]], Handler] = {
    (JobState.NEW, Accepted): _accept,
    (JobState.NEW, Adopted): _adopt,
    (JobState.HELD, Released): _release,
    (JobState.HELD, Moved): _move_held,
    (JobState.HELD, Heartbeat): _held_heartbeat,
    (JobState.HELD, TokenRenewed): _token_renewed,
    (JobState.HELD, Revoked): _revoke_held,
    (JobState.PENDING_SUBMIT, Heartbeat): _submit_if_due,
    (JobState.PENDING_SUBMIT, Submitted): _submitted,
    (JobState.PENDING_SUBMIT, SubmitFailed): _submit_failed,
    (JobState.PENDING_SUBMIT, Revoked): _revoke_unsubmitted,
    **{(state, Heartbeat): _unchanged for state in ON_BACKEND},  # polled per backend, not per heartbeat
    **{(state, StatusPolled): _polled for state in ON_BACKEND},
    **{(state, PollFailed): _poll_failed for state in ON_BACKEND},
    **{(state, TokenRenewed): _token_renewed for state in ON_BACKEND},
    **{(state, Revoked): _revoke for state in ON_BACKEND},
}


def transition(job: Job, event: Event, now: Now, config: LifecycleConfig) -> Outcome:
    """The job after ``event`` and what the executor must do, in order. Pure: no I/O, no clock."""
    handler = TRANSITIONS.get((job.state, type(event)))
    if handler is None:
        raise LifecycleError(f"job {job.record.label}: no transition from {str(job.state)!r} on {type(event).__name__}")
    return handler(job, event, now, config)

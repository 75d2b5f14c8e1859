"""Finished (or at least started) jobs from SLURM accounting, with how long each waited.

:func:`read_sacct` asks ``sacct --parsable2`` (slurmdbd); :func:`read_jobcomp` reads the file
that ``JobCompType=jobcomp/filetxt`` writes, for a cluster without a database. Both return an
:class:`AccountingRead`: the started jobs as frozen :class:`QueueWaitRecord` s, the jobs that have
not started (:class:`Unstarted`), and one line per malformed row saying why it was left out, so
one bad row loses nothing else.

The wait is ``start - eligible`` (the time a job could have run but did not), or
``start - submit`` where the source gives no eligible time.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from agora_optimizer.errors import InputFileError
from agora_optimizer.slurm import values
from agora_optimizer.slurm.commands import run_slurm
from agora_optimizer.slurm.errors import SlurmCommandError, SlurmOutputError

SACCT_FIELDS = (
    "JobIDRaw",
    "Partition",
    "State",
    "Submit",
    "Eligible",
    "Start",
    "End",
    "ReqCPUS",
    "ReqTRES",
    "TimelimitRaw",
    "NodeList",
)
_JOBCOMP_TOKEN = re.compile(r"(\w+)=(\S*)")


@dataclass(frozen=True)
class QueueWaitRecord:
    """One job as accounting saw it. ``ended_at`` is ``None`` while it still runs."""

    job_id: str
    partition: str
    state: str
    submitted_at: datetime
    eligible_at: datetime | None
    started_at: datetime
    ended_at: datetime | None
    cores: int
    memory_bytes: int | None
    time_limit_s: float | None

    @property
    def wait_s(self) -> float:
        since = self.eligible_at or self.submitted_at
        return max((self.started_at - since).total_seconds(), 0.0)


@dataclass(frozen=True)
class Unstarted:
    """A job accounting knows but that has not started: still pending, or ended without running."""

    job_id: str
    state: str

    @property
    def finished(self) -> bool:
        """It will never start (cancelled, failed...) rather than still waiting."""
        return self.state not in _NOT_FINISHED


_NOT_FINISHED = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SUSPENDED", "RUNNING"})


@dataclass(frozen=True)
class AccountingRead:
    """What one read of accounting gave: the started jobs, the unstarted ones, and one reason
    per malformed row left out."""

    records: tuple[QueueWaitRecord, ...]
    unstarted: tuple[Unstarted, ...]
    skipped: tuple[str, ...]
    source: str


def sacct_argv(job_ids: Iterable[str] | None = None, since: datetime | None = None) -> list[str]:
    argv = ["sacct", "--allusers", "--allocations", "--parsable2", "--noheader", "--format", ",".join(SACCT_FIELDS)]
    ids = list(job_ids or [])
    if ids:
        argv += ["--jobs", ",".join(ids)]
    if since is not None:  # sacct reads a local time
        argv += ["--starttime", since.astimezone().strftime("%Y-%m-%dT%H:%M:%S")]
    elif not ids:
        argv += ["--starttime", "now-7days"]
    return argv


def read_sacct(job_ids: Iterable[str] | None = None, since: datetime | None = None) -> AccountingRead:
    """Jobs from ``sacct`` (all users, allocations only): the given ids, or those since ``since``
    (default: the last seven days)."""
    ids = list(job_ids or [])
    if job_ids is not None and not ids:
        return AccountingRead(records=(), unstarted=(), skipped=(), source="sacct")
    argv = sacct_argv(ids, since)
    return parse_sacct(run_slurm(argv), source=shlex.join([*argv[:2], "..."]))


def parse_sacct(text: str, source: str = "sacct") -> AccountingRead:
    """Parse ``sacct --parsable2 --noheader --format SACCT_FIELDS`` run with ``SLURM_TIME_FORMAT=%s``."""
    rows = _Rows()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) != len(SACCT_FIELDS):
            rows.skipped.append(f"line {number}: expected {len(SACCT_FIELDS)} fields, got {len(cells)}: {line!r}")
            continue
        row = dict(zip(SACCT_FIELDS, cells, strict=True))
        rows.add(_sacct_record, row, f"{source} line {number}")
    return rows.read(source)


def _sacct_record(row: Mapping[str, str], where: str) -> QueueWaitRecord | Unstarted:
    job_id = row["JobIDRaw"].strip()
    state = values.state(row["State"])  # "CANCELLED by 0"
    started = values.epoch_time(row["Start"], where, "Start")
    if started is None or row["NodeList"] in ("None assigned", ""):  # cancelled while pending: "started" then
        return Unstarted(job_id, state)
    return _record(row, where, _SACCT_NAMES, job_id, state, started)


def read_jobcomp(path: str | Path) -> AccountingRead:
    """Jobs from a ``jobcomp/filetxt`` file (``JobCompLoc``): one ``Key=value`` line per finished job."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputFileError(path, f"cannot read the SLURM job completion file: {exc.strerror or exc}") from None
    return parse_jobcomp(text, source=str(path))


def parse_jobcomp(text: str, source: str = "jobcomp") -> AccountingRead:
    """Parse jobcomp/filetxt lines; times there are the controller's local time in ISO format."""
    rows = _Rows()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        row = dict(_JOBCOMP_TOKEN.findall(line))
        if "JobId" not in row:
            rows.skipped.append(f"line {number}: no JobId: {line[:120]!r}")
            continue
        rows.add(_jobcomp_record, row, f"{source} line {number}")
    return rows.read(source)


def _jobcomp_record(row: Mapping[str, str], where: str) -> QueueWaitRecord | Unstarted:
    job_id = row["JobId"]
    for field in ("Partition", "JobState", "StartTime", "SubmitTime", "ProcCnt", "TimeLimit"):
        if field not in row:
            raise SlurmOutputError(where, field, f"job {job_id}: missing")
    started = values.iso_local_time(row["StartTime"], where, "StartTime")
    if started is None or row.get("NodeCnt") == "0":  # cancelled while pending: "started" when cancelled
        return Unstarted(job_id, row["JobState"])
    return _record(row, where, _JOBCOMP_NAMES, job_id, row["JobState"], started)


@dataclass(frozen=True)
class _Names:
    """What one accounting source calls a job's fields, and how it prints times."""

    partition: str
    submit: str
    eligible: str
    end: str
    cores: str
    tres: str
    limit: str
    read_time: Callable[[str, str, str], datetime | None]


_SACCT_NAMES = _Names("Partition", "Submit", "Eligible", "End", "ReqCPUS", "ReqTRES", "TimelimitRaw", values.epoch_time)
_JOBCOMP_NAMES = _Names(
    "Partition", "SubmitTime", "EligibleTime", "EndTime", "ProcCnt", "Tres", "TimeLimit", values.iso_local_time
)


def _record(
    row: Mapping[str, str], where: str, names: _Names, job_id: str, state: str, started: datetime
) -> QueueWaitRecord:
    """A started job's record from a row of either source."""
    submitted = names.read_time(row[names.submit], where, names.submit)
    if submitted is None:
        raise SlurmOutputError(where, names.submit, f"job {job_id} has no submit time")
    return _checked(
        QueueWaitRecord(
            job_id=job_id,
            partition=row[names.partition],
            state=state,
            submitted_at=submitted,
            eligible_at=names.read_time(row.get(names.eligible, ""), where, names.eligible),
            started_at=started,
            ended_at=names.read_time(row.get(names.end, ""), where, names.end),
            cores=values.integer(row[names.cores], where, names.cores),
            memory_bytes=values.tres_memory_bytes(row.get(names.tres, ""), where, names.tres),
            time_limit_s=values.time_limit_s(row[names.limit], where, names.limit),
        ),
        where,
    )


def read_accounting(
    job_ids: Iterable[str] | None = None, since: datetime | None = None, jobcomp_path: str | Path | None = None
) -> AccountingRead:
    """``sacct``; when it fails (no slurmdbd) and ``jobcomp_path`` is given, that file instead."""
    try:
        return read_sacct(job_ids, since)
    except SlurmCommandError:
        if jobcomp_path is None:
            raise
    found = read_jobcomp(jobcomp_path)
    wanted = None if job_ids is None else set(job_ids)
    records = tuple(
        r
        for r in found.records
        if (wanted is None or r.job_id in wanted) and (since is None or r.submitted_at >= since)
    )
    unstarted = tuple(u for u in found.unstarted if wanted is None or u.job_id in wanted)
    return AccountingRead(records, unstarted, found.skipped, found.source)


def _checked(record: QueueWaitRecord, where: str) -> QueueWaitRecord:
    if record.started_at < record.submitted_at:
        raise SlurmOutputError(where, "Start", f"job {record.job_id} starts before it was submitted")
    if record.ended_at is not None and record.ended_at < record.started_at:
        raise SlurmOutputError(where, "End", f"job {record.job_id} ends before it starts")
    return record


class _Rows:
    """The rows of one read as they are parsed; a parse error is one line in ``skipped``, not a lost read."""

    def __init__(self) -> None:
        self.records: list[QueueWaitRecord] = []
        self.unstarted: list[Unstarted] = []
        self.skipped: list[str] = []

    def add(
        self, build: Callable[[Mapping[str, str], str], QueueWaitRecord | Unstarted], row: Mapping[str, str], where: str
    ) -> None:
        try:
            result = build(row, where)
        except SlurmOutputError as exc:
            self.skipped.append(str(exc))
            return
        if isinstance(result, Unstarted):
            self.unstarted.append(result)
        else:
            self.records.append(result)

    def read(self, source: str) -> AccountingRead:
        return AccountingRead(tuple(self.records), tuple(self.unstarted), tuple(self.skipped), source)

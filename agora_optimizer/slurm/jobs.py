"""What squeue and sacct say of given jobs (agora's own): one :class:`SlurmRecord` per job.

:func:`squeue_jobs` asks ``squeue --states=all`` (pending and running jobs, and those SLURM has
ended within ``MinJobAge``), :func:`sacct_jobs` asks accounting (the allocation's row, with the
batch step's ``MaxRSS``); both ask for at most ``IDS_PER_CALL`` ids per command. A line without
its fields raises :class:`SlurmOutputError`: read as "no such job", it would make running jobs
look lost.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from agora_optimizer.slurm import values
from agora_optimizer.slurm.commands import DEFAULT_TIMEOUT_S, chunks, format_fields, run_slurm
from agora_optimizer.slurm.errors import SlurmCommandError, SlurmOutputError

log = logging.getLogger(__name__)

SQUEUE_FIELDS = (
    "JobID", "State", "Reason", "NodeList", "SubmitTime", "StartTime", "EndTime", "exit_code", "Partition", "WorkDir"
)  # fmt: skip
SACCT_FIELDS = (
    "JobID", "State", "ExitCode", "MaxRSS", "Submit", "Start", "End", "NodeList", "Reason", "Partition", "WorkDir"
)  # fmt: skip
SQUEUE_FORMAT = "--Format=" + format_fields(SQUEUE_FIELDS)


@dataclass(frozen=True)
class SlurmRecord:
    """What squeue or sacct says of one job (its allocation, not its steps)."""

    job_id: str
    state: str  # SLURM's word: RUNNING, TIMEOUT, OUT_OF_MEMORY ...
    reason: str = ""
    node: str = ""
    partition: str = ""
    work_dir: Path | None = None
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    exit_code: int | None = None  # a shell's view: the code, or 128 + the signal
    max_rss_bytes: int | None = None
    source: str = "squeue"

    @property
    def final(self) -> bool:
        return self.state in values.FINAL_STATES

    @property
    def held(self) -> bool:
        return self.state == "PENDING" and self.reason.startswith("JobHeld")


def parse_squeue(text: str) -> dict[str, SlurmRecord]:
    """``squeue --Format`` with ``|`` after each of :data:`SQUEUE_FIELDS` (WorkDir last, so it may hold a ``|``)."""
    records: dict[str, SlurmRecord] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.removesuffix("|").split("|", len(SQUEUE_FIELDS) - 1)
        if len(parts) != len(SQUEUE_FIELDS):
            log.warning("squeue: skipped a line with %d fields: %r", len(parts), line)
            continue
        job_id, state, reason, node, submit, start, end, status, partition, work_dir = (part.strip() for part in parts)
        times = (submit, start, end)
        exit_code = values.wait_status_exit_code(status)
        records[job_id] = _record(job_id, state, reason, node, partition, work_dir, times, exit_code)
    return records


def parse_sacct(text: str) -> dict[str, SlurmRecord]:
    """``sacct --parsable2`` with :data:`SACCT_FIELDS`: the allocation's row, with the batch step's MaxRSS."""
    rows: dict[str, list[str]] = {}
    rss: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split("|", len(SACCT_FIELDS) - 1)
        if len(parts) != len(SACCT_FIELDS):
            continue
        job_id, step = parts[0].partition(".")[::2]
        if step:
            peak = values.memory_bytes_or_none(parts[3])
            if peak is not None:
                rss[job_id] = max(rss.get(job_id, 0), peak)
        else:
            rows[job_id] = parts
    records: dict[str, SlurmRecord] = {}
    for job_id, parts in rows.items():
        _, state, exit_code, max_rss, submit, start, end, node, reason, partition, work_dir = parts
        records[job_id] = _record(
            job_id,
            state,
            reason,
            node,
            partition,
            work_dir,
            (submit, start, end),
            values.sacct_exit_code(exit_code),
            max_rss_bytes=rss.get(job_id, values.memory_bytes_or_none(max_rss)),
            source="sacct",
        )
    return records


def _record(
    job_id: str,
    state: str,
    reason: str,
    node: str,
    partition: str,
    work_dir: str,
    times: tuple[str, str, str],
    exit_code: int | None,
    max_rss_bytes: int | None = None,
    source: str = "squeue",
) -> SlurmRecord:
    submit, start, end = times
    return SlurmRecord(
        job_id=job_id,
        state=values.state(state),
        reason=values.nothing_as_empty(reason),
        node=values.nothing_as_empty(node),
        partition=partition.strip(),
        work_dir=Path(work_dir) if work_dir.startswith("/") else None,
        submitted_at=values.epoch_time_or_none(submit),
        started_at=values.epoch_time_or_none(start),
        ended_at=values.epoch_time_or_none(end),
        exit_code=exit_code,
        max_rss_bytes=max_rss_bytes,
        source=source,
    )


def squeue_jobs(job_ids: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, SlurmRecord]:
    """squeue's record of each of ``job_ids`` it still shows (ids it knows none of: none)."""
    records: dict[str, SlurmRecord] = {}
    for chunk in chunks(job_ids):
        try:
            out = run_slurm(
                ["squeue", "--noheader", "--states=all", f"--jobs={','.join(chunk)}", SQUEUE_FORMAT], timeout_s
            )
        except SlurmCommandError as exc:
            if "invalid job id" in exc.last_words.lower():
                continue  # squeue knows none of them
            raise
        refuse_garbage("squeue", out, len(SQUEUE_FIELDS), strip="|")
        records.update(parse_squeue(out))
    return records


def sacct_jobs(job_ids: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, SlurmRecord]:
    """Accounting's record of each of ``job_ids`` it has."""
    records: dict[str, SlurmRecord] = {}
    fmt = "--format=" + ",".join(SACCT_FIELDS)
    for chunk in chunks(job_ids):
        out = run_slurm(["sacct", "--noheader", "--parsable2", f"--jobs={','.join(chunk)}", fmt], timeout_s)
        refuse_garbage("sacct", out, len(SACCT_FIELDS))
        records.update(parse_sacct(out))
    return records


def refuse_garbage(command: str, text: str, field_count: int, strip: str = "") -> None:
    """``SlurmOutputError`` when a line of ``command``'s answer does not have its ``field_count`` fields."""
    for line in text.splitlines():
        if line.strip() and len(line.removesuffix(strip).split("|", field_count - 1)) != field_count:
            reason = f"a line agora cannot read (not {field_count} fields): {line[:200]!r}"
            raise SlurmOutputError(command, "(line)", reason)

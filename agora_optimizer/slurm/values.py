"""SLURM's printed values as numbers: memory sizes, time limits, TRES strings, epoch times, states.

Every parser takes the ``source`` (the command) and ``field`` to name in its error, and raises
:class:`SlurmOutputError` for a value it does not understand rather than guessing; the few
``*_or_none`` forms are for fields where agora reads what it can and leaves the rest unknown.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

from agora_optimizer.slurm.errors import SlurmOutputError

MIB = 2**20
_MEMORY_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)([cn]?)$")
_UNLIMITED = {"UNLIMITED", "INFINITE", "NONE", "PARTITION_LIMIT"}
_UNKNOWN_TIME = {"", "N/A", "NONE", "UNKNOWN", "0"}
_NOTHING = {"", "None", "(null)", "None assigned"}  # what SLURM prints for an empty reason or node list

# SLURM's job states. Active: not ended (a job that may start, or still runs); final: ended.
PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"})
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "BOOT_FAIL",
        "PREEMPTED",
        "DEADLINE",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)


def state(text: str) -> str:
    """A job's base state: ``"CANCELLED by 0"`` is ``CANCELLED``; nothing printed is ``UNKNOWN``."""
    words = text.split()
    return words[0].upper() if words else "UNKNOWN"


def nothing_as_empty(text: str) -> str:
    """A reason or node list, with SLURM's words for none (``None``, ``(null)``...) as ``""``."""
    value = text.strip()
    return "" if value in _NOTHING else value


def mib(size_bytes: int) -> int:
    """Bytes as whole MiB for ``--mem``: rounded up, at least 1."""
    return max(1, math.ceil(size_bytes / MIB))


def memory_bytes(text: str, source: str, field: str, default_unit: str = "M") -> int:
    """``"500M"``, ``"1.5G"``, ``"1400"`` (in ``default_unit``) or sacct's ``"2Gn"`` as bytes.

    A trailing ``c`` (per CPU, older sacct) or ``n`` (per node) is accepted and ignored: callers
    that need the total use the TRES string, which SLURM has already multiplied out.
    """
    match = _MEMORY.match(text.strip())
    if not match:
        raise SlurmOutputError(source, field, f"not a memory size: {text!r}")
    value, unit, _per = match.groups()
    return int(float(value) * _MEMORY_UNITS[unit or default_unit])


def time_limit_s(text: str, source: str, field: str) -> float | None:
    """``"[days-][hours:]minutes:seconds"`` (squeue) or a bare number of minutes as seconds.

    ``UNLIMITED`` is ``None``; ``"2:00"`` is two minutes, ``"1:00:00"`` one hour, ``"1-00:00:00"``
    one day, and ``"30"`` thirty minutes (sacct's ``TimelimitRaw``).
    """
    value = text.strip()
    if value.upper() in _UNLIMITED:
        return None
    days = 0
    if "-" in value:
        day_text, value = value.split("-", 1)
        if not day_text.isdigit():
            raise SlurmOutputError(source, field, f"not a time limit: {text!r}")
        days = int(day_text)
    parts = value.split(":")
    if not all(part.isdigit() for part in parts) or not 1 <= len(parts) <= 3:
        raise SlurmOutputError(source, field, f"not a time limit: {text!r}")
    numbers = [int(part) for part in parts]
    if len(numbers) == 1:
        seconds = numbers[0] * 60 if days == 0 else numbers[0] * 3600  # "minutes", or "days-hours"
    elif len(numbers) == 2:
        seconds = numbers[0] * 3600 + numbers[1] * 60 if days else numbers[0] * 60 + numbers[1]
    else:
        seconds = numbers[0] * 3600 + numbers[1] * 60 + numbers[2]
    return float(days * 86400 + seconds)


def tres(text: str, source: str, field: str) -> dict[str, str]:
    """``"cpu=2,mem=1400M,node=1,billing=2"`` as a dict (empty string, empty dict)."""
    result: dict[str, str] = {}
    for item in text.strip().split(","):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SlurmOutputError(source, field, f"not a TRES list: {text!r}")
        result[key] = value
    return result


def tres_memory_bytes(text: str, source: str, field: str) -> int | None:
    """The ``mem`` of a TRES string in bytes, or ``None`` when it names none."""
    mem = tres(text, source, field).get("mem")
    return None if mem is None else memory_bytes(mem, source, field)


def epoch_time(text: str, source: str, field: str) -> datetime | None:
    """A POSIX time printed under ``SLURM_TIME_FORMAT=%s`` as an aware UTC datetime; unset is ``None``."""
    value = text.strip()
    if value.upper() in _UNKNOWN_TIME:
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise SlurmOutputError(source, field, f"not a POSIX time: {text!r}") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise SlurmOutputError(source, field, f"not a POSIX time: {text!r}")
    return datetime.fromtimestamp(seconds, tz=UTC)


def epoch_time_or_none(text: str) -> datetime | None:
    """:func:`epoch_time`, with a value it cannot read as unknown (``None``)."""
    try:
        return epoch_time(text, "", "")
    except SlurmOutputError:
        return None


def memory_bytes_or_none(text: str, default_unit: str = "K") -> int | None:
    """:func:`memory_bytes` (sacct's ``MaxRSS``: kibibytes by default), ``None`` when empty or unreadable."""
    if not text.strip():
        return None
    try:
        return memory_bytes(text, "", "", default_unit=default_unit)
    except SlurmOutputError:
        return None


def iso_local_time(text: str, source: str, field: str) -> datetime | None:
    """``"2026-11-30T14:09:15"`` in the host's time zone (the jobcomp file's format) as aware UTC."""
    value = text.strip()
    if value.upper() in _UNKNOWN_TIME:
        return None
    try:
        naive = datetime.fromisoformat(value)
    except ValueError:
        raise SlurmOutputError(source, field, f"not an ISO time: {text!r}") from None
    return naive.astimezone(UTC)  # a naive time is taken as the host's local time


def integer(text: str, source: str, field: str) -> int:
    value = text.strip()
    if not value.isdigit():
        raise SlurmOutputError(source, field, f"not a whole number: {text!r}")
    return int(value)


def wait_status_exit_code(text: str) -> int | None:
    """squeue's ``exit_code``, the raw wait status (code << 8, or the signal), as a shell's exit code."""
    if not text.strip().isdigit():
        return None
    status = int(text)
    return 128 + (status & 0x7F) if status & 0x7F else status >> 8


def sacct_exit_code(text: str) -> int | None:
    """sacct's ``ExitCode``, ``code:signal``, as a shell's exit code (128 + the signal when killed)."""
    code, _, signal = text.partition(":")
    if not code.isdigit():
        return None
    return 128 + int(signal) if signal.isdigit() and int(signal) else int(code)

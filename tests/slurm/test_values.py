"""SLURM's printed values as numbers (agora_optimizer/slurm/values.py): one reading for every caller."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agora_optimizer.slurm import values
from agora_optimizer.slurm.errors import SlurmOutputError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2:00", 120.0),
        ("1:00:00", 3600.0),
        ("1-00:00:00", 86400.0),
        ("30", 1800.0),
        ("1-2", 93600.0),
        ("UNLIMITED", None),
    ],
)
def test_time_limits(text: str, seconds: float | None) -> None:
    assert values.time_limit_s(text, "squeue", "TimeLimit") == seconds


def test_memory_and_tres() -> None:
    assert values.memory_bytes("1.5G", "s", "f") == int(1.5 * 2**30)
    assert values.memory_bytes("1400", "s", "f") == 1400 * 2**20
    assert values.memory_bytes("2Gn", "s", "f") == 2 * 2**30
    assert values.tres_memory_bytes("cpu=2,mem=1400M,node=1", "s", "f") == 1400 * 2**20
    assert values.memory_bytes_or_none("322316K") == 322316 * 1024
    assert values.memory_bytes_or_none("") is None and values.memory_bytes_or_none("lots") is None
    assert values.mib(1) == 1 and values.mib(2**20 + 1) == 2
    with pytest.raises(SlurmOutputError, match=r"output of 'sacct': field 'ReqMem': not a memory size"):
        values.memory_bytes("lots", "sacct", "ReqMem")


def test_times_states_and_exit_codes() -> None:
    assert values.epoch_time("1796058847", "s", "f") == datetime.fromtimestamp(1796058847, UTC)
    assert values.epoch_time("Unknown", "s", "f") is None and values.epoch_time_or_none("N/A") is None
    assert values.epoch_time_or_none("soon") is None
    assert values.state("CANCELLED by 0") == "CANCELLED" and values.state("") == "UNKNOWN"
    assert values.nothing_as_empty("(null)") == "" and values.nothing_as_empty("None assigned") == ""
    assert values.wait_status_exit_code("768") == 3 and values.wait_status_exit_code("15") == 128 + 15
    assert values.sacct_exit_code("0:125") == 128 + 125 and values.sacct_exit_code("2:0") == 2

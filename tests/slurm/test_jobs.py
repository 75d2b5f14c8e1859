"""squeue's and sacct's records of agora's own jobs (agora_optimizer/slurm/jobs.py), without a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from agora_optimizer.executor.backends.slurm import status
from agora_optimizer.slurm import values
from agora_optimizer.slurm.errors import SlurmOutputError
from agora_optimizer.slurm.jobs import SACCT_FIELDS, parse_sacct, parse_squeue, refuse_garbage


def test_squeue_and_sacct_lines_are_read_once_into_records() -> None:
    line = "42|FAILED|NonZeroExitCode|agora-small|1796058847|1796058848|1796058850|768|debug|/tmp/a|b|\n"
    record = parse_squeue(line)["42"]
    assert (record.state, record.exit_code, record.node, record.partition, record.work_dir) == (
        "FAILED",
        3,
        "agora-small",
        "debug",
        Path("/tmp/a|b"),
    )
    assert record.final and record.started_at is not None and record.ended_at is not None
    assert parse_squeue("7|CANCELLED|None||1|N/A|Unknown|15|debug|/x|\n")["7"].exit_code == 128 + 15
    text = (
        "9|OUT_OF_MEMORY|0:125||1796058847|1796058847|1796058848|agora-large|None|compute|/tmp/j\n"
        "9.batch|OUT_OF_MEMORY|0:125|322316K||||agora-large|||\n"
    )
    acct = parse_sacct(text)["9"]
    assert (acct.state, acct.max_rss_bytes, acct.source) == ("OUT_OF_MEMORY", 322316 * 1024, "sacct")
    assert acct.partition == "compute"


def test_a_line_without_its_fields_is_refused_not_read_as_no_job() -> None:
    refuse_garbage("sacct", "1|COMPLETED|0:0||1|2|3|n|None|debug|/x\n", len(SACCT_FIELDS))
    with pytest.raises(SlurmOutputError, match=r"a line agora cannot read \(not 11 fields\): 'garbage'"):
        refuse_garbage("sacct", "garbage\n", len(SACCT_FIELDS))


def test_the_backend_reports_every_final_state_and_knows_every_active_one() -> None:
    assert status.FINAL_STATES.keys() == values.FINAL_STATES
    assert status.ACTIVE_PHASES.keys() == values.PENDING_STATES | values.RUNNING_STATES
    assert not values.FINAL_STATES & (values.PENDING_STATES | values.RUNNING_STATES)

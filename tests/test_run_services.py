"""The run's record of the services it started (tests/run_services.py): written by any process of the run,
stopped by its controller, the last started first."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.run_services import REPO, RUN_VARIABLE, StartedService, begin, end, record, recorded, stop_recorded

RECORD_IN_A_WORKER = (
    "import sys; from pathlib import Path; from tests.run_services import StartedService, record; "
    "record(StartedService(sys.argv[1], Path(sys.argv[2]), tuple(sys.argv[3:])))"
)


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A run of its own (this run's name in the environment comes back afterwards)."""
    monkeypatch.delenv(RUN_VARIABLE, raising=False)
    directory = begin()
    yield directory
    end(directory)
    assert not directory.exists() and RUN_VARIABLE not in os.environ


def _appends(log: Path, word: str) -> tuple[str, ...]:
    return ("bash", "-c", f"echo {word} >> {log}")


def test_services_recorded_by_two_processes_are_stopped_the_last_started_first(run: Path, tmp_path: Path) -> None:
    log = tmp_path / "stops.log"
    record(StartedService("SLURM", tmp_path / "slurm", _appends(log, "SLURM")))
    worker = [sys.executable, "-c", RECORD_IN_A_WORKER, "Redis", str(tmp_path / "redis"), *_appends(log, "Redis")]
    subprocess.run(worker, cwd=REPO, check=True, timeout=60)  # it finds the run by the environment it inherits
    assert [(s.service, s.directory) for s in recorded(run)] == [
        ("SLURM", tmp_path / "slurm"),
        ("Redis", tmp_path / "redis"),
    ]
    assert stop_recorded(run) == []
    assert log.read_text().split() == ["Redis", "SLURM"]


def test_a_stop_that_fails_is_named_and_the_others_still_run(run: Path, tmp_path: Path) -> None:
    log = tmp_path / "stops.log"
    record(StartedService("Redis", tmp_path / "redis", _appends(log, "Redis")))
    record(StartedService("PostgreSQL", tmp_path / "pg", ("bash", "-c", "echo no server there >&2; exit 3")))
    [failure] = stop_recorded(run)
    assert failure.startswith(f"stopping PostgreSQL of {tmp_path / 'pg'} (bash -c ") and failure.endswith(
        "exited 3: no server there"
    )
    assert log.read_text().split() == ["Redis"]


def test_a_record_that_is_not_one_names_its_file_and_line(run: Path, tmp_path: Path) -> None:
    record(StartedService("Redis", tmp_path, ("true",)))
    with open(run / "services.jsonl", "a") as records:
        records.write('{"service": "SLURM"}\n')
    with pytest.raises(ValueError, match=r"services\.jsonl, line 2: not a started service \('directory'\)"):
        recorded(run)

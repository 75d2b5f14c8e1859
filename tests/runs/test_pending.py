"""DAG runs whose record is owed, kept on disk: once each, oldest first, a bad file set aside."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agora_optimizer.runs.pending import EndedRun, discharge, keep, waiting


def test_a_run_is_kept_once_until_discharged_and_runs_wait_oldest_first(tmp_path: Path) -> None:
    first, second = EndedRun("etl", "manual__2026-12-01"), EndedRun("etl/odd", "r 2")
    path = keep(first, tmp_path)
    keep(second, tmp_path)
    assert keep(first, tmp_path) == path  # kept again: the same file
    os.utime(path, (1, 1))  # kept long ago
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert waiting(tmp_path) == [first, second]
    discharge(first, tmp_path)
    discharge(first, tmp_path)  # twice: nothing happens
    assert waiting(tmp_path) == [second]


def test_an_unreadable_file_is_set_aside_and_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    keep(EndedRun("etl", "r1"), tmp_path)
    (tmp_path / "broken.json").write_text('{"dag_id": 7, "run_id": "r2"}')
    with caplog.at_level("ERROR"):
        assert waiting(tmp_path) == [EndedRun("etl", "r1")]
    assert (tmp_path / "broken.bad").exists() and not (tmp_path / "broken.json").exists()
    assert "pending run record" in caplog.text and "broken.json" in caplog.text and "got 7" in caplog.text


def test_nothing_waits_where_nothing_was_kept(tmp_path: Path) -> None:
    assert waiting(tmp_path / "never-made") == []
    discharge(EndedRun("etl", "r1"), tmp_path / "never-made")

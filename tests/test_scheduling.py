"""The order the two pytest-xdist workers take the suite's units in (tests/conftest.py), and the timeline of a run
(scripts/test_timeline.py)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import REPO, longest_units_first


@dataclass
class _Item:
    """A collected test as longest_units_first reads it: its node id and markers."""

    nodeid: str
    markers: tuple[str, ...] = ()

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.markers else None


def test_the_slurm_group_goes_first_then_the_units_that_start_airflow_then_the_rest_by_size() -> None:
    collected: list[Any] = [
        _Item("tests/cli/test_a.py::one"),
        _Item("tests/integration/test_run.py::runs", ("airflow",)),
        _Item("tests/cli/test_a.py::two"),
        _Item("tests/slurm/test_cluster.py::up", ("slurm",)),
        _Item("tests/cli/test_b.py::one"),
        _Item("tests/cli/test_b.py::two"),
        _Item("tests/cli/test_b.py::three"),
        _Item("tests/queue_wait/test_waits.py::waits"),  # the SLURM group's too (tests/conftest.py)
    ]
    ordered = [item.nodeid for item in longest_units_first(collected)]
    assert ordered == [
        "tests/slurm/test_cluster.py::up", "tests/queue_wait/test_waits.py::waits",  # one unit, in its order
        "tests/integration/test_run.py::runs",
        "tests/cli/test_b.py::one", "tests/cli/test_b.py::two", "tests/cli/test_b.py::three",  # more tests first
        "tests/cli/test_a.py::one", "tests/cli/test_a.py::two",
    ]  # fmt: skip


def test_the_timeline_says_when_each_worker_ended_and_the_longest_units(tmp_path: Path) -> None:
    """Read from the lines the run writes (tests/conftest.py's pytest_runtest_logreport: CSV, quoted ids)."""
    timeline = tmp_path / "timeline.csv"
    timeline.write_text(
        "gw0,1000.0,100.0,call,passed,tests/slurm/test_cluster.py::up\n"
        "gw1,1000.0,30.0,call,passed,tests/cli/test_a.py::one\n"
        "gw1,1030.0,0.5,teardown,passed,tests/cli/test_a.py::one\n"
        'gw1,1040.0,20.0,call,failed,"tests/cli/test_b.py::one[a,b]"\n'  # a parameter's id with a comma
    )
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "test_timeline.py"), str(timeline)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert lines[:2] == ["gw0: ended at 1.7 min, busy 1.7 min", "gw1: ended at 1.0 min, busy 0.8 min"]
    assert [line.split()[-1] for line in lines[2:]] == [
        "group:slurm", "tests/cli/test_a.py", "tests/cli/test_b.py",
    ]  # fmt: skip

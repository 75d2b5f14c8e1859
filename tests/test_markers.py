"""``make test-fast`` selects the tests that need no service: the markers come from the fixtures a test uses."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # each test collects the suite in a pytest of its own: seconds

MODULES = [
    "tests/traces/test_store.py",
    "tests/executor/backends/aws/test_s3_transport.py",
    "tests/queue_wait/test_recorder.py",
    "tests/executor/test_airflow_db.py",  # task_instances' PostgreSQL half, parametrized indirectly
]


def _collected(*options: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-n", "0", "--collect-only", "-q", *options, *MODULES],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 5), done.stdout[-3000:] + done.stderr[-3000:]
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_the_fast_selection_has_no_test_that_uses_a_service_fixture_and_every_other_test() -> None:
    fast = re.search(r"^FAST := (.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert fast is not None, "Makefile: no FAST selection"
    selected, everything = _collected("-m", fast.group(1)), _collected()
    needs = {
        "tests/traces/test_store.py::test_wrong_postgresql_credentials_are_a_clear_error",  # postgres_url
        "tests/executor/backends/aws/test_s3_transport.py::test_an_unreachable_s3_is_transient",  # none: it stays
        "tests/queue_wait/test_recorder.py::test_a_job_cancelled_while_pending_is_marked_never_started",  # slurm_cluster  # noqa: E501
        "tests/queue_wait/test_recorder.py::test_every_recorded_job_got_its_wait",  # recorded_run, which uses it
    }
    assert needs <= everything
    assert needs & selected == {"tests/executor/backends/aws/test_s3_transport.py::test_an_unreachable_s3_is_transient"}
    assert not [test for test in selected if "[postgresql" in test]  # store_url's PostgreSQL half
    assert [test for test in selected if "[sqlite" in test]  # its SQLite half stays
    assert any("test_a_round_trip" in test for test in everything - selected)  # the moto fixture
    assert any("test_adding_the_same_job_twice_keeps_one_row" in test for test in selected)


def test_the_fast_selection_leaves_the_solver_heavy_modules_to_make_test() -> None:
    fast = re.search(r"^FAST := (.+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert fast is not None, "Makefile: no FAST selection"

    def collected(*options: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:randomly", "-n", "0", "--collect-only", "-q", *options],
            cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        return [line for line in done.stdout.splitlines() if "::" in line]

    heavy = "tests/engines/exact/test_milp.py"
    assert collected(heavy)  # make test has them
    assert not collected("-m", fast.group(1), heavy)

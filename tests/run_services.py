"""The services a test run started, stopped when the whole run ends (tests/conftest.py).

Leave nothing running: a service a test starts (the SLURM cluster, a PostgreSQL or Redis server)
the run stops, unless it was running before. The start scripts start only what does not run; the
code that runs them records what a start started (:func:`record`), with the command that stops just
that. Under pytest-xdist the workers share a service (either may start the SLURM cluster, and both
use it), so no worker stops what it recorded: the controller does (:func:`stop_recorded`), once
every worker has ended. A run in one process (``-n 0``, ``-p no:xdist``) is its own controller.

The controller makes the run's directory (:func:`begin`) and names it in the environment
(:data:`RUN_VARIABLE`) before the workers start: the workers write their records there, and every
process the run starts inherits the name, by which the end-of-run check (tests/leftovers.py) tells
the run's daemons from those of other runs on the machine.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN_VARIABLE = "AGORA_TEST_RUN"
RECORDS = "services.jsonl"


@dataclass(frozen=True)
class StartedService:
    """A service a test started, where it keeps its state, and the command that stops what was started."""

    service: str  # as messages name it: SLURM, PostgreSQL, Redis
    directory: Path  # its daemons name it (working directory, command line): the leftover check looks there
    stop: tuple[str, ...]


def begin() -> Path:
    """Make the run's directory and name it in this process's environment (the controller, before the workers)."""
    run = Path(tempfile.mkdtemp(prefix="agora-test-run-"))
    os.environ[RUN_VARIABLE] = str(run)
    return run


def record(service: StartedService) -> None:
    """Keep ``service`` for the end of the run; outside a test run, nothing (whoever started it stops it)."""
    run = os.environ.get(RUN_VARIABLE)
    if not run:
        return
    line = json.dumps({"service": service.service, "directory": str(service.directory), "stop": list(service.stop)})
    with open(Path(run) / RECORDS, "a", encoding="utf-8") as records:  # one short append: workers' lines stay whole
        records.write(line + "\n")


def recorded(run: Path) -> list[StartedService]:
    """The services recorded in ``run``, in the order they were started."""
    path = run / RECORDS
    if not path.exists():
        return []
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            fields = json.loads(line)
            found.append(StartedService(fields["service"], Path(fields["directory"]), tuple(fields["stop"])))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}, line {number}: not a started service ({exc}): {line!r}") from None
    return found


def stop_recorded(run: Path, timeout_s: float = 120.0) -> list[str]:
    """Stop every service recorded in ``run``, the last started first; one line for each stop that failed."""
    failures = []
    for service in reversed(recorded(run)):
        what = f"stopping {service.service} of {service.directory} ({shlex.join(service.stop)})"
        try:
            done = subprocess.run(service.stop, capture_output=True, text=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            failures.append(f"{what}: {exc}")
            continue
        if done.returncode != 0:
            failures.append(f"{what} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return failures


def end(run: Path) -> None:
    """Remove the run's directory, and its name from the environment."""
    shutil.rmtree(run, ignore_errors=True)
    if os.environ.get(RUN_VARIABLE) == str(run):
        del os.environ[RUN_VARIABLE]


def run_pytest(
    tests: Path, basetemp: Path, *options: str, timeout_s: float = 600.0
) -> subprocess.CompletedProcess[str]:
    """A test run of its own, in a new process, over the test files in ``tests``: with tests/conftest.py's
    hooks and fixtures (``-p tests.conftest``), its temporary files under ``basetemp``, and ``options``."""
    argv = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:randomly", "-p", "no:cacheprovider"]
    argv += ["-q", "--basetemp", str(basetemp), *options, str(tests)]
    # not our worker's, and not written into this run's timeline (tests/conftest.py's AGORA_TEST_TIMELINE)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("PYTEST_", "AGORA_TEST_"))}
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)

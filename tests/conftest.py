"""Shared fixtures: paths to the real data, and builders of tiny workflows and catalogs."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import leftovers, run_services

pytest_plugins = ("tests.slurm_fixtures",)  # the SLURM cluster's fixtures, for every directory that uses it

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "workflows"
CATALOGS = REPO / "catalogs"
AWS_CATALOG = CATALOGS / "aws-us-east-1.yaml"
SHARED_INSTANCES = REPO.parent / "shared" / "data" / "wfinstances"
# One bundled instance per family and size (the -002/-003 copies are there for the predictor's
# hold-out tests): the engine tests loop over these.
ENGINE_WORKFLOWS = sorted(BUNDLED.glob("*-001.json"))


# pytest-xdist scheduling (``--dist loadscope`` in scripts/test.sh): the tests that share one running
# service or one package-wide fixture form one unit, run in order in one worker; every other module is
# a unit of its own (its module-scoped Airflow, say, starts once); the units spread over the workers.
# (xdist's own ``loadgroup`` marks do not group under pytest 9, which no longer reads ``item._nodeid``.)
XDIST_GROUPS = {
    # one cluster; some tests fill a partition, and the fault suite restarts its slurmctld
    "slurm": (
        "slurm",
        "queue_wait",
        "executor/backends/slurm",
        "cli/test_queue_wait.py",
        "integration/test_executor_in_airflow_with_slurm.py",
        "faults",
        "bench/test_collect_queue_waits.py",  # a second cluster: not while the SLURM tests, whose timing matters, run
        # docker/compose.yaml's whole stack, built and run: it loads both cores for minutes, so not
        # while the SLURM tests, whose timing matters, run
        "deploy/test_stack.py",
    ),
    "ui": ("ui",),  # one Airflow api-server with the FAB auth manager for the whole package
    "aws": ("executor/backends/aws",),  # one moto server for the package
    "traces": ("traces",),  # one PostgreSQL server for the session
}


def xdist_unit(nodeid: str) -> str:
    """The scheduling unit of a test: its group, else its module."""
    module = nodeid.split("::", 1)[0]
    relative = module.removeprefix("tests/")
    for group, prefixes in XDIST_GROUPS.items():
        if any(relative == prefix or relative.startswith(f"{prefix}/") for prefix in prefixes):
            return f"group:{group}"
    return module


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent under `-p no:xdist`
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # The units in the collection's order, which pytest_collection_modifyitems made longest first (xdist's own
    # order, by test count, left the single-test Airflow modules of a minute or two for last: one worker then
    # ran the last of them while the other had nothing left)
    config.option.loadscopereorder = False

    class ServiceGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

    return ServiceGroupScheduling(config, log)


# What a test needs besides Python (``make test-fast`` runs the tests that need none of these),
# beside pyproject.toml's ``airflow``. A test that uses a fixture of SERVICE_FIXTURES, directly or
# through another fixture, gets its marker; tests that start a service without one carry the
# marker in their module.
SERVICE_MARKERS = {
    "slurm": "needs the loopback SLURM cluster (scripts/start_slurm.sh)",
    "postgres": "needs a PostgreSQL server (scripts/start_postgres.sh)",
    "celery": "needs a Redis server (scripts/start_redis.sh) and starts Celery workers",
    "moto": "needs a moto server (the AWS stand-in)",
    "browser": "drives a real browser (scripts/install_browser.sh)",
    "docker": "needs a Compose client (scripts/install_compose.sh)",
    "slow": "takes seconds per test: plans with the solvers, starts a Python that imports Airflow, or waits on "
    "real processes (not in make test-fast)",
}
SERVICE_FIXTURES = {
    "slurm_cluster": "slurm",
    "postgres_server": "postgres",
    "redis_server": "celery",
    "moto": "moto",
    "agora_ui": "airflow",
    "compose": "docker",
}

# Fixtures that, on their "postgresql" parameter, ask for the PostgreSQL server by name (request.getfixturevalue)
ASKS_FOR_POSTGRES = ("store_url", "task_instances")  # tests/traces/conftest.py, tests/executor/conftest.py


@dataclass(frozen=True)
class RunStart:
    """The whole run, as its controller sees it: its directory (tests/run_services.py) and the daemons
    that ran before it began."""

    directory: Path
    daemons_before: frozenset[leftovers.DaemonIdentity]


TEST_RUN = pytest.StashKey[RunStart]()


def pytest_configure(config: pytest.Config) -> None:
    for marker, meaning in SERVICE_MARKERS.items():
        config.addinivalue_line("markers", f"{marker}: {meaning}")
    if not hasattr(config, "workerinput"):  # the controller (before it starts the workers), or a run in one process
        config.stash[TEST_RUN] = RunStart(run_services.begin(), leftovers.daemons_running())


@pytest.hookimpl(trylast=True)  # after the runner's teardown of the session and xdist's end of the workers
def pytest_sessionfinish(session: pytest.Session) -> None:
    """At the end of the whole run: stop the services it started, then fail it for any daemon it left running.

    Such a daemon (see tests/leftovers.py) is named and ended, and the run exits 1. Leave nothing running:
    every service a test starts, the run stops, unless it was running before the run.
    """
    run = session.config.stash.get(TEST_RUN, None)
    if run is None:  # a pytest-xdist worker: the controller ends the run
        return
    failed_stops = run_services.stop_recorded(run.directory)
    roots = [run.directory, *(service.directory for service in run_services.recorded(run.directory))]
    left = leftovers.daemons_left(run.daemons_before, roots)
    if failed_stops:
        _report(session, "services the run could not stop", failed_stops, yellow=True)
    if left:
        names = [leftovers.describe(process) for process in left]
        leftovers.kill(left, term_grace_s=10)
        _report(session, f"{len(left)} daemons started by the test run outlived it (ended now)", names, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _report(session: pytest.Session, title: str, lines: list[str], **markup: bool) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:  # -p no:terminal
        print("\n".join([title, *lines]), file=sys.stderr)
        return
    reporter.write_sep("=", title, **markup)
    for line in lines:
        reporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(TEST_RUN, None)
    if run is not None:
        run_services.end(run.directory)


TIMELINE_ENV = "AGORA_TEST_TIMELINE"  # a CSV file each worker appends each test phase to (scripts/test_timeline.py)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With ``$AGORA_TEST_TIMELINE`` set: the phase's worker, start (epoch s), duration, phase, outcome and test, as
    the process that ran it saw it (the controller's copies of the workers' reports carry ``node``: skipped)."""
    path = os.environ.get(TIMELINE_ENV)
    if not path or getattr(report, "node", None) is not None:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    line = io.StringIO()  # one write per line: the workers append to the same file
    csv.writer(line).writerow([worker, f"{report.start:.3f}", f"{report.duration:.3f}", report.when, report.outcome,
                               report.nodeid])  # fmt: skip
    with open(path, "a", encoding="utf-8", newline="") as timeline:
        timeline.write(line.getvalue())


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a test that uses the session's SLURM cluster: any of its daemons that died is started
    again, and the test carries a warning naming it with its log's last lines (a dead node's daemon
    would fail every later test of its partition for no fault of theirs)."""
    if "slurm_cluster" in getattr(item, "fixturenames", ()):
        from tests.slurm_cluster import restart_dead_daemons

        report = restart_dead_daemons()
        if report:
            print(f"\n{report}", file=sys.stderr)
            item.warn(pytest.PytestWarning(report))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "postgresql" in (callspec.params.get(name) for name in ASKS_FOR_POSTGRES):
            used.add("postgres_server")
        for fixture, marker in SERVICE_FIXTURES.items():
            if fixture in used:
                item.add_marker(marker)
    items[:] = longest_units_first(items)


LONGEST_UNIT = "group:slurm"  # the cluster's tests and the Docker stack: the longest unit by far
STARTS_AIRFLOW = ("airflow", "docker", "celery", "browser")  # markers of tests that take tens of seconds each


def longest_units_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """``items`` by scheduling unit (:func:`xdist_unit`), the longest first as far as the markers tell: the SLURM
    group, then the units that start Airflow or a stack, then the rest; by test count within each, each unit's
    tests in their order. With two workers, the last units to run are then short ones, and both end together."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(xdist_unit(item.nodeid), []).append(item)

    def rank(unit: str) -> tuple[int, int]:
        tests = units[unit]
        heavy = any(item.get_closest_marker(marker) for item in tests for marker in STARTS_AIRFLOW)
        return (0 if unit == LONGEST_UNIT else 1 if heavy else 2, -len(tests))

    return [item for unit in sorted(units, key=rank) for item in units[unit]]


@pytest.fixture(scope="session", autouse=True)
def no_leftover_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """After the session's last test: no process the tests started still runs (see tests/leftovers.py).

    One that does (an Airflow component, a LocalExecutor worker, a moto server, a job) is named,
    killed, and fails the teardown of the last test. Under xdist each worker checks its own; the
    services' daemons, which both workers may share, the whole run checks when it ends (pytest_sessionfinish).
    """
    root = tmp_path_factory.getbasetemp()
    yield
    left = leftovers.leftovers(root)
    if left:
        names = "\n".join(leftovers.describe(process) for process in left)
        leftovers.kill(left)
        pytest.fail(f"{len(left)} processes started by the tests outlived them (killed now):\n{names}", pytrace=False)


def shared_instances() -> list[Path]:
    """Every real instance in ../shared (CI has it beside the clone), else the bundled ones."""
    found = sorted(SHARED_INSTANCES.glob("*.json"))
    return found or sorted(BUNDLED.glob("*.json"))


def wfformat_15(tasks: list[dict[str, Any]], files: dict[str, int] | None = None, name: str = "tiny") -> dict[str, Any]:
    """A WfFormat 1.5 document. Each task: id, runtime, parents, [inputs, outputs, memory, cores]."""
    children: dict[str, list[str]] = {t["id"]: [] for t in tasks}
    for t in tasks:
        for p in t.get("parents", []):
            children[p].append(t["id"])
    spec_tasks, exec_tasks = [], []
    for t in tasks:
        spec_tasks.append(
            {
                "name": t.get("name", t["id"]),
                "id": t["id"],
                "parents": t.get("parents", []),
                "children": children[t["id"]],
                "inputFiles": t.get("inputs", []),
                "outputFiles": t.get("outputs", []),
            }
        )
        record: dict[str, Any] = {"id": t["id"], "runtimeInSeconds": t["runtime"]}
        if "memory" in t:
            record["memoryInBytes"] = t["memory"]
        if "cores" in t:
            record["coreCount"] = t["cores"]
        exec_tasks.append(record)
    return {
        "name": name,
        "schemaVersion": "1.5",
        "workflow": {
            "specification": {
                "tasks": spec_tasks,
                "files": [{"id": f, "sizeInBytes": s} for f, s in (files or {}).items()],
            },
            "execution": {"makespanInSeconds": 0, "executedAt": "2026-01-01T00:00:00Z", "tasks": exec_tasks},
        },
    }


def write_json(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document))
    return path


def write_yaml(path: Path, document: Any) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


def resource(name: str, **overrides: Any) -> dict[str, Any]:
    base = {
        "name": name,
        "backend": "aws",
        "vcpus": 2,
        "memory_gib": 4,
        "speed": 1.0,
        "price_per_hour_usd": 0.36,
        "count": 2,
        "billing": {"granularity_s": 1, "minimum_s": 0},
        "boot_s": 0,
    }
    base.update(overrides)
    return base

"""Real services the fault suite breaks on purpose: a private PostgreSQL, a small tmpfs, one Airflow.

Every fault of :mod:`tests.faults.test_faults` runs against one module-scoped Airflow 3.3
(api-server, dag-processor, scheduler) with the AgoraExecutor on the two local pools and the
two partitions of the loopback SLURM cluster (``scripts/start_slurm.sh``). Its trace store is
a PostgreSQL server of its own (never the shared one other tests use), so that a test may stop
it; its state directory is a tmpfs of its own (when run as root), so that a test may fill it;
and the first directory of its ``PATH`` is empty until a test puts a SLURM client there that
answers garbage.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness.local_airflow import free_port
from tests.conftest import REPO

FIGURES = REPO / "bench" / "results" / "faults.json"


def _pg_bin() -> Path | None:
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists():
            return candidate
    found = shutil.which("initdb")
    return Path(found).parent if found else None


@dataclass
class PrivatePostgres:
    """A PostgreSQL server in a temporary data directory on its own port (trust auth, loopback only)."""

    root: Path
    bin: Path
    port: int = field(default_factory=free_port)

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _as_owner(self, *argv: str) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
        return subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=120, check=False)

    def init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.getuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        done = self._as_owner(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        assert done.returncode == 0, f"initdb failed: {done.stderr[-2000:]}"

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        done = self._as_owner(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "start"
        )
        assert done.returncode == 0, f"pg_ctl start failed: {done.stderr[-2000:]}\n{self.log()[-2000:]}"

    def stop(self) -> None:
        self._as_owner(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def log(self) -> str:
        path = self.root / "log"
        return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture(scope="session")
def fault_root() -> Iterator[Path]:
    """A directory of the suite's own, outside pytest's numbered temporary folders (which other
    pytest sessions on the machine prune, even while this one still runs a server in them)."""
    root = Path(tempfile.mkdtemp(prefix="agora-faults-"))
    root.chmod(0o711)  # the postgres user reaches its data directory below
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def private_postgres(fault_root: Path) -> Iterator[PrivatePostgres]:
    binaries = _pg_bin()
    if binaries is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("PostgreSQL must be installed in CI (scripts/start_postgres.sh installs it)")
        pytest.skip("no PostgreSQL binaries here (scripts/start_postgres.sh installs them)")
    server = PrivatePostgres(fault_root / "pg", binaries)
    server.init()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class SmallDisk:
    """A tmpfs of ``size_mib`` and ``inodes`` mounted on ``path`` (as root), that a test fills and empties again."""

    path: Path
    size_mib: int
    inodes: int = 16384  # room for the job directories of the suite's earlier tests
    mounted: bool = False

    @property
    def options(self) -> str:
        """Owner-only writable (as agora requires of its state directory), small in bytes and inodes."""
        return f"size={self.size_mib}m,nr_inodes={self.inodes},mode=0755"

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        if os.getuid() != 0:
            return
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", self.options, "tmpfs", str(self.path)],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        self.mounted = done.returncode == 0

    def fill(self) -> Path:
        """Use up the file system's blocks (one file) and inodes (empty files); returns the directory
        that holds them (delete it to free the space)."""
        filler = self.path / "filler"
        filler.mkdir()
        chunk = b"\0" * 2**16
        # The open may fail already: the run's earlier tests' job directories can use the last inodes
        # (CI: ENOSPC at this open, and the tests after it met a full disk that nothing emptied).
        with contextlib.suppress(OSError), open(filler / "blocks.bin", "wb") as handle:
            while True:
                handle.write(chunk)
                handle.flush()
        with contextlib.suppress(OSError):
            for index in range(10**6):
                (filler / str(index)).touch()
        return filler

    def unmount(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True, timeout=30, check=False)
            self.mounted = False


class Figures:
    """One measured figure per fault, written to bench/results/faults.json at the end of the module."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    def record(self, fault: str, **figures: Any) -> None:
        self.rows[fault] = figures
        print(f"\nFAULT {fault}: {json.dumps(figures)}")

    def write(self, started: float) -> None:
        if not self.rows:
            return
        FIGURES.parent.mkdir(parents=True, exist_ok=True)
        previous: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            previous = json.loads(FIGURES.read_text()).get("faults", {})
        document = {
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "suite_wall_s": round(time.monotonic() - started, 1),
            "command": ".venv/bin/python -m pytest tests/faults -n 0 -p no:randomly -s",
            "faults": {**previous, **self.rows},
        }
        FIGURES.write_text(json.dumps(document, indent=1) + "\n")
        print(f"\nfault figures: {FIGURES}")


@pytest.fixture(scope="session")
def figures() -> Iterator[Figures]:
    started = time.monotonic()
    collected = Figures()
    yield collected
    collected.write(started)

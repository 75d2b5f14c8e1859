"""The loopback SLURM cluster of ``scripts/start_slurm.sh``, started and stopped from Python.

The tests (tests/slurm_cluster.py) and ``bench/collect_queue_waits.py`` start it here. A start
starts only the daemons that do not run and names those it started; :func:`stop` stops just
those. So a caller stops what it started and leaves a cluster it found running as it was.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
START_SCRIPT = REPO / "scripts" / "start_slurm.sh"
STATE_DIR = Path(os.environ.get("AGORA_SLURM_STATE", "/tmp/agora-slurm"))  # the script's default
STARTED_LINE = re.compile(r"^start_slurm: started (?P<daemons>.+) \(SLURM [^)]*\)$", re.MULTILINE)


class SlurmStartError(RuntimeError):
    """scripts/start_slurm.sh failed; the message ends with its output."""


@dataclass(frozen=True)
class SlurmStart:
    """One run of the start script: the state directory and the daemons it started (none when all ran)."""

    state_dir: Path
    started: tuple[str, ...]  # munged, mariadbd, slurmdbd, slurmctld, slurmd-agora-small ...

    @property
    def conf(self) -> Path:
        """Its slurm.conf, for ``SLURM_CONF`` (else clients read /etc/slurm/slurm.conf: the first cluster's)."""
        return self.state_dir / "slurm.conf"

    def stop_argv(self) -> list[str]:
        """The command that stops what this start started (only that: the script stops all when none is named)."""
        if not self.started:
            raise ValueError(f"the start of {self.state_dir} started nothing: there is nothing of it to stop")
        return ["bash", str(START_SCRIPT), "stop", str(self.state_dir), *self.started]


def started_daemons(output: str) -> tuple[str, ...]:
    """The daemons a start's output says it started (``start_slurm: started munged ... (SLURM 22.05.8)``)."""
    found = STARTED_LINE.search(output)
    return tuple(found["daemons"].split()) if found else ()


def start(state_dir: Path = STATE_DIR, timeout_s: float = 900.0) -> SlurmStart:
    """Run the start script (idempotent; the first start on a machine installs SLURM, about 1.5 minutes)."""
    try:
        done = subprocess.run(
            ["bash", str(START_SCRIPT), "start", str(state_dir)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmStartError(f"{START_SCRIPT.name}: {exc}") from None
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise SlurmStartError(f"{START_SCRIPT.name} exited {done.returncode}:\n{tail}")
    return SlurmStart(state_dir=state_dir, started=started_daemons(done.stdout))


def stop(start: SlurmStart, timeout_s: float = 120.0) -> None:
    """Stop the daemons ``start`` started (nothing when it started none); the script's errors name the daemon."""
    if start.started:
        subprocess.run(start.stop_argv(), capture_output=True, text=True, timeout=timeout_s, check=True)

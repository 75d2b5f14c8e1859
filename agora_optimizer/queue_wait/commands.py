"""Run a SLURM client command (``squeue``, ``sacct``, ``sbatch``...) and return what it printed.

Times are asked for as POSIX seconds (``SLURM_TIME_FORMAT=%s``), so that nothing depends on the
host's time zone or locale. A missing binary, a non-zero exit or a timeout becomes a
:class:`SlurmCommandError` that names the command and repeats SLURM's own last words.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence

from agora_optimizer.queue_wait.errors import SlurmCommandError

DEFAULT_TIMEOUT_S = 30.0


def slurm_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a SLURM client: this process's, times as epoch seconds, no retry loop."""
    env = dict(os.environ)
    env["SLURM_TIME_FORMAT"] = "%s"
    env.update(extra or {})
    return env


def run_slurm(argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S, stdin: str | None = None) -> str:
    """Run ``argv`` and return its standard output; raise ``SlurmCommandError`` on any failure."""
    shown = shlex.join(argv)
    try:
        done = subprocess.run(
            list(argv),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=slurm_environment(),
            check=False,
        )
    except FileNotFoundError:
        reason = f"'{argv[0]}' is not installed (scripts/start_slurm.sh installs and starts a loopback SLURM)"
        raise SlurmCommandError(shown, reason) from None
    except subprocess.TimeoutExpired:
        raise SlurmCommandError(shown, f"no answer within {timeout_s:g} s (is slurmctld running?)") from None
    if done.returncode != 0:
        last = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        said = last[-1] if last else "no message"
        raise SlurmCommandError(shown, f"exit code {done.returncode}: {said}")
    return done.stdout

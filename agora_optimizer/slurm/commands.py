"""Run a SLURM client command (``sbatch``, ``squeue``, ``sacct``, ``scancel``, ``scontrol``,
``sinfo``) and return what it printed: the one place agora starts them.

Times are asked for as POSIX seconds (``SLURM_TIME_FORMAT=%s``), so that nothing depends on the
host's time zone or locale. Every command has a timeout and reads no standard input, so nothing
hangs. A missing binary, a non-zero exit or a timeout becomes a :class:`SlurmCommandError` that
names the command and repeats SLURM's own last words.
"""

from __future__ import annotations

import os
import pwd
import shlex
import subprocess
from collections.abc import Iterable, Mapping, Sequence

from agora_optimizer.slurm.errors import SlurmCommandError

DEFAULT_TIMEOUT_S = 30.0
IDS_PER_CALL = 400  # job ids per squeue / sacct --jobs command line


def slurm_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a SLURM client: this process's and ``extra``, times as epoch seconds."""
    return {**os.environ, **(extra or {}), "SLURM_TIME_FORMAT": "%s"}


def run_slurm(
    argv: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S, environment: Mapping[str, str] | None = None
) -> str:
    """Run ``argv`` (with ``environment`` added to this process's) and return its standard output.

    Raise ``SlurmCommandError`` on any failure."""
    shown = shlex.join(argv)
    program = argv[0]
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=slurm_environment(environment),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        reason = f"'{program}' is not installed (scripts/start_slurm.sh installs and starts a loopback SLURM)"
        raise SlurmCommandError(shown, reason, program=program, missing=True) from None
    except subprocess.TimeoutExpired:
        reason = f"no answer within {timeout_s:g} s (is slurmctld running?)"
        raise SlurmCommandError(shown, reason, program=program, timed_out=True) from None
    if done.returncode != 0:
        said = tuple(line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip())
        reason = f"exit code {done.returncode}: {said[-1] if said else 'no message'}"
        raise SlurmCommandError(shown, reason, program=program, said=said, returncode=done.returncode)
    return done.stdout


def format_fields(fields: Iterable[str]) -> str:
    """squeue's ``--Format`` value with a ``|`` after each field: ``"JobID:|,State:|"``."""
    return ",".join(f"{name}:|" for name in fields)


def this_user() -> str:
    """``--user=<this process's user>``: a look-up or cancel by job name must never reach another user's job."""
    return f"--user={pwd.getpwuid(os.geteuid()).pw_name}"


def chunks(items: Sequence[str], size: int = IDS_PER_CALL) -> Iterable[Sequence[str]]:
    """``items`` in runs of at most ``size``: job ids for one command line each."""
    for start in range(0, len(items), size):
        yield items[start : start + size]

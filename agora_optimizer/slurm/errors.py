"""Errors of the SLURM client: each names the SLURM command, file or field it is about."""

from __future__ import annotations

from agora_optimizer.errors import AgoraError

# Words in a SLURM client's error that mean "SLURM could not be reached now", not "no".
TRANSIENT_MARKERS = (
    "unable to contact slurm controller",
    "connection refused",
    "connect failure",
    "socket timed out",
    "timed out",
    "temporarily unavailable",
    "try again",
    "slurm_persist_conn",
    "problem talking to the database",
    "zero bytes were transmitted",
    "communication connection failure",
    "unable to establish",
    "slurmctld is busy",
    "job submit limit",
    "maxsubmitjob",
)


class SlurmCommandError(AgoraError):
    """A SLURM command is missing, failed, or timed out (SLURM is down, or not installed).

    ``program`` is the command's name (``squeue``), ``said`` the non-empty lines it printed
    (standard error, then standard output), ``returncode`` its exit code when it ran to the end;
    ``missing`` and ``timed_out`` tell the other two ways it can fail.
    """

    def __init__(
        self,
        command: str,
        reason: str,
        *,
        program: str = "",
        said: tuple[str, ...] = (),
        returncode: int | None = None,
        missing: bool = False,
        timed_out: bool = False,
    ) -> None:
        self.command = command
        self.reason = reason
        self.program = program or command.split(" ", 1)[0]
        self.said = said
        self.returncode = returncode
        self.missing = missing
        self.timed_out = timed_out
        super().__init__(f"SLURM command '{command}': {reason}")

    @property
    def transient(self) -> bool:
        """SLURM could not be reached now (a timeout, or a refusal in words that mean so)."""
        if self.timed_out:
            return True
        text = " ".join(self.said).lower()
        return any(marker in text for marker in TRANSIENT_MARKERS)

    @property
    def last_words(self) -> str:
        """The last line the command printed, without its ``sbatch: error:`` prefix ('' if none)."""
        return self.said[-1].removeprefix(f"{self.program}: error: ") if self.said else ""


class SlurmOutputError(AgoraError):
    """A SLURM command (or accounting file) printed something that cannot be parsed."""

    def __init__(self, source: str, field: str, reason: str) -> None:
        self.source = source
        self.field = field
        self.reason = reason
        super().__init__(f"output of '{source}': field '{field}': {reason}")

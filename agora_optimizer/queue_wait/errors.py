"""Errors of the queue-wait package: each names the SLURM command, file or field it is about."""

from __future__ import annotations

from agora_optimizer.errors import AgoraError


class SlurmCommandError(AgoraError):
    """A SLURM command is missing, failed, or timed out (SLURM is down, or not installed)."""

    def __init__(self, command: str, reason: str) -> None:
        self.command = command
        self.reason = reason
        super().__init__(f"SLURM command '{command}': {reason}")


class SlurmOutputError(AgoraError):
    """A SLURM command (or accounting file) printed something that cannot be parsed."""

    def __init__(self, source: str, field: str, reason: str) -> None:
        self.source = source
        self.field = field
        self.reason = reason
        super().__init__(f"output of '{source}': field '{field}': {reason}")


class QueueWaitModelError(AgoraError):
    """A queue-wait model cannot be trained, saved or loaded."""

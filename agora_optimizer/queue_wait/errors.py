"""Errors of the queue-wait package (SLURM's own are in :mod:`agora_optimizer.slurm.errors`)."""

from __future__ import annotations

from agora_optimizer.errors import AgoraError


class QueueWaitModelError(AgoraError):
    """A queue-wait model cannot be trained, saved or loaded."""

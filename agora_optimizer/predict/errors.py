"""Errors of the predictor: each names the model directory, the file, the task or the type."""

from __future__ import annotations

from agora_optimizer.errors import AgoraError, InputFileError


class PredictorError(AgoraError):
    """The predictor cannot answer: nothing to learn from, not trained, or asked about an unknown type."""


class EmptyHistoryError(PredictorError):
    """No usable attempt to learn from."""


class UnknownResourceError(PredictorError):
    """A resource type that the catalog does not list."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        shown = ", ".join(known[:8]) + (" ..." if len(known) > 8 else "")
        super().__init__(f"unknown resource type '{name}'; the catalog lists {shown}")


class ModelFileError(InputFileError):
    """A model directory or file that is missing, corrupt, foreign or tampered with."""

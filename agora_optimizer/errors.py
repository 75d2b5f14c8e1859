"""The one small error hierarchy of agora.

Every error that reaches a user names the thing it is about (a task, a file, a
field path) so that the user can fix the input without reading a traceback. The
CLI turns any ``AgoraError`` into a message on stderr and exit code 2.
"""

from __future__ import annotations


class AgoraError(Exception):
    """Base class of every error agora raises on purpose."""

    exit_code = 2


class InputFileError(AgoraError):
    """A file is missing, unreadable, or not of the expected format."""

    def __init__(self, path: object, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class FieldError(AgoraError):
    """A field of an input document has a missing, malformed or absurd value."""

    def __init__(self, source: object, field: str, reason: str) -> None:
        self.source = str(source)
        self.field = field
        self.reason = reason
        super().__init__(f"{self.source}: field '{field}': {reason}")


class CyclicWorkflowError(AgoraError):
    """The workflow's dependencies contain a cycle."""

    def __init__(self, workflow: str, cycle: list[str]) -> None:
        self.workflow = workflow
        self.cycle = cycle
        shown = " -> ".join([*cycle, cycle[0]]) if cycle else "?"
        super().__init__(f"workflow '{workflow}' is not a DAG: cycle {shown}")


class UnplaceableTaskError(AgoraError):
    """A task fits on no resource of the catalog."""

    def __init__(self, task: str, cores: int, memory_bytes: int, largest: str, gpus: int = 0) -> None:
        self.task = task
        needs = f"cores={cores}, memory_bytes={memory_bytes}" + (f", gpus={gpus}" if gpus else "")
        super().__init__(f"task '{task}' ({needs}) fits on no resource of the catalog; the largest is {largest}")


class TooManyGpusError(UnplaceableTaskError):
    """A task needs more GPUs than any resource type of the catalog has."""

    def __init__(self, task: str, gpus: int, most: str, most_gpus: int) -> None:
        self.task = task
        AgoraError.__init__(
            self,
            f"task '{task}' needs {gpus} GPUs, more than any resource of the catalog has; "
            f"the most is {most} with {most_gpus}",
        )


class PlanMismatchError(AgoraError):
    """A plan does not belong to the workflow or catalog it is checked against."""


class InfeasibleObjectiveError(AgoraError):
    """A deadline or budget cannot be met; the message gives the best achievable value."""


def first_line(exc: BaseException) -> str:
    """An error's first line, cut at 300 characters: what a log line of agora's hooks quotes (a driver's
    message can run to pages)."""
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""

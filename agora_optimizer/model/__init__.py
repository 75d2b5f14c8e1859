"""The domain model: frozen dataclasses with units in their field names, no I/O."""

from agora_optimizer.model.catalog import BACKENDS, GIB, Billing, Catalog, Resource
from agora_optimizer.model.plan import (
    OBJECTIVE_KINDS,
    PLAN_FORMAT,
    Assignment,
    Objective,
    Plan,
    SolverInfo,
    machine_type,
)
from agora_optimizer.model.workflow import Edge, Task, Workflow, category_of

__all__ = [
    "BACKENDS",
    "GIB",
    "OBJECTIVE_KINDS",
    "PLAN_FORMAT",
    "Assignment",
    "Billing",
    "Catalog",
    "Edge",
    "Objective",
    "Plan",
    "Resource",
    "SolverInfo",
    "Task",
    "Workflow",
    "category_of",
    "machine_type",
]

"""Shared by the spot tests: a one-type catalog and its spot twin, and small hand-made workflows."""

from __future__ import annotations

from dataclasses import replace

from agora_optimizer.model.catalog import GIB, Billing, Catalog, Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Edge, Task, Workflow

ON_DEMAND = Resource("od", "aws", 4, 16, 1.0, 1.0, None, Billing(1.0, 60.0), 30.0)
SPOT = Resource(
    "od-spot", "aws", 4, 16, 1.0, 0.3, None, Billing(1.0, 60.0), 30.0, spot=True, interruption_rate_per_hour=2.0,
    fallback="od",
)  # fmt: skip
CATALOG = Catalog((ON_DEMAND, SPOT), 1e8)


def task(name: str, runtime_s: float) -> Task:
    return Task(name, runtime_s, 1, GIB, name)


def assignment(task_id: str, resource: Resource, machine: int, start_s: float, end_s: float) -> Assignment:
    return Assignment(task_id, resource.name, f"{resource.name}#{machine}", start_s, end_s, 1, GIB)


def chain_workflow() -> Workflow:
    """a -> b -> c, and d alone; 1 s of transfer on each edge."""
    tasks = [task("a", 100.0), task("b", 100.0), task("c", 100.0), task("d", 50.0)]
    edges = [Edge("a", "b", int(1e8)), Edge("b", "c", int(1e8))]
    return Workflow.create("chain", tasks, edges)


def spot_plan() -> list[Assignment]:
    """a, b and d share one spot machine; c is on demand (b's output travels 1 s)."""
    return [
        assignment("a", SPOT, 0, 30.0, 130.0),
        assignment("d", SPOT, 0, 30.0, 80.0),
        assignment("b", SPOT, 0, 130.0, 230.0),
        assignment("c", ON_DEMAND, 0, 231.0, 331.0),
    ]


def slack_workflow() -> Workflow:
    """A 200 s chain (no slack for a re-run under a 260 s deadline) beside a 50 s task (slack to spare)."""
    tasks = [task("t1", 100.0), task("t2", 100.0), task("loose", 50.0)]
    return Workflow.create("slack", tasks, [Edge("t1", "t2", 0)])


def calm_catalog(rate_per_hour: float) -> Catalog:
    """One core a machine (no task shares an on-demand lease for free), no boot, billed by the second."""
    on_demand = replace(ON_DEMAND, vcpus=1, boot_s=0.0, billing=Billing(1.0, 0.0), count=None)
    spot = replace(SPOT, vcpus=1, boot_s=0.0, billing=Billing(1.0, 0.0), interruption_rate_per_hour=rate_per_hour)
    return Catalog((on_demand, spot), 1e8)

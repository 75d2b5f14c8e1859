"""Small planning instances for the adversarial search: random ones, their mutations, and their files.

An instance is a workflow of at most :data:`MAX_TASKS` tasks (runtimes, cores, memory, edges with
bytes), a catalog of at most :data:`MAX_TYPES` types (cores, memory, speed, price, count, boot,
billing minimum) with a bandwidth, and an objective: time; cost under a deadline; or balanced, with
or without one. The deadline is held as a factor of the makespan lower bound, so that it follows
the runtimes as they mutate. Every instance is one every task of which fits some type.

A case file (one JSON each) holds the instance as agora reads it: the workflow in agora's own
format (``agora-workflow/1``), the catalog in the catalog file's fields, and the objective.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agora_optimizer.io.workflow_file import workflow_from_document, workflow_to_dict
from agora_optimizer.model.catalog import GIB, Billing, Catalog, Resource
from agora_optimizer.model.plan import Objective
from agora_optimizer.model.workflow import Edge, Task, Workflow
from agora_optimizer.planning.bounds import makespan_lower_bound_s
from agora_optimizer.planning.problem import Problem

MAX_TASKS = 12
MAX_TYPES = 4
MAX_COUNT = 4
CASE_FORMAT = "agora-adversarial-case/1"
_VCPUS = (1, 2, 4, 8)
_MEMORY_GIB = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
_BILLING_MINIMUM_S = (0.0, 60.0)


@dataclass(frozen=True)
class Instance:
    workflow: Workflow
    catalog: Catalog
    kind: str  # the objective: time, cost or balanced
    deadline_factor: float | None  # the deadline over the makespan lower bound; None: no deadline

    def objective(self) -> Objective:
        if self.deadline_factor is None:
            return Objective(kind=self.kind)  # type: ignore[arg-type]
        deadline_s = self.deadline_factor * makespan_lower_bound_s(self.workflow, self.catalog)
        return Objective(kind=self.kind, deadline_s=round(deadline_s, 6))  # type: ignore[arg-type]

    def problem(self) -> Problem:
        return Problem.create(self.workflow, self.catalog, self.objective())

    def fits(self) -> bool:
        return all(any(r.fits(t) for r in self.catalog.resources) for t in self.workflow.tasks)


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _runtime_s(rng: random.Random) -> float:
    return round(_log_uniform(rng, 5.0, 3600.0), 3)


def _memory_bytes(rng: random.Random) -> int:
    return int(_log_uniform(rng, 0.25, 24.0) * GIB)


def _edge_bytes(rng: random.Random) -> int:
    return 0 if rng.random() < 0.4 else int(_log_uniform(rng, 1e6, 2e11))


def _task(rng: random.Random, number: int) -> Task:
    return Task(f"t{number}", _runtime_s(rng), rng.choice((1, 1, 2, 4)), _memory_bytes(rng), "adv")


def _resource(rng: random.Random, number: int) -> Resource:
    return Resource(
        name=f"r{number}",
        backend="aws",
        vcpus=rng.choice(_VCPUS),
        memory_gib=rng.choice(_MEMORY_GIB),
        speed=round(_log_uniform(rng, 0.5, 3.0), 3),
        price_per_hour_usd=round(_log_uniform(rng, 0.02, 3.0), 4),
        count=rng.randint(1, MAX_COUNT),
        billing=Billing(minimum_s=rng.choice(_BILLING_MINIMUM_S)),
        boot_s=rng.choice((0.0, 30.0, 90.0)),
    )


def random_instance(rng: random.Random) -> Instance:
    """A random instance in which every task fits some type (the largest type is widened if need be)."""
    n = rng.randint(3, MAX_TASKS)
    tasks = [_task(rng, i) for i in range(n)]
    density = rng.uniform(0.1, 0.5)
    edges = [
        Edge(f"t{i}", f"t{j}", _edge_bytes(rng)) for i in range(n) for j in range(i + 1, n) if rng.random() < density
    ]
    workflow = Workflow.create("adversarial", tasks, edges)
    resources = [_resource(rng, i) for i in range(rng.randint(1, MAX_TYPES))]
    cores, memory = max(t.cores for t in tasks), max(t.memory_bytes for t in tasks)
    if not any(r.vcpus >= cores and r.memory_bytes >= memory for r in resources):
        resources[0] = replace(resources[0], vcpus=max(resources[0].vcpus, 8), memory_gib=32.0)
    catalog = Catalog(tuple(resources), bandwidth_bytes_per_s=_log_uniform(rng, 1e7, 1e9))
    kind = rng.choice(("time", "cost", "balanced"))
    factor = None if kind == "time" or (kind == "balanced" and rng.random() < 0.5) else rng.uniform(1.0, 3.0)
    return Instance(workflow, catalog, kind, factor)


def _with_task(instance: Instance, index: int, task: Task) -> Instance:
    tasks = list(instance.workflow.tasks)
    tasks[index] = task
    return replace(instance, workflow=Workflow.create("adversarial", tasks, instance.workflow.edges))


def _with_resource(instance: Instance, index: int, resource: Resource) -> Instance:
    resources = list(instance.catalog.resources)
    resources[index] = resource
    return replace(instance, catalog=replace(instance.catalog, resources=tuple(resources)))


def _toggle_edge(instance: Instance, rng: random.Random) -> Instance:
    """An edge added or removed; an edge is only added from an earlier task to a later one (tasks are
    numbered in a topological order of the first instance), so the graph stays a DAG."""
    workflow = instance.workflow
    ids = [t.id for t in workflow.tasks]
    i, j = sorted(rng.sample(range(len(ids)), 2))
    edges = [e for e in workflow.edges if (e.parent, e.child) != (ids[i], ids[j])]
    if len(edges) == len(workflow.edges):
        edges.append(Edge(ids[i], ids[j], _edge_bytes(rng)))
    return replace(instance, workflow=Workflow.create("adversarial", workflow.tasks, edges))


def mutate(instance: Instance, rng: random.Random) -> Instance:
    """One random change (a runtime, a memory need, an edge, a type's speed, price, count or memory, the
    deadline, the objective); retried until every task still fits some type."""
    while True:
        candidate = _mutation(instance, rng)
        if candidate.fits():
            return candidate


def _mutation(instance: Instance, rng: random.Random) -> Instance:
    tasks, resources = instance.workflow.tasks, instance.catalog.resources
    index, kind = rng.randrange(len(tasks)), rng.randrange(10)
    task = tasks[index]
    if kind == 0:
        return _with_task(
            instance, index, replace(task, runtime_s=round(task.runtime_s * _log_uniform(rng, 0.3, 3.0), 3))
        )
    if kind == 1:
        return _with_task(instance, index, replace(task, memory_bytes=_memory_bytes(rng)))
    if kind in (2, 3) and len(tasks) > 1:
        return _toggle_edge(instance, rng)
    number = rng.randrange(len(resources))
    resource = resources[number]
    if kind == 4:
        return _with_resource(instance, number, replace(resource, speed=round(_log_uniform(rng, 0.5, 3.0), 3)))
    if kind == 5:
        price = round(resource.price_per_hour_usd * _log_uniform(rng, 0.5, 2.0), 4)
        return _with_resource(instance, number, replace(resource, price_per_hour_usd=max(price, 0.001)))
    if kind == 6:
        return _with_resource(instance, number, replace(resource, count=rng.randint(1, MAX_COUNT)))
    if kind == 7:
        return _with_resource(instance, number, replace(resource, memory_gib=rng.choice(_MEMORY_GIB)))
    if kind == 8 and instance.deadline_factor is not None:
        return replace(instance, deadline_factor=min(max(instance.deadline_factor * rng.uniform(0.8, 1.25), 1.0), 4.0))
    if kind == 8:
        return _with_resource(instance, number, replace(resource, boot_s=rng.choice((0.0, 30.0, 90.0))))
    return _with_resource(instance, number, replace(resource, vcpus=rng.choice(_VCPUS)))


def catalog_to_dict(catalog: Catalog) -> dict[str, Any]:
    """The catalog in the catalog file's fields (what this benchmark varies of them)."""
    return {
        "network": {"bandwidth_bytes_per_s": catalog.bandwidth_bytes_per_s},
        "resources": [
            {
                "name": r.name,
                "backend": r.backend,
                "vcpus": r.vcpus,
                "memory_gib": r.memory_gib,
                "speed": r.speed,
                "price_per_hour_usd": r.price_per_hour_usd,
                "count": r.count,
                "billing": {"granularity_s": r.billing.granularity_s, "minimum_s": r.billing.minimum_s},
                "boot_s": r.boot_s,
            }
            for r in catalog.resources
        ],
    }


def _catalog_from_dict(document: dict[str, Any]) -> Catalog:
    resources = []
    for item in document["resources"]:
        fields = {k: v for k, v in item.items() if k != "billing"}
        resources.append(Resource(**fields, billing=Billing(**item["billing"])))
    return Catalog(tuple(resources), bandwidth_bytes_per_s=document["network"]["bandwidth_bytes_per_s"])


def case_to_dict(instance: Instance) -> dict[str, Any]:
    return {
        "format": CASE_FORMAT,
        "objective": {"kind": instance.kind, "deadline_factor": instance.deadline_factor},
        "workflow": workflow_to_dict(instance.workflow),
        "catalog": catalog_to_dict(instance.catalog),
    }


def write_case(path: Path, document: dict[str, Any], extra: dict[str, Any]) -> None:
    """A case file: what the search found (``extra``: the target, the ratio, the command) and the instance."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": CASE_FORMAT, **extra, **document}, indent=1, allow_nan=False) + "\n")


def load_case(path: Path) -> tuple[Instance, dict[str, Any]]:
    """The instance of a case file, and the file's whole document."""
    document = json.loads(path.read_text())
    if document.get("format") != CASE_FORMAT:
        raise ValueError(f"{path}: not an adversarial case (format {document.get('format')!r}, not {CASE_FORMAT})")
    workflow = workflow_from_document(document["workflow"], str(path))
    objective = document["objective"]
    instance = Instance(
        workflow, _catalog_from_dict(document["catalog"]), objective["kind"], objective["deadline_factor"]
    )
    return instance, document

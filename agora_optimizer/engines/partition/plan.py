"""A mapped partition and its schedule."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from agora_optimizer.engines.base import Engine, EngineResult
from agora_optimizer.engines.partition.blocks import Partition
from agora_optimizer.engines.partition.placement import Mapping, Platform, Processor
from agora_optimizer.engines.partition.simulation import Schedule, simulate
from agora_optimizer.model.plan import Assignment
from agora_optimizer.planning.problem import Problem


@dataclass(frozen=True)
class BlockPlan:
    """An acyclic partition, each block on a processor, and the list schedule of its tasks."""

    platform: Platform
    partition: Partition
    mapping: Mapping
    schedule: Schedule

    @property
    def makespan_s(self) -> float:
        return self.schedule.makespan_s

    def free_slots(self) -> list[Processor]:
        used = set(self.mapping.values())
        return [s for s in self.platform.slots if s.index not in used]

    def assignments(self) -> tuple[Assignment, ...]:
        """One assignment per task; the used processors of each type are numbered ``#0, #1, ...``."""
        g, schedule, slots = self.platform.graph, self.schedule, self.platform.slots
        names: dict[int, str] = {}
        per_type: Counter[str] = Counter()
        for index in sorted(set(schedule.machine)):
            resource = slots[index].resource
            names[index] = f"{resource.name}#{per_type[resource.name]}"
            per_type[resource.name] += 1
        return tuple(
            Assignment(
                task=g.ids[v],
                resource=slots[schedule.machine[v]].resource.name,
                machine=names[schedule.machine[v]],
                start_s=schedule.start[v],
                end_s=schedule.end[v],
                cores=g.cores[v],
                memory_bytes=g.memory[v],
            )
            for v in range(g.n)
        )

    def result(self, method: str) -> EngineResult:
        return EngineResult(assignments=self.assignments(), method=method, status="heuristic")


class BlockPlanEngine(Engine):
    """An engine that makes one :class:`BlockPlan`: its schedule is the result.

    A workflow with a task that needs GPUs gets None: the machine-local list schedule
    (:mod:`~agora_optimizer.engines.partition.simulation`) shares cores and memory only, so its
    plan could over-subscribe a machine's GPUs.
    """

    def solve(
        self, problem: Problem, time_limit_s: float, warm_start: EngineResult | None = None
    ) -> EngineResult | None:
        if problem.workflow.uses_gpus:
            return None
        plan = self.plan(problem, time_limit_s)
        return None if plan is None else plan.result(self.name)

    def plan(self, problem: Problem, time_limit_s: float) -> BlockPlan | None:
        raise NotImplementedError


def evaluate(platform: Platform, partition: Partition, mapping: Mapping) -> BlockPlan:
    """List-schedule the tasks of a mapped partition (the exact makespan of agora's model)."""
    block_of = partition.block_of
    machine = [mapping[block_of[v]] for v in range(platform.graph.n)]
    schedule = simulate(platform.graph, machine, platform.slots, platform.bandwidth_bytes_per_s)
    return BlockPlan(platform, partition, mapping, schedule)

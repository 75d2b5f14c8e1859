"""HEFT, the Heterogeneous Earliest Finish Time list scheduler, as a benchmark peer.

H. Topcuoglu, S. Hariri and M.-Y. Wu, "Performance-effective and low-complexity task
scheduling for heterogeneous computing", IEEE Transactions on Parallel and Distributed
Systems 13(3):260-274, 2002.

1. Task priorities: the upward rank ``rank_u(i) = w̄_i + max_{j in succ(i)} (c̄_ij + rank_u(j))``,
   with ``w̄_i`` the mean execution time of task ``i`` over the resource types it fits on
   and ``c̄_ij`` the mean communication time of edge ``i -> j`` (its bytes over the
   catalog's bandwidth: the paper's average, which ignores that a transfer within one
   machine is free).
2. Processor selection: tasks in decreasing ``rank_u`` (ties in topological order) each
   go to the machine slot ``TYPE#N`` that gives the earliest finish time, insertion-based
   (a task may use idle capacity between tasks already placed).

Adapted to the agora model: processors are machine slots, ``N < count`` (a bounded
number for a type without a count), several tasks share a slot when their cores and
memory fit (:class:`~agora_optimizer.planning.timeline.MachineTimeline`), a task only
goes to a type it fits on, and no task starts before its type's release plus ``boot_s``. HEFT
ignores cost: the plan is billed as leased.
"""

from __future__ import annotations

import statistics

from agora_optimizer.engines.slot_list import SlotListEngine
from agora_optimizer.model.catalog import Catalog, Resource
from agora_optimizer.model.plan import Assignment
from agora_optimizer.model.workflow import Workflow
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.slots import SlotSchedule


def mean_execution_s(workflow: Workflow, options: dict[str, list[Resource]]) -> dict[str, float]:
    """``w̄_i``: each task's mean runtime over the types it fits on."""
    return {t.id: statistics.fmean(r.runtime_s(t) for r in options[t.id]) for t in workflow.tasks}


def mean_communication_s(workflow: Workflow, catalog: Catalog) -> dict[tuple[str, str], float]:
    """``c̄_ij``: each edge's bytes over the catalog's bandwidth."""
    return {(e.parent, e.child): catalog.transfer_s(e.bytes) for e in workflow.edges}


def upward_ranks(problem: Problem) -> dict[str, float]:
    """``rank_u`` of every task, computed from the exit tasks up."""
    workflow = problem.workflow
    mean_w = mean_execution_s(workflow, problem.options)
    mean_c = mean_communication_s(workflow, problem.catalog)
    rank: dict[str, float] = {}
    for task_id in reversed(workflow.topological_order):
        tail = max((mean_c[(task_id, e.child)] + rank[e.child] for e in workflow.children[task_id]), default=0.0)
        rank[task_id] = mean_w[task_id] + tail
    return rank


def priority_order(problem: Problem, rank: dict[str, float]) -> list[str]:
    """Tasks in decreasing rank; ties in topological order, so parents always come first."""
    position = {task_id: i for i, task_id in enumerate(problem.workflow.topological_order)}
    return sorted(position, key=lambda t: (-rank[t], position[t]))


def heft_schedule(
    problem: Problem, unlimited_slots: int | None = None, deadline: float | None = None
) -> list[Assignment] | None:
    """The HEFT schedule of ``problem``; ``None`` if ``time.perf_counter()`` passes ``deadline``."""
    schedule = SlotSchedule(problem, unlimited_slots)
    for task_id in priority_order(problem, upward_ranks(problem)):
        if schedule.out_of_time(deadline):
            return None
        schedule.place(task_id)
    return schedule.assignments


class HeftEngine(SlotListEngine):
    """HEFT (Topcuoglu, Hariri, Wu 2002) over machine slots; objective-blind (minimises makespan)."""

    name = "heft"

    def schedule(self, problem: Problem, deadline: float) -> list[Assignment] | None:
        return heft_schedule(problem, self.unlimited_slots, deadline)

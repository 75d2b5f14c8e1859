"""PEFT, the Predict Earliest Finish Time list scheduler, as a benchmark peer.

H. Arabnejad and J. G. Barbosa, "List scheduling algorithm for heterogeneous systems by
an optimistic cost table", IEEE Transactions on Parallel and Distributed Systems
25(3):682-694, 2014.

1. The optimistic cost table: for every task ``t_i`` and processor ``p_k``,
   ``OCT(t_i, p_k) = max_{t_j in succ(t_i)} min_{p_w} [OCT(t_j, p_w) + w(t_j, p_w) + c̄_ij]``
   with ``c̄_ij = 0`` when ``p_w = p_k``; ``OCT`` of an exit task is 0. It is the
   shortest time from the end of ``t_i`` on ``p_k`` to the end of the workflow, if
   every successor got the processor it likes best.
2. Task priorities: ``rank_oct(t_i)``, the mean of ``OCT(t_i, ·)`` over processors; the
   ready task with the highest rank goes first.
3. Processor selection: the processor that minimises the optimistic EFT,
   ``O_EFT(t_i, p_k) = EFT(t_i, p_k) + OCT(t_i, p_k)``, insertion-based.

Adapted to the agora model: processors are machine slots ``TYPE#N`` (see
:mod:`agora_optimizer.planning.slots`). All slots of a type are alike, so the table is
kept per type, and it stays exact: a successor on another slot of the same type pays
``c̄_ij`` like one on another type, and one on the same slot pays nothing, so
``min_{p_w}`` is ``min(OCT(t_j, k) + w(t_j, k), min_{k'} [OCT(t_j, k') + w(t_j, k')] + c̄_ij)``.
Types a task does not fit on are left out of its row and of every minimum and mean.
``c̄_ij`` is the edge's bytes over the catalog's bandwidth. PEFT ignores cost.
"""

from __future__ import annotations

import heapq
import statistics

from agora_optimizer.engines.slot_list import SlotListEngine
from agora_optimizer.model.plan import Assignment
from agora_optimizer.planning.problem import Problem
from agora_optimizer.planning.slots import SlotSchedule

OptimisticCostTable = dict[str, dict[str, float]]  # task id -> type name -> OCT in seconds


def optimistic_cost_table(problem: Problem) -> OptimisticCostTable:
    """``OCT(task, type)`` for every task and every type it fits on, exit tasks first."""
    workflow, catalog = problem.workflow, problem.catalog
    table: OptimisticCostTable = {}
    for task_id in reversed(workflow.topological_order):
        row = dict.fromkeys((r.name for r in problem.options[task_id]), 0.0)
        for edge in workflow.children[task_id]:
            child = workflow.by_id[edge.child]
            finish = {r.name: table[edge.child][r.name] + r.runtime_s(child) for r in problem.options[edge.child]}
            elsewhere = min(finish.values()) + catalog.transfer_s(edge.bytes)
            for name in row:
                here = finish.get(name, elsewhere)
                row[name] = max(row[name], min(here, elsewhere))
        table[task_id] = row
    return table


def oct_ranks(table: OptimisticCostTable) -> dict[str, float]:
    """``rank_oct``: each task's mean OCT over the types it fits on."""
    return {task_id: statistics.fmean(row.values()) for task_id, row in table.items()}


def peft_schedule(
    problem: Problem, unlimited_slots: int | None = None, deadline: float | None = None
) -> list[Assignment] | None:
    """The PEFT schedule of ``problem``; ``None`` if ``time.perf_counter()`` passes ``deadline``."""
    workflow = problem.workflow
    table = optimistic_cost_table(problem)
    rank = oct_ranks(table)
    position = {task_id: i for i, task_id in enumerate(workflow.topological_order)}
    waiting = {task_id: len(workflow.parents[task_id]) for task_id in position}
    ready = [(-rank[t], position[t], t) for t, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    schedule = SlotSchedule(problem, unlimited_slots)
    while ready:
        if schedule.out_of_time(deadline):
            return None
        _, _, task_id = heapq.heappop(ready)
        schedule.place(task_id, table[task_id])
        for edge in workflow.children[task_id]:
            waiting[edge.child] -= 1
            if waiting[edge.child] == 0:
                heapq.heappush(ready, (-rank[edge.child], position[edge.child], edge.child))
    return schedule.assignments


class PeftEngine(SlotListEngine):
    """PEFT (Arabnejad and Barbosa 2014) over machine slots; objective-blind (minimises makespan)."""

    name = "peft"

    def schedule(self, problem: Problem, deadline: float) -> list[Assignment] | None:
        return peft_schedule(problem, self.unlimited_slots, deadline)

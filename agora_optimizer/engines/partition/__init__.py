"""Partitioning engines (Kulagina, Meyerhenke and Benoit, ICPP 2024) and the building blocks they share.

The two engines of :mod:`agora_optimizer.engines.partition.icpp24` (the paper's four-step
heuristic) and :mod:`agora_optimizer.engines.partition.homogeneous` (the paper's
baseline that ignores heterogeneity) both

1. cut the workflow into an *acyclic* partition: blocks of tasks whose quotient graph
   (one vertex per block, an edge where a task edge crosses two blocks) has no cycle;
2. map every block onto one *processor*, a machine slot ``TYPE#N`` (``N < count``);
3. list-schedule every task on its block's machine and recompute the makespan from
   the tasks (never from the block-level estimate).

The building blocks: :class:`~.graph.TaskGraph` (the workflow as integer arrays, fast enough for
30,000 tasks), :func:`~.blocks.acyclic_partition` (our replacement for dagP), :class:`~.blocks.Partition`
(split and merge that keep the quotient acyclic), :func:`~.placement.machine_slots` (the
processors), :func:`~.placement.place_blocks` (the skeleton of the mapping step, with the paper's
"split a block that fits no free processor"), :func:`~.simulation.simulate` (the machine-local list
schedule) and :class:`~.plan.BlockPlan` (a mapped partition and its schedule).

Memory model. In the paper a block's memory requirement is the peak memory of its best
sequential traversal, files included. In agora's model (``docs/spec/agora-model.md``)
files do not occupy machine memory and a machine runs several tasks at once while their
summed cores and memory fit. Every machine runs a list schedule that starts a task only
when its cores and memory fit beside the running ones, so the memory a block needs over
time (the maximum of the summed memory of its concurrently running tasks) never exceeds
the machine, and a block *fits* a machine type iff each of its tasks fits it (cores and
memory): the block's requirement is its largest task.
"""

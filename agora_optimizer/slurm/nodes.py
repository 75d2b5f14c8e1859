"""What ``sinfo`` says of a partition's nodes: whether the partition is up, each node's state,
cores, memory and the partition's time limit.

A line without its six fields is left out (sinfo prints nothing for a partition it does not
know); sizes it cannot read are ``None``, and so is an unlimited time limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agora_optimizer.slurm import values
from agora_optimizer.slurm.commands import DEFAULT_TIMEOUT_S, run_slurm
from agora_optimizer.slurm.errors import SlurmOutputError

SINFO_FORMAT = "--format=%a|%t|%N|%c|%m|%l"
# sinfo's node states (%t, flags stripped) in which a node runs no new job.
UNUSABLE_NODE_STATES = frozenset({"down", "drain", "drng", "fail", "failg", "maint", "inval", "npc", "futr"})


@dataclass(frozen=True)
class PartitionNode:
    """One node of a partition as sinfo prints it (``state`` without its ``*~#...`` flags)."""

    name: str
    partition_state: str  # the partition's availability: up, down, drain, inact
    state: str
    cpus: int | None
    memory_mib: int | None
    max_minutes: int | None  # the partition's time limit; None: unlimited or unreadable

    @property
    def usable(self) -> bool:
        return self.state not in UNUSABLE_NODE_STATES


def parse_sinfo_nodes(text: str) -> list[PartitionNode]:
    """``sinfo --Node --noheader`` with :data:`SINFO_FORMAT`, one node a line."""
    nodes: list[PartitionNode] = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 6:
            continue
        available, state, name, cpus, memory, limit = parts
        try:
            limit_s = values.time_limit_s(limit, "sinfo", "TimeLimit")
        except SlurmOutputError:
            limit_s = None
        nodes.append(
            PartitionNode(
                name=name,
                partition_state=available,
                state=state.rstrip("*~#!%$@^-+"),
                cpus=int(cpus) if cpus.isdigit() else None,
                memory_mib=int(memory) if memory.isdigit() else None,
                max_minutes=None if limit_s is None else int(limit_s // 60),
            )
        )
    return nodes


def partition_nodes(partition: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Sequence[PartitionNode]:
    """The nodes of ``partition`` (none: SLURM knows no such partition)."""
    argv = ["sinfo", "--Node", "--noheader", f"--partition={partition}", SINFO_FORMAT]
    return parse_sinfo_nodes(run_slurm(argv, timeout_s))

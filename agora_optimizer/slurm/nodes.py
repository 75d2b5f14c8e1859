"""What ``sinfo`` says of a partition's nodes: whether the partition is up, each node's state,
cores, memory and the partition's time limit, and each node's GPUs (generic resource ``gpu``).

A line without its six fields is left out (sinfo prints nothing for a partition it does not
know); sizes it cannot read are ``None``, and so is an unlimited time limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agora_optimizer.slurm import values
from agora_optimizer.slurm.commands import DEFAULT_TIMEOUT_S, run_slurm
from agora_optimizer.slurm.errors import SlurmOutputError

SINFO_FORMAT = "--format=%a|%t|%N|%c|%m|%l"
# sinfo's node states (%t, flags stripped) in which a node runs no new job.
# One ``gpu[:type]:count`` entry of a node's Gres (``gpu:a100:4(S:0-1),gpu:v100:2``, ``(null)``).
_GRES_GPU = re.compile(r"(?:^|,)gpu(?::([^:,()]+))?:(\d+)")
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


def gres_gpus(gres: str, gres_type: str | None = None) -> int:
    """The GPUs a node's Gres (sinfo's ``%G``) declares; of type ``gres_type`` only, when given."""
    return sum(int(count) for kind, count in _GRES_GPU.findall(gres.strip()) if gres_type in (None, kind))


def partition_gpus(
    partition: str, gres_type: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Mapping[str, int]:
    """Each node of ``partition`` and its GPUs (of ``gres_type`` when given); empty for an unknown partition."""
    argv = ["sinfo", "--Node", "--noheader", f"--partition={partition}", "--format=%N|%G"]
    found: dict[str, int] = {}
    for line in run_slurm(argv, timeout_s).splitlines():
        name, separator, gres = line.strip().partition("|")
        if separator:
            found[name] = gres_gpus(gres, gres_type)
    return found

"""What sinfo says of a partition's nodes (agora_optimizer/slurm/nodes.py)."""

from __future__ import annotations

from agora_optimizer.slurm.nodes import gres_gpus, parse_sinfo_nodes, partition_gpus, partition_nodes
from tests.slurm_cluster import NODES, SlurmCluster


def test_sinfo_lines_give_state_size_and_time_limit() -> None:
    text = "up|idle*|n1|8|8192|1:00:00\nup|drain|n2|16|32768|infinite\nnot a node line\ndown|mix|n3|x|y|z\n"
    first, second, third = parse_sinfo_nodes(text)
    assert (first.name, first.state, first.cpus, first.memory_mib, first.max_minutes) == ("n1", "idle", 8, 8192, 60)
    assert first.usable and not second.usable and second.max_minutes is None
    assert (third.partition_state, third.cpus, third.memory_mib, third.max_minutes) == ("down", None, None, None)


def test_gres_strings_count_gpus_by_type() -> None:
    assert gres_gpus("gpu:loopback:2") == gres_gpus("gpu:2") == 2
    assert gres_gpus("gpu:a100:4(S:0-1),gpu:v100:2(S:0,1)") == 6
    assert gres_gpus("gpu:a100:4(S:0-1),gpu:v100:2", "v100") == 2 and gres_gpus("gpu:2", "a100") == 0
    assert gres_gpus("(null)") == gres_gpus("nvgpu:3,mps:100") == 0


def test_the_loopback_partitions_have_their_node(slurm_cluster: SlurmCluster) -> None:
    for partition, node in NODES.items():
        (found,) = partition_nodes(partition)
        assert (found.partition_state, found.cpus, found.memory_mib) == ("up", node.cpus, node.memory_mib)
        assert partition_gpus(partition) == {node.name: node.gpus}
    assert partition_nodes("no-such-partition") == [] and partition_gpus("no-such-partition") == {}
    assert partition_gpus("accel", "loopback") == {"agora-gpu": 2} and partition_gpus("accel", "a100") == {
        "agora-gpu": 0
    }

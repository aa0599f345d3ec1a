"""Nodes carry an accelerator type; the default is the catalogue's reference accelerator."""

from __future__ import annotations

from dl2.core import Accelerator, ClusterSpec, NodeSpec, Resources

NODE = Resources(gpu=8.0, cpu=64.0, mem_gb=512.0)


def test_a_node_without_an_accelerator_is_the_reference_and_equals_one_built_before_the_field() -> None:
    node = NodeSpec(0, NODE, "philly-8gpu")
    assert node.accelerator is None
    assert node == NodeSpec(0, NODE, "philly-8gpu", None)
    assert node != NodeSpec(0, NODE, "philly-8gpu", Accelerator("V100", 16.0))
    assert ClusterSpec.homogeneous(2, NODE).accelerators == {None}


def test_homogeneous_and_mixed_clusters_carry_their_accelerators() -> None:
    t4 = Accelerator("T4", 16.0)
    assert ClusterSpec.homogeneous(3, NODE, kind="t4", accelerator=t4).accelerators == {t4}
    mixed = ClusterSpec.mixed([(1, NODE, None), (2, Resources(gpu=2.0, cpu=32.0), t4)], name="m")
    assert [(n.node_id, n.kind, n.accelerator) for n in mixed.nodes] == [
        (0, "default", None),
        (1, "T4", t4),
        (2, "T4", t4),
    ]
    assert mixed.total_capacity == Resources(gpu=12.0, cpu=128.0, mem_gb=512.0)

"""Servers and clusters."""

from __future__ import annotations

from dataclasses import dataclass, field

from dl2.core.resources import Resources


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One server."""

    node_id: int
    """Index of the node in its cluster (0-based, dense)."""
    capacity: Resources
    """What the node offers."""
    kind: str = "default"
    """Hardware kind (e.g. 'V100x8'); clusters may mix kinds."""


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """A set of servers, indexed 0..n-1."""

    nodes: tuple[NodeSpec, ...]
    name: str = "cluster"
    total_capacity: Resources = field(init=False, repr=False, compare=False)
    """Sum of the nodes' capacities (derived)."""

    def __post_init__(self) -> None:
        total = Resources()
        for index, node in enumerate(self.nodes):
            if node.node_id != index:
                raise ValueError(f"node ids must be 0..n-1 in order; node {index} has id {node.node_id}")
            total = total + node.capacity
        object.__setattr__(self, "total_capacity", total)

    @classmethod
    def homogeneous(
        cls, num_nodes: int, capacity: Resources, kind: str = "default", name: str = "cluster"
    ) -> ClusterSpec:
        return cls(tuple(NodeSpec(i, capacity, kind) for i in range(num_nodes)), name)

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

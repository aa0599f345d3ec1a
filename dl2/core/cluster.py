"""Servers and clusters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from dl2.core.resources import Resources


@dataclass(frozen=True, slots=True)
class Accelerator:
    """A type of accelerator (GPU). A node's count of them is its `capacity.gpu`; how fast each catalogue model runs
    on a type is `dl2.workload.accelerators`' to say."""

    name: str
    """Type name as the cluster reports it (e.g. 'V100M32', 'T4'); `dl2.workload.accelerators.ACCELERATOR_TYPES`
    lists the types with a known speed."""
    mem_gb: float | None = None
    """Memory of one accelerator, GB (None: not disclosed)."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One server."""

    node_id: int
    """Index of the node in its cluster (0-based, dense)."""
    capacity: Resources
    """What the node offers."""
    kind: str = "default"
    """Hardware kind (e.g. 'V100x8'); clusters may mix kinds."""
    accelerator: Accelerator | None = None
    """Type of the node's `capacity.gpu` accelerators; None: the catalogue's reference accelerator, the one its
    speeds were measured on (a cluster of such nodes runs exactly as the catalogue says)."""


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
        cls,
        num_nodes: int,
        capacity: Resources,
        kind: str = "default",
        name: str = "cluster",
        accelerator: Accelerator | None = None,
    ) -> ClusterSpec:
        return cls(tuple(NodeSpec(i, capacity, kind, accelerator) for i in range(num_nodes)), name)

    @classmethod
    def mixed(cls, groups: Sequence[tuple[int, Resources, Accelerator | None]], name: str = "cluster") -> ClusterSpec:
        """Groups of (number of nodes, capacity, accelerator) in order; a node's kind is its accelerator's name
        ('default' for the reference accelerator)."""
        nodes: list[NodeSpec] = []
        for count, capacity, accelerator in groups:
            kind = accelerator.name if accelerator is not None else "default"
            first = len(nodes)
            nodes.extend(NodeSpec(first + i, capacity, kind, accelerator) for i in range(count))
        return cls(tuple(nodes), name)

    @property
    def accelerators(self) -> frozenset[Accelerator | None]:
        """The accelerator types of its nodes (None: the reference accelerator)."""
        return frozenset(node.accelerator for node in self.nodes)

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

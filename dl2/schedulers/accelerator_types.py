"""A cluster's accelerator types as schedulers and placers see them: which type each node has, and in
which order a job's workers should try the types.

A real deployment knows each node's GPU model (Kubernetes' `nvidia.com/gpu.product` label) and, from its profile,
how fast each job type runs on each model; it does not know a job's true speed. So the order reads the catalogue's
profile of each type (`dl2.workload.accelerators.relative_speed`), or, for a job the deciding scheduler's speed
model knows per type (a calibration from the cluster's records: `place_sticky`'s `speed`), the profile times that
model's speedups (`speeds_with`, `order_of`).

A type here is a class of accelerators that the profile cannot tell apart (the same relative speed for every
catalogue model: Alibaba's G2 and G3 and P100, or its V100M16 and V100M32): spreading a job over them costs nothing.
Only nodes with GPUs have a type: a CPU-only server (parameter servers, CPU-only models) is of no type, and a
cluster whose GPU servers are all of one type is not mixed: every placer then runs exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from dl2.core import Accelerator, ClusterSpec
from dl2.workload.accelerators import ACCELERATOR_TYPES, relative_speed
from dl2.workload.catalogue import CATALOGUE, GPU_MODEL_NAMES, MODEL_NAMES

NO_TYPE = -1
"""The type index of a node without GPUs, and 'any type' where a type is asked for."""

T = TypeVar("T")


class LastCluster(Generic[T]):
    """`build` of the last cluster it was asked about, kept until it is asked about another (by identity).

    The simulator asks for the same cluster spec (immutable) every slot, so what is derived from it is built once per
    run, not per slot; one entry, so a finished run's cluster is let go as soon as the next run asks."""

    def __init__(self, build: Callable[[ClusterSpec], T]) -> None:
        self.build = build
        self._last: tuple[ClusterSpec, T] | None = None

    def __call__(self, cluster: ClusterSpec) -> T:
        last = self._last
        if last is None or last[0] is not cluster:
            last = self._last = (cluster, self.build(cluster))
        return last[1]


class AcceleratorTypes:
    """Per cluster (immutable, so built once per run): its GPU types, each node's, and per job type an order."""

    def __init__(self, cluster: ClusterSpec) -> None:
        with_gpus = sorted(
            {node.accelerator for node in cluster.nodes if node.capacity.gpu > 0},
            key=lambda a: ("", 0.0) if a is None else (a.name, a.mem_gb or 0.0),
        )
        # accelerators the profile cannot tell apart (the same relative speed for every catalogue model: G2 and
        # P100, V100M16 and V100M32) are one type here: a job spread over them runs at one pace
        classes: dict[object, list[Accelerator | None]] = {}
        for accelerator in with_gpus:
            classes.setdefault(_profile_key(accelerator) if len(with_gpus) > 1 else None, []).append(accelerator)
        self.types: tuple[tuple[Accelerator | None, ...], ...] = tuple(tuple(members) for members in classes.values())
        """The GPU types, in a fixed order (by their first accelerator: the reference first, then by name): type
        index -> the accelerators of that type."""
        index = {accelerator: i for i, members in enumerate(self.types) for accelerator in members}
        self.type_of_node: list[int] = [
            index[node.accelerator] if node.capacity.gpu > 0 else NO_TYPE for node in cluster.nodes
        ]
        """Per node, its type index (`NO_TYPE` for a node without GPUs)."""
        self.gpus: list[float] = [0.0] * len(self.types)
        """Per type, the GPUs of its nodes."""
        for node, kind in zip(cluster.nodes, self.type_of_node, strict=True):
            if kind != NO_TYPE:
                self.gpus[kind] += node.capacity.gpu
        self._mean_speed: list[float] | None = None
        self._orders: dict[str, tuple[int, ...]] = {}
        self._gains: dict[str, float] = {}

    @staticmethod
    def of(cluster: ClusterSpec) -> AcceleratorTypes:
        """The cluster's types, built once per run (`LastCluster`)."""
        return _types_of(cluster)

    @property
    def is_mixed(self) -> bool:
        """Whether the GPU servers are of more than one type."""
        return len(self.types) > 1

    def speeds(self, model: str) -> list[float]:
        """Per type, the catalogue's relative speed of `model` there (1 everywhere for a model it does not profile
        on GPUs: its workers need no accelerator, or it is a type only the truth knows)."""
        profile = CATALOGUE.get(model)
        if profile is None or not profile.uses_gpu:
            return [1.0] * len(self.types)
        return [_speed(model, members[0]) for members in self.types]

    def order(self, model: str) -> tuple[int, ...]:
        """The types a worker of `model` should try, best first: fastest for it by the profile; among types
        equally fast for it, the one the catalogue's models gain least from on average; then type index."""
        order = self._orders.get(model)
        if order is None:
            order = self._orders[model] = self.order_of(self.speeds(model))
        return order

    def order_of(self, speeds: list[float]) -> tuple[int, ...]:
        """`order` for a job whose per-type speeds are `speeds` (its own, where a speed model knows them)."""
        mean = self._mean_speeds()
        return tuple(sorted(range(len(self.types)), key=lambda t: (-speeds[t], mean[t], t)))

    def speeds_with(self, model: str, speedups: Mapping[str, float]) -> list[float]:
        """Per type, `model`'s profile speed there times its speedup over the profile (a speed model's per-type
        knowledge of a job: `dl2.workload.accelerated_speed.PerAcceleratorSpeeds`; a type not named: 1)."""
        return [
            speed * speedups.get(members[0].name, 1.0) if members[0] is not None else speed
            for speed, members in zip(self.speeds(model), self.types, strict=True)
        ]

    def _mean_speeds(self) -> list[float]:
        """Per type, how much the catalogue's GPU models gain from it on average: where a job gains the same from
        two types, it takes the one the others gain less from, leaving the other to them."""
        if self._mean_speed is None:
            self._mean_speed = [
                sum(_speed(model, members[0]) for model in GPU_MODEL_NAMES) / max(len(GPU_MODEL_NAMES), 1)
                for members in self.types
            ]
        return self._mean_speed

    def gain(self, model: str) -> float:
        """How much `model` gains from the cluster's fastest type for it over its slowest (1: types do not matter)."""
        gain = self._gains.get(model)
        if gain is None:
            speeds = self.speeds(model)
            gain = self._gains[model] = max(speeds) / min(speeds) if speeds else 1.0
        return gain


_types_of = LastCluster(AcceleratorTypes)


def _profile_key(accelerator: Accelerator | None) -> object:
    """What the profile says of an accelerator: its relative speed for every catalogue model (an accelerator it
    does not know is a type of its own)."""
    if accelerator is not None and accelerator.name not in ACCELERATOR_TYPES:
        return accelerator
    return tuple(relative_speed(model, accelerator) for model in MODEL_NAMES)


def _speed(model: str, accelerator: Accelerator | None) -> float:
    """The profile's relative speed; 1 on an accelerator it does not know (a label no table maps: the simulator
    refuses such a cluster, a deployment may still report one)."""
    if accelerator is not None and accelerator.name not in ACCELERATOR_TYPES:
        return 1.0
    return relative_speed(model, accelerator)

"""A job's speed on the accelerators its workers were placed on: heterogeneous clusters.

`AcceleratedSpeedModel` wraps a realistic-mode speed model for one cluster. A worker's computation runs
`relative_speed(model, type)` times as fast on its node's accelerator type as on the reference accelerator
(`dl2.workload.accelerators`), and a job whose workers sit on several types runs at its slowest worker's pace:
synchronous training waits every step for the last worker's gradients, and data parallelism gives every worker the
same share of the batch. Parameter servers run on CPUs, so their nodes' accelerators do not matter.

What it scales, and why only that: the parametric model's computation term (`t0 / w` of `dl2.workload.speed_fit`),
multiplied by 1 / relative speed, and nothing else. Gavel measured each type's throughput on one GPU alone, a
step with no gradient exchange, so its ratio between types is a ratio of computation times; the exchange with
parameter servers or the ring all-reduce crosses the network, whose speed no accelerator changes. (Scaling the whole
step instead would let a faster GPU speed up a network-bound job as much as a compute-bound one.)

Exactly today's speeds where nothing differs: a job whose slowest worker's type has relative speed 1.0 (every node
the reference accelerator, or a type read as P100 with scale 1) gets the wrapped model's own number, computed by
the wrapped model; no factor of 1.0 is multiplied in. A speed model other than the parametric one (which has no
computation term to scale) has its whole throughput scaled instead, except a per-job correction of another model
(`CorrectedPerJob`: a world fitted from each job's progress), whose model is scaled as it would be alone and the
correction applied on top.

A wrapped model that knows per-(job type, accelerator type) speeds of its own (`PerAcceleratorSpeeds`: a truth,
`dl2.truth.speed.TrueSpeedModel`) has them applied on top: a job's computation on a type runs its speedup times
as fast as the catalogue's factor says, still at the slowest worker's pace. Where it names none for a job, the
numbers are the catalogue's, bit for bit.

A wrapped model that knows nodes slower than their type (`PerNodeSpeeds`: a truth's slow nodes,
`dl2.truth.model.SlowNodes`) has each worker's type factor multiplied by its node's factor before the slowest is
taken, for jobs whose workers use a GPU (the degraded part is the GPU server's; a parameter server's node never
counts). Such a model is wrapped on a cluster of reference accelerators too (`on_accelerators`); where a job's
workers sit on no named node the factor is the type's alone, so its numbers stay the wrapped model's, bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from dl2.core import Accelerator, ClusterSpec, JobAllocation, JobSpec
from dl2.workload.accelerators import accelerator_type, relative_speed
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES
from dl2.workload.speed import SpeedModel
from dl2.workload.speed_fit import ParametricSpeedModel, ShiftedSpeedModel, factored_placed_throughput


@runtime_checkable
class PerAcceleratorSpeeds(Protocol):
    """A speed model that knows how fast each job runs on each accelerator type beyond the catalogue's one profile
    scaled per type (a truth); `AcceleratedSpeedModel` applies it."""

    def accelerator_speedups(self, spec: JobSpec) -> tuple[str, Mapping[str, float]]:
        """(a name for the job's true type, per accelerator type name the factor on its computation's speed there
        over the catalogue's; a type not named: 1). The same name must always come with the same factors."""
        ...


@runtime_checkable
class PerNodeSpeeds(Protocol):
    """A speed model that knows nodes on which a GPU worker's computation is slower than its accelerator type says
    (a truth's degraded servers); `AcceleratedSpeedModel` applies it."""

    def node_compute_factors(self) -> Mapping[int, float]:
        """Node index -> the factor (at least 1) on a GPU worker's computation time there; a node not named: 1."""
        ...


@runtime_checkable
class CorrectedPerJob(Protocol):
    """A speed model that is another (`base`) with each job's throughput multiplied by a correction learned from its
    progress (`dl2.workload.job_fit.JobFittedSpeedModel`); `AcceleratedSpeedModel` scales `base` per type, as it
    would alone, and applies the correction on top."""

    base: SpeedModel

    def correction(self, job_id: str, num_workers: int) -> float:
        """The factor on `base`'s throughput of this job at this many workers."""
        ...


@runtime_checkable
class HeldComputation(Protocol):
    """A speed model with jobs whose computation stops splitting past some worker count (a truth's scaling knee,
    `dl2.truth.model.ScalingKnee`); `AcceleratedSpeedModel` keeps that on every accelerator type."""

    def held_compute(self, spec: JobSpec, num_workers: int, factors: tuple[float, float, float, float]) -> float:
        """What `spec` on `num_workers` adds to its time per unit of throughput with these term factors (0 where
        its computation still splits)."""
        ...


class AcceleratedSpeedModel:
    """`base`'s speeds on `cluster`'s accelerators (the module docstring)."""

    def __init__(self, base: SpeedModel, cluster: ClusterSpec) -> None:
        self.base = base
        self._corrected: tuple[CorrectedPerJob, AcceleratedSpeedModel] | None = None
        if isinstance(base, CorrectedPerJob):
            self._corrected = (base, AcceleratedSpeedModel(base.base, cluster))
        """A per-job correction and its `base` on this cluster: the correction is applied to that model's speeds, so
        a parametric `base` keeps its computation-only scaling per type (the module docstring)."""
        self._own = base if isinstance(base, PerAcceleratorSpeeds) else None
        """The wrapped model, where it has per-type speeds of its own."""
        self._own_factor: dict[tuple[str, str], tuple[float, ...]] = {}
        """Per (catalogue model, true type name): per accelerator type, its factor on the computation time."""
        types: list[Accelerator | None] = sorted(
            cluster.accelerators, key=lambda a: ("", 0.0) if a is None else (a.name, a.mem_gb or 0.0)
        )
        for accelerator in types:
            if accelerator is not None:
                accelerator_type(accelerator.name, where=f"cluster {cluster.name}")
        self._types = tuple(types)
        index = {accelerator: i for i, accelerator in enumerate(types)}
        self._type_of_node = [index[node.accelerator] for node in cluster.nodes]
        """Per node, its accelerator's position in `types`."""
        self._compute_factor = {
            model: tuple(1.0 / relative_speed(model, accelerator) for accelerator in types) for model in MODEL_NAMES
        }
        """Per catalogue model, per accelerator type: the factor on the computation time."""
        self._node_factor = _node_factors(base, len(cluster.nodes))
        """Per node, the factor on a GPU worker's computation time there (None: 1 on every node)."""

    def throughput(self, model: str, num_ps: int, num_workers: int) -> float:
        """Placement ignored: on the reference accelerator, as the wrapped model says."""
        return self.base.throughput(model, num_ps, num_workers)

    def compute_factor(self, model: str, worker_nodes: tuple[int, ...]) -> float:
        """Factor on the computation time of `model` with workers on these nodes: the slowest worker's."""
        return self.slowest(self._compute_factor[model], worker_nodes)

    def slowest(
        self, factors: tuple[float, ...], worker_nodes: tuple[int, ...], node_factors: tuple[float, ...] | None = None
    ) -> float:
        """Of per-type factors on the computation time, the one of the slowest worker on these nodes; with
        `node_factors` (per node), each worker's type factor times its node's."""
        type_of = self._type_of_node
        if node_factors is None:
            return max(factors[type_of[node]] for node in worker_nodes)
        return max(factors[type_of[node]] * node_factors[node] for node in worker_nodes)

    def job_compute_factors(self, spec: JobSpec, model: str) -> tuple[float, ...]:
        """Per accelerator type, the factor on the computation time of `spec` (whose fit is `model`'s): the
        catalogue's, with the wrapped model's own speedups applied where it has them."""
        factors = self._compute_factor[model]
        if self._own is None or spec.worker_demand.gpu <= 0:
            return factors
        key, speedups = self._own.accelerator_speedups(spec)
        if not speedups:
            return factors
        own = self._own_factor.get((model, key))
        if own is None:
            own = self._own_factor[(model, key)] = tuple(
                factor if accelerator is None else factor / speedups.get(accelerator.name, 1.0)
                for factor, accelerator in zip(factors, self._types, strict=True)
            )
        return own

    def placed_throughput(self, spec: JobSpec, allocation: JobAllocation) -> float:
        workers = allocation.worker_nodes
        if not workers:
            return 0.0
        if self._corrected is not None:
            corrected, accelerated = self._corrected
            value = accelerated.placed_throughput(spec, allocation)
            return value * corrected.correction(spec.job_id, allocation.num_workers) if value > 0 else value
        base = self.base
        if isinstance(base, ShiftedSpeedModel):
            model, factors = base.job_factors(spec)  # a job runs at its true type's pace
        else:
            model, factors = spec.model, None
        nodes = self._node_factor if spec.worker_demand.gpu > 0 else None
        slowest = self.slowest(self.job_compute_factors(spec, model), workers, nodes)
        if slowest == 1.0:
            return base.placed_throughput(spec, allocation)
        if not isinstance(base, ParametricSpeedModel):
            return base.placed_throughput(spec, allocation) / slowest
        compute, communication, parameter_server, overhead = factors or (1.0, 1.0, 1.0, 1.0)
        shifted = (compute * slowest, communication, parameter_server, overhead)
        speed = factored_placed_throughput(base.fits[model], CATALOGUE[model], spec.architecture, allocation, shifted)
        held = base.held_compute(spec, len(workers), shifted) if isinstance(base, HeldComputation) else 0.0
        return speed if held == 0.0 or speed <= 0.0 else 1.0 / (1.0 / speed + held)


def _node_factors(speed: SpeedModel, num_nodes: int) -> tuple[float, ...] | None:
    """Per node of a cluster of `num_nodes`, the factor `speed` names on a GPU worker's computation time there
    (`PerNodeSpeeds`); None where it names none other than 1."""
    named = speed.node_compute_factors() if isinstance(speed, PerNodeSpeeds) else {}
    if any(factor < 1.0 for factor in named.values()):
        raise ValueError(f"node compute factors must be at least 1, got {dict(named)}")
    if all(factor == 1.0 for node, factor in named.items() if node < num_nodes):
        return None
    return tuple(float(named.get(node, 1.0)) for node in range(num_nodes))


def on_accelerators(speed: SpeedModel, cluster: ClusterSpec) -> SpeedModel:
    """`speed` itself on a cluster of reference accelerators only, unless it names slow nodes (`PerNodeSpeeds`);
    otherwise it wrapped for the cluster's types and nodes."""
    if cluster.accelerators == {None} and _node_factors(speed, len(cluster.nodes)) is None:
        return speed
    return AcceleratedSpeedModel(speed, cluster)


class FastestAcceleratorSpeed(AcceleratedSpeedModel):
    """As if every worker ran on the cluster's fastest type for its model: no placement on the cluster is faster,
    so bounds that search placements by speed (`dl2.sim.lower_bound`) stay bounds on a heterogeneous cluster.
    Slow nodes (`PerNodeSpeeds`) are ignored: their factors are at least 1, so the bound stays a bound."""

    def slowest(
        self, factors: tuple[float, ...], worker_nodes: tuple[int, ...], node_factors: tuple[float, ...] | None = None
    ) -> float:
        return min(factors)


def on_fastest_accelerators(speed: SpeedModel, cluster: ClusterSpec) -> SpeedModel:
    """`speed` itself on a cluster of reference accelerators only; otherwise `FastestAcceleratorSpeed`."""
    if cluster.accelerators == {None}:
        return speed
    return FastestAcceleratorSpeed(speed, cluster)

"""What a truth is: how a cluster's jobs really behave, set against the catalogue that policies read.

The catalogue (`dl2.workload.catalogue`, fitted by `dl2.workload.speed_fit`) is what every policy, heuristic and
the lifecycle know. A real cluster is never the catalogue: code and hardware change a type's speed (faster GPUs
shrink computation, a slower network or parameter server stretches communication), models arrive that the
catalogue lacks, co-located jobs interfere otherwise than profiled, and resizing costs what the cluster's
checkpointing makes it cost. A `Truth` says all of that as data, so that the cluster twin and the runs that stand
for a cluster can play it, and a benchmark can score how far a policy learned it from feedback.
"""

from __future__ import annotations

from dataclasses import field
from typing import Annotated

from annotated_types import Ge, Gt, Le, Lt

from dl2.config import config, refuse
from dl2.core import Resources
from dl2.sim.config import RescaleCost
from dl2.workload.accelerators import ACCELERATOR_TYPES
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES

Factor = Annotated[float, Gt(0), Le(100)]


@config
class SpeedShift:
    """How one job type's true time per step departs from its catalogue fit: a factor on each group of terms of
    the placement-aware Optimus-family model (`dl2.workload.speed_fit`: 1/S = t0/w + t1 + kappa (t2/p + t3 w/p)
    + t4 w + t5 p). A factor above 1 makes that part slower."""

    compute: Factor = 1.0
    """On t0: the computation split across workers (a faster or slower accelerator, a bigger batch)."""
    communication: Factor = 1.0
    """On t2 and t3, and on the all-reduce ring: the parameters moved each step (a slower network, a larger
    model)."""
    parameter_server: Factor = 1.0
    """On t3 alone: a parameter server serving its workers (slower parameter servers)."""
    overhead: Factor = 1.0
    """On t1, t4 and t5: synchronisation and per-task overheads."""

    @property
    def is_identity(self) -> bool:
        return self.compute == self.communication == self.parameter_server == self.overhead == 1.0


@config
class NewJobType:
    """A job type the catalogue lacks. Its jobs are submitted under the catalogue label `declared` (the closest
    profile the cluster's users or operators pick; that is all a policy or heuristic can read) and run at their
    own speed: the fit of `base` with `shift` applied. Its demands replace the job's own."""

    name: str
    """What the type really is (a model name the catalogue does not have)."""
    base: str
    """The catalogue type whose fitted speed function it starts from."""
    declared: str
    """The catalogue label its jobs carry."""
    share: Annotated[float, Gt(0), Le(1)]
    """The fraction of the workload's jobs that are of this type (drawn with the truth's seed)."""
    shift: SpeedShift = SpeedShift()
    """Its speed against `base`'s fit."""
    worker_gpu: Annotated[float, Ge(0), Le(8)] = 1.0
    """GPUs of one worker (0: a CPU-only type)."""
    worker_cpu: Annotated[float, Gt(0), Le(64)] = 4.0
    """Cores of one worker."""
    worker_mem_gb: Annotated[float, Gt(0), Le(512)] = 24.0
    """Memory of one worker."""
    ps_cpu: Annotated[float, Gt(0), Le(64)] = 4.0
    """Cores of one parameter server."""
    ps_mem_gb: Annotated[float, Gt(0), Le(512)] = 8.0
    """Memory of one parameter server."""

    def __post_init__(self) -> None:
        if self.name in CATALOGUE:
            raise refuse("new_types.name", self.name, "a type the catalogue lacks, not one of its models")
        for key, value in (("base", self.base), ("declared", self.declared)):
            if value not in CATALOGUE:
                raise refuse(f"new_types.{key}", value, f"a catalogue model: {', '.join(MODEL_NAMES)}")

    @property
    def worker_demand(self) -> Resources:
        return Resources(gpu=self.worker_gpu, cpu=self.worker_cpu, mem_gb=self.worker_mem_gb)

    @property
    def ps_demand(self) -> Resources:
        return Resources(cpu=self.ps_cpu, mem_gb=self.ps_mem_gb)


@config
class ScalingKnee:
    """Jobs whose scaling departs from their type's: past `workers` workers their computation stops splitting (each
    step's samples come from an input pipeline that feeds `workers` workers' worth, or a per-worker batch that cannot
    shrink further), while synchronisation keeps growing with every worker. In the fit's form the compute term t0/w
    is held at t0/k for w > k, every other term taking the job's real w and p: past the knee a job's throughput
    declines slowly, as much as the catalogue's communication and per-task overheads say one more worker costs.
    A job is one of them by its id, drawn with the truth's seed; its label and demands stay its type's, so no policy
    can tell it apart but by how it runs."""

    share: Annotated[float, Gt(0), Le(1)]
    """The fraction of the workload's jobs that have the knee (drawn with the truth's seed, its own stream)."""
    workers: Annotated[int, Ge(1), Le(64)] = 2
    """k: the most workers whose computation still splits."""


@config
class SlowNodes:
    """Degraded GPU servers (a thermally throttled or failing GPU, a bad PCIe link): a worker's computation on one
    of them takes `compute` times as long. Synchronous training runs at its slowest worker's pace, so a job with one
    worker on a slow node is slowed as a whole; parameter servers run on CPUs, and a job whose workers use no GPU
    does not touch the GPUs either: neither is slowed. Which nodes are slow is drawn with the truth's seed, among the
    cluster's GPU servers (`dl2.truth.realise.slow_nodes`); nothing a policy reads names them."""

    share: Annotated[float, Gt(0), Le(1)]
    """The fraction of the cluster's GPU servers that are slow (at least one; drawn with the truth's seed, its own
    stream)."""
    compute: Annotated[float, Ge(1), Le(10)] = 3.0
    """The factor on a worker's computation time on a slow node (the computation term of the fit, as
    `SpeedShift.compute`)."""


@config
class Truth:
    """How a cluster's jobs really behave (see the module docstring). The identity truth is the catalogue."""

    name: str
    """What to call it in tables (a scenario's name, or `seed-N`, `drawn-N` for a drawn one)."""
    shifts: dict[str, SpeedShift] = field(default_factory=dict)
    """Per catalogue type: its true speed against its fit (a type not named keeps its fit)."""
    new_types: tuple[NewJobType, ...] = ()
    """Types the catalogue lacks, each with its share of the jobs."""
    interference_scale: Annotated[float, Ge(0), Le(10)] = 1.0
    """Each co-location's extra slowdown is this multiple of the profiled one: slowdown' = 1 + scale (s - 1)."""
    interference_spread: Annotated[float, Ge(0), Lt(1)] = 0.0
    """Each pair's extra slowdown is also multiplied by a factor drawn once in [1 - spread, 1 + spread] (an
    interference table unlike the profiled one, not merely larger)."""
    rescale: RescaleCost | None = None
    """What a resize really costs (None: the run's own setting)."""
    arrival_density: Annotated[float, Ge(0.1), Le(10)] = 1.0
    """Arrivals come this many times as densely as the workload's (2: every gap between arrivals halves)."""
    seed: Annotated[int, Ge(0), Lt(2**32)] = 0
    """Seeds which jobs are of the new types, which have the knee, which nodes are slow, and the interference
    spread."""
    knee: ScalingKnee | None = None
    """Jobs whose throughput stops gaining past a few workers, whatever their type's fit says (None: none)."""
    slow_nodes: SlowNodes | None = None
    """GPU servers on which a worker's computation takes longer, whatever its job's type (None: none)."""
    accelerator_speedups: dict[str, dict[str, Factor]] = field(default_factory=dict)
    """Per job type (a catalogue model, or one of `new_types` by its name), per accelerator type
    (`dl2.workload.accelerators.ACCELERATOR_TYPES`): a factor on how fast its computation runs on that type against
    what the catalogue's per-type factor says (2: twice as fast as the catalogue expects there; the catalogue knows
    one profile per model, scaled per type by Gavel-derived factors). It acts on nodes of that type only, on the
    computation term, the slowest worker's pace setting a job's (`dl2.workload.accelerated_speed`); the reference
    accelerator (a node without a named type) takes `shifts` alone, so a truth runs on a homogeneous reference
    cluster exactly as without it. A type not named, or a job whose workers use no GPU, keeps the catalogue's
    factor; a new type not named here gains as its base's profile says."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.shifts) - set(CATALOGUE))
        if unknown:
            raise refuse("shifts", unknown[0], f"a catalogue model: {', '.join(MODEL_NAMES)}")
        names = [t.name for t in self.new_types]
        if len(set(names)) != len(names):
            raise refuse("new_types", names, "distinct names")
        for model, per_type in self.accelerator_speedups.items():
            if model not in CATALOGUE and model not in names:
                raise refuse("accelerator_speedups", model, "a catalogue model or a new type's name")
            unknown = sorted(set(per_type) - set(ACCELERATOR_TYPES))
            if unknown:
                raise refuse(
                    f"accelerator_speedups.{model}", unknown[0], f"an accelerator type: {', '.join(ACCELERATOR_TYPES)}"
                )
        if sum(t.share for t in self.new_types) > 1.0:
            raise refuse("new_types.share", [t.share for t in self.new_types], "shares summing to at most 1")

    def shift_of(self, model: str) -> SpeedShift:
        return self.shifts.get(model, IDENTITY)

    def speedups_of(self, model: str) -> dict[str, float]:
        """Per accelerator type name, the truth's factor on `model`'s catalogue speed there (empty: the catalogue's)."""
        return {name: factor for name, factor in self.accelerator_speedups.get(model, {}).items() if factor != 1.0}

    @property
    def is_catalogue(self) -> bool:
        """True when nothing departs from the catalogue (the no-shift control)."""
        return (
            all(shift.is_identity for shift in self.shifts.values())
            and not self.new_types
            and self.interference_scale == 1.0
            and self.interference_spread == 0.0
            and self.rescale is None
            and self.arrival_density == 1.0
            and self.knee is None
            and (self.slow_nodes is None or self.slow_nodes.compute == 1.0)
            and all(factor == 1.0 for per_type in self.accelerator_speedups.values() for factor in per_type.values())
        )


IDENTITY = SpeedShift()

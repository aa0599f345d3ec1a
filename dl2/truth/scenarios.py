"""Named truths, and truths drawn from a seed.

The named ones are the cases DL2's online phase exists for, one departure each, with `catalogue` as the control:

- `speed-shift`: speeds about 30% off the catalogue, in a type-dependent way (communication-heavy types slower
  over a busier network and slower parameter servers, compute-bound ones faster on newer accelerators);
- `new-types`: two job types the catalogue lacks, a quarter of the jobs between them, under catalogue labels;
- `interference-2x`: every co-location costs twice the profiled extra slowdown;
- `dense-arrivals`: arrivals twice as dense as the workload's;
- `scaling-knee`: 40% of the jobs stop gaining past one worker (`ScalingKnee`: their computation no longer
  splits, their synchronisation still grows), whatever their type's fit says. The catalogue's types peak at about
  two workers on the cluster sizes played here, so a knee at two would depart from it on few allocations; at one,
  a knee job on the two workers Optimus gives most jobs runs 9-15% slower than on one.
- `slow-nodes`: a quarter of the GPU servers are degraded (`SlowNodes`: a throttled or failing GPU, a bad PCIe
  link), a worker's computation on one taking three times as long; a job with a worker there runs at that worker's
  pace. Which servers are slow is drawn with the truth's seed; no policy reading the catalogue can tell them apart
  but by how the jobs on them run.
- `interference-pairs`: each pair's extra slowdown from co-location is the profiled one times a factor drawn once
  per pair, uniform between 0.075 and 2.925 (`interference_scale` 1.5, `interference_spread` 0.95): some pairs cost
  three times what was profiled, others almost nothing, so which co-locations are cheap only records can tell.
- `accelerator-affinity` (in `MIXED_SCENARIOS`: it departs only on a cluster of several accelerator types; on
  a reference cluster it is the catalogue): the catalogue, scaling one profile per model by Gavel's geometric mean
  over batch sizes, says the CNNs gain most from a V100 (1.52x a P100) and the language models least (wlm 1.19x,
  seq2seq 1.35x); in this truth it is the other way round. The language models run 1.8 times as fast on the V100s
  as the catalogue says (wlm 2.14x a P100, seq2seq 2.43x) and 0.6 times on the K80s; the CNNs 0.75 times on the
  V100s (resnet-50, vgg-16, inception-bn 1.14x; resnext-110 0.83x, slower than a P100) and 1.4 times on the K80s.
  The CNNs' side is within what Gavel measured (ResNet-18's V100/P100 ratio spans 0.84-1.54 over batch sizes, the
  Transformer's 0.95-1.77: a cluster's batch sizes are not the geometric mean); the language models' is beyond it
  (Gavel's largest V100/P100 ratio is CycleGAN's 1.84): a deliberately strong departure, so that which jobs get
  the fast GPUs matters and the catalogue is wrong about it.

`drawn-N` draws a truth that mixes every departure (`draw`): what `seed-N` draws, and with even odds each a
scaling knee (10-40% of the jobs, past one or two workers) and slow servers (10-30% of them, 2-4 times slower), and
a per-pair interference spread of 0.5-0.95, so that a method is judged on cases nobody tuned it to. `seed-N`
(`generate`) draws all but the knee and the slow servers, with a spread up to 0.5: the truths that the tables
naming `seed-N` were measured on. Both draw per-(model, accelerator type) speedups from streams of their own, one
per pair, keyed by the names (`_accelerator_speedups`): every other draw of a seed is what it was before they
existed, and they act only on nodes of a named accelerator type, so every run on a reference cluster is bit for bit
what it was.
"""

from __future__ import annotations

import zlib
from dataclasses import replace

import numpy as np

from dl2.config import ConfigError
from dl2.sim.config import RescaleCost, RescaleKind
from dl2.truth.model import NewJobType, ScalingKnee, SlowNodes, SpeedShift, Truth
from dl2.workload.accelerators import ACCELERATOR_TYPES
from dl2.workload.catalogue import CATALOGUE, GPU_MODEL_NAMES, MODEL_NAMES

_V100S = ("V100", "V100M16", "V100M32")
_LANGUAGE = {"K80": 0.6} | {name: 1.8 for name in _V100S}
"""The language models against the catalogue (`accelerator-affinity`): far more from a V100, less on a K80."""
_CNN = {"K80": 1.4} | {name: 0.75 for name in _V100S}
"""The CNNs against the catalogue (`accelerator-affinity`): less from a V100, more on a K80."""

_COMMUNICATION_HEAVY = SpeedShift(communication=1.8, parameter_server=1.35)
_COMPUTE_BOUND = SpeedShift(compute=0.55, overhead=0.7)

SCENARIOS: dict[str, Truth] = {
    "catalogue": Truth("catalogue"),
    "speed-shift": Truth(
        "speed-shift",
        shifts={
            "vgg-16": _COMMUNICATION_HEAVY,
            "resnet-50": _COMMUNICATION_HEAVY,
            "wlm": SpeedShift(communication=1.7, overhead=1.3),
            "seq2seq": SpeedShift(compute=0.55, communication=1.3, overhead=0.75),
            "inception-bn": _COMPUTE_BOUND,
            "resnext-110": _COMPUTE_BOUND,
            "cnn-text-classification": SpeedShift(overhead=1.4),
            "dssm": SpeedShift(overhead=1.4),
        },
    ),
    "new-types": Truth(
        "new-types",
        new_types=(
            NewJobType(
                "transformer-large",
                base="vgg-16",
                declared="resnet-50",
                share=0.13,
                shift=SpeedShift(compute=1.6, communication=2.2),
                worker_mem_gb=48.0,
                ps_mem_gb=16.0,
            ),
            NewJobType(
                "graph-net",
                base="resnext-110",
                declared="inception-bn",
                share=0.12,
                shift=SpeedShift(compute=0.5, communication=3.0, parameter_server=2.0),
                worker_cpu=8.0,
            ),
        ),
    ),
    "interference-2x": Truth("interference-2x", interference_scale=2.0),
    "dense-arrivals": Truth("dense-arrivals", arrival_density=2.0),
    "scaling-knee": Truth("scaling-knee", knee=ScalingKnee(share=0.4, workers=1)),
    "slow-nodes": Truth("slow-nodes", slow_nodes=SlowNodes(share=0.25, compute=3.0)),
    "interference-pairs": Truth("interference-pairs", interference_scale=1.5, interference_spread=0.95, seed=3),
}

MIXED_SCENARIOS: dict[str, Truth] = {
    "accelerator-affinity": Truth(
        "accelerator-affinity",
        accelerator_speedups={
            "wlm": _LANGUAGE,
            "seq2seq": _LANGUAGE,
            "resnet-50": _CNN,
            "vgg-16": _CNN,
            "inception-bn": _CNN,
            "resnext-110": _CNN,
        },
    ),
}
"""Truths that depart from the catalogue only on clusters of several accelerator types (on a reference cluster they
are the catalogue): kept out of `SCENARIOS`, whose every member the homogeneous benchmarks play by default."""


def _factor(rng: np.random.Generator, sigma: float) -> float:
    return float(np.clip(np.exp(rng.normal(0.0, sigma)), 0.25, 4.0))


def generate(seed: int) -> Truth:
    """A truth drawn from `seed`: every type's speed off by log-normal factors, up to two new types (5-20% of the
    jobs each), interference 0.5-2.5 times the profiled with a per-pair spread, sometimes checkpoint-restart
    resizes, arrivals 1-2 times as dense; on a cluster of several accelerator types, every GPU model's speed on each
    named type off the catalogue's by a log-normal factor (`_accelerator_speedups`). It draws no scaling knee and
    no slow nodes yet: adding them would move every drawn truth."""
    rng = np.random.default_rng([seed, 2029])
    shifts = {
        model: SpeedShift(
            compute=_factor(rng, 0.3),
            communication=_factor(rng, 0.35),
            parameter_server=_factor(rng, 0.25),
            overhead=_factor(rng, 0.2),
        )
        for model in MODEL_NAMES
    }
    new_types = []
    for index in range(int(rng.integers(0, 3))):
        base = str(rng.choice(GPU_MODEL_NAMES))
        declared = base if rng.uniform() < 0.5 else str(rng.choice(GPU_MODEL_NAMES))
        new_types.append(
            NewJobType(
                f"new-type-{index + 1}",
                base=base,
                declared=declared,
                share=round(float(rng.uniform(0.05, 0.2)), 3),
                shift=SpeedShift(compute=_factor(rng, 0.5), communication=_factor(rng, 0.5)),
                worker_mem_gb=float(rng.choice([24.0, 48.0])),
                ps_mem_gb=max(4.0, round(4 * CATALOGUE[base].model_size_mb / 1024 + 4)),
            )
        )
    rescale = RescaleCost(kind=RescaleKind.CHECKPOINT) if rng.uniform() < 0.3 else None
    return Truth(
        f"seed-{seed}",
        shifts=shifts,
        new_types=tuple(new_types),
        interference_scale=round(float(rng.uniform(0.5, 2.5)), 3),
        interference_spread=round(float(rng.uniform(0.0, 0.5)), 3),
        rescale=rescale,
        arrival_density=round(float(rng.uniform(1.0, 2.0)), 3),
        seed=seed,
        accelerator_speedups=_accelerator_speedups(seed),
    )


def draw(seed: int) -> Truth:
    """A truth drawn from `seed` with every departure the named scenarios keep one of: `generate`'s draws (the same
    shifts, new types, interference scale, resize cost, density and accelerator factors), plus, from a stream of
    their own, a per-pair interference spread of 0.5-0.95 in place of `generate`'s, and with even odds each a
    scaling knee (10-40% of the jobs, past one or two workers) and slow servers (10-30% of the GPU servers, a
    worker's computation 2-4 times as long there)."""
    rng = np.random.default_rng([seed, 2060])
    spread = round(float(rng.uniform(0.5, 0.95)), 3)
    knee = None
    if rng.uniform() < 0.5:
        knee = ScalingKnee(share=round(float(rng.uniform(0.1, 0.4)), 3), workers=int(rng.integers(1, 3)))
    slow_nodes = None
    if rng.uniform() < 0.5:
        slow_nodes = SlowNodes(share=round(float(rng.uniform(0.1, 0.3)), 3), compute=round(float(rng.uniform(2, 4)), 3))
    return replace(generate(seed), name=f"drawn-{seed}", interference_spread=spread, knee=knee, slow_nodes=slow_nodes)


def _accelerator_speedups(seed: int, sigma: float = 0.3) -> dict[str, dict[str, float]]:
    """Per GPU model, per named accelerator type: a log-normal factor (sigma 0.3, clipped to 0.25-4) on its speed
    there over the catalogue's. Each pair draws from a stream of its own keyed by the seed and the two names (not
    by their positions), so neither `generate`'s other draws nor a pair's factor moves when a type or a model is
    added."""
    return {
        model: {
            name: round(_factor(np.random.default_rng([seed, 2052, _key(model), _key(name)]), sigma), 3)
            for name in sorted(ACCELERATOR_TYPES)
        }
        for model in GPU_MODEL_NAMES
    }


def _key(name: str) -> int:
    return zlib.crc32(name.encode())


def truth_named(name: str) -> Truth:
    """A scenario by name, `seed-N` (`generate`) or `drawn-N` (`draw`); `ConfigError` names what is known."""
    if name in SCENARIOS:
        return SCENARIOS[name]
    if name in MIXED_SCENARIOS:
        return MIXED_SCENARIOS[name]
    if name.startswith("seed-") and name.removeprefix("seed-").isdigit():
        return generate(int(name.removeprefix("seed-")))
    if name.startswith("drawn-") and name.removeprefix("drawn-").isdigit():
        return draw(int(name.removeprefix("drawn-")))
    known = ", ".join([*SCENARIOS, *MIXED_SCENARIOS])
    raise ConfigError(f"truth: {name!r} is not allowed (one of {known}, seed-N or drawn-N for a drawn one)")

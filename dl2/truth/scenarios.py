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

`seed-N` draws a truth that mixes all of these but the knee (`generate`; it draws none, so the truths drawn so
far stay what they were), so that a method is judged on cases nobody tuned it to.
"""

from __future__ import annotations

import numpy as np

from dl2.config import ConfigError
from dl2.sim.config import RescaleCost, RescaleKind
from dl2.truth.model import NewJobType, ScalingKnee, SpeedShift, Truth
from dl2.workload.catalogue import CATALOGUE, GPU_MODEL_NAMES, MODEL_NAMES

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
}


def _factor(rng: np.random.Generator, sigma: float) -> float:
    return float(np.clip(np.exp(rng.normal(0.0, sigma)), 0.25, 4.0))


def generate(seed: int) -> Truth:
    """A truth drawn from `seed`: every type's speed off by log-normal factors, up to two new types (5-20% of the
    jobs each), interference 0.5-2.5 times the profiled with a per-pair spread, sometimes checkpoint-restart
    resizes, arrivals 1-2 times as dense."""
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
    )


def truth_named(name: str) -> Truth:
    """A scenario by name, or `seed-N` for a generated truth; `ConfigError` names what is known."""
    if name in SCENARIOS:
        return SCENARIOS[name]
    if name.startswith("seed-") and name.removeprefix("seed-").isdigit():
        return generate(int(name.removeprefix("seed-")))
    raise ConfigError(f"truth: {name!r} is not allowed (one of {', '.join(SCENARIOS)}, or seed-N for a drawn one)")

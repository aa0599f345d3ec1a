"""Accelerator types and how fast each catalogue model runs on each, relative to the catalogue's own GPU.

The catalogue's speeds were measured on the DL2 authors' testbed, whose GPU the shipped measurements do not name
(`data/reference/dl2-official/`): that GPU is the *reference accelerator*, a node with `accelerator=None`, and every
speed on it is exactly the catalogue's. Other types' speeds come from Gavel's measured single-GPU throughputs on
K80, P100 and V100 (`data/reference/gavel/`, Narayanan et al., OSDI'20; MIT licence) through three mappings, each
entry marked measured or assumed:

- `REFERENCE_MEASURED_TYPE`: which Gavel type the reference accelerator counts as (assumed: P100, a Pascal-class
  data-centre GPU of the testbeds' time; nothing in the shipped data names it);
- `CATALOGUE_TO_GAVEL`: each catalogue model -> the Gavel model nearest to it (CPU-only models use no accelerator);
- `ACCELERATOR_TYPES`: each accelerator type a cluster may report (Alibaba GPU 2023's seven among them) -> memory,
  the Gavel type its speed is read from, and a scale on that speed (1 unless a datasheet ratio is assumed).

relative_speed(model, type) = scale(type) x geometric mean, over the batch sizes Gavel measured on all three types at
one GPU, of throughput(gavel type) / throughput(P100). It is exactly 1.0 for the reference accelerator and for any
type read as P100 with scale 1. `dl2.workload.accelerated_speed` applies it to a job's computation.

`with_generations` turns a homogeneous cluster (Philly's, or a synthetic one) into one of three GPU generations,
K80, P100 and V100, a third of the servers each (`THREE_GENERATIONS`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from dl2.core import Accelerator, ClusterSpec, InputError
from dl2.paths import data_dir
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES

GAVEL_TYPES = ("k80", "p100", "v100")
"""The accelerator types Gavel measured (its `*_unconsolidated` keys are multi-server placements, not used)."""

REFERENCE_MEASURED_TYPE = "p100"
"""ASSUMED: the catalogue's reference accelerator (the DL2 authors' testbed GPU, unnamed in the shipped data) counts
as Gavel's P100."""


@dataclass(frozen=True, slots=True)
class ModelMapping:
    """Which Gavel model a catalogue model's accelerator speeds are read from."""

    gavel_model: str | None
    """Gavel's model name; None: the model runs on CPUs only and no accelerator changes its speed."""
    measured: bool
    """True when Gavel measured this very model; False when it is the nearest one Gavel has (an assumption)."""
    why: str


CATALOGUE_TO_GAVEL: dict[str, ModelMapping] = {
    "resnet-50": ModelMapping("ResNet-50", True, "the same model (ImageNet)"),
    "vgg-16": ModelMapping("ResNet-50", False, "nearest: a large ImageNet CNN"),
    "resnext-110": ModelMapping("ResNet-18", False, "nearest: a CIFAR-10 residual network"),
    "inception-bn": ModelMapping("ResNet-50", False, "nearest: an ImageNet CNN"),
    "seq2seq": ModelMapping("Transformer", False, "nearest: sequence-to-sequence translation"),
    "cnn-text-classification": ModelMapping(None, True, "CPU-only: no accelerator"),
    "dssm": ModelMapping(None, True, "CPU-only: no accelerator"),
    "wlm": ModelMapping("LM", False, "nearest: Gavel's LM is a word-level LSTM language model (Wikitext-2)"),
}


@dataclass(frozen=True, slots=True)
class AcceleratorType:
    """An accelerator type a cluster may report, and where its speeds come from."""

    accelerator: Accelerator
    gavel_type: str | None
    """Gavel type whose measured speeds it takes; None: the reference accelerator's (relative speed 1)."""
    scale: float
    """Factor on that type's speeds (1.0 unless a datasheet ratio is assumed)."""
    measured: bool
    """True when Gavel measured this very type; False when the mapping is an assumption."""
    why: str


def _type(
    name: str, mem_gb: float | None, gavel: str | None, scale: float, measured: bool, why: str
) -> AcceleratorType:
    return AcceleratorType(Accelerator(name, mem_gb), gavel, scale, measured, why)


ACCELERATOR_TYPES: dict[str, AcceleratorType] = {
    t.accelerator.name: t
    for t in (
        _type("K80", 12.0, "k80", 1.0, True, "Gavel K80 (one GK210 die, as AWS p2 exposes it)"),
        _type("P100", 16.0, "p100", 1.0, True, "Gavel P100"),
        _type("V100", 16.0, "v100", 1.0, True, "Gavel V100 (16 GB, AWS p3)"),
        # Alibaba GPU 2023 (openb_node_list_gpu_node.csv): memory from NVIDIA's datasheets
        _type("V100M16", 16.0, "v100", 1.0, True, "Gavel V100; memory does not change the speed"),
        _type("V100M32", 32.0, "v100", 1.0, False, "Gavel V100 (16 GB); assumed: 32 GB runs at the same speed"),
        _type(
            "T4",
            16.0,
            "p100",
            8.1 / 9.3,
            False,
            "assumed: P100's speeds x 8.1/9.3, peak FP32 TFLOPS of T4 over P100 PCIe (NVIDIA datasheets); unmeasured",
        ),
        _type("A10", 24.0, "v100", 1.0, False, "assumed: V100's speeds (Ampere A10, V100-class training); unmeasured"),
        _type("G1", None, None, 1.0, False, "assumed: the reference speed (an undisclosed Alibaba type)"),
        _type("G2", None, None, 1.0, False, "assumed: the reference speed (an undisclosed Alibaba type)"),
        _type("G3", None, None, 1.0, False, "assumed: the reference speed (an undisclosed Alibaba type)"),
    )
}


def accelerator_type(name: str, where: str = "accelerator") -> AcceleratorType:
    """The known type of this name; an unknown name is an `InputError` naming the known ones."""
    known = ACCELERATOR_TYPES.get(name)
    if known is None:
        raise InputError(where, f"unknown accelerator type {name!r}; known: {', '.join(ACCELERATOR_TYPES)}")
    return known


def gavel_path() -> Path:
    return data_dir() / "reference" / "gavel" / "simulation_throughputs.json"


_KEY = re.compile(r"^\('(?P<model>.+?)(?: \(batch size (?P<batch>\d+)\))?', (?P<scale>\d+)\)$")


def load_gavel_isolated(path: Path | None = None) -> dict[str, dict[tuple[str, int], float]]:
    """Gavel's measured throughput (steps/s) of each (model, batch size) alone on one GPU, per Gavel type."""
    path = path or gavel_path()
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise InputError(str(path), f"cannot read Gavel's throughputs ({error})") from None
    isolated: dict[str, dict[tuple[str, int], float]] = {}
    for gavel_type in GAVEL_TYPES:
        rows: dict[tuple[str, int], float] = {}
        for key, entry in table.get(gavel_type, {}).items():
            match = _KEY.match(key)
            if match is None or match["scale"] != "1":
                continue
            rows[(match["model"], int(match["batch"] or 0))] = float(entry["null"])
        if not rows:
            raise InputError(str(path), f"no single-GPU throughputs for {gavel_type!r}")
        isolated[gavel_type] = rows
    return isolated


def gavel_speedup(gavel_model: str, gavel_type: str, isolated: dict[str, dict[tuple[str, int], float]]) -> float:
    """Geometric mean over batch sizes measured on every type of throughput(type) / throughput(P100)."""
    batches = sorted(
        batch
        for model, batch in isolated[REFERENCE_MEASURED_TYPE]
        if model == gavel_model and all(isolated[t].get((model, batch), 0.0) > 0 for t in GAVEL_TYPES)
    )
    if not batches:
        raise ValueError(f"Gavel measured {gavel_model!r} on no batch size on every type")
    ratios = [
        isolated[gavel_type][(gavel_model, b)] / isolated[REFERENCE_MEASURED_TYPE][(gavel_model, b)] for b in batches
    ]
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


@cache
def relative_speeds() -> dict[str, dict[str, float]]:
    """relative_speed[accelerator type][catalogue model]: speed of one worker's computation on that type over the
    reference accelerator's (the module docstring). Read once per process."""
    isolated = load_gavel_isolated()
    speeds: dict[str, dict[str, float]] = {}
    for name, known in ACCELERATOR_TYPES.items():
        per_model = {}
        for model in MODEL_NAMES:
            gavel_model = CATALOGUE_TO_GAVEL[model].gavel_model
            if gavel_model is None or not CATALOGUE[model].uses_gpu or known.gavel_type is None:
                per_model[model] = 1.0
            elif known.gavel_type == REFERENCE_MEASURED_TYPE:
                per_model[model] = known.scale  # exactly the scale: no ratio of equal numbers rounds here
            else:
                per_model[model] = known.scale * gavel_speedup(gavel_model, known.gavel_type, isolated)
        speeds[name] = per_model
    return speeds


def relative_speed(model: str, accelerator: Accelerator | None) -> float:
    """Speed of `model`'s computation on `accelerator` over the reference accelerator's (1.0 for None)."""
    if accelerator is None:
        return 1.0
    accelerator_type(accelerator.name)
    return relative_speeds()[accelerator.name][model]


THREE_GENERATIONS: tuple[tuple[str, float], ...] = (("V100", 1 / 3), ("P100", 1 / 3), ("K80", 1 / 3))
"""(accelerator type, share of the GPU servers) of a cluster of three generations: the three types Gavel measured,
in equal shares as in Gavel's simulated cluster (OSDI'20 simulations; its artifact's `--cluster_spec 36:36:36`:
36 V100, 36 P100 and 36 K80 GPUs). ASSUMED for Philly: its trace records no GPU models (`data/traces/philly`
counts servers per virtual cluster only)."""


def with_generations(cluster: ClusterSpec, shares: Sequence[tuple[str, float]] = THREE_GENERATIONS) -> ClusterSpec:
    """The same servers, each GPU server given one of `shares`' accelerator types (and that type as its kind),
    interleaved so that every prefix of the servers holds each type's share to within one server: the first N
    nodes of the result (`testbed.twin.workloads.first_nodes`) mix the generations as the whole does. A server without
    GPUs keeps what it has. Deterministic: server i takes the type furthest behind its share of the first i + 1."""
    total = sum(share for _, share in shares)
    if not shares or total <= 0 or any(share < 0 for _, share in shares):
        raise ValueError(f"shares must be non-negative with a positive sum, got {list(shares)}")
    accelerators = [accelerator_type(name).accelerator for name, _ in shares]
    counts = [0] * len(shares)
    nodes = []
    placed = 0
    for node in cluster.nodes:
        if node.capacity.gpu <= 0:
            nodes.append(node)
            continue
        placed += 1
        behind = [share / total * placed - count for (_, share), count in zip(shares, counts, strict=True)]
        kind = max(range(len(shares)), key=lambda k: (behind[k], -k))
        counts[kind] += 1
        accelerator = accelerators[kind]
        nodes.append(replace(node, kind=accelerator.name, accelerator=accelerator))
    return ClusterSpec(tuple(nodes), f"{cluster.name}-generations")

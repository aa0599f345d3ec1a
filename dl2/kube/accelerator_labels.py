"""A node's accelerator type, read from the labels NVIDIA's GPU feature discovery (GFD) puts on it.

GFD labels every GPU node with its product name (`nvidia.com/gpu.product`, e.g. `Tesla-V100-SXM2-16GB`,
`NVIDIA-A100-SXM4-40GB`, `Tesla-T4`) and the memory of one GPU in MiB (`nvidia.com/gpu.memory`). dl2 knows the
types of `dl2.workload.accelerators.ACCELERATOR_TYPES` (their speeds relative to the catalogue's reference GPU);
`node_accelerator` maps a node's labels to one of them:

- no product label: the reference accelerator (None), as every node was before clusters had types, so a cluster
  without GFD runs exactly as it did;
- a product GFD writes for a known type (`PRODUCT_MODELS`: the model token after `Tesla-`/`NVIDIA-`, so that every
  form factor and memory size of one GPU maps alike): that type; a V100 with 24 GB or more (from the memory label,
  else from the product's `-32GB`) is `V100M32`, any other V100 `V100`;
- a product that is itself a dl2 type name (`V100M16`, `G2`: a label set by hand on a cluster without GFD, or by the
  twin for types GFD has no name for): that type;
- anything else (an A100, an H100, a MIG slice, a typo) is *unrecognised*: the node is taken for the reference
  accelerator, and the controller warns once per node (an Event on the Node, a log line). Refusing the node would
  take its GPUs away from every job the controller sizes, which is worse than sizing them as if the GPU were the
  reference one; and a type is only known with its relative speeds, which a label cannot give.

The memory of the type is the memory label's (GiB, rounded to whole), else the known type's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from dl2.core import Accelerator
from dl2.workload.accelerators import ACCELERATOR_TYPES

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""GFD's label: the GPU's product name, with spaces as dashes (`Tesla-V100-SXM2-16GB`)."""
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
"""GFD's label: memory of one GPU, MiB (`16160`)."""

PRODUCT_MODELS: dict[str, str] = {
    "K80": "K80",
    "P100": "P100",
    "V100": "V100",
    "V100S": "V100",
    "T4": "T4",
    "A10": "A10",
    "A10G": "A10",
}
"""GPU model token of a GFD product name -> dl2 type. V100S (a faster-clocked V100) and A10G (AWS's A10) are
ASSUMED to run as the type they are mapped to; a V100 of 24 GB or more becomes `V100M32` (`node_accelerator`)."""
LARGE_V100_GB = 24.0
"""A V100 with at least this much memory is `V100M32` (V100s come with 16 or 32 GB)."""

PRODUCTS: dict[str, str] = {
    "K80": "Tesla-K80",
    "P100": "Tesla-P100-PCIE-16GB",
    "V100": "Tesla-V100-SXM2-16GB",
    "V100M32": "Tesla-V100-SXM2-32GB",
    "T4": "Tesla-T4",
    "A10": "NVIDIA-A10",
}
"""dl2 type -> the product name GFD writes for it (what the twin labels its nodes with); a type not here is
labelled with its own name (`product_of`)."""

_PREFIX = re.compile(r"^(?:NVIDIA|TESLA|QUADRO)[-_ ]+", re.IGNORECASE)
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)GB$", re.IGNORECASE)


def accelerator_of(product: str, memory_mib: str | None = None) -> Accelerator | None:
    """The dl2 type of a GFD product name (and memory label, MiB), or None where it is not one dl2 knows."""
    tokens = [token for token in re.split(r"[-_ ]+", _PREFIX.sub("", product.strip())) if token]
    if not tokens or any(token.upper() == "MIG" for token in tokens):
        return None  # a MIG slice is a part of a GPU, of no type dl2 has speeds for
    name = PRODUCT_MODELS.get(tokens[0].upper())
    if name is None:
        own = ACCELERATOR_TYPES.get(product.strip())  # a dl2 type name, set by hand or by the twin
        return None if own is None else _with_memory(own.accelerator, memory_mib)
    memory_gb = _memory_gb(memory_mib)
    if memory_gb is None:
        sizes = [float(m[1]) for m in map(_MEMORY.match, tokens[1:]) if m is not None]
        memory_gb = sizes[0] if sizes else None
    if name == "V100" and memory_gb is not None and memory_gb >= LARGE_V100_GB:
        name = "V100M32"
    return _with_memory(ACCELERATOR_TYPES[name].accelerator, memory_mib)


def _memory_gb(memory_mib: str | None) -> float | None:
    try:
        mib = float(memory_mib) if memory_mib is not None else math.nan
    except ValueError:
        return None
    return float(round(mib / 1024)) if math.isfinite(mib) and mib > 0 else None


def _with_memory(known: Accelerator, memory_mib: str | None) -> Accelerator:
    memory_gb = _memory_gb(memory_mib)
    return known if memory_gb is None or memory_gb == known.mem_gb else Accelerator(known.name, memory_gb)


def node_accelerator(labels: Mapping[str, str]) -> tuple[Accelerator | None, str | None]:
    """(a node's accelerator type, None for the reference one; its product label where dl2 does not know it)."""
    product = labels.get(GPU_PRODUCT_LABEL)
    if not product:
        return None, None
    accelerator = accelerator_of(product, labels.get(GPU_MEMORY_LABEL))
    return accelerator, (product if accelerator is None else None)


def product_labels(accelerator: Accelerator | None) -> dict[str, str]:
    """The labels GFD would put on a node of this type (none for the reference accelerator): what the twin labels
    its kwok nodes with, and `node_accelerator` reads back as the same type."""
    if accelerator is None:
        return {}
    labels = {GPU_PRODUCT_LABEL: PRODUCTS.get(accelerator.name, accelerator.name)}
    if accelerator.mem_gb is not None:
        labels[GPU_MEMORY_LABEL] = str(round(accelerator.mem_gb * 1024))
    return labels


def unrecognised_note(node: str, product: str) -> str:
    """The warning on a node whose product dl2 does not know."""
    known = ", ".join(sorted({*PRODUCTS.values(), *ACCELERATOR_TYPES}))
    return (
        f"node {node}: {GPU_PRODUCT_LABEL}={product!r} is no accelerator type dl2 knows; its GPUs are taken for the "
        f"reference accelerator (the catalogue's speeds). Known: {known}"
    )

"""The job-type catalogue: the eight models the DL2 authors measured, with their per-model constants.

Constants come from the authors' public simulator (pengyanghua/DL2, `trace.py`, commit 2e54920): per-model
compute time per step, model size, inter- and intra-server bandwidth, samples per epoch unit, and the
default epoch counts as fractions of MAX_NUM_EPOCHS. Task demands are given twice: in the authors' slot units
(compatibility mode: a server has 8 CPU and 8 GPU slots, one GPU = 4 slots) and in realistic units (GPUs,
CPU cores, GB).
"""

from __future__ import annotations

from dataclasses import dataclass

from dl2.core import Resources


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """One job type."""

    name: str
    type_index: int
    """Position in the catalogue (0-based; the authors' type id minus one)."""
    compute_time_s: float
    """Local computation time of one step (authors' `local_comp_times`)."""
    model_size_mb: float
    """Parameter size in MB (what a worker pushes and pulls each step)."""
    inter_bw_mb_s: float
    """Measured bandwidth between servers, MB/s."""
    intra_bw_mb_s: float
    """Measured bandwidth inside a server, MB/s."""
    samples_per_epoch: float
    """The authors' `epoch_sizes`: throughput units per epoch."""
    epochs_fraction: float
    """Default epochs as a fraction of the setting's MAX_NUM_EPOCHS (authors' `num_epochs`)."""
    uses_gpu: bool
    """False for the two CPU-only models (cnn-text-classification, dssm)."""

    @property
    def compat_worker_demand(self) -> Resources:
        return Resources(gpu=4.0 if self.uses_gpu else 0.0, cpu=2.0)

    @property
    def compat_ps_demand(self) -> Resources:
        return Resources(cpu=2.0)

    @property
    def worker_demand(self) -> Resources:
        """Realistic units: one GPU, 4 cores and 24 GB per GPU worker; CPU-only workers take 8 cores."""
        if self.uses_gpu:
            return Resources(gpu=1.0, cpu=4.0, mem_gb=24.0)
        return Resources(cpu=8.0, mem_gb=16.0)

    @property
    def ps_demand(self) -> Resources:
        """Realistic units: a parameter server takes 4 cores and memory for a few copies of the model."""
        return Resources(cpu=4.0, mem_gb=max(4.0, round(4 * self.model_size_mb / 1024 + 4)))


_ROWS = (
    # name, compute s, size MB, inter MB/s, intra MB/s, samples/epoch, epochs fraction, gpu
    ("resnet-50", 0.449, 102.2, 91.875, 306.5, 115, 0.30, True),
    ("vgg-16", 0.535, 553.4, 233.0, 427.75, 115, 0.96, True),
    ("resnext-110", 0.226, 6.92, 59.5, 63.0, 390, 0.05, True),
    ("inception-bn", 0.815, 42.1, 145.875, 1082.125, 120, 0.54, True),
    ("seq2seq", 0.075, 36.5, 120.125, 181.125, 780, 0.95, True),
    ("cnn-text-classification", 0.585, 24.0, 60.75, 159.625, 193, 0.46, False),
    ("dssm", 0.567, 6.0, 92.125, 65.625, 349, 0.33, False),
    ("wlm", 0.154, 19.2, 10.375, 22.875, 165, 0.23, True),
)

CATALOGUE: dict[str, ModelProfile] = {row[0]: ModelProfile(row[0], index, *row[1:]) for index, row in enumerate(_ROWS)}
MODEL_NAMES: tuple[str, ...] = tuple(CATALOGUE)
GPU_MODEL_NAMES: tuple[str, ...] = tuple(name for name, profile in CATALOGUE.items() if profile.uses_gpu)


def profile(model: str) -> ModelProfile:
    try:
        return CATALOGUE[model]
    except KeyError:
        raise KeyError(f"unknown model '{model}'; known: {', '.join(MODEL_NAMES)}") from None

"""Training the speed-prediction model (PyTorch): supervised regression of log throughput on logged samples.

The loss is the squared error of the logarithm, so every sample counts by its relative error whatever its
speed (a 16-worker vgg-16 and a 1-worker resnext-110 differ 40x in throughput). The network is the one
`speed_model.NumpySpeedModel` evaluates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from dl2.nn.layers import mlp
from dl2.placement.config import PredictorTraining, SpeedModelConfig
from dl2.placement.features import JOB_FEATURES, SERVER_FEATURES, Encoded, gather_rows
from dl2.placement.samples import SpeedSamples
from dl2.placement.speed_model import CONTEXT_FEATURES, NumpySpeedModel


class SpeedNetwork(nn.Module):
    def __init__(self, config: SpeedModelConfig) -> None:
        super().__init__()
        self.encoder = mlp([SERVER_FEATURES + CONTEXT_FEATURES, *config.encoder], final_activation=True)
        width = config.encoder[-1]
        self.head = mlp([JOB_FEATURES + 2 * width, *config.head, 1], final_activation=False)

    def forward(self, jobs: torch.Tensor, servers: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        """Standardised log throughput per job, shape (num_jobs,)."""
        context = jobs[segments, :CONTEXT_FEATURES]
        embedded = self.encoder(torch.cat([servers, context], dim=1))
        width = embedded.shape[1]
        index = segments[:, None].expand(-1, width)
        total = torch.zeros(len(jobs), width).index_add_(0, segments, embedded)
        largest = torch.zeros(len(jobs), width).scatter_reduce(0, index, embedded, reduce="amax", include_self=True)
        output: torch.Tensor = self.head(torch.cat([jobs, total, largest], dim=1)).squeeze(1)
        return output


@dataclass(slots=True)
class PredictorResult:
    state: dict[str, torch.Tensor]
    config: SpeedModelConfig
    train_loss: list[float]
    """Mean squared error of the standardised target, per epoch."""

    def numpy_model(self) -> NumpySpeedModel:
        return NumpySpeedModel.from_state_dict(self.state, self.config)


def train_predictor(
    samples: SpeedSamples,
    training: PredictorTraining,
    on_epoch: Callable[[int, float], None] | None = None,
    initial: PredictorResult | None = None,
) -> PredictorResult:
    """Fit the speed model to `samples`; from `initial`'s weights and target scale if given (a refit to a
    cluster's records starts from the model trained on the catalogue's, `dl2.placement.refit`), else from scratch
    with the scale of `samples` (`training.network`'s widths either way must match `initial`'s)."""
    torch.manual_seed(training.seed)
    rng = np.random.default_rng(training.seed)
    if initial is not None:
        config = initial.config
    else:
        mean, std = float(samples.log_throughput.mean()), float(samples.log_throughput.std() or 1.0)
        config = SpeedModelConfig(training.network.encoder, training.network.head, mean, std)
    network = SpeedNetwork(config)
    if initial is not None:
        network.load_state_dict(initial.state)
    mean, std = config.target_mean, config.target_std
    optimizer = torch.optim.Adam(network.parameters(), lr=training.learning_rate, weight_decay=training.weight_decay)
    batches_per_epoch = max(1, int(np.ceil(len(samples) / training.batch_size)))
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=training.epochs * batches_per_epoch, eta_min=training.learning_rate / 10
    )
    encoded = samples.encoded
    starts = encoded.starts()
    target = ((samples.log_throughput - mean) / std).astype(np.float32)
    losses = []
    for epoch in range(training.epochs):
        order = rng.permutation(len(samples))
        total = 0.0
        for first in range(0, len(order), training.batch_size):
            rows = order[first : first + training.batch_size]
            jobs, servers, segments = _batch(encoded, starts, rows)
            loss = nn.functional.mse_loss(network(jobs, servers, segments), torch.from_numpy(target[rows]))
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            schedule.step()
            total += float(loss.detach()) * len(rows)
        losses.append(total / len(samples))
        if on_epoch is not None:
            on_epoch(epoch, losses[-1])
    state = {name: value.detach().clone() for name, value in network.state_dict().items()}
    return PredictorResult(state, config, losses)


def _batch(encoded: Encoded, starts: np.ndarray, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The jobs at `rows` with their server rows, as tensors."""
    index, segments = gather_rows(starts, rows)
    return (
        torch.from_numpy(encoded.jobs[rows]),
        torch.from_numpy(encoded.servers[index]),
        torch.from_numpy(segments),
    )

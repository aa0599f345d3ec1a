"""Policy and value networks.

- `mlp` (DL2 §4.1, the paper's shape): a fully connected trunk over the flattened window of jobs, a softmax
  over the 3J+1 actions; the value network has the same trunk shape with its own weights and one linear output.
- `per-job` (ours, the default): the same per-job scorer is applied to every column (DeepSets-style weight
  sharing), with the mean of the jobs' embeddings and the cluster-wide features as context; stop is scored from
  the context. A decision such as "give the job with the largest marginal gain one more PS" is one function
  applied to every job, which a flat MLP must learn separately for each of the J column positions.
- `per-job-local`: the same, except that the per-job encoder sees only the job's own features; the cluster-wide
  features enter through the context, which the job head sees. A task granted to one job then changes only
  that job's embedding, so inference within a slot updates one row per decision instead of re-encoding all J
  jobs (`inference.NumpyPolicy`, `compiled`): what a slot's decision latency needs.

Impossible actions are masked out of the softmax.
"""

from __future__ import annotations

import torch
from torch import nn

from dl2.env.observation import InputShape
from dl2.nn.layers import mlp
from dl2.rl.config import KINDS, MASKED_LOGIT, NetworkConfig


class _PerJobTrunk(nn.Module):
    """Per-job embeddings (shared weights) and a pooled context."""

    def __init__(self, shape: InputShape, hidden: tuple[int, ...], global_in_encoder: bool) -> None:
        super().__init__()
        self.shape = shape
        self.global_in_encoder = global_in_encoder
        inputs = shape.job_features + (shape.global_features if global_in_encoder else 0)
        self.encoder = mlp([inputs, *hidden], final_activation=True)
        width = hidden[-1]
        self.context = mlp([width + shape.global_features, width], final_activation=True)
        self.width = width

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = self.shape
        batch = observations.shape[0]
        jobs = observations[:, : shape.window * shape.job_features].reshape(batch, shape.window, shape.job_features)
        tail = observations[:, shape.window * shape.job_features :]
        if self.global_in_encoder:
            expanded = tail[:, None, :].expand(batch, shape.window, shape.global_features)
            embeddings = self.encoder(torch.cat([jobs, expanded], dim=2))  # (batch, window, width)
        else:
            embeddings = self.encoder(jobs)
        occupied = (jobs.abs().sum(dim=2, keepdim=True) > 0).float()
        pooled = (embeddings * occupied).sum(dim=1) / occupied.sum(dim=1).clamp(min=1.0)
        context = self.context(torch.cat([pooled, tail], dim=1))
        return embeddings, context


class PolicyNetwork(nn.Module):
    def __init__(self, shape: InputShape, config: NetworkConfig) -> None:
        super().__init__()
        if config.kind not in KINDS:
            raise ValueError(f"unknown network kind {config.kind!r}; known: {', '.join(KINDS)}")
        self.kind = config.kind
        self.shape = shape
        num_actions = 3 * shape.window + 1
        if config.kind == "mlp":
            self.trunk = mlp([shape.size, *config.hidden], final_activation=True)
            self.head = nn.Linear(config.hidden[-1], num_actions)
        else:
            self.jobs = _PerJobTrunk(shape, config.hidden, global_in_encoder=config.kind == "per-job")
            width = self.jobs.width
            self.job_head = mlp([2 * width, width, 3], final_activation=False)
            self.stop_head = nn.Linear(width, 1)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """Unmasked logits, shape (batch, 3 J + 1)."""
        if self.kind == "mlp":
            logits: torch.Tensor = self.head(self.trunk(observations))
            return logits
        embeddings, context = self.jobs(observations)
        batch, window, width = embeddings.shape
        paired = torch.cat([embeddings, context[:, None, :].expand(batch, window, width)], dim=2)
        job_logits = self.job_head(paired).reshape(batch, 3 * window)
        return torch.cat([job_logits, self.stop_head(context)], dim=1)

    def masked_logits(self, observations: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        return self.forward(observations).masked_fill(masks == 0, MASKED_LOGIT)


class ValueNetwork(nn.Module):
    def __init__(self, shape: InputShape, config: NetworkConfig) -> None:
        super().__init__()
        self.kind = config.kind
        if config.kind == "mlp":
            self.trunk = mlp([shape.size, *config.hidden], final_activation=True)
            self.head = nn.Linear(config.hidden[-1], 1)
        else:
            self.jobs = _PerJobTrunk(shape, config.hidden, global_in_encoder=config.kind == "per-job")
            self.head = nn.Linear(self.jobs.width, 1)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """Value estimates, shape (batch,)."""
        if self.kind == "mlp":
            features = self.trunk(observations)
        else:
            _, features = self.jobs(observations)
        value: torch.Tensor = self.head(features).squeeze(-1)
        return value

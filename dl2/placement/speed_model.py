"""The speed-prediction model at inference: NumPy, no torch (the simulator and the placer's training call it).

Harmony §4.1: a network maps a job's placement and its neighbours to its training speed. Ours is a set
network over the servers a job uses (DeepSets): each server row, with the job's type, goes through a shared
encoder; the encodings are pooled by sum and by max (a synchronous job runs at its slowest server's pace), and
a head maps the job row and the pools to the logarithm of the throughput. `dl2.placement.predictor` trains it.
A model folder holds `speed.pt` (a state dict), `config.json` and a model card.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from dl2.core import InputError
from dl2.nn.numpy_inference import Layers, dense, linear_layers
from dl2.placement.config import SpeedModelConfig
from dl2.placement.features import NUM_TYPES, Encoded

WEIGHTS = "speed.pt"
CONTEXT_FEATURES = NUM_TYPES + 1
"""What each server row is paired with: the job's type (one-hot) and architecture."""


def context_of(encoded: Encoded) -> np.ndarray:
    """Per server row, its job's type and architecture columns."""
    context: np.ndarray = encoded.jobs[encoded.segments, :CONTEXT_FEATURES]
    return context


class NumpySpeedModel:
    """Predicted throughput (samples/s) of encoded placed jobs."""

    def __init__(self, config: SpeedModelConfig, encoder: Layers, head: Layers) -> None:
        self.config = config
        self.encoder = encoder
        self.head = head

    @classmethod
    def from_state_dict(cls, state: Mapping[str, object], config: SpeedModelConfig) -> NumpySpeedModel:
        return cls(config, linear_layers(state, "encoder."), linear_layers(state, "head."))

    @classmethod
    def from_dir(cls, directory: str | Path) -> NumpySpeedModel:
        from dl2.nn.state_io import load_weights
        from dl2.placement.model_files import read_config

        data = read_config(Path(directory), "speed-model")
        config = SpeedModelConfig.from_json_dict(data, str(Path(directory) / "config.json"))
        try:
            return cls.from_state_dict(load_weights(Path(directory) / WEIGHTS), config)
        except (KeyError, ValueError) as error:
            raise InputError(str(directory), f"weights do not match the configured network ({error})") from None

    def log_throughput(self, encoded: Encoded) -> np.ndarray:
        if len(encoded) == 0:
            return np.zeros(0)
        rows = np.concatenate([encoded.servers, context_of(encoded)], axis=1)
        embedded = dense(rows.astype(np.float32), self.encoder, final_activation=True)
        starts = encoded.starts()[:-1]
        total = np.add.reduceat(embedded, starts, axis=0)
        largest = np.maximum.reduceat(embedded, starts, axis=0)
        standardised = dense(np.concatenate([encoded.jobs, total, largest], axis=1), self.head, False)[:, 0]
        result: np.ndarray = standardised.astype(np.float64) * self.config.target_std + self.config.target_mean
        return result

    def throughput(self, encoded: Encoded) -> np.ndarray:
        result: np.ndarray = np.exp(self.log_throughput(encoded))
        return result

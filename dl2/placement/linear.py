"""The baseline: a linear interference model fitted by least squares on the same samples.

The form of the classic interference models (e.g. Paragon, and the linear models Harmony §5 compares with):
the logarithm of a job's speed is a per-type linear function of its placement (workers, PS, the share of
co-located worker-PS pairs, how many servers it spans), and each other job sharing one of its servers slows it
by a fixed factor per (victim type, aggressor type) pair, the factors multiplying:

    log speed = sum_t [type = t] (a_t + b_t log(1+w) + c_t log(1+p) + d_t pairs + e_t log servers + f_t single)
                + sum_a g[type, a] n_a

where n_a counts the other jobs of type a on the job's servers (a job on two of its servers counts twice).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dl2.placement.features import NUM_TYPES, Encoded

_PLACEMENT_COLUMNS = (5, 6, 9, 8, 10)
"""Job-row columns after the type block used per type: log1p workers, log1p PS, pair share, log servers, single."""
_OTHERS = slice(7, 7 + NUM_TYPES)
"""Server-row columns: other jobs by type."""


def design(encoded: Encoded) -> np.ndarray:
    """The linear model's regressors for each job."""
    jobs = encoded.jobs.astype(np.float64)
    types = jobs[:, :NUM_TYPES]
    placement = np.column_stack([np.ones(len(jobs)), jobs[:, [NUM_TYPES + c for c in _PLACEMENT_COLUMNS]]])
    per_type = (types[:, :, None] * placement[:, None, :]).reshape(len(jobs), -1)
    others = np.zeros((len(jobs), NUM_TYPES))
    np.add.at(others, encoded.segments, encoded.servers[:, _OTHERS].astype(np.float64))
    pairs = (types[:, :, None] * others[:, None, :]).reshape(len(jobs), -1)
    return np.concatenate([per_type, pairs], axis=1)


@dataclass(frozen=True, slots=True)
class LinearInterferenceModel:
    coefficients: np.ndarray

    @classmethod
    def fit(cls, encoded: Encoded, log_throughput: np.ndarray) -> LinearInterferenceModel:
        coefficients, *_ = np.linalg.lstsq(design(encoded), log_throughput, rcond=None)
        return cls(coefficients)

    def log_throughput(self, encoded: Encoded) -> np.ndarray:
        result: np.ndarray = design(encoded) @ self.coefficients
        return result

    @classmethod
    def from_list(cls, coefficients: list[float]) -> LinearInterferenceModel:
        return cls(np.asarray(coefficients, dtype=float))

    def throughput(self, encoded: Encoded) -> np.ndarray:
        result: np.ndarray = np.exp(self.log_throughput(encoded))
        return result

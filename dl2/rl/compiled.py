"""A compiled forward pass of the `per-job-local` policy for greedy decisions (numba).

A slot of the authors' contended setting takes about 150 decisions; with NumPy each decision costs some 25 array
calls whose fixed overhead, not their size (40 jobs x 64 units), dominates. One compiled function does the same
arithmetic: it finds the window columns whose features changed since the last call, re-encodes only those (a
column's embedding depends on its own job alone), pools, and scores every action, masked, returning the argmax.
DL2 §6.3 makes a slot's decisions in milliseconds; `benchmarks/bench_decision_speed.py` measures ours.

numba is optional and imported on first use (it takes most of a second to import): `greedy_kernel()` returns
None without it, and `inference.NumpyPolicy` then falls back to NumPy. Both paths compute the same function (a
test compares them with torch). The compiled code is cached on disk (numba's `cache=True`), so only the first
process on a machine pays the compilation (a few seconds).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np


def _add_product(out: np.ndarray, vector: np.ndarray, weight: np.ndarray) -> None:
    """`out += vector @ weight`, skipping the zero entries of `vector` (most features and ReLU outputs are 0)."""
    for i in range(weight.shape[0]):
        value = vector[i]
        if value != 0.0:
            for k in range(weight.shape[1]):
                out[k] += value * weight[i, k]


def _relu(values: np.ndarray) -> None:
    for k in range(values.shape[0]):
        if values[k] < 0.0:
            values[k] = 0.0


def _greedy_local(
    x: np.ndarray,
    mask: np.ndarray,
    window: int,
    features: int,
    cached_jobs: np.ndarray,
    embeddings: np.ndarray,
    head_part: np.ndarray,
    occupied: np.ndarray,
    encoder_weights: Any,
    encoder_biases: Any,
    head_jobs: np.ndarray,
    context_pooled: np.ndarray,
    context_tail: np.ndarray,
    context_bias: np.ndarray,
    context_out: np.ndarray,
    context_out_bias: np.ndarray,
    last: np.ndarray,
    last_bias: np.ndarray,
    logits: np.ndarray,
) -> int:
    """Writes every action's logit into `logits` (unmasked: sampling masks them) and returns the best action
    that `mask` allows. `cached_jobs`, `embeddings`,
    `head_part` and `occupied` carry the columns between calls and are updated in place."""
    width = embeddings.shape[1]
    for j in range(window):
        changed = False
        for f in range(features):
            if x[j * features + f] != cached_jobs[j, f]:
                changed = True
                break
        if not changed:
            continue
        any_feature = False
        for f in range(features):
            value = x[j * features + f]
            cached_jobs[j, f] = value
            if value != 0.0:
                any_feature = True
        occupied[j] = any_feature
        h = cached_jobs[j].copy()
        for layer in range(len(encoder_weights)):
            out = encoder_biases[layer].copy()
            _add_product(out, h, encoder_weights[layer])
            _relu(out)
            h = out
        for k in range(width):
            embeddings[j, k] = h[k]
        head_part[j, :] = 0.0
        _add_product(head_part[j], h, head_jobs)
    # pooled mean over occupied columns (all columns count as torch's sum / max(count, 1) when none is)
    count = 0
    for j in range(window):
        if occupied[j]:
            count += 1
    pooled = np.zeros(width, dtype=np.float32)
    for j in range(window):
        if occupied[j]:
            for k in range(width):
                pooled[k] += embeddings[j, k]
    if count > 1:
        for k in range(width):
            pooled[k] /= count
    context = context_bias.copy()
    _add_product(context, pooled, context_pooled)
    _add_product(context, x[window * features :], context_tail)
    _relu(context)
    out = context_out_bias.copy()
    _add_product(out, context, context_out)
    hidden_width = out.shape[0] - 1
    heads = last.shape[1]
    best, best_logit = -1, np.float32(0.0)
    hidden = np.empty(hidden_width, dtype=np.float32)
    for j in range(window):
        for k in range(hidden_width):
            value = head_part[j, k] + out[k]
            hidden[k] = value if value > 0.0 else 0.0
        for a in range(heads):
            action = j * heads + a
            value = last_bias[a]
            for k in range(hidden_width):
                value += hidden[k] * last[k, a]
            logits[action] = value
            if mask[action] != 0 and (best < 0 or value > best_logit):
                best, best_logit = action, value
    stop = window * heads
    logits[stop] = out[hidden_width]
    if mask[stop] != 0 and (best < 0 or logits[stop] > best_logit):
        best = stop
    return max(best, 0)  # nothing possible: action 0, as np.argmax over all-masked logits


@functools.cache
def greedy_kernel() -> Callable[..., int] | None:
    """The compiled `_greedy_local`, or None where numba is not installed."""
    try:
        import numba
    except ImportError:  # an optional accelerator: everything works without it, only slower
        return None
    from numba.extending import register_jitable

    for helper in (_add_product, _relu):  # callable from the kernel, inlined into it
        register_jitable(inline="always")(helper)
    kernel: Callable[..., int] = numba.njit(cache=True, nogil=True)(_greedy_local)
    return kernel

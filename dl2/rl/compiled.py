"""Compiled forward passes of the per-job policies for greedy decisions (numba).

A slot of the authors' contended setting takes about 150 decisions; with NumPy each decision costs some 25 array
calls whose fixed overhead, not their size (40 jobs x 64 units), dominates. One compiled function does the same
arithmetic and returns the masked argmax:

- `per-job-local` (`_greedy_local`): finds the window columns whose features changed since the last call,
  re-encodes only those (a column's embedding depends on its own job alone), pools, and scores every action.
- `per-job` (`_greedy_shared`): the encoder also sees the cluster-wide features, which change with every task
  granted, so every column is re-encoded each call; only the product of a column's own features with the first
  layer is kept between calls. The matrix products go to BLAS (numba's `np.dot`); a slot of 2,000 Philly jobs
  takes some 5,000 decisions (`benchmarks/kube_controller.py`).

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
            weight = encoder_weights[layer]
            bias = encoder_biases[layer]
            out = bias.copy()
            for i in range(weight.shape[0]):
                value = h[i]
                if value != 0.0:
                    for k in range(weight.shape[1]):
                        out[k] += value * weight[i, k]
            for k in range(out.shape[0]):
                if out[k] < 0.0:
                    out[k] = 0.0
            h = out
        for k in range(width):
            embeddings[j, k] = h[k]
        for k in range(head_part.shape[1]):
            head_part[j, k] = 0.0
        for i in range(width):
            value = h[i]
            if value != 0.0:
                for k in range(head_part.shape[1]):
                    head_part[j, k] += value * head_jobs[i, k]
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
    for i in range(width):
        value = pooled[i]
        if value != 0.0:
            for k in range(context.shape[0]):
                context[k] += value * context_pooled[i, k]
    tail_start = window * features
    for i in range(context_tail.shape[0]):
        value = x[tail_start + i]
        if value != 0.0:
            for k in range(context.shape[0]):
                context[k] += value * context_tail[i, k]
    for k in range(context.shape[0]):
        if context[k] < 0.0:
            context[k] = 0.0
    out = context_out_bias.copy()
    for i in range(context.shape[0]):
        value = context[i]
        if value != 0.0:
            for k in range(out.shape[0]):
                out[k] += value * context_out[i, k]
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


def _greedy_shared(
    x: np.ndarray,
    mask: np.ndarray,
    window: int,
    features: int,
    cached_jobs: np.ndarray,
    first_jobs: np.ndarray,
    occupied: np.ndarray,
    encoder_jobs: np.ndarray,
    encoder_tail: np.ndarray,
    encoder_bias: np.ndarray,
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
    """`_greedy_local` for the `per-job` network: `cached_jobs`, `first_jobs` (each column's features times the
    encoder's first layer) and `occupied` carry the columns between calls; the first layer is split into
    `encoder_jobs` and `encoder_tail`, so of `encoder_weights`/`encoder_biases` (all the encoder's layers: never an
    empty tuple, which numba cannot type) the first is skipped."""
    tail = x[window * features :]
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
        first_jobs[j] = np.dot(cached_jobs[j], encoder_jobs)
    h = first_jobs + (np.dot(tail, encoder_tail) + encoder_bias)
    np.maximum(h, 0.0, h)
    for layer in range(1, len(encoder_weights)):
        h = np.dot(h, encoder_weights[layer]) + encoder_biases[layer]
        np.maximum(h, 0.0, h)
    # pooled mean over occupied columns (as torch's sum / max(count, 1))
    count = 0
    pooled = np.zeros(h.shape[1], dtype=np.float32)
    for j in range(window):
        if occupied[j]:
            count += 1
            pooled += h[j]
    if count > 1:
        pooled /= np.float32(count)
    context = np.dot(pooled, context_pooled) + np.dot(tail, context_tail) + context_bias
    np.maximum(context, 0.0, context)
    out = np.dot(context, context_out) + context_out_bias
    hidden_width = out.shape[0] - 1
    hidden = np.dot(h, head_jobs) + out[:hidden_width]
    np.maximum(hidden, 0.0, hidden)
    job_logits = np.dot(hidden, last)
    heads = last.shape[1]
    best, best_logit = -1, np.float32(0.0)
    for j in range(window):
        for a in range(heads):
            action = j * heads + a
            value = job_logits[j, a] + last_bias[a]
            logits[action] = value
            if mask[action] != 0 and (best < 0 or value > best_logit):
                best, best_logit = action, value
    stop = window * heads
    logits[stop] = out[hidden_width]
    if mask[stop] != 0 and (best < 0 or logits[stop] > best_logit):
        best = stop
    return max(best, 0)  # nothing possible: action 0, as np.argmax over all-masked logits


KERNELS: dict[str, Callable[..., int]] = {"per-job-local": _greedy_local, "per-job": _greedy_shared}
"""The network kinds that have a compiled greedy pass, and its Python source."""


@functools.cache
def greedy_kernel(kind: str = "per-job-local") -> Callable[..., int] | None:
    """The compiled greedy pass of a network kind, or None where numba is not installed or the kind has none."""
    if kind not in KERNELS:
        return None
    try:
        import numba
    except ImportError:  # an optional accelerator: everything works without it, only slower
        return None
    kernel: Callable[..., int] = numba.njit(cache=True, nogil=True)(KERNELS[kind])
    return kernel

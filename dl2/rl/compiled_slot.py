"""A `per-job` policy's greedy slot in compiled code (numba): Python is entered once per window, not per task.

A slot of the densest Philly load takes some 5,000 decisions; each one through `SlotDecision.step`, `Observer`
and the greedy kernel of `dl2.rl.compiled` costs ~35 us, most of it Python and two 40 x 64 x 64 products. Here
one compiled function plays a whole window: the mask, the greedy pass, the grant (caps, free capacity) and the
observation's update (the granted job's three numbers and the cluster-wide tail), with the arithmetic of
`SlotDecision` and `Observer` (float64, in their order), so the slot's bookkeeping is the same. The mask is
checked in full only when the free capacity no longer covers the largest demand of a possible action (until then
only the granted job's caps can close one).

The network is evaluated incrementally. Within a window, in realistic mode, only two numbers of the observation's
tail move (the free GPU and CPU fractions; the 'next task' pair equals them) and one job column changes per grant.
While a column's ReLU patterns stay put, its encoder output and its share of the job head are affine in those two
numbers, so each column keeps an anchor (its values at the last full evaluation) and two direction vectors per
layer, and an action costs a few multiply-adds per unit. A column is evaluated in full when its features change
(the job that received the task), when a unit of its encoder changes sign (the first layer's units are checked
only when (gpu, cpu) moved far enough to reach the closest of them), or when the window starts. The logits equal
the full pass up to float rounding: `tests/unit/rl/test_compiled_slot.py` compares slots' allocations with the
NumPy path's (hand-built clusters, the shipped model on the Philly week), and so do the benchmark's views
(`benchmarks/lookahead_latency.py`: 236, 1,348 and 1,434 active jobs, the same allocations).

`slot_kernel(policy)` returns None without numba or for a network this does not cover (another kind, or other
depths than the trained `per-job` net: two encoder layers, a two-layer job head); `LearnedScheduler` then steps
`SlotDecision` from Python. Compiled code is cached on disk like `dl2.rl.compiled`'s.
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dl2.env.decision import ROLES_PER_JOB, SlotDecision
from dl2.env.observation import GLOBAL_FEATURES, JOB_FEATURES, STATIC_FEATURES, Observer, inverse_total

if TYPE_CHECKING:
    from dl2.rl.inference import NumpyPolicy

_EPS = 1e-9  # SlotDecision's tolerance on what fits


def _fits(demand: np.ndarray, room: np.ndarray, free: np.ndarray, rank: int, role: int) -> bool:
    """`SlotDecision._window_possible` for one job and role: within caps and fitting the free capacity."""
    if not room[rank, role]:
        return False
    for r in range(3):  # noqa: SIM110 (numba compiles no generator expression)
        if not demand[rank, role, r] <= free[r] + _EPS:
            return False
    return True


def _grant(
    demand: np.ndarray, room: np.ndarray, counts: np.ndarray, caps: np.ndarray, is_ps: np.ndarray,
    free: np.ndarray, rank: int, role: int,
) -> None:  # fmt: skip
    """`SlotDecision._grant` in realistic mode (nothing is placed until the slot's allocation is final)."""
    adds_worker = role != 1
    adds_ps = role == 1 or (role == 2 and is_ps[rank])
    for r in range(3):
        free[r] = free[r] - demand[rank, role, r]
    if adds_worker:
        counts[rank, 0] += 1
    if adds_ps:
        counts[rank, 1] += 1
    worker_room = counts[rank, 0] < caps[rank, 0]
    ps_room = counts[rank, 1] < caps[rank, 1] and is_ps[rank]
    room[rank, 0] = worker_room
    room[rank, 1] = ps_room
    room[rank, 2] = worker_room and ps_room


def _observe_grant(
    x: np.ndarray, column: int, rank: int, features: int, static: int, demand: np.ndarray, counts: np.ndarray,
    caps: np.ndarray, inverse: np.ndarray, free: np.ndarray, total: np.ndarray, tail_start: int,
) -> None:  # fmt: skip
    """`Observer._update_job` for the job that received a task, then the tail's free fractions
    (`Observer._fill_tail` in realistic mode: the 'next task' pair is the cluster's)."""
    workers, ps = counts[rank, 0], counts[rank, 1]
    max_workers, max_ps = caps[rank, 0], caps[rank, 1]
    gpu_share = (workers * demand[rank, 0, 0] + ps * demand[rank, 1, 0]) * inverse[0]
    cpu_share = (workers * demand[rank, 0, 1] + ps * demand[rank, 1, 1]) * inverse[1]
    mem_share = (workers * demand[rank, 0, 2] + ps * demand[rank, 1, 2]) * inverse[2]
    share = max(gpu_share, max(cpu_share, mem_share))
    start = column * features + static
    x[start] = workers / max_workers
    x[start + 1] = ps / max_ps if max_ps else 0.0
    x[start + 2] = min(share, 1.0)
    free_gpu = free[0] / total[0] if total[0] else 0.0
    free_cpu = free[1] / total[1] if total[1] else 0.0
    x[tail_start] = free_gpu
    x[tail_start + 1] = free_cpu
    x[tail_start + 2] = free_gpu
    x[tail_start + 3] = free_cpu


def _evaluate_columns(
    x: np.ndarray, columns: int, features: int, dirty: np.ndarray, state: Any, weights: Any, logits: np.ndarray
) -> None:
    """Writes the logits of the window's first `columns` jobs and the stop logit into `logits` (the others are
    left as they are: the mask never allows them). `state` carries the columns' anchors between calls; `dirty`
    marks the columns whose features changed, which are evaluated in full."""
    first, s1, margin, encoded, s2, headed, anchor = state
    (encoder_jobs, encoder_tail, encoder_bias, along_gpu, along_cpu, encoder_out, encoder_out_bias, head_jobs,
     context_pooled, context_tail, context_bias, context_out, context_out_bias, last, last_bias) = weights  # fmt: skip
    zero = np.float32(0.0)
    width = encoder_jobs.shape[1]
    tail_start = x.shape[0] - encoder_tail.shape[0]
    gpu, cpu = x[tail_start], x[tail_start + 1]
    u = encoder_bias.copy()  # the tail's share of the first layer, bias included
    for i in range(encoder_tail.shape[0]):
        value = x[tail_start + i]
        if value != zero:
            for k in range(width):
                u[k] += value * encoder_tail[i, k]
    # how far the first layer can move per unit of (gpu, cpu), and a bound on the rounding of `u`
    reach_gpu, reach_cpu = zero, zero
    for k in range(width):
        reach_gpu = max(reach_gpu, abs(along_gpu[k]))
        reach_cpu = max(reach_cpu, abs(along_cpu[k]))
    reach_gpu *= np.float32(1.01)
    reach_cpu *= np.float32(1.01)
    rounding = np.float32(1e-4)
    out_width = encoded.shape[2]
    pooled = np.zeros(out_width, dtype=np.float32)  # the sum of the jobs' embeddings
    h2 = np.empty(out_width, dtype=np.float32)
    refresh = np.empty(columns, dtype=np.int64)
    stale = 0
    # (no array slices in these loops: a slice is a reference-counted view, and counting costs more than the
    # arithmetic)
    for j in range(columns):
        if dirty[j]:
            dirty[j] = False
            for k in range(width):
                first[j, k] = zero
            for f in range(features):
                value = x[j * features + f]
                if value != zero:
                    for k in range(width):
                        first[j, k] += value * encoder_jobs[f, k]
            refresh[stale] = j
            stale += 1
            continue
        # a column stays affine in (gpu, cpu) while no unit of its encoder changes sign; the first layer's units
        # cannot have when (gpu, cpu) moved less than the closest of them was from zero at the anchor
        flips = 0
        d_gpu, d_cpu = gpu - anchor[j, 0], cpu - anchor[j, 1]
        if abs(d_gpu) * reach_gpu + abs(d_cpu) * reach_cpu + rounding >= margin[j]:
            for k in range(width):
                flips += (first[j, k] + u[k] > zero) != s1[j, k]
        if flips == 0:
            for k in range(out_width):
                z = encoded[j, 0, k] + d_gpu * encoded[j, 1, k] + d_cpu * encoded[j, 2, k]
                flips += (z > zero) != s2[j, k]
                h2[k] = z if z > zero else zero
            if flips == 0:
                for k in range(out_width):
                    pooled[k] += h2[k]
        if flips:
            refresh[stale] = j
            stale += 1
    if stale:
        # each stale column in full, with its two directions: rows (value, along gpu, along cpu) per column
        rows = np.zeros((3 * stale, width), dtype=np.float32)
        for n in range(stale):
            j = refresh[n]
            anchor[j, 0], anchor[j, 1] = gpu, cpu
            closest = np.float32(np.inf)
            for k in range(width):
                z = first[j, k] + u[k]
                s1[j, k] = z > zero
                closest = min(closest, abs(z))
                if z > zero:
                    rows[3 * n, k] = z
                    rows[3 * n + 1, k] = along_gpu[k]
                    rows[3 * n + 2, k] = along_cpu[k]
            margin[j] = closest
        products = np.dot(rows, encoder_out)
        for n in range(stale):
            j = refresh[n]
            for k in range(products.shape[1]):
                z = products[3 * n, k] + encoder_out_bias[k]
                encoded[j, 0, k] = z
                encoded[j, 1, k] = products[3 * n + 1, k]
                encoded[j, 2, k] = products[3 * n + 2, k]
                s2[j, k] = z > zero
                h2_k = z if z > zero else zero
                pooled[k] += h2_k
                products[3 * n, k] = h2_k
                if z <= zero:
                    products[3 * n + 1, k] = zero
                    products[3 * n + 2, k] = zero
        heads = np.dot(products, head_jobs)
        for n in range(stale):
            j = refresh[n]
            for k in range(heads.shape[1]):
                headed[j, 0, k] = heads[3 * n, k]
                headed[j, 1, k] = heads[3 * n + 1, k]
                headed[j, 2, k] = heads[3 * n + 2, k]
    if columns > 1:  # the mean over the jobs' columns (torch's sum / max(n, 1))
        for k in range(pooled.shape[0]):
            pooled[k] /= np.float32(columns)
    context = context_bias.copy()
    for i in range(pooled.shape[0]):
        value = pooled[i]
        if value != zero:
            for k in range(context.shape[0]):
                context[k] += value * context_pooled[i, k]
    for i in range(context_tail.shape[0]):
        value = x[tail_start + i]
        if value != zero:
            for k in range(context.shape[0]):
                context[k] += value * context_tail[i, k]
    out = context_out_bias.copy()
    for i in range(context.shape[0]):
        value = context[i]
        if value > zero:  # ReLU
            for k in range(out.shape[0]):
                out[k] += value * context_out[i, k]
    hidden_width = out.shape[0] - 1
    for j in range(columns):
        # the job head, its first layer affine in (gpu, cpu) from the anchor (the anchor itself for a fresh column);
        # `last` is transposed: (worker, PS, bundle) x hidden
        d_gpu, d_cpu = gpu - anchor[j, 0], cpu - anchor[j, 1]
        worker, ps, bundle = zero, zero, zero
        for k in range(hidden_width):
            value = headed[j, 0, k] + d_gpu * headed[j, 1, k] + d_cpu * headed[j, 2, k] + out[k]
            hidden = value if value > zero else zero
            worker += hidden * last[0, k]
            ps += hidden * last[1, k]
            bundle += hidden * last[2, k]
        logits[ROLES_PER_JOB * j] = worker + last_bias[0]
        logits[ROLES_PER_JOB * j + 1] = ps + last_bias[1]
        logits[ROLES_PER_JOB * j + 2] = bundle + last_bias[2]
    logits[logits.shape[0] - 1] = out[hidden_width]


def _decide_window(
    x: np.ndarray, window: int, first_rank: int, num_jobs: int, granted_before: int, work_conserving: bool,
    demand: np.ndarray, room: np.ndarray, counts: np.ndarray, caps: np.ndarray, is_ps: np.ndarray,
    free: np.ndarray, total: np.ndarray, inverse: np.ndarray, state: Any, weights: Any, logits: np.ndarray,
) -> tuple[int, int]:  # fmt: skip
    """Plays the current window from observation `x` (its columns and tail as `Observer` fills them) until the
    policy stops, picks an impossible action, or nothing more fits; `room`, `counts`, `free` and `x` are updated
    in place as `SlotDecision` and `Observer` would. Returns (actions, tasks granted)."""
    features = (x.shape[0] - GLOBAL_FEATURES) // window
    tail_start = window * features
    columns = min(window, num_jobs - first_rank)
    stop = ROLES_PER_JOB * window
    mask = np.zeros(logits.shape[0], dtype=np.bool_)
    dirty = np.ones(columns, dtype=np.bool_)
    largest = np.zeros(3)  # per resource, the largest demand of a possible action: while it fits, they all do
    actions, granted, num_possible, column, rank = 0, 0, 0, 0, first_rank
    while True:
        if granted and largest[0] <= free[0] + _EPS and largest[1] <= free[1] + _EPS and largest[2] <= free[2] + _EPS:
            for role in range(ROLES_PER_JOB):  # only the granted job's caps can have closed an action
                action = ROLES_PER_JOB * column + role
                if mask[action] and not room[rank, role]:
                    mask[action] = False
                    num_possible -= 1
        else:
            num_possible = 0
            largest[:] = 0.0
            for c in range(columns):
                for role in range(ROLES_PER_JOB):
                    possible = _fits(demand, room, free, first_rank + c, role)
                    mask[ROLES_PER_JOB * c + role] = possible
                    if possible:
                        num_possible += 1
                        for r in range(3):
                            largest[r] = max(largest[r], demand[first_rank + c, role, r])
        if num_possible == 0:  # SlotDecision closes a window where nothing is possible
            break
        mask[stop] = not (work_conserving and granted_before + granted == 0)
        _evaluate_columns(x, columns, features, dirty, state, weights, logits)
        best, best_logit = stop, np.float32(0.0)
        found = False
        for action in range(ROLES_PER_JOB * columns):  # the first action of highest logit, as np.argmax
            if mask[action] and (not found or logits[action] > best_logit):
                best, best_logit, found = action, logits[action], True
        if mask[stop] and (not found or logits[stop] > best_logit):
            best = stop
        actions += 1
        if best == stop:
            break
        column, role = best // ROLES_PER_JOB, best % ROLES_PER_JOB
        rank = first_rank + column
        _grant(demand, room, counts, caps, is_ps, free, rank, role)
        granted += 1
        _observe_grant(
            x, column, rank, features, STATIC_FEATURES, demand, counts, caps, inverse, free, total, tail_start
        )
        dirty[column] = True
    return actions, granted


HELPERS = (_fits, _grant, _observe_grant)
"""Compiled first, then bound in place of their Python source in `_decide_window` (float64 bookkeeping: exact)."""
NETWORK = _evaluate_columns
"""Compiled with reassociation and contraction allowed (float rounding only), so its dot products vectorize."""


@functools.cache
def _compiled_window() -> Any:
    """`_decide_window` compiled with its helpers, or None without numba."""
    try:
        import numba
    except ImportError:  # an optional accelerator: LearnedScheduler steps the slot from Python without it
        return None
    # inlined into the window's loop: a call would count references to each array it is passed
    bound_helpers = {helper.__name__: numba.njit(cache=True, nogil=True, inline="always")(helper) for helper in HELPERS}
    network = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})(NETWORK)
    namespace = {**_decide_window.__globals__, **bound_helpers, NETWORK.__name__: network}
    bound = types.FunctionType(_decide_window.__code__, namespace, _decide_window.__name__)
    return numba.njit(cache=True, nogil=True)(bound)


@dataclass(slots=True)
class SlotKernel:
    """A `per-job` policy's greedy slot through `_decide_window`: the network's weights in the kernel's layout and
    the per-column state it carries within a window."""

    run: Any
    window: int
    weights: tuple[np.ndarray, ...]
    state: tuple[np.ndarray, ...]
    logits: np.ndarray

    def decide(self, decision: SlotDecision, observer: Observer) -> int:
        """Plays `decision` (realistic mode) to its end; returns the number of actions taken."""
        if decision.places_each_task or decision.window != self.window:
            raise ValueError("the compiled slot plays realistic-mode decisions with the policy's window")
        actions = 0
        inverse = np.array(inverse_total(decision.total), dtype=np.float64)
        while not decision.done:
            x = observer(decision)
            taken, granted = self.run(
                x, self.window, decision.first_rank, len(decision.jobs), decision.granted, decision.work_conserving,
                decision.demand_array, decision.room, decision.counts, decision.caps, decision.is_ps,
                decision.free_total,
                decision.total, inverse, self.state, self.weights, self.logits,
            )  # fmt: skip
            actions += taken
            decision.record_window(taken, granted)
        return actions


def slot_kernel(policy: NumpyPolicy) -> SlotKernel | None:
    """The compiled greedy slot of `policy`, or None where numba is missing or the network is not covered."""
    shape = policy.shape
    if policy.kind != "per-job" or shape.job_features != JOB_FEATURES or shape.global_features != GLOBAL_FEATURES:
        return None
    encoder = policy.parts["encoder"]
    if len(encoder) != 2 or len(policy._head_rest) != 1 or policy._head_rest[0][0].shape[1] != ROLES_PER_JOB:
        return None
    run = _compiled_window()
    if run is None:
        return None
    ((last, last_bias),) = policy._head_rest
    tail = np.ascontiguousarray(policy._encoder_tail)
    (encoder_out, encoder_out_bias) = encoder[1]
    contiguous = np.ascontiguousarray
    weights = tuple(
        contiguous(w, dtype=np.float32)
        for w in (
            policy._encoder_jobs, tail, policy._encoder_bias,
            tail[0] + tail[2], tail[1] + tail[3],  # the tail moves along (free GPU = next GPU, free CPU = next CPU)
            encoder_out, encoder_out_bias, policy._head_jobs, policy._context_pooled, policy._context_tail,
            policy._context_bias, policy._context_out, policy._context_out_bias, last.T, last_bias,
        )
    )  # fmt: skip
    window, width = shape.window, policy._encoder_jobs.shape[1]
    out_width, hidden_width = encoder_out.shape[1], policy._head_jobs.shape[1]

    def floats(columns: int) -> np.ndarray:
        return np.zeros((window, columns), dtype=np.float32)

    state = (
        floats(width),  # columns x the first layer's job part
        np.zeros((window, width), dtype=np.bool_),  # first layer's ReLU pattern at the anchor
        np.zeros(window, dtype=np.float32),  # how close its closest unit was to zero
        np.zeros((window, 3, out_width), dtype=np.float32),  # encoder output before ReLU; along gpu, along cpu
        np.zeros((window, out_width), dtype=np.bool_),  # its ReLU pattern
        np.zeros((window, 3, hidden_width), dtype=np.float32),  # the job head's share; along gpu, along cpu
        floats(2),  # the (gpu, cpu) fractions at the anchor
    )
    logits = np.empty(ROLES_PER_JOB * window + 1, dtype=np.float32)
    return SlotKernel(run, window, weights, state, logits)

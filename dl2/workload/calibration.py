"""Speeds calibrated from a cluster's decision records: how far each job type runs from its catalogue fit.

A record (`DecisionRecord`) gives a job's allocation, its placement and the epochs it made over the slot; a
*steady* record (the job held that placement through the previous slot and is still there in the next, so no
resize pause and no finish part-way) makes its observed throughput, observed_epochs x samples_per_epoch / slot_s,
a measurement of its speed at that placement. Records of one slot also say which jobs shared servers.

The calibration keeps the catalogue's form (`dl2.workload.speed_fit`) and fits, per job type, the factors a
cluster's truth may put on its groups of terms (computation, communication, the parameter servers' share,
overheads): a least-squares fit of the inverse speed of the job's solo records (no other job on its servers),
weighted to relative error, with a ridge pull of each factor towards 1 so that a type seen at few allocations
moves only as far as its records show. Co-located records then fit one scale of the profiled interference. A
type is keyed by its catalogue label; `by_demand=True` also splits a label by the pods' requests, which is how
jobs of a model the catalogue lacks, submitted under a catalogue label, get a calibration of their own.

On a cluster of several accelerator types (records that name their workers' types,
`DecisionRecord.applied_worker_accelerators`), a record's computation term is the catalogue's on its workers' type
(`dl2.workload.accelerators.relative_speed`), and a type of job whose records ran on more than one accelerator type
gets a computation factor per accelerator type: the same least-squares fit with one computation column per
accelerator type instead of one, each pulled towards the catalogue as the one column is. (A pull of `prior_weight`
records' worth of each column's own size, weaker since the computation is a small share of most steps, let the
computation trade places with the overheads on one-worker jobs, whose records cannot tell the two apart: 33% median
error per pair against 17% on a drawn truth, `benchmarks/accelerator_calibration.py`.) What the fit measures on type
A is x_A, the computation time there over the catalogue's; the job type's computation factor c is x on the reference
accelerator where its records had it, else the geometric mean of the x_A weighted by their records, and its speedups
(`TypeCalibration.speedups`, what `CalibratedSpeedModel` hands `dl2.workload.accelerated_speed` through its
`PerAcceleratorSpeeds` protocol) are c / x_A, so that c / speedup_A is x_A on every type it ran on. Only records
whose workers all sat on one type measure it: a job spread over several runs at its slowest worker's pace, and which
worker that is depends on the per-type speeds being fitted (a truth may rank two types the other way round from the
catalogue), so such records are left out (`Calibration.mixed_type_records` counts them). Validation keeps a type's
per-type factors only where they predict its held-out records better than one computation factor for every type
does. Workers that use no GPU, and records that name no types, are on the reference accelerator: a log of a
homogeneous cluster calibrates exactly as before types, and so does a job type whose records all ran on one type
(its c is then that type's x, with no speedups).
"""

from __future__ import annotations

import math
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from dl2.core import Architecture, DecisionRecord, JobAllocation, JobSpec
from dl2.workload.accelerators import accelerator_type, relative_speed
from dl2.workload.catalogue import CATALOGUE
from dl2.workload.interference import InterferenceModel
from dl2.workload.speed_fit import ParametricSpeedModel, ShiftedSpeedModel, TermFactors, placement_kappa, ring_term

Nodes = tuple[tuple[int, ...], tuple[int, ...]]
IDENTITY: TermFactors = (1.0, 1.0, 1.0, 1.0)


def nodes_of(record: DecisionRecord) -> Nodes:
    return record.applied_worker_nodes, record.applied_ps_nodes


REFERENCE = ""
"""The reference accelerator's name in records (`DecisionRecord.applied_worker_accelerators`)."""


def worker_accelerator(record: DecisionRecord) -> str | None:
    """The one accelerator type the record's workers ran on (`REFERENCE` where it names none, and for workers that
    use no GPU, whose speed no accelerator changes); None where they sat on several."""
    names = record.applied_worker_accelerators
    if not names or record.worker_gpu <= 0:
        return REFERENCE
    return names[0] if all(name == names[0] for name in names) else None


def is_steady(
    record: DecisionRecord, nodes: Nodes, before: dict[str, Nodes], after: dict[str, Nodes], gap_s: float
) -> bool:
    """Held the same placement through the previous slot (which ended where this one starts) and is still
    active in the next slot, with progress to show for it."""
    previous = before.get(record.job_id)
    return (
        record.observed_epochs > 0
        and record.job_id in after
        and previous is not None
        and math.isclose(gap_s, record.slot_s)
        and JobAllocation(*previous).same_placement(JobAllocation(*nodes))
    )


@dataclass(frozen=True, slots=True)
class Measurement:
    """One steady record: a job's speed at a placement, and the labels of the jobs it shared servers with."""

    record: DecisionRecord
    throughput: float
    neighbours: tuple[str, ...]


def steady_measurements(records: Sequence[DecisionRecord]) -> Iterator[Measurement]:
    """The steady records of one cluster's log, in slot order."""
    by_slot: dict[float, list[DecisionRecord]] = defaultdict(list)
    for record in records:
        by_slot[record.time_s].append(record)
    times = sorted(by_slot)
    placements = [{r.job_id: nodes_of(r) for r in by_slot[t]} for t in times]
    for k in range(1, len(times) - 1):
        slot = by_slot[times[k]]
        on_node: dict[int, list[DecisionRecord]] = defaultdict(list)
        for record in slot:
            for node in set(record.applied_worker_nodes + record.applied_ps_nodes):
                on_node[node].append(record)
        for record in slot:
            nodes = placements[k][record.job_id]
            if not nodes[0] or not is_steady(
                record, nodes, placements[k - 1], placements[k + 1], times[k] - times[k - 1]
            ):
                continue
            neighbours = {
                other.model
                for node in set(nodes[0] + nodes[1])
                for other in on_node[node]
                if other.job_id != record.job_id
            }
            throughput = record.observed_epochs * record.samples_per_epoch / record.slot_s
            yield Measurement(record, throughput, tuple(sorted(neighbours)))


TypeKey = tuple[str, float, float, float, float]
"""(catalogue label, worker GPUs, worker cores, worker memory, PS memory): a job type as the cluster sees it."""
LABEL_WIDE = (0.0, 0.0, 0.0, 0.0)
"""The demand part of a label's own key (`type_key(..., by_demand=False)`)."""


def type_key(spec_or_record: JobSpec | DecisionRecord, by_demand: bool) -> TypeKey:
    if isinstance(spec_or_record, DecisionRecord):
        r = spec_or_record
        demand = (r.worker_gpu, r.worker_cpu, r.worker_mem_gb, r.ps_mem_gb)
        label = r.model
    else:
        s = spec_or_record
        demand = (s.worker_demand.gpu, s.worker_demand.cpu, s.worker_demand.mem_gb, s.ps_demand.mem_gb)
        label = s.model
    return (label, *demand) if by_demand else (label, *LABEL_WIDE)


def _terms(catalogue: ParametricSpeedModel, record: DecisionRecord) -> np.ndarray:
    """The four groups of terms of the record's inverse speed at its placement (compute, communication, the
    parameter servers' extra, overheads): 1/S = a.f for factors f."""
    fit = catalogue.fits[record.model]
    t0, t1, t2, t3, t4, t5 = fit.coefficients
    workers, ps = record.applied_worker_nodes, record.applied_ps_nodes
    w = len(workers)
    profile = CATALOGUE[record.model]
    compute = t0 / w
    accelerator = worker_accelerator(record)
    if accelerator:  # the catalogue's computation on that type (mixed-type records never reach here)
        compute /= relative_speed(record.model, accelerator_type(accelerator, where="decision record").accelerator)
    if record.architecture == Architecture.ALLREDUCE.value:
        ring = ring_term(fit, profile, w, spans_servers=len(set(workers)) > 1)
        return np.array([compute, ring, 0.0, t1 + t4 * w])
    p = len(ps)
    kappa = placement_kappa(profile, workers, ps)
    # communication x (t2/p + parameter_server x t3 w/p): linear in (communication, communication x parameter_server)
    return np.array([compute, kappa * t2 / p, kappa * t3 * w / p, t1 + t4 * w + t5 * p])


@dataclass(frozen=True, slots=True)
class TypeCalibration:
    factors: TermFactors
    """(compute, communication, parameter server, overhead), as `speed_fit.TermFactors`."""
    records: int
    """Records the factors were fitted to."""
    jobs: int
    held_out_error: float | None = None
    """Mean relative speed error on the held-out records of a fit without them (None: not validated)."""
    catalogue_error: float | None = None
    """The catalogue's on the same records."""
    held_out: str = ""
    """What was held out: "jobs" (other jobs of the type), "later slots" (its jobs' last records), "" (nothing)."""
    speedups: dict[str, float] = field(default_factory=dict)
    """Per accelerator type its records ran on, the factor on its computation's speed there over what `factors`
    and the catalogue's relative speed say (the module docstring; `PerAcceleratorSpeeds`): empty where its records
    ran on one type."""
    accelerator_records: dict[str, int] = field(default_factory=dict)
    """Records per accelerator type ('' the reference) the factors were fitted to, where there were several."""


@dataclass(frozen=True, slots=True)
class Calibration:
    """Per-type factors and an interference scale fitted from records."""

    types: dict[TypeKey, TypeCalibration]
    interference_scale: float
    co_located_records: int
    by_demand: bool
    seen: frozenset[TypeKey] = frozenset()
    """Every type the records had, kept or not."""
    mixed_type_records: int = 0
    """Steady records left out because their workers sat on several accelerator types (the module docstring)."""

    def entry(self, spec: JobSpec | DecisionRecord) -> tuple[TypeKey, TypeCalibration] | None:
        """A job's calibration and its key: its demand signature's; its label's for a signature the records never
        had; else none (the catalogue). A signature that was seen and not kept keeps the catalogue rather than
        borrow its label's factors, which other jobs under the label (a new type, say) may have made."""
        own = type_key(spec, self.by_demand)
        found = self.types.get(own)
        if found is None and self.by_demand and own not in self.seen:
            own = type_key(spec, False)
            found = self.types.get(own)
        return None if found is None else (own, found)

    def factors(self, spec: JobSpec | DecisionRecord) -> TermFactors:
        """A job's factors (`entry`'s; the catalogue's where it has none)."""
        found = self.entry(spec)
        return IDENTITY if found is None else found[1].factors

    def speedups(self, spec: JobSpec | DecisionRecord) -> dict[str, float]:
        """A job's per-accelerator-type speedups (`entry`'s; none where it has none)."""
        found = self.entry(spec)
        return {} if found is None else found[1].speedups

    def interference(self, profiled: InterferenceModel) -> InterferenceModel:
        """The profiled table with the fitted scale on each extra slowdown, 1 + k (s - 1) (k = 1: `profiled`)."""
        if self.interference_scale == 1.0:
            return profiled
        k = self.interference_scale
        return InterferenceModel(
            {
                victim: {aggressor: 1.0 + k * (s - 1.0) for aggressor, s in row.items()}
                for victim, row in profiled.matrix.items()
            }
        )


def calibrate(
    records: Sequence[DecisionRecord],
    catalogue: ParametricSpeedModel,
    interference: InterferenceModel,
    by_demand: bool = False,
    prior_weight: float = 3.0,
    validate: bool = True,
) -> Calibration:
    """Fit the factors of every type seen in `records` and the interference scale (module docstring).
    `prior_weight` is the pull towards the catalogue, in records' worth.

    With `validate`, a quarter of the jobs (by a hash of their ids) is held out. The interference scale comes
    first: it is kept only if, on those jobs' co-located records (else on every job's later records, below), a fit
    with it predicts the observed speeds better than a fit at the profiled scale does; otherwise the factors are
    fitted at the profiled scale. A type then keeps its factors only if a fit without the held-out jobs predicts
    their observed speeds better than the catalogue does (and keeps per-accelerator-type factors only if they
    predict them better than one computation factor for every type does), and a kept scale stays only if some type
    is kept. A type
    none of whose jobs is held out (a small cluster's log: a few jobs of each type) is judged on its jobs' later
    records instead: the last quarter of each job's steady records, predicted by a fit on the earlier ones (by
    demand, only a signature's fit: a label's, which signatures the records lack borrow, must predict other jobs).
    A calibration is used only where it has shown that it beats what it replaces on records it was not fitted to."""
    steady = list(steady_measurements(records))
    measurements = [m for m in steady if worker_accelerator(m.record) is not None]
    data = _Data.of(measurements, catalogue, interference, by_demand)
    everything = np.ones(len(data.inverse), dtype=bool)
    mixed = len(steady) - len(measurements)
    if not validate:
        return replace(data.fit(everything, prior_weight), mixed_type_records=mixed)
    held_jobs = np.array([zlib.crc32(m.record.job_id.encode()) % 4 == 0 for m in data.measurements], dtype=bool)
    fixed_scale = None if data.scale_predicts_better(held_jobs, prior_weight) else 1.0
    full = data.fit(everything, prior_weight, fixed_scale=fixed_scale)
    typed = any(entry.speedups for entry in full.types.values())
    # one computation factor for every accelerator type: what a type's per-type factors must beat (none without)
    full_single = data.fit(everything, prior_weight, fixed_scale=fixed_scale, per_accelerator=False) if typed else full
    kept: dict[TypeKey, TypeCalibration] = {}
    # by demand, a label's own fit is only ever judged across jobs: a signature the records never had borrows it,
    # and a few jobs of a new type under the label must not speak for the label's other jobs
    unjudged = [
        key
        for key in full.types
        if not (held_jobs & data.rows_of(key)).any() and not (by_demand and key[1:] == LABEL_WIDE)
    ]
    for held, label, keys in (
        (held_jobs, "jobs", [key for key in full.types if key not in unjudged]),
        (data.later_records(), "later slots", unjudged),
    ):
        trained = data.fit(~held, prior_weight, fixed_scale=fixed_scale) if keys else full
        single = data.fit(~held, prior_weight, fixed_scale=fixed_scale, per_accelerator=False) if typed else trained
        for key in keys:
            rows = held & data.rows_of(key)
            if not rows.any() or key not in trained.types:
                continue
            entry, chosen = trained.types[key], full.types[key]
            fitted = data.error(rows, entry.factors, trained.interference_scale, entry.speedups)
            if entry.speedups and key in single.types:
                one = data.error(rows, single.types[key].factors, single.interference_scale)
                if one <= fitted:  # the per-type factors did not predict better than one for all types
                    fitted, chosen = one, full_single.types[key]
            profiled = data.error(rows, IDENTITY, 1.0)
            if fitted < profiled:
                kept[key] = replace(chosen, held_out_error=fitted, catalogue_error=profiled, held_out=label)
    scale = full.interference_scale if kept else 1.0
    return Calibration(kept, scale, full.co_located_records, by_demand, frozenset(full.types), mixed)


@dataclass(frozen=True, slots=True)
class _Data:
    """The steady measurements of a log (none with workers on several accelerator types), with what every fit
    needs of each: its terms, its worst neighbour's profiled extra slowdown, its observed inverse speed, its type
    keys and its workers' accelerator type."""

    measurements: list[Measurement]
    terms: list[np.ndarray]
    extra: np.ndarray
    inverse: np.ndarray
    keys: list[set[TypeKey]]
    by_demand: bool
    accelerators: list[str]

    @classmethod
    def of(
        cls, measurements: list[Measurement], catalogue: ParametricSpeedModel, interference: InterferenceModel,
        by_demand: bool,
    ) -> _Data:  # fmt: skip
        extra = [
            max(interference.slowdown(m.record.model, other) for other in m.neighbours) - 1.0 if m.neighbours else 0.0
            for m in measurements
        ]
        return cls(
            measurements,
            [_terms(catalogue, m.record) for m in measurements],
            np.array(extra),
            np.array([1.0 / m.throughput for m in measurements]),
            [{type_key(m.record, False), type_key(m.record, by_demand)} for m in measurements],
            by_demand,
            [_one_accelerator(m.record) for m in measurements],
        )

    def fit(
        self, use: np.ndarray, prior_weight: float, rounds: int = 4, min_solo: int = 20,
        fixed_scale: float | None = None, per_accelerator: bool = True,
    ) -> Calibration:  # fmt: skip
        """Solo and co-located records both count: the factors are fitted to each record's speed with its
        slowdown taken out at the current interference scale, the scale then at the current factors, `rounds`
        times (once, at `fixed_scale`, when one is given). A type with `min_solo` solo records is fitted to those
        alone, so that how fast it is and how much its neighbours slow it are not traded for each other."""
        jobs: dict[TypeKey, set[str]] = defaultdict(set)
        solo: Counter[TypeKey] = Counter()
        for m, own, chosen in zip(self.measurements, self.keys, use, strict=True):
            for key in own if chosen else ():
                jobs[key].add(m.record.job_id)
                solo[key] += not m.neighbours
        shared = int(np.count_nonzero(self.extra[use]))
        start = 1.0 if fixed_scale is None else fixed_scale
        calibration = Calibration({}, start, shared, self.by_demand)
        for _ in range(rounds if shared and fixed_scale is None else 1):
            rows: dict[TypeKey, list[tuple[np.ndarray, float, str]]] = defaultdict(list)
            solo_inverse = self.inverse / (1.0 + calibration.interference_scale * self.extra)
            for i in np.flatnonzero(use):
                # every label gets a calibration of its own (what `CalibratedSpeedModel.throughput` reads), and
                # with `by_demand` each demand signature under it one more
                for key in self.keys[i]:
                    if self.extra[i] == 0.0 or solo[key] < min_solo:
                        rows[key].append((self.terms[i], float(solo_inverse[i]), self.accelerators[i]))
            types = {
                key: _type_calibration(samples, prior_weight, len(jobs[key]), per_accelerator)
                for key, samples in rows.items()
            }
            fitted = Calibration(types, calibration.interference_scale, shared, self.by_demand)
            scale = (
                _interference_scale(fitted, self.measurements, self.terms, self.extra, use, self.accelerators)
                if fixed_scale is None
                else fixed_scale
            )
            calibration = Calibration(types, scale, shared, self.by_demand, frozenset(types))
        return calibration

    def scale_predicts_better(self, held_jobs: np.ndarray, prior_weight: float) -> bool:
        """Whether a fit with its own interference scale predicts records it was not fitted to better than a fit
        at the profiled scale: the records of `held_jobs`, or where they cannot tell (no co-located record among
        them, or the records left find no scale of their own) every job's later records. Solo records count too: a
        fit at the wrong scale moves the types' factors to absorb what it misses, which shows on them. Neither can
        tell: the scale has not shown that it predicts better, and the profiled one stays."""
        co_located = self.extra > 0.0
        for held in (held_jobs, self.later_records()):
            if not (held & co_located).any():
                continue
            own = self.fit(~held, prior_weight)
            if own.interference_scale == 1.0:  # the records left measured no scale: nothing to judge here
                continue
            profiled = self.fit(~held, prior_weight, fixed_scale=1.0)
            return self.calibrated_error(held, own) < self.calibrated_error(held, profiled)
        return False

    def rows_of(self, key: TypeKey) -> np.ndarray:
        """Which measurements are of type `key`."""
        return np.array([key in own for own in self.keys], dtype=bool)

    def later_records(self, share: float = 0.25) -> np.ndarray:
        """Each job's last `share` of its steady measurements (they come in slot order); none of a job with one."""
        count: Counter[str] = Counter(m.record.job_id for m in self.measurements)
        seen: Counter[str] = Counter()
        later = np.zeros(len(self.measurements), dtype=bool)
        for i, m in enumerate(self.measurements):
            job = m.record.job_id
            later[i] = seen[job] >= count[job] - math.floor(share * count[job])
            seen[job] += 1
        return later

    def calibrated_error(self, rows: np.ndarray, calibration: Calibration) -> float:
        """Mean relative error of the speeds `calibration` predicts for `rows` (each its own type's factors, the
        catalogue's for a type it lacks), against the observed."""
        return self._relative_error(
            rows,
            lambda i: _coordinates(
                calibration.factors(self.measurements[i].record),
                calibration.speedups(self.measurements[i].record),
                self.accelerators[i],
            ),
            calibration.interference_scale,
        )

    def error(
        self, rows: np.ndarray, factors: TermFactors, scale: float, speedups: dict[str, float] | None = None
    ) -> float:
        """Mean relative error of the speeds these factors (with these per-accelerator-type speedups) and scale
        predict for `rows`, against the observed."""
        if not speedups:
            coordinates = _coordinates(factors)
            return self._relative_error(rows, lambda _: coordinates, scale)
        return self._relative_error(rows, lambda i: _coordinates(factors, speedups, self.accelerators[i]), scale)

    def _relative_error(self, rows: np.ndarray, coordinates_of: Callable[[int], np.ndarray], scale: float) -> float:
        """Mean relative error of the inverse speeds predicted for `rows` (measurement i's terms at
        `coordinates_of(i)`, slowed by its neighbours at `scale`), against the observed."""
        picked: list[int] = np.flatnonzero(rows).tolist()
        predicted = np.array([float(self.terms[i] @ coordinates_of(i)) * (1 + scale * self.extra[i]) for i in picked])
        return float(np.mean(np.abs(self.inverse[rows] / predicted - 1.0)))


def _interference_scale(
    calibration: Calibration,
    measurements: list[Measurement],
    terms: list[np.ndarray],
    extra: np.ndarray,
    use: np.ndarray,
    accelerators: list[str],
) -> float:
    """One scale k on the profiled extra slowdowns, slowdown = 1 + k (s - 1). Within a type, a record's inverse
    speed over the calibrated one is r = b (1 + k e), e its worst profiled neighbour's extra slowdown (0 alone):
    a line in e whose slope over intercept is k, whatever part of the slowdown the type's level absorbed. k is
    the mean of the types' slopes over intercepts, weighted by how much e varies within each."""
    if not extra[use].any():
        return 1.0
    ratios: dict[TypeKey, list[tuple[float, float]]] = defaultdict(list)
    for i in np.flatnonzero(use):
        m, row, e = measurements[i], terms[i], extra[i]
        coordinates = _coordinates(calibration.factors(m.record), calibration.speedups(m.record), accelerators[i])
        predicted_inverse = float(row @ coordinates)
        ratios[type_key(m.record, calibration.by_demand)].append((float(e), 1.0 / (m.throughput * predicted_inverse)))
    slopes, weights = [], []
    for pairs in ratios.values():
        e, r = np.array(pairs).T
        spread = float(np.sum((e - e.mean()) ** 2))
        if len(pairs) < 3 or spread <= 1e-9:
            continue
        slope = float(np.sum((e - e.mean()) * (r - r.mean())) / spread)
        intercept = float(r.mean() - slope * e.mean())
        if intercept > 0:
            slopes.append(slope / intercept)
            weights.append(spread)
    if not weights:
        return calibration.interference_scale
    return float(np.clip(np.average(slopes, weights=weights), 0.0, 10.0))


def _one_accelerator(record: DecisionRecord) -> str:
    found = worker_accelerator(record)
    if found is None:
        raise ValueError(f"job {record.job_id}'s workers sat on several accelerator types: not one type's measurement")
    return found


def _type_calibration(
    samples: list[tuple[np.ndarray, float, str]], prior_weight: float, jobs: int, per_accelerator: bool = True
) -> TypeCalibration:
    """A type's calibration from its records (terms, observed inverse speed, accelerator type): `_fit` where they
    ran on one accelerator type (or `per_accelerator` is off), `_fit_per_accelerator` where on several."""
    counts = Counter(s[2] for s in samples)
    if len(counts) == 1 or not per_accelerator:
        return TypeCalibration(_fit([(s[0], s[1]) for s in samples], prior_weight), len(samples), jobs)
    factors, speedups = _fit_per_accelerator(samples, prior_weight)
    records = dict(sorted(counts.items()))
    return TypeCalibration(factors, len(samples), jobs, speedups=speedups, accelerator_records=records)


def _fit(samples: list[tuple[np.ndarray, float]], prior_weight: float) -> TermFactors:
    """Least squares on relative error of the inverse speed in the (compute, communication, communication x
    parameter server, overhead) coordinates, each pulled towards 1 by `prior_weight` records' worth: where the
    records leave a direction open (a type seen at one allocation), the factors stay as near the catalogue as the
    records allow, and a change is spread over the terms in proportion to their share of the inverse speed."""
    terms = np.array([s[0] for s in samples])
    target = np.array([s[1] for s in samples])
    relative = terms / target[:, None]  # each row's terms as shares of its observed inverse speed: ~1 in sum
    present = relative.any(axis=0)  # all-reduce jobs have no parameter-server term
    # a record's pull on the fit is the squared norm of its row; the prior's, spread over the factors, weighs as
    # `prior_weight` such rows
    strength = math.sqrt(prior_weight * float(np.mean(np.sum(relative**2, axis=1))) / int(present.sum()))
    ridge = strength * np.eye(4)[present]
    design = np.vstack([relative, ridge])
    goal = np.concatenate([np.ones(len(target)), np.full(len(ridge), strength)])
    solution = np.ones(4)
    solution[present], *_ = np.linalg.lstsq(design[:, present], goal, rcond=None)
    compute, communication, joint, overhead = (float(v) for v in np.clip(solution, 0.05, 20.0))
    if not present[2]:
        joint = communication
    return (compute, communication, joint / communication, overhead)


def _fit_per_accelerator(
    samples: list[tuple[np.ndarray, float, str]], prior_weight: float
) -> tuple[TermFactors, dict[str, float]]:
    """`_fit` with one computation column per accelerator type (the module docstring): the factors, with the
    computation's c, and per accelerator type its speedup c / x. Every column is pulled towards 1 as in `_fit`."""
    names = sorted({s[2] for s in samples})
    column = {name: k for k, name in enumerate(names)}
    terms = np.array([s[0] for s in samples])
    target = np.array([s[1] for s in samples])
    relative = terms / target[:, None]
    present = relative.any(axis=0)
    strength = math.sqrt(prior_weight * float(np.mean(np.sum(relative**2, axis=1))) / int(present.sum()))
    k = len(names)
    wide = np.zeros((len(samples), k + 3))  # x per accelerator type, communication, its PS part, overhead
    for row, sample in enumerate(samples):
        wide[row, column[sample[2]]] = relative[row, 0]
    wide[:, k:] = relative[:, 1:]
    used = wide.any(axis=0)
    ridge = strength * np.eye(k + 3)[used]
    design = np.vstack([wide, ridge])
    goal = np.concatenate([np.ones(len(target)), ridge.sum(axis=1)])
    solution = np.ones(k + 3)
    solution[used], *_ = np.linalg.lstsq(design[:, used], goal, rcond=None)
    solution = np.clip(solution, 0.05, 20.0)
    x = {name: float(solution[column[name]]) for name in names}
    communication, joint, overhead = (float(v) for v in solution[k:])
    if not present[2]:
        joint = communication
    counts = Counter(s[2] for s in samples)
    if REFERENCE in x:
        compute = x[REFERENCE]
    else:  # no reference accelerator to anchor c: the types' geometric mean, weighted by their records
        compute = math.exp(sum(counts[name] * math.log(x[name]) for name in names) / len(samples))
    speedups = {name: compute / x[name] for name in names if name != REFERENCE}
    return (compute, communication, joint / communication, overhead), speedups


def _coordinates(factors: TermFactors, speedups: dict[str, float] | None = None, accelerator: str = "") -> np.ndarray:
    """The factors in `_fit`'s coordinates, the computation's on `accelerator` (its speedup applied)."""
    compute, communication, parameter_server, overhead = factors
    if speedups and accelerator:
        compute = compute / speedups.get(accelerator, 1.0)
    return np.array([compute, communication, communication * parameter_server, overhead])


class CalibratedSpeedModel(ShiftedSpeedModel):
    """The catalogue's speed with a calibration's factors (the `SpeedModel` protocol): what a heuristic reads
    once the cluster's records have been fitted. A type read by name takes its label's factors; a job, its own
    type's (`Calibration.factors`), and on a cluster of several accelerator types its per-type speedups
    (`accelerator_speedups`, `dl2.workload.accelerated_speed.PerAcceleratorSpeeds`)."""

    def __init__(self, catalogue: ParametricSpeedModel, calibration: Calibration) -> None:
        super().__init__(catalogue)
        self.calibration = calibration

    def type_factors(self, model: str) -> tuple[str, TermFactors | None]:
        found = self.calibration.types.get((model, 0.0, 0.0, 0.0, 0.0))
        return model, None if found is None else found.factors

    def job_factors(self, spec: JobSpec) -> tuple[str, TermFactors | None]:
        found = self.calibration.factors(spec)
        return spec.model, None if found == IDENTITY else found  # None: the catalogue's own floats

    def accelerator_speedups(self, spec: JobSpec) -> tuple[str, Mapping[str, float]]:
        """(the job's calibrated type, its speedups per accelerator type): `PerAcceleratorSpeeds`, through which
        `dl2.workload.accelerated_speed` plays them on a cluster of several types."""
        found = self.calibration.entry(spec)
        if found is None or not found[1].speedups:
            return spec.model, {}
        return "/".join(str(part) for part in found[0]), found[1].speedups

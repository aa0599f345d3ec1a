"""The promotion gate on numbers only: is the challenger safe, and better than what it would replace by the margin?

The reference is the champion or, when there is none (or it cannot finish any more), the incumbent scheduler(s).
The challenger is accepted iff every run finishes, its p99 JCT is at most `max_slowdown_p99` x each reference's
and its average JCT <= (1 - `margin`) x each reference's.

A cluster is never the catalogue the held-out workloads run on. When the reference is the champion and the
clusters' decision records calibrated a twin (`ClusterEvidence`: the two policies paired on the twin's
workloads), a challenger the twin finds faster (the 95% interval of the mean relative difference below zero) is
accepted if it is safe and no worse than the champion on the held-out workloads beyond the margin: what the
cluster says decides, the catalogue guards. Pure: scores in, a verdict out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Score:
    """A scheduler's results on the held-out workloads (means over the workloads)."""

    avg_jct_s: float
    """Mean of the runs' average JCTs (inf when a run did not finish)."""
    p99_jct_s: float
    """Mean of the runs' p99 JCTs (inf when a run did not finish)."""
    finished: bool
    """Every job of every run finished."""
    runs: int
    error: str = ""
    """Why a run did not finish."""

    @classmethod
    def failed(cls, runs: int, error: str) -> Score:
        """A scheduler whose runs did not all finish: infinite JCTs, so it can never win a comparison."""
        return cls(math.inf, math.inf, False, runs, error)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("avg_jct_s", "p99_jct_s"):
            data[key] = finite(data[key])
        return data


@dataclass(frozen=True, slots=True)
class ClusterEvidence:
    """The challenger against the champion in the twins calibrated from the clusters' decision records: the mean
    relative difference of their average JCTs over paired twin workloads (negative: the challenger is faster),
    with its interval (95% over the comparison's planned looks: workloads are added while it is undecided)."""

    logs: tuple[str, ...]
    workloads: int
    mean: float
    low: float
    high: float

    @property
    def faster(self) -> bool:
        return self.high < 0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "logs": list(self.logs)}

    def text(self) -> str:
        return (
            f"{self.mean:+.1%} [{self.low:+.1%}, {self.high:+.1%}] against the champion in the clusters' calibrated "
            f"twin ({self.workloads} paired workloads)"
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    accepted: bool
    reason: str
    references: tuple[str, ...]
    """What the challenger was compared with: ('champion',) or the incumbents' names."""
    threshold_avg_jct_s: float
    """The average JCT the challenger had to reach (the strictest reference's, less the margin)."""
    threshold_p99_jct_s: float
    """The p99 JCT it had to stay under."""


def references(champion: Score | None, incumbents: Mapping[str, Score]) -> dict[str, Score]:
    """What the challenger would replace: the champion, or when there is none (or it cannot finish any more)
    the incumbents."""
    if champion is not None and champion.finished:
        return {"champion": champion}
    return dict(incumbents)


def decide(
    challenger: Score,
    champion: Score | None,
    incumbents: Mapping[str, Score],
    margin: float,
    max_slowdown_p99: float,
    unit: tuple[float, str] = (1.0, "s"),
    cluster: ClusterEvidence | None = None,
) -> Verdict:
    """The gate, on numbers only: safe, and better than every reference by the margin, or (against the champion,
    given the `cluster` evidence) faster on the clusters' twin and within the margin on the held-out workloads.
    `unit` (seconds per unit, its name) is how the reason states the figures, as the report table does."""
    scale, name_of_unit = unit

    def f(seconds: float) -> str:
        return f"{seconds / scale:.2f} {name_of_unit}"

    compared = references(champion, incumbents)
    unfinished = [name for name, s in compared.items() if not s.finished]
    names = tuple(compared)
    if unfinished:  # the cluster's own scheduler cannot run the test set: nothing to compare with
        return Verdict(False, f"reference {', '.join(unfinished)} did not finish the test workloads", names, 0, 0)
    strictest = min(compared, key=lambda name: compared[name].avg_jct_s)
    tightest = min(compared, key=lambda name: compared[name].p99_jct_s)
    threshold = (1.0 - margin) * compared[strictest].avg_jct_s
    p99_limit = max_slowdown_p99 * compared[tightest].p99_jct_s

    def verdict(accepted: bool, reason: str) -> Verdict:
        return Verdict(accepted, reason, names, threshold, p99_limit)

    if not challenger.finished:
        return verdict(False, f"safety: not every job finished ({challenger.error})")
    if challenger.p99_jct_s > p99_limit:
        return verdict(
            False,
            f"safety: p99 JCT {f(challenger.p99_jct_s)} > {f(p99_limit)} "
            f"({max_slowdown_p99:g} x {tightest}'s {f(compared[tightest].p99_jct_s)})",
        )
    if challenger.avg_jct_s > threshold:
        held_out = (
            f"average JCT {f(challenger.avg_jct_s)} > {f(threshold)} "
            f"((1 - {margin:g}) x {strictest}'s {f(compared[strictest].avg_jct_s)})"
        )
        if cluster is None or names != ("champion",):
            return verdict(False, held_out)
        guard = (1.0 + margin) * compared["champion"].avg_jct_s
        if not cluster.faster:
            return verdict(False, f"{held_out}; not faster on the cluster: {cluster.text()}")
        if challenger.avg_jct_s > guard:
            return verdict(
                False,
                f"faster on the cluster ({cluster.text()}) but worse on the held-out workloads: average JCT "
                f"{f(challenger.avg_jct_s)} > {f(guard)} ((1 + {margin:g}) x the champion's)",
            )
        return verdict(
            True,
            f"faster on the cluster: {cluster.text()}; held-out average JCT {f(challenger.avg_jct_s)} <= "
            f"{f(guard)} ((1 + {margin:g}) x the champion's), p99 {f(challenger.p99_jct_s)} <= {f(p99_limit)}",
        )
    return verdict(
        True,
        f"average JCT {f(challenger.avg_jct_s)} <= {f(threshold)} ((1 - {margin:g}) x {strictest}'s "
        f"{f(compared[strictest].avg_jct_s)}), p99 {f(challenger.p99_jct_s)} <= {f(p99_limit)}",
    )


def best_heuristic(scores: Mapping[str, Score], heuristics: Sequence[str]) -> str | None:
    """The heuristic with the lowest average JCT among those that finished (None: none did)."""
    finished = [name for name in heuristics if scores[name].finished]
    return min(finished, key=lambda name: scores[name].avg_jct_s) if finished else None


def margin_against(challenger: Score, best: Score | None) -> float | None:
    """The challenger's average JCT relative to the best heuristic's, minus one (negative: faster)."""
    if best is None or not challenger.finished:
        return None
    return challenger.avg_jct_s / best.avg_jct_s - 1.0


def finite(value: float) -> float | None:
    """A figure as JSON holds it: None for a run that did not finish (inf)."""
    return value if math.isfinite(value) else None

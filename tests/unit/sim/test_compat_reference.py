"""Compatibility mode reproduces the DL2 authors' simulator on their own validation workloads.

Bar (issue 2): per scheduler and setting, the average JCT over the 10 workloads within 3% of theirs
(`results-uniform.json`) and every single workload within 5%.

One figure cannot be held to the per-workload 5%: FIFO on the default workloads. Their code breaks ties between
jobs by Python 2 memory address, and FIFO's per-workload results swing with the order of the 10 jobs arriving
in the same slot. We ran their own code on this machine: reruns that build the workloads once gave per-workload
FIFO values from -7.7% to +2.0% of the published ones, reruns that copy the jobs per task (as a multiprocessing
driver does) from -3.9% to +9.1%, and every rerun missed the published figure by more than 5% on at least one
workload: the published numbers are one draw of an order nobody can recover. We break ties by job id; for that
one case the per-workload check uses the envelope measured from their code (8%). Given the tie order their code
used in a run (`reruns-with-tie-order.json`), ours reproduces that run's per-workload JCT exactly, for every
scheduler: the last test.
"""

from __future__ import annotations

import json
from functools import cache

import pytest

from dl2.paths import reference_dir
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.metrics import summarize
from dl2.sim.run import speed_model
from dl2.sim.simulator import simulate
from dl2.workload.reference import load_reference_workloads

THEIR_NAMES = {"drf": "DRF", "fifo": "FIFO", "srtf-fraction": "SRTF", "optimus": "Optimus"}
"""Our names of the authors' schedulers (their SRTF ranks by remaining fraction of epochs)."""
AVERAGE_BAR = 0.03
WORKLOAD_BAR = 0.05
TIE_ORDER_ENVELOPE = {("fifo", "default"): 0.08}
"""Per-workload tolerance where the authors' own reruns vary by more than the bar (see the module docstring)."""


@cache
def reference_results() -> dict[str, dict[str, dict[str, object]]]:
    return json.loads((reference_dir() / "results-uniform.json").read_text())  # type: ignore[no-any-return]


def our_jcts(setting: str, scheduler: str) -> list[float]:
    speed = speed_model(Mode.COMPAT)
    workloads = load_reference_workloads(reference_dir() / f"traces-{setting}-uniform.json")
    return [
        summarize(simulate(w, make_scheduler(scheduler, speed, compat=True), SimConfig.compat(), speed)).avg_jct_slots
        for w in workloads
    ]


@pytest.mark.parametrize("setting", ["small", "default"])
@pytest.mark.parametrize("scheduler", sorted(THEIR_NAMES))
def test_matches_the_authors_simulator(setting: str, scheduler: str) -> None:
    theirs = reference_results()[setting][THEIR_NAMES[scheduler]]
    ours = our_jcts(setting, scheduler)
    average = sum(ours) / len(ours)
    assert average == pytest.approx(theirs["avg_jct_slots"], rel=AVERAGE_BAR)
    tolerance = TIE_ORDER_ENVELOPE.get((scheduler, setting), WORKLOAD_BAR)
    for index, (mine, their) in enumerate(zip(ours, theirs["jct_per_trace"], strict=True)):  # type: ignore[call-overload]
        assert mine == pytest.approx(their, rel=tolerance), f"workload {index}: ours {mine:.3f}, theirs {their:.3f}"


def _reruns() -> list[dict[str, object]]:
    document = json.loads((reference_dir() / "reruns-with-tie-order.json").read_text())
    return document["runs"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("run", _reruns(), ids=lambda run: f"{run['setting']}-{run['scheduler']}-{run['how'][:20]}")
def test_exact_with_the_tie_order_of_their_run(run: dict[str, object]) -> None:
    """Given the order in which their code broke ties, ours reproduces their per-workload JCT exactly."""
    from dl2.core import Workload

    speed = speed_model(Mode.COMPAT)
    workloads = load_reference_workloads(reference_dir() / f"traces-{run['setting']}-uniform.json")
    name = THEIR_NAMES_BACK[str(run["scheduler"])]
    for workload, trace in zip(workloads, run["traces"], strict=True):  # type: ignore[call-overload]
        rank = {str(job_id): k for ids in trace["tie_order"].values() for k, job_id in enumerate(ids)}
        ordered = tuple(sorted(workload.jobs, key=lambda job: (job.spec.arrival_s, rank[job.spec.job_id])))
        reordered = Workload(workload.name, workload.cluster, ordered, workload.slot_s)
        result = simulate(reordered, make_scheduler(name, speed, compat=True), SimConfig.compat(), speed)
        assert summarize(result).avg_jct_slots == pytest.approx(trace["avg_jct_slots"], rel=1e-6)


THEIR_NAMES_BACK = {their: ours for ours, their in THEIR_NAMES.items()}

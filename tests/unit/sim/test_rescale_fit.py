"""The resize cost learned from the jobs' progress (`dl2.sim.rescale_fit`): hand-computed losses, the world's cost
kept while resizes are hot or too few, and a fitted lookahead that learns a checkpoint-restart cluster."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dl2.core import ClusterView, JobAllocation, JobView
from dl2.sim.config import RescaleCost, RescaleKind, SimConfig
from dl2.sim.rescale_fit import MIN_OBSERVATIONS, RescaleFit
from dl2.sim.run import interference_model
from dl2.truth import SCENARIOS, realise
from dl2.truth.run import run_on
from dl2.workload.synthetic import PRESETS, generate

SLOT_S = 1200.0
WORKLOAD = generate(replace(PRESETS["synthetic-small"], num_jobs=6), 2, "small")
SPECS = [job.spec for job in WORKLOAD.jobs]
EMPTY = JobAllocation((), ())


def view(slot: int, jobs: list[tuple[int, JobAllocation, float, float]]) -> ClusterView:
    """jobs: (index into SPECS, allocation held in the previous slot, epochs so far, its throughput then)."""
    views = tuple(
        JobView(SPECS[i], progress, 0.0, allocation, throughput, 0.0, 0) for i, allocation, progress, throughput in jobs
    )
    return ClusterView(slot * SLOT_S, slot, SLOT_S, WORKLOAD.cluster, views, _previous(views))


def _previous(views):
    from dl2.core import Allocation

    return Allocation({v.spec.job_id: v.allocation for v in views})


def epochs(index: int, seconds: float, throughput: float) -> float:
    return seconds * throughput / SPECS[index].samples_per_epoch


def test_the_loss_of_a_resize_and_of_a_start_by_hand() -> None:
    """Job 0 runs on node 0, then moves to node 1 and makes 900 s of progress in its 1,200 s slot: 300 s lost to a
    resize of a running job. Job 1 starts from nothing and makes 1,100 s: 100 s lost to a start. Job 2 keeps its
    placement: nothing learned."""
    fit = RescaleFit()
    a, b, keep = JobAllocation((0,), (2,)), JobAllocation((1,), (2,)), JobAllocation((3,), (3,))
    fit.observe(view(0, [(0, EMPTY, 0.0, 0.0), (1, EMPTY, 0.0, 0.0), (2, EMPTY, 0.0, 0.0)]))
    fit.observe(view(1, [(0, a, 0.1, 50.0), (1, EMPTY, 0.0, 0.0), (2, keep, 0.2, 40.0)]))
    learned = fit.observe(
        view(2, [
            (0, b, 0.1 + epochs(0, 900.0, 50.0), 50.0),
            (1, a, epochs(1, 1100.0, 30.0), 30.0),
            (2, keep, 0.2 + epochs(2, 1200.0, 40.0), 40.0),
        ])
    )  # fmt: skip
    # the first view's starts (job 0 and job 2 from nothing) count as starts too
    assert learned == 2
    assert fit.running_losses == [pytest.approx(300.0)]
    assert fit.start_losses[-1] == pytest.approx(100.0)


def test_the_world_s_cost_is_kept_until_enough_is_seen_or_while_resizes_are_hot() -> None:
    world = RescaleCost()
    fit = RescaleFit()
    fit.running_losses = [200.0] * (MIN_OBSERVATIONS - 1)
    fit.start_losses = [120.0] * MIN_OBSERVATIONS
    assert fit.rescale(world) == world
    fit.running_losses.append(200.0)
    learned = fit.rescale(world)
    assert learned.kind is RescaleKind.CHECKPOINT
    assert (learned.stop_s, learned.restore_min_s, learned.restore_max_s) == (80.0, 120.0, 120.0)
    fit.running_losses = [0.05] * MIN_OBSERVATIONS
    fit.start_losses = [0.05] * MIN_OBSERVATIONS
    assert fit.rescale(world) == world


def test_a_fitted_lookahead_learns_a_checkpoint_restart_cluster_and_not_a_hot_one() -> None:
    """Under a truth whose resizes checkpoint and restart (1 to 6 minutes), the fitted lookahead's what-if runs end
    up resizing at about that cost; on the catalogue's hot resizes they keep the world's."""
    from dl2.rl.fitted_lookahead import make_fitted_lookahead
    from dl2.sim.run import World

    workload = generate(replace(PRESETS["synthetic-small"], num_jobs=30), 3, "small")
    for truth, checkpoint in (
        (replace(SCENARIOS["catalogue"], rescale=RescaleCost(kind=RescaleKind.CHECKPOINT)), True),
        (SCENARIOS["catalogue"], False),
    ):
        cluster = realise(truth, workload)
        built = {}

        def build(speed, compat, built=built):
            built["lookahead"] = make_fitted_lookahead(
                "lookahead:optimus+speedup-hull", World(speed, interference_model()), SimConfig.realistic(),
                "isolate-strict",
            )  # fmt: skip
            return built["lookahead"]

        run_on(cluster, build, SimConfig.realistic(seed=3))
        rescale = built["lookahead"].config.rescale
        if checkpoint:
            assert rescale.kind is RescaleKind.CHECKPOINT
            # the truth's restore is uniform in 30-300 s, its stop 60 s
            assert 30.0 <= rescale.restore_min_s <= 300.0 and rescale.restore_min_s == rescale.restore_max_s
            assert 0.0 <= rescale.stop_s <= 200.0
        else:
            assert rescale == SimConfig.realistic().rescale

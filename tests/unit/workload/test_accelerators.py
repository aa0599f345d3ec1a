"""Accelerator types and their speeds: Gavel's ratios, the slowest worker, the exact reference."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dl2.core import Accelerator, Architecture, ClusterSpec, InputError, JobAllocation, JobSpec, Resources
from dl2.workload.accelerated_speed import AcceleratedSpeedModel, on_accelerators
from dl2.workload.accelerators import (
    ACCELERATOR_TYPES,
    CATALOGUE_TO_GAVEL,
    accelerator_type,
    gavel_path,
    load_gavel_isolated,
    relative_speed,
)
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES
from dl2.workload.speed_fit import ParametricSpeedModel, ShiftedSpeedModel, TermFactors, ring_term
from dl2.workload.traces import alibaba_cluster

V100, K80, P100 = (ACCELERATOR_TYPES[name].accelerator for name in ("V100", "K80", "P100"))
NODE = Resources(gpu=8.0, cpu=64.0, mem_gb=512.0)


@pytest.fixture(scope="module")
def catalogue() -> ParametricSpeedModel:
    return ParametricSpeedModel()


def spec(model: str = "resnet-50", architecture: Architecture = Architecture.PS) -> JobSpec:
    profile = CATALOGUE[model]
    allreduce = architecture is Architecture.ALLREDUCE
    return JobSpec(
        job_id="j",
        model=model,
        arrival_s=0.0,
        declared_epochs=1.0,
        samples_per_epoch=profile.samples_per_epoch,
        worker_demand=profile.worker_demand,
        ps_demand=Resources() if allreduce else profile.ps_demand,
        max_workers=8,
        max_ps=0 if allreduce else 8,
        architecture=architecture,
        requested_ps=0 if allreduce else 1,
    )


# nodes 0-1: V100, 2-3: K80, 4: the reference accelerator (hosts parameter servers)
CLUSTER = ClusterSpec.mixed([(2, NODE, V100), (2, NODE, K80), (1, NODE, None)], name="mixed")


def test_relative_speeds_are_gavels_single_gpu_ratios_by_hand() -> None:
    # Gavel, ResNet-50 alone on one GPU, steps/s at batch 16/32/64/128 (simulation_throughputs.json, rounded):
    # V100 11.396 7.787 4.395 2.497; P100 9.053 4.888 2.619 1.584; K80 2.301 1.237 0.619 0.347
    v100 = (11.396 / 9.053 * 7.787 / 4.888 * 4.395 / 2.619 * 2.497 / 1.584) ** 0.25
    k80 = (2.301 / 9.053 * 1.237 / 4.888 * 0.619 / 2.619 * 0.347 / 1.584) ** 0.25
    assert relative_speed("resnet-50", V100) == pytest.approx(v100, rel=1e-3)  # 1.517
    assert relative_speed("resnet-50", K80) == pytest.approx(k80, rel=1e-3)  # 0.240
    # exactly 1: the reference, a type read as P100, the undisclosed Alibaba types, the CPU-only models
    assert relative_speed("resnet-50", None) == 1.0
    for model in MODEL_NAMES:
        assert relative_speed(model, P100) == 1.0
        assert relative_speed(model, ACCELERATOR_TYPES["G2"].accelerator) == 1.0
    assert relative_speed("dssm", K80) == relative_speed("cnn-text-classification", V100) == 1.0
    assert relative_speed("wlm", ACCELERATOR_TYPES["T4"].accelerator) == pytest.approx(8.1 / 9.3)


def test_every_catalogue_model_is_mapped_and_every_mapped_gavel_model_exists() -> None:
    isolated = load_gavel_isolated()
    assert set(CATALOGUE_TO_GAVEL) == set(MODEL_NAMES)
    measured_models = {model for model, _batch in isolated["p100"]}
    for model, mapping in CATALOGUE_TO_GAVEL.items():
        assert (mapping.gavel_model is None) == (not CATALOGUE[model].uses_gpu)
        assert mapping.gavel_model is None or mapping.gavel_model in measured_models


def test_the_copied_gavel_table_is_the_reference_one() -> None:
    data = json.loads(gavel_path().read_text())
    assert set(data) == {"k80", "p100", "v100", "k80_unconsolidated", "p100_unconsolidated", "v100_unconsolidated"}
    assert data["v100"]["('ResNet-50 (batch size 64)', 1)"]["null"] == pytest.approx(4.395, abs=1e-3)


def test_speed_on_a_v100_and_on_a_k80_node_by_hand(catalogue: ParametricSpeedModel) -> None:
    # 1 worker, 1 PS on another server (kappa 1): 1/S = t0 / r + t1 + t2 + t3 + t4 + t5, r the accelerator's speed
    speed = AcceleratedSpeedModel(catalogue, CLUSTER)
    t0, t1, t2, t3, t4, t5 = catalogue.fits["resnet-50"].coefficients
    rest = t1 + (t2 + t3) + t4 + t5
    for node, accelerator in ((0, V100), (2, K80)):
        expected = 1.0 / (t0 / relative_speed("resnet-50", accelerator) + rest)
        assert speed.placed_throughput(spec(), JobAllocation((node,), (4,))) == pytest.approx(expected, rel=1e-12)
    on_reference = speed.placed_throughput(spec(), JobAllocation((4,), (3,)))
    assert on_reference == catalogue.placed_throughput(spec(), JobAllocation((4,), (3,)))
    on_v100 = speed.placed_throughput(spec(), JobAllocation((0,), (4,)))
    on_k80 = speed.placed_throughput(spec(), JobAllocation((2,), (4,)))
    assert on_k80 < on_reference < on_v100


def test_a_job_over_several_types_runs_at_its_slowest_workers_pace(catalogue: ParametricSpeedModel) -> None:
    speed = AcceleratedSpeedModel(catalogue, CLUSTER)
    mixed = speed.placed_throughput(spec(), JobAllocation((0, 1, 2), (4,)))  # two V100 workers and one K80
    all_k80 = speed.placed_throughput(spec(), JobAllocation((2, 3, 3), (4,)))
    assert mixed == all_k80
    assert speed.compute_factor("resnet-50", (0, 1, 2)) == 1.0 / relative_speed("resnet-50", K80)
    # a parameter server's node does not matter: it runs on CPUs
    assert speed.placed_throughput(spec(), JobAllocation((0,), (2,))) == speed.placed_throughput(
        spec(), JobAllocation((0,), (4,))
    )


def test_an_allreduce_jobs_ring_is_not_sped_up(catalogue: ParametricSpeedModel) -> None:
    speed = AcceleratedSpeedModel(catalogue, CLUSTER)
    fit, profile = catalogue.fits["resnet-50"], CATALOGUE["resnet-50"]
    t0, t1, _, _, t4, _ = fit.coefficients
    r = relative_speed("resnet-50", V100)
    expected = 1.0 / (t0 / r / 2 + (t1 + t4 * 2) + ring_term(fit, profile, 2, True))
    job = spec(architecture=Architecture.ALLREDUCE)
    assert speed.placed_throughput(job, JobAllocation((0, 1))) == pytest.approx(expected, rel=1e-12)


def test_a_truths_compute_factor_and_the_accelerators_multiply(catalogue: ParametricSpeedModel) -> None:
    class Shifted(ShiftedSpeedModel):
        def type_factors(self, model: str) -> tuple[str, TermFactors | None]:
            return model, (0.5, 1.5, 1.0, 2.0)

    speed = AcceleratedSpeedModel(Shifted(catalogue), CLUSTER)
    t0, t1, t2, t3, t4, t5 = catalogue.fits["resnet-50"].coefficients
    r = relative_speed("resnet-50", K80)
    expected = 1.0 / (0.5 / r * t0 + 2.0 * (t1 + t4 + t5) + 1.5 * (t2 + t3))
    assert speed.placed_throughput(spec(), JobAllocation((2,), (4,))) == pytest.approx(expected, rel=1e-12)


def test_a_cluster_of_reference_or_p100_nodes_gives_the_catalogues_floats_exactly(
    catalogue: ParametricSpeedModel,
) -> None:
    reference = ClusterSpec.homogeneous(3, NODE)
    assert on_accelerators(catalogue, reference) is catalogue  # not even wrapped
    p100 = AcceleratedSpeedModel(catalogue, ClusterSpec.homogeneous(3, NODE, accelerator=P100))
    for model in MODEL_NAMES:
        for allocation in (JobAllocation((0, 1), (2,)), JobAllocation((0, 0, 1), (0, 2))):
            assert p100.placed_throughput(spec(model), allocation) == catalogue.placed_throughput(
                spec(model), allocation
            )


def test_an_unknown_accelerator_type_is_refused(catalogue: ParametricSpeedModel) -> None:
    with pytest.raises(InputError, match="unknown accelerator type 'H100'"):
        AcceleratedSpeedModel(catalogue, ClusterSpec.homogeneous(1, NODE, accelerator=Accelerator("H100", 80.0)))
    assert accelerator_type("A10").accelerator == Accelerator("A10", 24.0)


def test_the_alibaba_cluster_has_its_seven_gpu_models_with_their_counts() -> None:
    cluster = alibaba_cluster()
    counts: dict[str, int] = {}
    for node in cluster.nodes:
        assert node.accelerator is not None and node.accelerator.name == node.kind
        counts[node.kind] = counts.get(node.kind, 0) + 1
    assert counts == {"G2": 549, "T4": 404, "P100": 134, "V100M16": 55, "G3": 39, "V100M32": 30, "A10": 2}
    assert {a.mem_gb for a in cluster.accelerators if a is not None} == {None, 16.0, 32.0, 24.0}


def test_an_unknown_gpu_model_in_a_node_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "nodes_gpu.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,8000,32768,1,T4\nn1,8000,32768,1,Z9\n")
    with pytest.raises(InputError) as caught:
        alibaba_cluster(path)
    assert (caught.value.row, caught.value.field) == (2, "model")


def test_mixed_clusters_number_their_nodes_densely() -> None:
    assert [n.node_id for n in CLUSTER.nodes] == [0, 1, 2, 3, 4]
    assert [n.kind for n in CLUSTER.nodes] == ["V100", "V100", "K80", "K80", "default"]
    assert CLUSTER.accelerators == {V100, K80, None}
    assert math.isclose(CLUSTER.total_capacity.gpu, 40.0)

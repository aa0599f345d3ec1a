"""Heterogeneous clusters on Kubernetes: a node's accelerator type from GPU feature discovery's labels, the typed
cluster the controller observes, the records that name each worker's type, the extender's ranking by type, the twin's
labelled kwok nodes, and the progress-backwards check that never compares a replayed slot with its own journal."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dl2.core import Accelerator, ClusterSpec, DecisionRecord, InputError, JobAllocation, Resources
from dl2.core.log_format import cluster_from_json, cluster_to_json, parse_record, records_text
from dl2.kube.accelerator_labels import (
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    accelerator_of,
    node_accelerator,
    product_labels,
)
from dl2.kube.extender import ExtenderArgs, HarmonyExtender, SnapshotCache, best_hosts, worker_type_ranks
from dl2.kube.observe import RawCluster, cluster_spec, snapshot
from dl2.kube.quarantine import Cause, RecordedProgress, reserved
from dl2.kube.reconcile import Reason, Target
from dl2.kube.records import DecisionLog, JournalEntry, SlotJournal, observed, recall
from dl2.placement.config import JOB_INPUTS, SERVER_INPUTS, PlacerConfig
from dl2.placement.policy import HarmonyPlacer, NumpyPlacementPolicy
from dl2.placement.samples import record_run
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import Simulation
from dl2.workload.accelerated_speed import AcceleratedSpeedModel
from dl2.workload.accelerators import ACCELERATOR_TYPES
from testbed.twin import manifests
from tests.builders import tiny_workload

V100, P100, K80 = (ACCELERATOR_TYPES[name].accelerator for name in ("V100", "P100", "K80"))
NODE = Resources(8.0, 64.0, 256.0)


# -- the label ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("product", "memory_mib", "expected"),
    [
        ("Tesla-V100-SXM2-16GB", None, V100),
        ("Tesla-V100-SXM2-16GB", "16160", V100),  # GFD's MiB, rounded to whole GiB: the table's 16
        ("Tesla-V100-SXM2-32GB", None, ACCELERATOR_TYPES["V100M32"].accelerator),
        ("Tesla-V100-PCIE-32GB", "32510", ACCELERATOR_TYPES["V100M32"].accelerator),
        ("Tesla-V100S-PCIE-32GB", None, ACCELERATOR_TYPES["V100M32"].accelerator),
        ("Tesla-P100-PCIE-16GB", None, P100),
        ("Tesla-P100-SXM2-16GB", None, P100),
        ("Tesla-K80", None, K80),
        ("Tesla-T4", None, ACCELERATOR_TYPES["T4"].accelerator),
        ("Tesla-T4", "15360", Accelerator("T4", 15.0)),  # the label's memory, where it differs from the table's
        ("NVIDIA-A10", None, ACCELERATOR_TYPES["A10"].accelerator),
        ("NVIDIA-A10G", None, ACCELERATOR_TYPES["A10"].accelerator),
        ("V100M16", None, ACCELERATOR_TYPES["V100M16"].accelerator),  # a dl2 type name, set by hand
        ("G2", None, ACCELERATOR_TYPES["G2"].accelerator),
        ("NVIDIA-A100-SXM4-40GB", "40960", None),  # no speeds known for it: unrecognised
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", None, None),  # a slice of a GPU
        ("NVIDIA-H100-80GB-HBM3", None, None),
        ("nonsense", "lots", None),
    ],
)
def test_a_gpu_product_maps_to_its_dl2_type(product: str, memory_mib: str | None, expected: Accelerator | None):
    assert accelerator_of(product, memory_mib) == expected


def test_a_node_without_the_label_is_the_reference_type_and_an_unknown_product_is_named():
    assert node_accelerator({}) == (None, None)
    assert node_accelerator({GPU_MEMORY_LABEL: "16160"}) == (None, None)
    assert node_accelerator({GPU_PRODUCT_LABEL: "Tesla-K80"}) == (K80, None)
    assert node_accelerator({GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-40GB"}) == (None, "NVIDIA-A100-SXM4-40GB")


@pytest.mark.parametrize("name", sorted(ACCELERATOR_TYPES))
def test_the_twins_labels_read_back_as_the_same_type(name: str):
    accelerator = ACCELERATOR_TYPES[name].accelerator
    assert node_accelerator(product_labels(accelerator)) == (accelerator, None)
    assert product_labels(None) == {}


# -- observing ---------------------------------------------------------------------------------------------------


def typed_cluster() -> ClusterSpec:
    return ClusterSpec.mixed([(2, NODE, V100), (2, NODE, P100)], "mixed")


def node_objects(cluster: ClusterSpec) -> list[dict[str, Any]]:
    return [manifests.node(n, manifests.node_name(cluster.name, n.node_id, cluster.num_nodes)) for n in cluster.nodes]


def test_observe_builds_typed_nodes_from_node_objects():
    cluster = typed_cluster()
    nodes = node_objects(cluster)
    observed_cluster, _ = cluster_spec(list(reversed(nodes)), "mixed")  # name order, whatever the API's order
    assert [n.accelerator for n in observed_cluster.nodes] == [V100, V100, P100, P100]
    unknown = json.loads(json.dumps(nodes[0]))
    unknown["metadata"]["labels"][GPU_PRODUCT_LABEL] = "NVIDIA-H100-80GB-HBM3"
    assert cluster_spec([unknown], "x")[0].nodes[0].accelerator is None


def test_a_homogeneous_cluster_observes_as_before():
    cluster = ClusterSpec.homogeneous(3, NODE)
    nodes = node_objects(cluster)
    assert all(GPU_PRODUCT_LABEL not in n["metadata"]["labels"] for n in nodes)
    observed_cluster, _ = cluster_spec(nodes, "plain")
    assert observed_cluster.accelerators == {None}
    assert [(n.capacity, n.kind) for n in observed_cluster.nodes] == [(n.capacity, n.kind) for n in cluster.nodes]


def test_what_quarantined_jobs_hold_is_taken_off_a_node_that_keeps_its_type():
    left = reserved(typed_cluster(), {0: Resources(2.0, 8.0, 16.0)})
    assert left.nodes[0].accelerator == V100 and left.nodes[0].capacity.gpu == 6.0
    assert [n.accelerator for n in left.nodes] == [V100, V100, P100, P100]


# -- records -----------------------------------------------------------------------------------------------------


def draft(job_id: str = "a", progress: float = 2.0) -> DecisionRecord:
    return DecisionRecord(
        time_s=600.0, slot_s=600.0, cluster="mixed", job_id=job_id, model="resnet-50", architecture="ps",
        arrival_s=0.0, declared_epochs=10.0, samples_per_epoch=100.0, worker_gpu=1.0, worker_cpu=4.0,
        worker_mem_gb=8.0, ps_cpu=2.0, ps_mem_gb=4.0, max_workers=4, max_ps=4, progress_epochs=progress,
        held_workers=1, held_ps=1, model_version="m/1", incumbent="drf", incumbent_workers=2, incumbent_ps=1,
        proposed_workers=2, proposed_ps=1, applied_workers=2, applied_ps=1, mode="active", observed_epochs=0.0,
    )  # fmt: skip


def round_trip(record: DecisionRecord) -> DecisionRecord:
    return parse_record(records_text([record]), "log.jsonl", 1)


def test_records_name_each_workers_type_and_read_back():
    record = observed(draft(), {"a": 3.0}, {"a": JobAllocation((1, 2), (3,))}, typed_cluster())
    assert record.applied_worker_accelerators == ("V100", "P100")
    assert round_trip(record) == record


def test_records_of_a_homogeneous_cluster_and_old_records_read_as_before():
    plain = observed(draft(), {"a": 3.0}, {"a": JobAllocation((1, 2), (3,))}, ClusterSpec.homogeneous(4, NODE))
    assert plain.applied_worker_accelerators == ()
    assert round_trip(plain) == plain
    old = {k: v for k, v in plain.to_json_dict().items() if k != "applied_worker_accelerators"}
    assert parse_record(json.dumps(old), "old.jsonl", 1) == plain
    # one reference node among typed ones: '' stands for it
    mixed = ClusterSpec.mixed([(1, NODE, None), (1, NODE, K80)])
    assert observed(draft(), {}, {"a": JobAllocation((0, 1), ())}, mixed).applied_worker_accelerators == ("", "K80")


@pytest.mark.parametrize("bad", [["V100"], "V100", [1, 2], ["x" * 300, "V100"]])
def test_a_record_whose_types_do_not_fit_its_workers_is_refused(bad: Any):
    record = observed(draft(), {"a": 3.0}, {"a": JobAllocation((1, 2), ())}, typed_cluster()).to_json_dict()
    with pytest.raises(InputError, match="applied_worker_accelerators"):
        parse_record(json.dumps({**record, "applied_worker_accelerators": bad}), "log.jsonl", 1)


def test_cluster_json_carries_the_types_and_an_old_file_reads_as_reference_nodes():
    cluster = typed_cluster()
    assert cluster_from_json(cluster_to_json(cluster), "cluster.json") == cluster
    plain = ClusterSpec.homogeneous(2, NODE, name="plain")
    assert all("accelerator" not in node for node in cluster_to_json(plain)["nodes"])  # the file as before
    assert cluster_from_json(cluster_to_json(plain), "cluster.json") == plain
    broken = cluster_to_json(cluster)
    broken["nodes"][1]["accelerator"] = {"mem_gb": 16.0}
    with pytest.raises(InputError, match="accelerator"):
        cluster_from_json(broken, "cluster.json")


# -- the extender ------------------------------------------------------------------------------------------------


def placer() -> HarmonyPlacer:
    rng = np.random.default_rng(0)
    layers = [
        (rng.normal(size=(SERVER_INPUTS + JOB_INPUTS, 8)).astype(np.float32), rng.normal(size=8).astype(np.float32)),
        (rng.normal(size=(8, 1)).astype(np.float32), np.zeros(1, np.float32)),
    ]
    return HarmonyPlacer(NumpyPlacementPolicy(layers), PlacerConfig((8,)))


def raw_on(cluster: ClusterSpec, running: dict[int, list[tuple[str, int]]]) -> tuple[RawCluster, list[str]]:
    """Jobs 0..n of a tiny workload (every one a GPU job) on `cluster`'s nodes; job i runs `running[i]`."""
    workload = tiny_workload(num_jobs=len(running) + 1, num_nodes=cluster.num_nodes)
    nodes = node_objects(cluster)
    names = [node["metadata"]["name"] for node in nodes]
    jobs, pods = [], []
    for index, job in enumerate(workload.jobs):
        spec = replace(job.spec, arrival_s=float(index), model="seq2seq", worker_demand=Resources(1.0, 2.0, 8.0))
        obj = manifests.job(spec, f"job-{index}", "team-a", None, "dl2-scheduler")
        obj["metadata"]["uid"] = f"uid-{index}"
        jobs.append(obj)
        plural = "pytorchjobs" if obj["kind"] == "PyTorchJob" else "jobs"
        for count, (role, node) in enumerate(running.get(index, [])):
            pods.append(manifests.pod(spec, f"job-{index}", "team-a", plural, f"uid-{index}", role, count, names[node],
                                      "dl2-scheduler"))  # fmt: skip
    return RawCluster(("team-a",), tuple(jobs), tuple(pods), tuple(nodes)), names


def priorities(raw: RawCluster, names: list[str], index: int, role: str = "worker") -> dict[str, int]:
    cache = SnapshotCache(lambda: raw)
    cache.refresh()
    obj = raw.jobs[index]
    spec = snapshot(raw, 0.0, 0, 1.0, "kubernetes").view.jobs[index].spec
    plural = "pytorchjobs" if obj["kind"] == "PyTorchJob" else "jobs"
    pod = manifests.pod(spec, obj["metadata"]["name"], "team-a", plural, obj["metadata"]["uid"], role, 5, None,
                        "dl2-scheduler")  # fmt: skip
    answer = HarmonyExtender(placer(), cache).prioritize(ExtenderArgs(pod, tuple(names), None))
    return {entry["Host"]: entry["Score"] for entry in answer}


def test_a_worker_prefers_the_type_its_job_runs_on():
    # nodes 0-1 V100, 2-3 P100; job 0 runs a worker on a P100: its next worker goes to a P100 too
    cluster = typed_cluster()
    raw, names = raw_on(cluster, {0: [("worker", 2)]})
    scores = priorities(raw, names, 0)
    assert best_hosts([{"Host": h, "Score": s} for h, s in scores.items()]) <= set(names[2:])
    assert all(scores[name] == 0 for name in names[:2]) and all(scores[name] >= 1 for name in names[2:])


def test_a_job_with_no_worker_yet_prefers_its_fastest_type():
    raw, names = raw_on(typed_cluster(), {0: [("worker", 2)]})
    scores = priorities(raw, names, 1)  # seq2seq gains from a V100 (Gavel's Transformer)
    assert all(scores[name] >= 1 for name in names[:2]) and all(scores[name] == 0 for name in names[2:])


def test_type_ranks_mean_nothing_on_one_type_or_for_a_cpu_worker():
    spec = replace(tiny_workload(1, 2).jobs[0].spec, model="seq2seq", worker_demand=Resources(1.0, 2.0, 8.0))
    assert worker_type_ranks(ClusterSpec.homogeneous(2, NODE), spec, ()) is None
    assert worker_type_ranks(ClusterSpec.homogeneous(2, NODE, accelerator=K80), spec, ()) is None
    cpu = replace(spec, worker_demand=Resources(0.0, 2.0, 8.0))
    assert worker_type_ranks(typed_cluster(), cpu, ()) is None
    assert worker_type_ranks(typed_cluster(), spec, ()) == [0, 0, 1, 1]
    assert worker_type_ranks(typed_cluster(), spec, (3,)) == [1, 1, 0, 0]


# -- the twin ----------------------------------------------------------------------------------------------------


def test_the_twins_nodes_carry_the_label_and_its_jobs_run_at_their_types_speed():
    workload = replace(tiny_workload(2, 4), cluster=typed_cluster())
    labels = [n["metadata"]["labels"] for n in node_objects(workload.cluster)]
    assert [label[GPU_PRODUCT_LABEL] for label in labels] == ["Tesla-V100-SXM2-16GB"] * 2 + ["Tesla-P100-PCIE-16GB"] * 2
    # the simulation the twin plays its jobs' progress with, as it builds it: at the speed of the cluster's types
    # (`on_accelerators`)
    simulation = Simulation(workload, SimConfig.realistic(seed=1), speed_model(Mode.REALISTIC), interference_model())
    assert isinstance(simulation.speed, AcceleratedSpeedModel)


# -- progress backwards ------------------------------------------------------------------------------------------


def journal(slot: int, progress: dict[str, float]) -> SlotJournal:
    entries = tuple(
        JournalEntry(
            replace(draft(job_id, epochs), time_s=600.0 * slot),
            "team-a",
            job_id,
            Target(job_id, 2, 1, Reason.UNCHANGED),
        )
        for job_id, epochs in progress.items()
    )
    return SlotJournal(slot, entries)


def test_a_replayed_slot_compares_progress_with_the_slot_before_not_its_own_journal(tmp_path: Path):
    raw, _ = raw_on(typed_cluster(), {})
    job_id = snapshot(raw, 0.0, 7, 600.0, "mixed").view.jobs[0].spec.job_id
    log = DecisionLog(tmp_path)
    log.write_journal(journal(6, {job_id: 2.0, "b": 1.0}))
    log.write_journal(journal(7, {job_id: 3.5}))  # its progress at 7 was read from Prometheus: 3.5
    recorded = RecordedProgress()
    recall(recorded, DecisionLog(tmp_path))  # a restart within slot 7 finds both journals
    assert recorded.before(7) == {job_id: 2.0, "b": 1.0}  # the replay of 7 compares with 6's
    assert recorded.before(8) == {job_id: 3.5, "b": 1.0}  # slot 8 with 7's
    # the replay reads the annotation only (Prometheus is down): 3.0, behind 7's 3.5, ahead of 6's 2.0
    progressed = json.loads(json.dumps(raw.jobs[0]))
    progressed["metadata"]["annotations"]["dl2.io/progress-epochs"] = "3"
    raw = replace(raw, jobs=(progressed, *raw.jobs[1:]))
    assert not snapshot(raw, 0.0, 7, 600.0, "mixed", recorded=recorded.before(7)).quarantined
    # what the check was for still holds: at slot 8, 3.0 is behind the 3.5 recorded at 7
    backwards = snapshot(raw, 0.0, 8, 600.0, "mixed", recorded=recorded.before(8)).quarantined
    assert [q.cause for q in backwards] == [Cause.PROGRESS_BACKWARDS]
    # the same replay compared with every journal, the slot's own included (as before the fix): quarantined
    everything = {job_id: 3.5}
    assert [q.cause for q in snapshot(raw, 0.0, 7, 600.0, "mixed", recorded=everything).quarantined] == [
        Cause.PROGRESS_BACKWARDS
    ]


def test_recorded_progress_keeps_one_record_a_slot_and_forgets_old_jobs():
    recorded = RecordedProgress()
    recorded.note("a", 1.0, 3)
    recorded.note("a", 1.5, 3)  # the same slot again: replaced
    recorded.note("a", 2.0, 4)
    recorded.note("b", 9.0, 1)
    assert recorded.before(3) == {"b": 9.0}
    assert recorded.before(4) == {"a": 1.5, "b": 9.0}
    assert recorded.before(5) == {"a": 2.0, "b": 9.0}
    recorded.forget_before(2)
    assert recorded.before(5) == {"a": 2.0}


def test_the_simulators_records_name_the_types_as_the_controllers_do():
    workload = replace(tiny_workload(4, 4), cluster=typed_cluster())
    speed = speed_model(Mode.REALISTIC)
    drf = make_scheduler("drf", speed, False, "load-balance")
    records = record_run(workload, drf, SimConfig.realistic(seed=1), speed, interference_model())
    placed = [r for r in records if r.applied_worker_nodes and r.worker_gpu > 0]
    assert placed
    for record in placed:
        names = tuple(workload.cluster.nodes[node].accelerator.name for node in record.applied_worker_nodes)
        assert record.applied_worker_accelerators == names


def test_recorded_progress_answers_for_one_slot_exactly():
    recorded = RecordedProgress()
    recorded.note("a", 1.0, 3)
    recorded.note("a", 2.0, 4)
    recorded.note("b", 9.0, 1)
    assert recorded.at(4) == {"a": 2.0} and recorded.at(3) == {"a": 1.0} and recorded.at(2) == {}

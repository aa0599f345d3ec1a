"""Per-job quarantine (`dl2.kube.quarantine`) by hand: which inputs quarantine a job and why, that the rest of the
cluster is decided as without it (no cluster-wide fallback), and that what it holds stays reserved."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from dl2.core import Architecture, ClusterSpec, JobSpec, NodeSpec, Resources
from dl2.core.limits import MAX_EPOCHS, MAX_TASKS_PER_JOB
from dl2.kube import contract as c
from dl2.kube.models import PolicyRuntime, input_problem, smoke_view
from dl2.kube.observe import RESIZED_SLOT, RawCluster, snapshot
from dl2.kube.quarantine import MAX_PROGRESS_RATIO, Cause, Room, job_problem, reserved
from testbed.twin import manifests
from tests.builders import heuristic_loader, tiny_workload

NODE = Resources(gpu=8.0, cpu=64.0, mem_gb=256.0)
CLUSTER = ClusterSpec.homogeneous(2, NODE)
WORKER = Resources(gpu=1.0, cpu=4.0, mem_gb=16.0)
PS = Resources(cpu=4.0, mem_gb=16.0)


def spec(**fields) -> JobSpec:
    base = JobSpec("j", "resnet-50", 0.0, 10.0, 100.0, WORKER, PS, 8, 4, Architecture.PS, 2, 1)
    return replace(base, **fields)


def problem(progress=0.0, replicas=(2, 1), recorded=None, **fields):
    found = job_problem(spec(**fields), progress, replicas, Room.of(CLUSTER), recorded)
    return found[0] if found is not None else None


@pytest.mark.parametrize(
    ("fields", "cause"),
    [
        ({}, None),
        ({"declared_epochs": 0.0}, Cause.DECLARED_EPOCHS),
        ({"declared_epochs": 1e300}, Cause.DECLARED_EPOCHS),
        ({"declared_epochs": MAX_EPOCHS}, None),  # the bound itself is allowed
        ({"samples_per_epoch": 0.0}, Cause.SAMPLES),
        ({"worker_demand": Resources(gpu=16.0)}, Cause.DEMAND),  # no node has 16 GPUs
        ({"ps_demand": Resources(mem_gb=512.0)}, Cause.DEMAND),
        ({"max_workers": MAX_TASKS_PER_JOB + 1}, Cause.SIZE),
        ({"requested_workers": 9}, Cause.SIZE),  # asks for more than its own maximum
        ({"requested_workers": 10**12, "max_workers": 10**12}, Cause.SIZE),
        # 8 workers of 3 GPUs each fit a node one at a time, but 24 GPUs are more than the cluster's 16
        ({"worker_demand": Resources(gpu=3.0), "requested_workers": 8}, Cause.SIZE),
        # each role alone fits the cluster's 128 CPUs (32 and 120), together they do not: a job may ask for that
        ({"requested_workers": 8, "requested_ps": 4, "ps_demand": Resources(cpu=30.0)}, None),
    ],
)
def test_a_job_is_quarantined_for_what_cannot_be_true(fields, cause):
    assert problem(**fields) is cause


def test_progress_past_twice_the_declared_epochs_non_finite_or_going_back():
    assert problem(progress=MAX_PROGRESS_RATIO * 10.0) is None  # 20 of 10 declared: the bound itself
    assert problem(progress=20.5) is Cause.PROGRESS
    assert problem(progress=math.nan) is Cause.PROGRESS
    assert problem(progress=-1.0) is Cause.PROGRESS
    assert problem(progress=4.0, recorded=5.0) is Cause.PROGRESS_BACKWARDS
    assert problem(progress=5.0, recorded=5.0) is None  # no progress is not going back
    assert problem(replicas=(9, 1)) is Cause.SIZE  # running above its maximum


def test_a_cluster_without_nodes_quarantines_no_job_for_its_size():
    empty = Room.of(ClusterSpec(()))
    assert job_problem(spec(worker_demand=Resources(gpu=16.0)), 0.0, (2, 1), empty) is None
    assert job_problem(spec(declared_epochs=0.0), 0.0, (2, 1), empty) is not None


def test_only_the_clock_is_out_of_range_for_the_whole_cluster():
    view = smoke_view()
    assert input_problem(view) is None
    assert "bad clock" in str(input_problem(replace(view, time_s=math.inf)))
    runaway = replace(view.jobs[0], progress_epochs=1e12)  # a job's own problem is its own (quarantined before)
    assert input_problem(replace(view, jobs=(runaway, *view.jobs[1:]))) is None


def test_the_room_of_a_cluster_keeps_the_nodes_no_other_node_exceeds():
    small, wide, tall = Resources(4.0, 32.0, 128.0), Resources(8.0, 16.0, 64.0), Resources(2.0, 96.0, 512.0)
    cluster = ClusterSpec(tuple(NodeSpec(i, c) for i, c in enumerate([small, wide, NODE, NODE, tall])))
    room = Room.of(cluster)
    assert set(room.largest) == {NODE, tall}  # small and wide fit inside NODE
    assert room.total == Resources(30.0, 272.0, 1216.0)
    assert room.fits_a_node(Resources(2.0, 80.0)) and not room.fits_a_node(Resources(4.0, 80.0))


def test_reserved_takes_what_quarantined_jobs_hold_off_their_nodes():
    cluster = reserved(CLUSTER, {1: Resources(gpu=3.0, cpu=100.0, mem_gb=16.0)})
    assert cluster.nodes[0].capacity == NODE
    assert cluster.nodes[1].capacity == Resources(gpu=5.0, cpu=0.0, mem_gb=240.0)  # never below zero
    assert reserved(CLUSTER, {}) is CLUSTER


# -- through observation: raw objects in, a view without the job out ----------------------------------------------

WORKLOAD = tiny_workload(num_jobs=30, num_nodes=4, seed=3)
NODE_NAMES = [manifests.node_name("hand", n.node_id, WORKLOAD.cluster.num_nodes) for n in WORKLOAD.cluster.nodes]
NOW_S = max(job.spec.arrival_s for job in WORKLOAD.jobs) + 600.0


def job_object(job_spec: JobSpec, name: str, progress: float, **annotations: str | None) -> dict:
    obj = manifests.job(job_spec, name, "team-a")
    obj["metadata"]["uid"] = f"uid-{name}"
    merged = {**obj["metadata"]["annotations"], c.PROGRESS_EPOCHS: repr(progress), **annotations}
    obj["metadata"]["annotations"] = {k: v for k, v in merged.items() if v is not None}
    return obj


def thirty_jobs() -> list[dict]:
    """The workload's 30 jobs, each a quarter of the way through."""
    return [
        job_object(job.spec, manifests.job_name(i, 40, job.spec.model), 0.25 * job.spec.declared_epochs)
        for i, job in enumerate(WORKLOAD.jobs)
    ]


def observe(jobs, pods=(), recorded=None, last_slot=None):
    nodes = [manifests.node(n, name) for n, name in zip(WORKLOAD.cluster.nodes, NODE_NAMES, strict=True)]
    raw = RawCluster(("team-a",), tuple(jobs), tuple(pods), tuple(nodes))
    return snapshot(raw, NOW_S, 7, 600.0, "hand", recorded=recorded, last_slot=last_slot)


def bad_job(**annotations: str | None) -> dict:
    return job_object(replace(WORKLOAD.jobs[0].spec, job_id="bad"), "job-0039-bad", 0.0, **annotations)


@pytest.mark.parametrize(
    ("annotations", "cause", "words"),
    [
        ({c.DECLARED_EPOCHS: "0"}, Cause.DECLARED_EPOCHS, "0 declared epochs"),
        ({c.DECLARED_EPOCHS: "1e300"}, Cause.DECLARED_EPOCHS, "1e+300 declared epochs"),
        ({c.DECLARED_EPOCHS: "1e400"}, Cause.CONTRACT, "finite"),
        ({c.DECLARED_EPOCHS: "NaN"}, Cause.CONTRACT, "finite"),
        ({c.DECLARED_EPOCHS: "-3"}, Cause.CONTRACT, "non-negative"),
        ({c.DECLARED_EPOCHS: "ten"}, Cause.CONTRACT, "not a number"),
        ({c.DECLARED_EPOCHS: None}, Cause.CONTRACT, "missing annotation"),
        ({c.PROGRESS_EPOCHS: "1e12"}, Cause.PROGRESS, "over 2x"),
        ({c.REQUESTED_WORKERS: "1e12"}, Cause.SIZE, "requested 1000000000000 workers"),
        ({c.REQUESTED_WORKERS: "2.5"}, Cause.CONTRACT, "whole number"),
        ({c.SAMPLES_PER_EPOCH: "0"}, Cause.SAMPLES, "0 samples per epoch"),
    ],
)
def test_a_bad_annotation_quarantines_its_job_alone(annotations, cause, words):
    snap = observe([*thirty_jobs(), bad_job(**annotations)])
    (quarantined,) = snap.quarantined
    assert (quarantined.key, quarantined.cause) == ("team-a/job-0039-bad", cause)
    assert words in quarantined.message and quarantined.describe().startswith(f"team-a/job-0039-bad: {cause}: ")
    assert len(snap.view.jobs) == 30
    assert ("bad" in snap.progress) is (cause in (Cause.DECLARED_EPOCHS, Cause.SIZE, Cause.SAMPLES))
    assert snap.view.cluster == snap.cluster  # it holds nothing: nothing to reserve


def test_the_thirty_others_are_decided_as_without_the_bad_job_and_the_model_decides():
    """The bar: `declared-epochs: "0"` among 30 others. The incumbent (DRF, standing in for a model) decides the
    same allocation for the 30 with the bad job there as without it, and there is no fallback."""
    runtime = PolicyRuntime(heuristic_loader("drf"))
    assert runtime.ensure("dl2-policy", "1")
    without = runtime.decide(observe(thirty_jobs()).view, "drf")
    runtime.incumbent("drf").reset()
    runtime.current.scheduler.reset()
    with_bad = observe([*thirty_jobs(), bad_job(**{c.DECLARED_EPOCHS: "0"})])
    decision = runtime.decide(with_bad.view, "drf")
    assert decision.fallback is None and decision.proposer == "dl2-policy/1"
    assert "bad" not in decision.proposal.jobs
    assert decision.proposal.jobs == without.proposal.jobs
    assert sum(a.num_workers for a in decision.proposal.jobs.values()) > 0  # they were given something


def test_what_a_quarantined_job_holds_stays_reserved():
    """A quarantined job running 2 one-GPU workers on the first node: the view's first node has 2 GPUs less (the
    policy may not give them to another job); the node as the decision log describes it is unchanged."""
    bad = bad_job(**{c.DECLARED_EPOCHS: "0"})
    demand = WORKLOAD.jobs[0].spec.worker_demand
    plural = "pytorchjobs" if bad["kind"] == "PyTorchJob" else "jobs"
    pods = [
        manifests.pod(WORKLOAD.jobs[0].spec, "job-0039-bad", "team-a", plural, "uid-job-0039-bad", c.WORKER, i,
                      NODE_NAMES[0], "default-scheduler")
        for i in range(2)
    ]  # fmt: skip
    snap = observe([*thirty_jobs(), bad], pods)
    assert snap.cluster.nodes[0].capacity == WORKLOAD.cluster.nodes[0].capacity
    left = snap.view.cluster.nodes[0].capacity
    assert left == WORKLOAD.cluster.nodes[0].capacity - demand.scaled(2)
    assert [node.capacity for node in snap.view.cluster.nodes[1:]] == [n.capacity for n in snap.cluster.nodes[1:]]


def test_progress_below_its_last_record_quarantines_the_job_until_it_passes_it():
    jobs = thirty_jobs()
    first = WORKLOAD.jobs[0].spec
    recorded = {first.job_id: 0.5 * first.declared_epochs}  # its last record: half way; now a quarter
    (quarantined,) = observe(jobs, recorded=recorded).quarantined
    assert quarantined.cause is Cause.PROGRESS_BACKWARDS and "re-created" in quarantined.message
    assert observe(jobs, recorded={first.job_id: 0.25 * first.declared_epochs}).quarantined == ()


def test_a_second_job_with_the_same_id_is_quarantined():
    jobs = thirty_jobs()
    twin = job_object(WORKLOAD.jobs[0].spec, "job-0039-copy", 0.0)
    snap = observe([*jobs, twin])
    assert [(q.name, q.cause) for q in snap.quarantined] == [("job-0039-copy", Cause.DUPLICATE_ID)]
    assert len(snap.view.jobs) == 30


def test_a_jobs_throughput_over_the_slot_before_is_what_it_gained_since_its_record_then():
    """The view carries each job's observed samples/s over the last slot, as the simulator's does, so that a fit
    per job or per server learns under `dl2 serve` too: (epochs now - epochs recorded at slot 6) x samples per epoch
    / the slot's 600 s; a job not decided at slot 6, or that gained nothing, shows 0."""
    jobs = thirty_jobs()
    first, second, third = (WORKLOAD.jobs[i].spec for i in range(3))
    quarter = {spec.job_id: 0.25 * spec.declared_epochs for spec in (first, second, third)}
    last_slot = {first.job_id: quarter[first.job_id] - 0.5, second.job_id: quarter[second.job_id]}
    views = {job.spec.job_id: job for job in observe(jobs, last_slot=last_slot).view.jobs}
    assert views[first.job_id].last_throughput == pytest.approx(0.5 * first.samples_per_epoch / 600.0)
    assert views[second.job_id].last_throughput == 0.0  # no progress since
    assert views[third.job_id].last_throughput == 0.0  # not decided at slot 6
    assert all(job.last_throughput == 0.0 for job in observe(jobs).view.jobs)
    # resized at slot 6: what it gained then holds the resize's pause, not its speed
    jobs[0]["metadata"]["annotations"][RESIZED_SLOT] = "6"
    resized = {job.spec.job_id: job for job in observe(jobs, last_slot=last_slot).view.jobs}
    assert resized[first.job_id].last_throughput == 0.0

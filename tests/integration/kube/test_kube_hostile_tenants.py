"""Hostile tenants on the real control plane: jobs whose annotations are absurd, missing, non-numeric, negative,
huge or self-contradicting, progress that goes back, a job deleted and re-created under the same name between two
slots, and a thousand jobs in one namespace. In each case the job is quarantined (`dl2.kube.quarantine`) where
everyone can see it (the SchedulerPolicy's status, one Warning Event on the job, `dl2_quarantined_jobs`), no
other job's decision changes, the incumbent never stands in for the whole cluster, and nothing unreal reaches the
decision records."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from dl2.core import Architecture, JobSpec, Resources
from dl2.core.limits import MAX_EPOCHS, MAX_TASKS_PER_JOB
from dl2.core.log_format import read_log
from dl2.kube import contract
from dl2.kube.controller import Controller, ControllerConfig
from dl2.kube.models import PolicyRuntime
from dl2.kube.observe import snapshot
from dl2.kube.quarantine import MAX_PROGRESS_RATIO
from dl2.kube.rest import EVENTS, PYTORCHJOBS, VOLCANO_JOBS
from dl2.placement.samples import record_run
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.workload.catalogue import CATALOGUE
from testbed.harness import clock
from testbed.twin import manifests, reference_result, start_twin
from tests.builders import heuristic_loader, tiny_workload

CONFIG = SimConfig.realistic(seed=1)
NAMESPACE = "team-a"
WORKER = Resources(gpu=1.0, cpu=4.0, mem_gb=16.0)


class Tenants:
    """A twin, a policy and an in-process controller. What a tenant writes goes through an admin client, and the
    controller's next slot waits until its caches hold it (the twin's clock only covers the twin's own writes)."""

    def __init__(self, kube, tmp_path, policies):
        self.kube = kube
        self.tmp_path = tmp_path
        self.policies = policies
        self.rest = kube.rest()
        self.cluster = None
        self.controller = None

    def start(self, workload, mode="active"):
        self.cluster = start_twin(self.kube.twin_api(), workload, CONFIG)
        self.policies.create(mode)
        config = ControllerConfig("a", decision_log=self.tmp_path / "decisions", clock="cluster")
        self.controller = Controller(self.kube.controller_api(), config, heuristic_loader("drf"))
        self.controller.refresh_policy(self.policies.read())
        return self.controller

    def slot(self):
        now = clock(self.rest)
        barrier = dict(now.resource_versions)
        for key, version in self.rest.written.items():
            barrier[key] = max(barrier.get(key, 0), version)
        report = self.controller.run_slot(now.slot, now.time_s, now.slot_s, barrier)
        assert report.fallback is None, report.fallback  # no job of a tenant's makes the incumbent decide for all
        assert self.sample("dl2_fallback_active") == 0
        return report

    def run(self, max_slots=None, between=None):
        """Slot after slot (`between(i)` after the controller's slot i, before the twin moves on) until the twin is
        done; the reports."""
        reports = []
        for index in itertools.count():
            if max_slots is not None and index >= max_slots:
                break
            reports.append(self.slot())
            if between is not None:
                between(index)
            if self.cluster.done:
                break
            self.cluster.advance()
        return reports

    def create(self, obj):
        return self.rest.create(resource_of(obj), obj["metadata"]["namespace"], obj)

    def patch(self, obj, annotations):
        metadata = obj["metadata"]
        body = {"metadata": {"annotations": annotations}}
        return self.rest.merge_patch(resource_of(obj), metadata["namespace"], metadata["name"], body)

    def status(self):
        return self.policies.read()["status"]

    def quarantined(self):
        """`namespace/name` -> its cause, from the SchedulerPolicy's status."""
        return {entry.split(": ")[0]: entry.split(": ")[1] for entry in self.status()["quarantinedJobs"]}

    def sample(self, name, **labels):
        return self.controller.metrics.registry.get_sample_value(name, labels or None)

    def warnings(self, name, namespace=NAMESPACE):
        """The notes of the Quarantined Events about a job, in the order they were made."""
        self.controller.events.flush()
        found = [e for e in self.rest.list(EVENTS, namespace)
                 if e["regarding"]["name"] == name and e["reason"] == "Quarantined"]  # fmt: skip
        return [e["note"] for e in sorted(found, key=lambda e: e["eventTime"])]

    def read(self, obj):
        """The job as the API server holds it now."""
        metadata = obj["metadata"]
        return self.rest.get(resource_of(obj), metadata["namespace"], metadata["name"])

    def records(self):
        return read_log(self.tmp_path / "decisions" / "dl2-local")

    def close(self):
        if self.controller is not None:
            self.controller.cache.stop()
            self.controller.events.stop()
        if self.cluster is not None:
            self.cluster.close()


def resource_of(obj):
    return PYTORCHJOBS if obj["kind"] == "PyTorchJob" else VOLCANO_JOBS


@pytest.fixture
def tenants(kube, tmp_path, policies):
    running = Tenants(kube, tmp_path, policies)
    yield running
    running.close()


def hand_made(name, architecture=Architecture.ALLREDUCE, **annotations):
    """A job a tenant submits by hand (no twin runs its pods): 2 one-GPU workers of at most 4, with `annotations`
    over the contract's (None removes one)."""
    ps = Architecture.PS is architecture
    spec = JobSpec(
        name, "resnet-50", 0.0, 10.0, CATALOGUE["resnet-50"].samples_per_epoch, WORKER,
        Resources(cpu=4.0, mem_gb=16.0) if ps else Resources(), 4, 2 if ps else 0, architecture, 2, 1 if ps else 0,
    )  # fmt: skip
    obj = manifests.job(spec, name, NAMESPACE)
    merged = {**obj["metadata"]["annotations"], **annotations}
    obj["metadata"]["annotations"] = {key: value for key, value in merged.items() if value is not None}
    return obj


def assert_nothing_unreal(records, quarantined_ids=()):
    """Every record holds values that can be true, progress never goes back, and quarantined jobs have none."""
    assert records
    assert not {r.job_id for r in records} & set(quarantined_ids)
    last: dict[str, float] = {}
    for record in sorted(records, key=lambda r: r.time_s):
        assert 0 < record.declared_epochs <= MAX_EPOCHS
        assert 0 <= record.progress_epochs <= MAX_PROGRESS_RATIO * record.declared_epochs
        assert record.max_workers <= MAX_TASKS_PER_JOB and record.applied_workers <= record.max_workers
        assert record.applied_ps <= record.max_ps
        assert record.progress_epochs >= last.get(record.job_id, 0.0), record
        last[record.job_id] = record.progress_epochs


def assert_the_decision_log_suite_passes(tenants):
    """The log passes the decision-log suite that `collect` runs before any record is learned from."""
    from pipelines import params, validate
    from pipelines.stage import Layout

    layout = Layout(tenants.tmp_path / "validation")
    report = validate.validate_log(tenants.tmp_path / "decisions" / "dl2-local", params.load(smoke=True), layout)
    assert report["success"] is True, validate.failure_text(report, "-")


def test_a_job_declaring_zero_epochs_among_thirty_changes_no_other_decision(tenants):
    """The bar: `declared-epochs: "0"` among 30 others. DRF active through the API: every one of the 30 is sized
    in every slot exactly as the simulator sizes it without the bad job, the model decides throughout
    (`dl2_fallback_active` 0), and the bad job is quarantined with its reason, left at its size, never recorded."""
    workload = tiny_workload(num_jobs=30, num_nodes=2, seed=3)
    controller = tenants.start(workload)
    created = tenants.create(hand_made("zero-epochs", **{contract.DECLARED_EPOCHS: "0"}))
    tenants.run(max_slots=12)
    key = f"{NAMESPACE}/zero-epochs"
    assert tenants.quarantined() == {key: "declared-epochs"}
    status = tenants.status()
    assert status["counts"]["quarantined"] == 1 and status["counts"]["fallbackSlots"] == 0
    assert {c["type"]: c["status"] for c in status["conditions"]}["Fallback"] == "False"
    assert tenants.sample("dl2_quarantined_jobs", reason="declared-epochs") == 1
    assert tenants.warnings("zero-epochs") == [
        "left at its size, not decided, not recorded: declared-epochs: 0 declared epochs, outside (0, 1e+07]"
    ]  # once, not every slot
    assert contract.replicas(tenants.read(created)) == contract.replicas(created) == (2, 0)
    assert "zero-epochs" not in {job.job_id for job in controller.last_snapshot.jobs}
    # the 30: the same sizes as the simulator gives them with DRF and no bad job, slot by slot
    records = tenants.records()
    assert_nothing_unreal(records, {"zero-epochs"})
    speed = speed_model(Mode.REALISTIC)
    drf = make_scheduler("drf", speed, False, "load-balance")
    simulated = {(r.time_s, r.job_id): r for r in record_run(workload, drf, CONFIG, speed, interference_model())}
    assert len(records) > 30
    for record in records:
        direct = simulated[(record.time_s, record.job_id)]
        assert (record.proposed_workers, record.proposed_ps) == (direct.proposed_workers, direct.proposed_ps)
        assert (record.applied_workers, record.applied_ps) == (direct.applied_workers, direct.applied_ps)


HOSTILE = {
    "absurd-progress": ({contract.PROGRESS_EPOCHS: "1e12"}, "progress"),
    "huge-epochs": ({contract.DECLARED_EPOCHS: "1e300"}, "declared-epochs"),
    "infinite-epochs": ({contract.DECLARED_EPOCHS: "1e400"}, "contract"),
    "no-model": ({contract.MODEL: None}, "contract"),
    "no-epochs": ({contract.DECLARED_EPOCHS: None}, "contract"),
    "ten-epochs": ({contract.DECLARED_EPOCHS: "ten"}, "contract"),
    "nan-progress": ({contract.PROGRESS_EPOCHS: "NaN"}, "contract"),
    "negative-workers": ({contract.REQUESTED_WORKERS: "-2"}, "contract"),
    "huge-workers": ({contract.REQUESTED_WORKERS: "1e12"}, "size"),
    "more-than-max": ({contract.REQUESTED_WORKERS: "8"}, "size"),  # its maxReplicas is 4
    "no-samples": ({contract.SAMPLES_PER_EPOCH: "0"}, "samples-per-epoch"),
}


def test_absurd_missing_non_numeric_negative_huge_and_contradicting_annotations(tenants):
    """Eleven hostile jobs beside the twin's eight: each quarantined with its cause and one Event, the eight finish
    exactly as DRF runs them alone, no record of a hostile job. A job whose cause changes gets an Event for the
    new cause; a job whose annotation is mended is decided again."""
    workload = tiny_workload(num_jobs=8, num_nodes=2)
    tenants.start(workload)
    for name, (written, _) in HOSTILE.items():
        tenants.create(hand_made(name, **written))
    ps_job = hand_made("ps-over-max", Architecture.PS, **{contract.MAX_PS: "0"})  # runs 1 PS, allows none
    tenants.create(ps_job)
    reports = tenants.run()
    expected = {f"{NAMESPACE}/{name}": cause for name, (_, cause) in HOSTILE.items()}
    expected[f"{NAMESPACE}/ps-over-max"] = "size"
    assert tenants.quarantined() == expected
    assert tenants.status()["counts"]["quarantined"] == len(expected)
    for cause in set(expected.values()):
        assert tenants.sample("dl2_quarantined_jobs", reason=cause) == list(expected.values()).count(cause)
    for key in expected:
        assert len(tenants.warnings(key.split("/")[1])) == 1
    through_api = {j.job_id: (j.finish_s, j.num_rescales) for j in tenants.cluster.result().jobs}
    direct = {j.job_id: (j.finish_s, j.num_rescales) for j in reference_result(workload, "drf", CONFIG).jobs}
    assert through_api == direct and len(reports) > 4
    assert_nothing_unreal(tenants.records(), set(HOSTILE) | {"ps-over-max"})
    # the cause changes: a second Event, naming the new one; mended: decided and recorded again
    stored = tenants.rest.get(PYTORCHJOBS, NAMESPACE, "ten-epochs")
    tenants.patch(stored, {contract.DECLARED_EPOCHS: "1e300"})
    tenants.slot()
    notes = tenants.warnings("ten-epochs")
    assert len(notes) == 2 and "declared-epochs: 1e+300 declared epochs" in notes[1]
    tenants.patch(stored, {contract.DECLARED_EPOCHS: "10"})
    tenants.slot()
    assert f"{NAMESPACE}/ten-epochs" not in tenants.quarantined()
    assert "ten-epochs" in {job.name for job in tenants.controller.last_snapshot.jobs}


def test_a_running_job_quarantined_keeps_its_size_and_what_it_holds(tenants):
    """A twin job holding pods gets `declared-epochs: "0"` mid-run: from the next slot it is never resized or
    recorded, and what the others are given fits in the cluster less what it holds. Progress patched below what
    its records say quarantines another job too (the records never go back)."""
    workload = tiny_workload(num_jobs=8, num_nodes=2)
    controller = tenants.start(workload)
    tenants.run(max_slots=3)
    snap = controller.last_snapshot
    running = [(job, view) for job, view in zip(snap.jobs, snap.view.jobs, strict=True) if view.allocation.num_workers]
    (victim, _), (backwards, recorded) = running[0], running[-1]
    assert recorded.progress_epochs > 0
    tenants.patch(victim.obj, {contract.DECLARED_EPOCHS: "0"})
    tenants.patch(backwards.obj, {contract.PROGRESS_EPOCHS: repr(recorded.progress_epochs / 2)})
    held = contract.replicas(tenants.read(victim.obj))
    report = tenants.slot()
    causes = {key.split("/")[1]: cause for key, cause in tenants.quarantined().items()}
    assert causes == {victim.name: "declared-epochs", backwards.name: "progress-backwards"}
    assert victim.job_id not in {t.job_id for t in report.targets}
    snap = controller.last_snapshot
    gpus = sum(node.capacity.gpu for node in snap.cluster.nodes)
    reserved = gpus - sum(node.capacity.gpu for node in snap.view.cluster.nodes)
    assert reserved > 0  # its pods' GPUs are not the policy's to give
    given = sum(t.workers * v.spec.worker_demand.gpu for t, v in zip(report.targets, snap.view.jobs, strict=True))
    assert given + reserved <= gpus
    tenants.cluster.advance()
    tenants.run(max_slots=6)
    assert contract.replicas(tenants.read(victim.obj)) == held  # never resized since
    records = tenants.records()
    assert_nothing_unreal(records)
    last = max((r for r in records if r.job_id == victim.job_id), key=lambda r: r.time_s)
    assert last.time_s < snap.view.time_s  # none since
    assert last.observed_epochs > 0  # what it did in its last recorded slot: its progress is still believed
    assert len(tenants.warnings(victim.name, victim.namespace)) == 1


def test_a_job_deleted_and_re_created_under_the_same_name_between_slots(tenants):
    """Between two slots a tenant deletes a job that has trained and submits it again under the same name: the new
    job starts from 0 epochs, below what the records say of that name, so it is quarantined (`progress-backwards`,
    naming the re-creation) rather than recorded as the old job going back; the old job's last slot is recorded as
    a job that is gone (0 epochs observed)."""
    workload = tiny_workload(num_jobs=8, num_nodes=2)
    controller = tenants.start(workload)
    tenants.run(max_slots=3)
    snap = controller.last_snapshot
    trained = max(snap.view.jobs, key=lambda job: job.progress_epochs)
    assert trained.progress_epochs > 0
    old = next(job.obj for job in snap.jobs if job.job_id == trained.spec.job_id)
    metadata = old["metadata"]
    resource = PYTORCHJOBS if old["kind"] == "PyTorchJob" else VOLCANO_JOBS

    deleted_at: list[float] = []

    def recreate(index):
        if index == 0:
            now = controller.last_snapshot.view.jobs
            deleted_at.append(next(v.progress_epochs for v in now if v.spec.job_id == trained.spec.job_id))
            tenants.rest.delete_now(resource, metadata["namespace"], metadata["name"])
            annotations = {**metadata["annotations"], contract.PROGRESS_EPOCHS: "0"}
            again = {"apiVersion": old["apiVersion"], "kind": old["kind"], "spec": old["spec"],
                     "metadata": {"name": metadata["name"], "namespace": metadata["namespace"],
                                  "labels": metadata.get("labels") or {}, "annotations": annotations}}  # fmt: skip
            tenants.rest.create(resource, metadata["namespace"], again)

    tenants.run(max_slots=2, between=recreate)
    key = f"{metadata['namespace']}/{metadata['name']}"
    assert tenants.quarantined()[key] == "progress-backwards"
    (note,) = tenants.warnings(metadata["name"], metadata["namespace"])
    assert "re-created under the same id" in note
    records = tenants.records()
    assert_nothing_unreal(records)
    mine = sorted((r for r in records if r.job_id == trained.spec.job_id), key=lambda r: r.time_s)
    assert mine[-1].progress_epochs == deleted_at[0] and mine[-1].observed_epochs == 0
    assert_the_decision_log_suite_passes(tenants)


def test_a_thousand_jobs_in_one_namespace(tenants):
    """1,000 hand-made jobs in one namespace, one in ten hostile (five kinds), in shadow mode: one slot decides the
    900 and the twin's jobs as the incumbent decides them with the hostile ones gone, quarantines the 100 with
    one Event each, and records none of them."""
    workload = tiny_workload(num_jobs=4, num_nodes=2)
    controller = tenants.start(workload, mode="shadow")
    kinds = [
        {contract.DECLARED_EPOCHS: "0"}, {contract.DECLARED_EPOCHS: "abc"}, {contract.PROGRESS_EPOCHS: "-1"},
        {contract.REQUESTED_WORKERS: "1e12"}, {contract.PROGRESS_EPOCHS: "99"},
    ]  # fmt: skip
    jobs = [hand_made(f"job-{i:04d}", **(kinds[(i // 10) % 5] if i % 10 == 0 else {})) for i in range(1000)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(tenants.create, jobs))
    tenants.run(max_slots=2)
    quarantined = tenants.quarantined()
    status = tenants.status()
    assert status["counts"]["quarantined"] == 100 and len(quarantined) == 20  # the status lists the first 20
    counted = {r: tenants.sample("dl2_quarantined_jobs", reason=r) for r in ("declared-epochs", "contract", "size",
                                                                              "progress")}  # fmt: skip
    assert counted == {"declared-epochs": 20, "contract": 40, "size": 20, "progress": 20}
    hostile = {f"job-{i:04d}" for i in range(0, 1000, 10)}
    assert len(tenants.warnings("job-0000")) == 1
    controller.events.flush()
    warned = {e["regarding"]["name"] for e in tenants.rest.list(EVENTS, NAMESPACE) if e["reason"] == "Quarantined"}
    assert warned == hostile
    assert len(controller.last_snapshot.jobs) >= 900
    records = tenants.records()
    assert_nothing_unreal(records, hostile)
    # the same slot decided on a read without the hostile jobs: the same proposal for every other job
    raw = controller.cache.read()
    kept = tuple(j for j in raw.jobs if j["metadata"]["name"] not in hostile)
    snap = controller.last_snapshot
    clean = snapshot(replace(raw, jobs=kept), snap.view.time_s, snap.view.slot, snap.view.slot_s, "dl2-local")
    runtime = PolicyRuntime(heuristic_loader("drf"))
    expected = runtime.decide(clean.view, "drf").proposal
    journal = controller.log.journal(snap.view.slot)
    assert journal is not None and len(journal.entries) == len(clean.view.jobs)
    for entry in journal.entries:
        allocation = expected.get(entry.record.job_id)
        proposed = (entry.record.proposed_workers, entry.record.proposed_ps)
        assert proposed == (allocation.num_workers, allocation.num_ps)

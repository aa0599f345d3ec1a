"""The controller end to end against the local API server in simulated mode: the slot loop, modes, guardrails,
Kueue, faults, fallbacks, malformed policies, the promotion handshake, leader election, metrics and health."""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import replace

import pytest
from kubernetes import client

from dl2.env.observation import ObservationConfig
from dl2.kube.apiserver import Fault, FaultKind, contract
from dl2.twin import ClusterOptions, reference_result, simulate_cluster
from dl2.kube.controller import Controller, ControllerConfig
from dl2.kube.leader import LeaseConfig, LeaseElector
from dl2.kube.metrics import HealthServer
from dl2.kube.models import input_problem, smoke_view
from dl2.kube.promotion import confirm_hook, promote_policy
from dl2.kube.watch import ObjectWatcher
from dl2.rl.feedback import feedback_batch
from dl2.schedulers.registry import PLACERS
from dl2.sim.config import SimConfig
from dl2.sim.decision_log import read_log
from tests.kube_helpers import (
    CONTROLLER_AGENT,
    POLICIES,
    api_client,
    clock,
    controller_api,
    heuristic_loader,
    kube_server,
    policy_object,
)
from tests.test_kube_simcluster import tiny_workload

CONFIG = SimConfig.realistic(seed=1)
JOB_WRITES = {"pytorchjobs", "pytorchjobs/scale", "jobs"}


@pytest.fixture
def server():
    with kube_server() as running:
        yield running


def start(server, tmp_path, mode="active", workload=None, options=None, loader=None, identity="a", **spec):
    workload = workload or tiny_workload(num_jobs=8, num_nodes=2)
    cluster = simulate_cluster(server, workload, CONFIG, options=options)
    server.create(POLICIES, None, policy_object(mode, **spec))
    config = ControllerConfig(identity, decision_log=tmp_path / "decisions", clock="cluster")
    controller = Controller(controller_api(server, identity), config, loader or heuristic_loader("drf"))
    controller.refresh_policy(server.objects(POLICIES)["default"])
    return workload, cluster, controller


def run(server, cluster, controller, max_slots=None, before_slot=None):
    """Lock step: the controller runs the cluster's slot, then the cluster advances; returns the slot reports."""
    reports = []
    while max_slots is None or len(reports) < max_slots:
        if before_slot is not None:
            before_slot(len(reports))
        reports.append(controller.run_slot(*clock(server)))
        if cluster.done:
            break
        cluster.advance()
    return reports


def writes_to_jobs(server, agent=CONTROLLER_AGENT):
    return [
        r
        for r in server.records()
        if agent in r.user_agent and r.rbac_resource in JOB_WRITES and r.verb in ("patch", "update", "create")
    ]


def test_active_mode_runs_drf_through_the_api_exactly_and_logs_every_job_once(server, tmp_path):
    workload, cluster, controller = start(server, tmp_path)
    reports = run(server, cluster, controller)
    through_api = {j.job_id: (j.finish_s, j.num_rescales) for j in cluster.result().jobs}
    direct = {j.job_id: (j.finish_s, j.num_rescales) for j in reference_result(workload, "drf", CONFIG).jobs}
    assert through_api == direct  # the same allocations in every slot
    records = read_log(tmp_path / "decisions" / "dl2-local")
    keys = Counter((r.time_s, r.job_id) for r in records)
    assert max(keys.values()) == 1  # keyed by (slot, job): nothing twice
    assert len(records) == sum(report.jobs for report in reports)  # every active job of every slot
    assert {r.mode for r in records} == {"active"} and {r.model_version for r in records} == {"dl2-policy/1"}
    # the observed progress of slot t is the progress read at t+1; summed, it is every job's epochs
    epochs = Counter()
    for record in records:
        epochs[record.job_id] += record.observed_epochs
        assert record.applied_workers == record.proposed_workers and record.applied_ps == record.proposed_ps
    assert epochs == pytest.approx({j.spec.job_id: j.spec.declared_epochs for j in workload.jobs})
    assert sum(report.resizes for report in reports) == len(writes_to_jobs(server, "dl2-serve/a")) - sum(
        1 for r in writes_to_jobs(server) if r.rbac_resource == "pytorchjobs"
    )  # a PyTorchJob's resize is its annotation plus its scale patch
    # the trainer reads the records as it reads a simulated log
    batch = feedback_batch(records, workload.cluster, ObservationConfig(window=8), PLACERS["load-balance"]())
    assert batch.num_slots == len({r.time_s for r in records}) and len(batch) > 0
    status = server.objects(POLICIES)["default"]["status"]
    assert status["lastSlot"] == reports[-1].slot and status["loadedModel"]["version"] == "1"
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Ready": "True", "SpecValid": "True", "ModelLoaded": "True", "Fallback": "False",
    }  # fmt: skip


def test_shadow_records_every_decision_and_writes_nothing_to_jobs(server, tmp_path):
    _, cluster, controller = start(server, tmp_path, mode="shadow", loader=heuristic_loader("optimus"))
    before = {n: contract.replicas(j) for n, j in server.objects("kubeflow.org/v1/pytorchjobs").items()}
    reports = run(server, cluster, controller, max_slots=12)
    assert writes_to_jobs(server) == []
    assert all(report.resizes == 0 for report in reports)
    records = read_log(tmp_path / "decisions" / "dl2-local")
    assert records and {r.mode for r in records} == {"shadow"}
    # the policy proposed changes, none of which was applied: what ran is what the users asked for
    assert any((r.proposed_workers, r.proposed_ps) != (r.applied_workers, r.applied_ps) for r in records)
    assert all(r.incumbent == "drf" for r in records)
    after = server.objects("kubeflow.org/v1/pytorchjobs")
    assert {n: contract.replicas(after[n]) for n in before} == before


def test_canary_stays_in_scope_and_the_guardrails_hold(server, tmp_path):
    guardrails = {"maxReplicas": 3, "maxStepPerSlot": 1, "cooldownSlots": 1, "maxJobsChangedPerSlot": 2}
    workload = tiny_workload(num_jobs=10, num_nodes=2)
    workload, cluster, controller = start(
        server, tmp_path, mode="canary", workload=workload, canary={"namespaces": ["team-a"]}, guardrails=guardrails
    )
    reports = []
    resized_at: dict[str, list[int]] = {}
    for _ in range(25):
        report = controller.run_slot(*clock(server))
        snap = controller.last_snapshot
        actual = {job.job_id: job.replicas for job in snap.jobs}
        namespace = {job.job_id: job.namespace for job in snap.jobs}
        changed = [t for t in report.targets if t.size != actual[t.job_id]]
        assert len(changed) <= 2
        for target in changed:
            assert namespace[target.job_id] == "team-a"
            workers, ps = actual[target.job_id]
            assert abs(target.workers - workers) <= 1 and abs(target.ps - ps) <= 1
            for size, before in ((target.workers, workers), (target.ps, ps)):
                assert size <= 3 or size == before - 1  # within maxReplicas, or stepping down to it
            resized_at.setdefault(target.job_id, []).append(report.slot)
        reports.append(report)
        if cluster.done:
            break
        cluster.advance()
    assert sum(r.resizes for r in reports) > 0
    for slots in resized_at.values():  # cooldown: never two resizes of a job in consecutive slots
        assert all(b - a >= 2 for a, b in itertools.pairwise(slots))
    writes = writes_to_jobs(server)
    assert writes and {w.namespace for w in writes} == {"team-a"}


def test_kueue_jobs_are_left_alone_and_reported(server, tmp_path):
    options = ClusterOptions(kueue_fraction=0.5, seed=2)
    _, cluster, controller = start(server, tmp_path, options=options)
    run(server, cluster, controller, max_slots=6)
    jobs = {**server.objects("kubeflow.org/v1/pytorchjobs"), **server.objects("batch.volcano.sh/v1alpha1/jobs")}
    kueue = {name for name, job in jobs.items() if contract.is_kueue_managed(job)}
    assert kueue and kueue != set(jobs)
    touched = {w.name for w in writes_to_jobs(server)}
    assert touched and not touched & kueue
    status = server.objects(POLICIES)["default"]["status"]
    listed = {key.split("/")[1] for key in status["kueueJobs"]}
    active = {job.name for job in controller.last_snapshot.jobs if job.kueue}
    assert listed == active and status["counts"]["kueueManaged"] == len(active)


def test_api_faults_are_survived_with_backoff_and_change_no_decision(server, tmp_path):
    workload, cluster, controller = start(server, tmp_path)
    controller.call.timeout_s = 0.3
    agent = "dl2-serve/a"
    faults = [
        Fault(FaultKind.ERROR, code=409, verb="patch", resource="pytorchjobs/scale", user_agent=agent, count=3),
        Fault(FaultKind.ERROR, code=500, verb="list", resource="pods", user_agent=agent, count=2),
        Fault(FaultKind.ERROR, code=503, verb="patch", resource="jobs", user_agent=agent, count=2),
        Fault(FaultKind.DELAY, delay_s=1.0, verb="list", resource="nodes", user_agent=agent, count=2),
        Fault(FaultKind.ERROR, code=429, verb="patch", resource="schedulerpolicies/status", user_agent=agent, count=1),
    ]
    for fault in faults:
        server.add_fault(fault)
    run(server, cluster, controller)
    through_api = {j.job_id: j.finish_s for j in cluster.result().jobs}
    assert through_api == {j.job_id: j.finish_s for j in reference_result(workload, "drf", CONFIG).jobs}
    errors = {
        (sample.labels["operation"], sample.labels["code"]): sample.value
        for metric in controller.metrics.api_errors.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }
    assert errors[("patch_namespaced_custom_object_scale", "409")] == 3
    assert errors[("list_pod_for_all_namespaces", "500")] == 2
    assert errors[("patch_namespaced_custom_object", "503")] == 2
    assert errors[("list_node", "ReadTimeoutError")] == 2
    assert errors[("patch_cluster_custom_object_status", "429")] == 1


def test_a_watch_survives_dropped_streams_and_expired_versions(server):
    from kubernetes import client as k8s

    server.create(POLICIES, None, policy_object("shadow"))
    api = controller_api(server)
    from dl2.kube.metrics import Metrics

    watcher = ObjectWatcher(
        k8s.CustomObjectsApi(api).list_cluster_custom_object, ("dl2.io", "v1alpha1", "schedulerpolicies"), "default",
        Metrics(), "schedulerpolicies", watch_timeout_s=30,
    ).start()  # fmt: skip
    try:
        assert watcher.wait_synced(10) and watcher.latest["spec"]["mode"] == "shadow"
        custom = k8s.CustomObjectsApi(api_client(server, "dl2-test"))

        def set_mode(mode):
            watcher.changed.clear()
            custom.patch_cluster_custom_object("dl2.io", "v1alpha1", "schedulerpolicies", "default",
                                               {"spec": {"mode": mode}})  # fmt: skip
            deadline = time.time() + 10
            while time.time() < deadline and (watcher.latest or {}).get("spec", {}).get("mode") != mode:
                time.sleep(0.02)
            return watcher.latest["spec"]["mode"]

        assert set_mode("active") == "active"
        server.drop_watches()
        assert set_mode("canary") == "canary"
        server.add_fault(Fault(FaultKind.DROP_WATCH, delay_s=0.05, resource="schedulerpolicies", count=3))
        server.drop_watches()
        assert set_mode("shadow") == "shadow"
        server.compact()  # the watch's version is gone: 410 on resuming, then a fresh list
        server.drop_watches()
        assert set_mode("off") == "off"
        assert watcher.restarts >= 3
    finally:
        watcher.stop()


def test_a_model_that_fails_to_load_or_raises_falls_back(server, tmp_path):
    class Exploding:
        name = "exploding"

        def __init__(self):
            self.calls = 0

        def reset(self):
            pass

        def schedule(self, view):
            self.calls += 1
            if view.cluster.name == "smoke" or self.calls < 3:
                return heuristic_loader("drf")("m", "1").schedule(view)
            raise RuntimeError("NaN in the policy head")

    exploding = Exploding()
    drf = heuristic_loader("drf", failing=("2",))

    def loader(name, version):
        return exploding if version == "3" else drf(name, version)

    _, cluster, controller = start(server, tmp_path, loader=loader)
    run(server, cluster, controller, max_slots=2)
    custom = client.CustomObjectsApi(api_client(server, "dl2-test"))
    custom.patch_cluster_custom_object("dl2.io", "v1alpha1", "schedulerpolicies", "default",
                                       {"spec": {"model": {"version": "2"}}})  # fmt: skip
    controller.refresh_policy(server.objects(POLICIES)["default"])
    controller.publish_status()
    status = server.objects(POLICIES)["default"]["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "LoadFailed"
    assert "still serving dl2-policy v1" in conditions["ModelLoaded"]["message"]
    assert status["loadedModel"]["version"] == "1"  # the last good model keeps serving
    report = run(server, cluster, controller, max_slots=1)[0]
    assert report.fallback is None  # v1 decides
    custom.patch_cluster_custom_object("dl2.io", "v1alpha1", "schedulerpolicies", "default",
                                       {"spec": {"model": {"version": "3"}}})  # fmt: skip
    controller.refresh_policy(server.objects(POLICIES)["default"])
    reports = run(server, cluster, controller, max_slots=4)
    assert [r.fallback is not None for r in reports][-2:] == [True, True]
    assert reports[-1].fallback.startswith("model-error: RuntimeError")
    status = server.objects(POLICIES)["default"]["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Fallback"] == "True"
    assert status["counts"]["fallbackSlots"] >= 2
    records = read_log(tmp_path / "decisions" / "dl2-local")
    assert any(r.model_version == "incumbent/drf" for r in records)
    fallbacks = {s.labels["reason"]: s.value for m in controller.metrics.fallbacks.collect() for s in m.samples
                 if s.name.endswith("_total")}  # fmt: skip
    assert fallbacks["model-error"] >= 2


def test_input_out_of_range_is_detected():
    view = smoke_view()
    assert input_problem(view) is None
    job = view.jobs[0]
    runaway = replace(job, progress_epochs=3 * job.spec.declared_epochs)
    assert "over 2x declared" in input_problem(replace(view, jobs=(runaway, *view.jobs[1:])))
    huge = replace(job, spec=replace(job.spec, worker_demand=replace(job.spec.worker_demand, gpu=16.0)))
    assert "more than any node has" in input_problem(replace(view, jobs=(huge,)))


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"mode": "turbo"}, "spec.mode: unknown mode 'turbo'"),
        ({"guardrails": {"maxStepPerSlot": -1}}, "spec.guardrails.maxStepPerSlot: must not be negative"),
        ({"model": {"version": None}}, "spec.model.version: missing"),
    ],
)
def test_a_malformed_policy_is_refused_with_a_condition_and_changes_nothing(server, tmp_path, patch, message):
    _, cluster, controller = start(server, tmp_path, mode="shadow")
    run(server, cluster, controller, max_slots=2)
    custom = client.CustomObjectsApi(api_client(server, "dl2-test"))
    updated = custom.patch_cluster_custom_object("dl2.io", "v1alpha1", "schedulerpolicies", "default",
                                                 {"spec": {**patch, "mode": patch.get("mode", "active")}})  # fmt: skip
    jobs_before = {**server.objects("kubeflow.org/v1/pytorchjobs"), **server.objects("batch.volcano.sh/v1alpha1/jobs")}
    controller.refresh_policy(server.objects(POLICIES)["default"])
    controller.run_slot(*clock(server))
    status = server.objects(POLICIES)["default"]["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert status["observedGeneration"] == updated["metadata"]["generation"]  # seen, and refused
    assert conditions["SpecValid"]["status"] == "False" and conditions["SpecValid"]["reason"] == "InvalidSpec"
    assert conditions["Ready"]["reason"] == "InvalidSpec" and message in conditions["Ready"]["message"]
    assert status["mode"] == "shadow" and controller.policy.mode.value == "shadow"  # the last valid spec stays
    assert writes_to_jobs(server) == []
    jobs_after = {**server.objects("kubeflow.org/v1/pytorchjobs"), **server.objects("batch.volcano.sh/v1alpha1/jobs")}
    assert {n: contract.replicas(j) for n, j in jobs_after.items() if n in jobs_before} == {
        n: contract.replicas(j) for n, j in jobs_before.items()
    }


def test_the_promotion_handshake_confirms_a_loaded_version_and_restores_a_failing_one(server, tmp_path):
    server.create(POLICIES, None, policy_object("shadow", canary={"namespaces": ["team-a"]}))
    config = ControllerConfig("a", decision_log=tmp_path / "decisions", slot_s=3600.0)
    controller = Controller(controller_api(server), config, heuristic_loader("drf", failing=("3",)))
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    promoter = api_client(server, "dl2-promoter")
    try:
        result = promote_policy(promoter, 2, "canary", timeout_s=20, poll_s=0.05)
        assert result.confirmed and not result.restored, result.detail
        assert result.previous_version == "1" and result.version == "2" and result.mode == "canary"
        spec = server.objects(POLICIES)["default"]["spec"]
        assert spec["model"]["version"] == "2" and spec["mode"] == "canary"
        failed = promote_policy(promoter, 3, "active", timeout_s=20, poll_s=0.05)
        assert not failed.confirmed and failed.restored and failed.detail.startswith("LoadFailed")
        spec = server.objects(POLICIES)["default"]["spec"]
        assert spec["model"]["version"] == "2" and spec["mode"] == "canary"  # the previous spec is back
        deadline = time.time() + 10
        while time.time() < deadline:
            status = server.objects(POLICIES)["default"]["status"]
            if status.get("observedGeneration") == server.objects(POLICIES)["default"]["metadata"]["generation"]:
                break
            time.sleep(0.05)
        assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
        hook = confirm_hook(promoter, poll_s=0.05)  # what the gate calls
        confirmed, detail = hook(5, None, 20)
        assert confirmed and detail.startswith("the controller runs v5 (generation ")
        refused, detail = hook(3, None, 20)
        assert not refused and detail.endswith("(previous spec restored)")
    finally:
        stop.set()
        thread.join(10)
    timed_out = promote_policy(promoter, 4, timeout_s=0.5, poll_s=0.05)  # nobody answers now
    assert not timed_out.confirmed and timed_out.restored and timed_out.detail.startswith("timed out after 0.5 s")
    assert server.objects(POLICIES)["default"]["spec"]["model"]["version"] == "5"


def test_leader_failover_within_one_lease_period_and_a_deposed_leader_writes_nothing(server, tmp_path):
    lease = LeaseConfig(lease_s=2.0, renew_deadline_s=1.5, retry_s=0.1)
    server.create("v1/namespaces", None, {"metadata": {"name": "dl2-system"}})
    first = LeaseElector(controller_api(server, "a"), "a", lease).start()
    second = LeaseElector(controller_api(server, "b"), "b", lease).start()
    try:
        deadline = time.time() + 5
        while time.time() < deadline and not (first.is_leader() or second.is_leader()):
            time.sleep(0.02)
        leader, follower = (first, second) if first.is_leader() else (second, first)
        assert leader.is_leader() and not follower.is_leader()
        stopped = time.monotonic()
        leader.stop(release=False)  # a crash: no release, the Lease must expire
        overlap, took_over = False, None
        while time.monotonic() - stopped < 5:
            overlap |= leader.is_leader() and follower.is_leader()
            if follower.is_leader():
                took_over = time.monotonic() - stopped
                break
            time.sleep(0.01)
        assert not overlap and took_over is not None
        assert took_over <= lease.lease_s + 2 * lease.retry_s  # within one lease period (and its polling)
        assert not leader.is_leader()
        server.create(POLICIES, None, policy_object("active"))
        simulate_cluster(server, tiny_workload(num_jobs=4, num_nodes=1), CONFIG)
        config = ControllerConfig(leader.identity, decision_log=tmp_path / "decisions", clock="cluster")
        deposed = Controller(controller_api(server, leader.identity), config, heuristic_loader(), elector=leader)
        server.clear_records()
        assert deposed.run_slot(*clock(server)) is None
        assert [r for r in server.records() if r.verb != "get"] == []
        assert not (tmp_path / "decisions").exists()
    finally:
        first.stop()
        second.stop()


def test_metrics_and_health_endpoints(server, tmp_path):
    _, cluster, controller = start(server, tmp_path)
    health = HealthServer(controller.metrics, controller.health, "127.0.0.1", 0).start()
    try:
        run(server, cluster, controller, max_slots=3)

        def get(path):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health.port}{path}", timeout=5) as response:
                    return response.status, response.read().decode()
            except urllib.error.HTTPError as error:
                return error.code, error.read().decode()

        code, text = get("/metrics")
        assert code == 200
        for name in ("dl2_decisions_total", "dl2_resizes_total", "dl2_slot_duration_seconds_bucket",
                     "dl2_records_written_total", "dl2_model_version 1.0"):  # fmt: skip
            assert name in text
        assert get("/healthz")[0] == 200 and get("/readyz") == (200, "ready\n")
        controller.health.ready, controller.health.reason = False, "LoadFailed"
        assert get("/readyz") == (503, "LoadFailed\n") and get("/nowhere")[0] == 404
    finally:
        health.stop()


def test_the_log_folder_holds_slot_segments_the_cluster_and_one_journal(tmp_path, server):
    workload, cluster, controller = start(server, tmp_path)
    reports = run(server, cluster, controller, max_slots=4)
    folder = tmp_path / "decisions" / "dl2-local"
    described = json.loads((folder / "cluster.json").read_text())
    assert [node["gpu"] for node in described["nodes"]] == [n.capacity.gpu for n in workload.cluster.nodes]
    decided = [r.slot for r in reports if r.decided]
    # every decided slot but the last is a segment named by its slot; the last waits in the journal
    assert sorted(p.name for p in folder.glob("segment-*.jsonl")) == [
        f"segment-{s:09d}-000000.jsonl" for s in decided[:-1]
    ]
    assert [p.name for p in (folder / ".journal").iterdir()] == [f"slot-{decided[-1]:09d}.json"]


def test_without_a_policy_the_controller_is_off_and_writes_nothing(server, tmp_path):
    simulate_cluster(server, tiny_workload(num_jobs=4, num_nodes=1), CONFIG)
    config = ControllerConfig("a", decision_log=tmp_path / "decisions", clock="cluster")
    controller = Controller(controller_api(server), config, heuristic_loader())
    controller.refresh_policy(None)
    report = controller.run_slot(*clock(server))
    assert report.mode == "off" and report.jobs > 0 and not report.decided
    assert not controller.health.ready and "not found" in controller.health.reason
    writes = [r for r in server.records() if CONTROLLER_AGENT in r.user_agent and r.verb != "list"]
    assert writes == [] and not list((tmp_path / "decisions").rglob("segment-*"))

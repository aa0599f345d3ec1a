"""The controller end to end on the real control plane, with the cluster twin: the slot loop, modes, guardrails,
Kueue, API faults (through a fault-injecting proxy), fallbacks, malformed policies, the promotion handshake,
leader election, Events, metrics and health. The controller runs under its ServiceAccount (k8s/rbac.yaml)."""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import replace

import pytest

from dl2.core import ClusterSpec
from dl2.core.log_format import CLUSTER_FILE, read_cluster, read_cluster_log, read_log
from dl2.env.observation import ObservationConfig
from dl2.kube import contract
from dl2.kube.accelerator_labels import GPU_PRODUCT_LABEL
from dl2.kube.controller import Controller, ControllerConfig
from dl2.kube.informer import Informer
from dl2.kube.leader import LeaseConfig, LeaseElector
from dl2.kube.metrics import HealthServer, Metrics
from dl2.kube.policy import POLICIES
from dl2.kube.promotion import confirm_hook, promote_policy
from dl2.kube.rest import AUTOSCALERS, EVENTS, NODES, PYTORCHJOBS, VOLCANO_JOBS, Rest
from dl2.placement.samples import record_run, samples_from_records
from dl2.rl.feedback import feedback_batch
from dl2.schedulers.registry import PLACERS, make_scheduler
from dl2.sim.calibrated import calibrated_world
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.truth import SCENARIOS
from dl2.workload.accelerators import ACCELERATOR_TYPES
from testbed.controlplane.install import CONTROLLER, service_account_user
from testbed.twin import TwinOptions, reference_result, start_twin
from tests.builders import CONTROLLER_AGENT, heuristic_loader, tiny_workload

CONFIG = SimConfig.realistic(seed=1)
JOB_WRITES = {"pytorchjobs", "pytorchjobs/scale", "jobs"}  # (it never uses scale: one patch carries the stamp)
CONTROLLER_USER = service_account_user(CONTROLLER)
API_LATENCY_ALLOWANCE_S = 1.0
"""Wall-clock slack for a failover measured while the rest of the suite loads the machine."""


class Setup:
    """A twin, a policy and an in-process controller on the session's control plane (closed by the fixture)."""

    def __init__(self, kube, tmp_path, policies, run_slot):
        self.kube = kube
        self.tmp_path = tmp_path
        self.policies = policies
        self.run_slot = run_slot
        self.rest = kube.rest()
        self.offset = kube.plane.audit_offset()
        self.cluster = None
        self.controllers = []
        self.proxy = None

    def start(
        self, mode="active", workload=None, options=None, loader=None, identity="a", proxy=False, truth=None, **spec
    ):
        workload = workload or tiny_workload(num_jobs=8, num_nodes=2)
        self.cluster = start_twin(self.kube.twin_api(), workload, CONFIG, options=options, truth=truth)
        self.policies.create(mode, **spec)
        server = None
        if proxy:
            from testbed.controlplane.proxy import FaultProxy

            self.proxy = FaultProxy(self.kube.url, self.kube.plane.ca).start()
            server = self.proxy.url
        config = ControllerConfig(identity, decision_log=self.tmp_path / "decisions", clock="cluster")
        api = self.kube.controller_api(identity, server=server)
        controller = Controller(api, config, loader or heuristic_loader("drf"))
        self.controllers.append(controller)
        controller.refresh_policy(self.policies.read())
        return workload, controller

    def run(self, controller, max_slots=None, before_slot=None):
        """Lock step: the controller runs the twin's slot, then the twin advances; returns the slot reports."""
        reports = []
        while max_slots is None or len(reports) < max_slots:
            if before_slot is not None:
                before_slot(len(reports))
            reports.append(self.run_slot(controller))
            if self.cluster.done:
                break
            self.cluster.advance()
        return reports

    def audit(self, agent=CONTROLLER_AGENT):
        """The controller's requests since the test began, as the API server's audit log has them."""
        events = self.kube.plane.audit_events(self.offset)
        return [e for e in events if e.user == CONTROLLER_USER and agent in e.user_agent]

    def writes_to_jobs(self, agent=CONTROLLER_AGENT):
        return [
            e for e in self.audit(agent) if e.rbac_resource in JOB_WRITES and e.verb in ("patch", "update", "create")
        ]

    def jobs(self):
        return {j["metadata"]["name"]: j for resource in (PYTORCHJOBS, VOLCANO_JOBS) for j in self.rest.list(resource)}

    def close(self):
        for controller in self.controllers:
            controller.cache.stop()
            controller.events.stop()
        if self.cluster is not None:
            self.cluster.close()
        if self.proxy is not None:
            self.proxy.stop()


@pytest.fixture
def setup(kube, tmp_path, policies, run_slot):
    running = Setup(kube, tmp_path, policies, run_slot)
    yield running
    running.close()


def test_active_mode_runs_drf_through_the_api_exactly_and_logs_every_job_once(setup, policies, tmp_path):
    workload, controller = setup.start()
    reports = setup.run(controller)
    through_api = {j.job_id: (j.finish_s, j.num_rescales) for j in setup.cluster.result().jobs}
    finish = {job_id: finish_s for job_id, (finish_s, _) in through_api.items()}
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
    writes = setup.writes_to_jobs("dl2-serve/a")
    assert sum(report.resizes for report in reports) == len(writes)  # one request each: the size and the stamp
    assert sum(report.api_calls for report in reports) == len(writes) + len(reports)  # writes and a status, no reads
    # each record holds where the job's pods ran through its slot: the simulator's own placement of that slot, for
    # every job still running at the next slot (one that finished within the slot has no pods left to show it)
    speed = speed_model(Mode.REALISTIC)
    drf = make_scheduler("drf", speed, False, "load-balance")
    simulated = {(r.time_s, r.job_id): r for r in record_run(workload, drf, CONFIG, speed, interference_model())}
    finishing = {(r.time_s, r.job_id) for r in simulated.values() if r.time_s + r.slot_s >= finish[r.job_id]}
    for record in records:
        direct = simulated[(record.time_s, record.job_id)]
        placed = (record.applied_worker_nodes, record.applied_ps_nodes)
        expected = (
            ((), ())
            if (record.time_s, record.job_id) in finishing
            else (direct.applied_worker_nodes, direct.applied_ps_nodes)
        )
        assert placed == expected, (record.time_s, record.job_id)
    cluster = read_cluster(tmp_path / "decisions" / "dl2-local" / CLUSTER_FILE)
    assert len(samples_from_records(records, cluster)) > 0  # steady placements: what Harmony's refit learns from
    # the trainer reads the records as it reads a simulated log
    batch = feedback_batch(records, workload.cluster, ObservationConfig(window=8), PLACERS["load-balance"]())
    assert batch.num_slots == len({r.time_s for r in records}) and len(batch) > 0
    status = policies.read()["status"]
    assert status["lastSlot"] == reports[-1].slot and status["loadedModel"]["version"] == "1"
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Ready": "True", "SpecValid": "True", "ModelLoaded": "True", "Fallback": "False",
    }  # fmt: skip


def test_the_records_calibrate_the_interference_the_cluster_really_has(setup, tmp_path):
    """What the calibration (`dl2.sim.calibrated`) and Harmony's refit learn from is the controller's log, not a
    simulator's: on a cluster whose interference is twice the profiled, its records measure a scale near two (DRF
    active, so that jobs run both alone and beside others)."""
    _, controller = setup.start(
        workload=tiny_workload(num_jobs=16, num_nodes=2, seed=5), truth=SCENARIOS["interference-2x"]
    )
    setup.run(controller)
    _, calibration = calibrated_world(tmp_path / "decisions" / "dl2-local")
    assert calibration.co_located_records > 20 and calibration.seen
    assert 1.5 < calibration.interference_scale < 2.5


def test_shadow_records_every_decision_and_writes_nothing_to_jobs(setup, tmp_path):
    _, controller = setup.start(mode="shadow", loader=heuristic_loader("optimus"))
    before = {n: contract.replicas(j) for n, j in setup.jobs().items()}
    reports = setup.run(controller, max_slots=12)
    assert setup.writes_to_jobs() == []
    assert all(report.resizes == 0 for report in reports)
    records = read_log(tmp_path / "decisions" / "dl2-local")
    assert records and {r.mode for r in records} == {"shadow"}
    # the policy proposed changes, none of which was applied: what ran is what the users asked for
    assert any((r.proposed_workers, r.proposed_ps) != (r.applied_workers, r.applied_ps) for r in records)
    assert all(r.incumbent == "drf" for r in records)
    after = setup.jobs()
    assert {n: contract.replicas(after[n]) for n in before if n in after} == {
        n: r for n, r in before.items() if n in after
    }


def test_canary_stays_in_scope_and_the_guardrails_hold(setup, run_slot, tmp_path):
    guardrails = {"maxReplicas": 3, "maxStepPerSlot": 1, "cooldownSlots": 1, "maxJobsChangedPerSlot": 2}
    workload = tiny_workload(num_jobs=10, num_nodes=2)
    workload, controller = setup.start(
        mode="canary", workload=workload, canary={"namespaces": ["team-a"]}, guardrails=guardrails
    )
    reports = []
    resized_at: dict[str, list[int]] = {}
    for _ in range(25):
        report = run_slot(controller)
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
        if setup.cluster.done:
            break
        setup.cluster.advance()
    assert sum(r.resizes for r in reports) > 0
    for slots in resized_at.values():  # cooldown: never two resizes of a job in consecutive slots
        assert all(b - a >= 2 for a, b in itertools.pairwise(slots))
    writes = setup.writes_to_jobs()
    assert writes and {w.namespace for w in writes} == {"team-a"}


def test_canary_exploration_moves_canary_jobs_only_and_records_its_propensities(setup, run_slot, tmp_path):
    workload = tiny_workload(num_jobs=10, num_nodes=2)
    workload, controller = setup.start(
        mode="canary", workload=workload, canary={"namespaces": ["team-a"], "explore": 0.5},
        loader=heuristic_loader("optimus"),
    )  # fmt: skip
    namespace: dict[str, str] = {}
    for _ in range(16):
        run_slot(controller)
        namespace |= {job.job_id: job.namespace for job in controller.last_snapshot.jobs}
        if setup.cluster.done:
            break
        setup.cluster.advance()
    records = read_log(tmp_path / "decisions" / "dl2-local")
    explored = [r for r in records if r.applied_propensity < 1]
    assert explored and {namespace[r.job_id] for r in explored} == {"team-a"}
    # a move (0.25); staying where both moves were possible (0.5), or one was not (0.75)
    assert {r.applied_propensity for r in explored} <= {0.25, 0.5, 0.75}
    moved = [r for r in explored if r.applied_propensity == 0.25]
    assert moved and all(abs(r.applied_workers - r.proposed_workers) <= 1 for r in moved)
    assert all(r.applied_propensity == 1 for r in records if namespace[r.job_id] != "team-a")
    assert {w.namespace for w in setup.writes_to_jobs()} <= {"team-a"}


def test_kueue_jobs_are_left_alone_and_reported(setup, policies, tmp_path):
    options = TwinOptions(kueue_fraction=0.5, seed=2)
    _, controller = setup.start(options=options)
    setup.run(controller, max_slots=6)
    jobs = setup.jobs()
    kueue = {name for name, job in jobs.items() if contract.is_kueue_managed(job)}
    assert kueue and kueue != set(jobs)
    touched = {w.name for w in setup.writes_to_jobs()}
    assert touched and not touched & kueue
    status = policies.read()["status"]
    listed = {key.split("/")[1] for key in status["kueueJobs"]}
    active = {job.name for job in controller.last_snapshot.jobs if job.kueue}
    assert listed == active and status["counts"]["kueueManaged"] == len(active)


def test_jobs_an_hpa_or_gitops_sizes_are_left_alone_and_reported(setup, policies):
    """A PyTorchJob whose Worker replicas a GitOps tool owns by server-side apply, and a Volcano Job that Flux
    tracks: the controller never writes to them and lists them, with the reason, in the policy's status. A job
    whose model the catalogue lacks is scheduled under a catalogue profile, not refused, and listed too."""
    workload, controller = setup.start()
    finish = {job.job_id: job.finish_s for job in reference_result(workload, "drf", CONFIG).jobs}
    for _ in range(8):  # slot by slot until a job of each kind has arrived: each is marked as soon as it exists
        setup.run(controller, max_slots=1)
        unfinished = [job for job in setup.jobs().values() if not contract.is_finished(job)]
        if {job["kind"] for job in unfinished} == {"PyTorchJob", "Job"}:
            break
        setup.cluster.advance()

    def longest(kind):  # the job of the kind that ends last (DRF decides, as in the reference): still running later
        return max((j for j in unfinished if j["kind"] == kind), key=lambda j: finish[contract.job_spec(j).job_id])

    applied, tracked = longest("PyTorchJob"), longest("Job")
    name, namespace = applied["metadata"]["name"], applied["metadata"]["namespace"]
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": contract.replicas(applied)[0]}}},
    }
    query = {"fieldManager": "argocd-controller", "force": "true"}
    setup.rest.request("PATCH", PYTORCHJOBS.path(namespace, name), manifest, query, "application/apply-patch+yaml")
    flux = {"metadata": {"labels": {"kustomize.toolkit.fluxcd.io/name": "training"}}}
    setup.rest.merge_patch(VOLCANO_JOBS, tracked["metadata"]["namespace"], tracked["metadata"]["name"], flux)
    unknown = {"metadata": {"annotations": {contract.MODEL: "bert-large"}}}  # the same job: still scheduled
    setup.rest.merge_patch(VOLCANO_JOBS, tracked["metadata"]["namespace"], tracked["metadata"]["name"], unknown)
    since = len(setup.writes_to_jobs())
    setup.cluster.advance()
    setup.run(controller, max_slots=1)
    owned = {name, tracked["metadata"]["name"]}
    status = policies.read()["status"]
    setup.run(controller, max_slots=4)
    touched = {w.name for w in setup.writes_to_jobs()[since:]}
    assert not touched & owned
    reasons = {entry.split(": ", 1)[0].split("/")[1]: entry.split(": ", 1)[1] for entry in status["sizeOwnedJobs"]}
    assert set(reasons) == owned and status["counts"]["sizeOwnedElsewhere"] == 2
    assert "argocd-controller" in reasons[name] and "Flux" in reasons[tracked["metadata"]["name"]]
    assert status["quarantinedJobs"] == [] and status["counts"]["unknownModels"] == 1
    assert status["unknownModelJobs"][0].startswith(f"{tracked['metadata']['namespace']}/{tracked['metadata']['name']}")
    assert "'bert-large' not in the catalogue, profiled as" in status["unknownModelJobs"][0]


def test_a_job_a_horizontal_pod_autoscaler_scales_is_left_alone_and_reported(setup, policies):
    """An HPA whose scaleTargetRef names a PyTorchJob (the controller watches HPAs): no write to the job, and the
    policy's status names the HPA."""
    workload, controller = setup.start()
    finish = {job.job_id: job.finish_s for job in reference_result(workload, "drf", CONFIG).jobs}
    for _ in range(8):  # slot by slot until a PyTorchJob has arrived
        setup.run(controller, max_slots=1)
        unfinished = [j for j in setup.jobs().values() if not contract.is_finished(j) and j["kind"] == "PyTorchJob"]
        if unfinished:
            break
        setup.cluster.advance()
    job = max(unfinished, key=lambda j: finish[contract.job_spec(j).job_id])
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": f"{name}-hpa", "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name},
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                                  "averageUtilization": 80}}}],
        },
    }  # fmt: skip
    setup.rest.create(AUTOSCALERS, namespace, hpa)
    try:
        since = len(setup.writes_to_jobs())
        setup.cluster.advance()
        setup.run(controller, max_slots=1)
        status = policies.read()["status"]
        setup.cluster.advance()
        setup.run(controller, max_slots=3)
        assert name not in {w.name for w in setup.writes_to_jobs()[since:]}
        assert status["sizeOwnedJobs"] == [f"{namespace}/{name}: hpa: HorizontalPodAutoscaler {namespace}/{name}-hpa"]
    finally:
        setup.rest.request("DELETE", AUTOSCALERS.path(namespace, f"{name}-hpa"))


def error_counts(controller):
    return {
        (sample.labels["operation"], sample.labels["code"]): sample.value
        for metric in controller.metrics.api_errors.collect()
        for sample in metric.samples
        if sample.name.endswith("_total")
    }


def test_api_faults_are_survived_with_backoff_and_change_no_decision(setup, tmp_path):
    """Conflicts, server errors, throttling and a slow server on the controller's writes, failed lists and dropped
    and expired watches under its caches: every slot decides as without them."""
    from testbed.controlplane.faults import Fault, FaultKind

    workload, controller = setup.start(proxy=True)
    controller.rest.timeout_s = 0.5
    agent = "dl2-serve/a"
    faults = [
        Fault(FaultKind.ERROR, code=409, verb="patch", resource="pytorchjobs", user_agent=agent, count=3),
        Fault(FaultKind.ERROR, code=503, verb="patch", resource="jobs", user_agent=agent, count=2),
        Fault(FaultKind.DELAY, delay_s=1.0, verb="list", resource="nodes", user_agent=agent, count=2),
        Fault(FaultKind.ERROR, code=429, verb="patch", resource="schedulerpolicies/status", user_agent=agent, count=1),
        Fault(FaultKind.ERROR, code=500, verb="list", resource="pods", user_agent=agent, count=2),
    ]
    for fault in faults:
        setup.proxy.add_fault(fault)

    def disturb(slot):
        if slot == 5:
            setup.proxy.drop_watches()
        if slot == 9:
            setup.proxy.add_fault(Fault(FaultKind.EXPIRE_WATCH, resource="nodes", count=1))
            setup.proxy.drop_watches("nodes")

    setup.run(controller, before_slot=disturb)
    through_api = {j.job_id: j.finish_s for j in setup.cluster.result().jobs}
    assert through_api == {j.job_id: j.finish_s for j in reference_result(workload, "drf", CONFIG).jobs}
    errors = error_counts(controller)
    assert errors[("patch pytorchjobs", "409")] == 3
    assert errors[("patch jobs", "503")] == 2
    assert errors[("list nodes", "ReadTimeoutError")] == 2
    # a 429 is waited out as long as Retry-After says, below the controller's own retries (as client-go does)
    throttled = [r for r in setup.proxy.requests() if r.code == 429]
    assert [(r.verb, r.rbac_resource) for r in throttled] == [("patch", "schedulerpolicies/status")]
    # the pods are watched per operator (`pods/kubeflow`, `pods/volcano`): the two 500s fell on their lists
    assert sum(n for (operation, code), n in errors.items() if operation.startswith("list pods") and code == "500") == 2
    informers = {informer.resource.key: informer for informer in controller.cache.informers}
    assert all(informer.restarts >= 1 for informer in informers.values())  # every watch was dropped once
    assert informers["nodes"].relists >= 2  # the expired watch listed again


def test_an_informer_survives_dropped_streams_and_expired_versions(kube, policies):
    from testbed.controlplane.faults import Fault, FaultKind
    from testbed.controlplane.proxy import FaultProxy

    policies.create("shadow")
    with FaultProxy(kube.url, kube.plane.ca) as proxy:
        rest = Rest(kube.controller_api(server=proxy.url))
        changed = threading.Event()
        watcher = Informer(
            rest, POLICIES, Metrics(), field_selector="metadata.name=default", watch_timeout_s=30,
            on_change=changed.set,
        ).start()  # fmt: skip
        try:
            assert watcher.wait_synced(10) and watcher.get("default")["spec"]["mode"] == "shadow"
            admin = kube.rest()

            def set_mode(mode):
                admin.patch(POLICIES, None, "default", {"spec": {"mode": mode}})
                deadline = time.time() + 10
                while time.time() < deadline and (watcher.get("default") or {}).get("spec", {}).get("mode") != mode:
                    changed.wait(0.05)
                    changed.clear()
                return watcher.get("default")["spec"]["mode"]

            assert set_mode("active") == "active"
            proxy.drop_watches()
            assert set_mode("shadow") == "shadow"
            proxy.add_fault(Fault(FaultKind.DROP_WATCH, delay_s=0.05, resource="schedulerpolicies", count=3))
            proxy.drop_watches()
            assert set_mode("active") == "active"
            proxy.add_fault(Fault(FaultKind.EXPIRE_WATCH, resource="schedulerpolicies", count=1))
            proxy.drop_watches()
            assert set_mode("off") == "off"
            assert watcher.restarts >= 3 and watcher.relists >= 2
        finally:
            watcher.stop()


def events_about(kube, name, namespace=None):
    """(type, reason, note) of the events about an object, in the order they were made (an event a core/v1 client
    made, such as the node controller's about a node, has no eventTime: its first timestamp orders it)."""
    rest = kube.rest()
    found = [e for e in rest.list(EVENTS, namespace) if e["regarding"]["name"] == name]
    made = lambda e: e.get("eventTime") or e.get("deprecatedFirstTimestamp") or ""  # noqa: E731
    return [(e["type"], e["reason"], e["note"]) for e in sorted(found, key=made)]


def test_a_model_that_fails_to_load_or_raises_falls_back_with_conditions_and_events(setup, policies, tmp_path):
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

    _, controller = setup.start(loader=loader)
    setup.run(controller, max_slots=2)
    admin = setup.rest
    admin.patch(POLICIES, None, "default", {"spec": {"model": {"version": "2"}}})
    controller.refresh_policy(policies.read())
    controller.publish_status()
    status = policies.read()["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "LoadFailed"
    assert "still serving dl2-policy v1" in conditions["ModelLoaded"]["message"]
    assert status["loadedModel"]["version"] == "1"  # the last good model keeps serving
    report = setup.run(controller, max_slots=1)[0]
    assert report.fallback is None  # v1 decides
    admin.patch(POLICIES, None, "default", {"spec": {"model": {"version": "3"}}})
    controller.refresh_policy(policies.read())
    reports = setup.run(controller, max_slots=4)
    assert [r.fallback is not None for r in reports][-2:] == [True, True]
    assert reports[-1].fallback.startswith("model-error: RuntimeError")
    status = policies.read()["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Fallback"] == "True"
    assert status["counts"]["fallbackSlots"] >= 2
    records = read_log(tmp_path / "decisions" / "dl2-local")
    assert any(r.model_version == "incumbent/drf" for r in records)
    fallbacks = {s.labels["reason"]: s.value for m in controller.metrics.fallbacks.collect() for s in m.samples
                 if s.name.endswith("_total")}  # fmt: skip
    assert fallbacks["model-error"] >= 2
    controller.events.flush()
    reasons = [reason for _, reason, _ in events_about(setup.kube, "default", "default")]
    assert reasons[:1] == ["Promoted"] and "ModelLoadFailed" in reasons and "Fallback" in reasons
    assert reasons.count("Fallback") == 1  # once when it starts, not every slot
    resized = [(kind, reason) for job in setup.jobs() for kind, reason, _ in events_about(setup.kube, job)]
    assert resized and set(resized) == {("Normal", "Resized")}


def test_the_api_server_refuses_what_its_schema_forbids_and_the_controller_refuses_the_rest(
    setup, policies, run_slot, tmp_path
):
    """A bad spec never reaches the controller when the CRD's schema forbids it (422 from the real server); what a
    schema cannot say (an incumbent that does not exist in this version, say, if the CRD lags the code) the
    controller refuses with a condition and an Event, keeping the last valid spec."""
    from kubernetes.client.exceptions import ApiException

    _, controller = setup.start(mode="shadow")
    setup.run(controller, max_slots=2)
    admin = setup.rest
    for patch in ({"mode": "turbo"}, {"mode": "Off"}, {"guardrails": {"maxStepPerSlot": -1}},
                  {"guardrails": {"minReplicas": 4, "maxReplicas": 2}}, {"model": {"version": None}}):  # fmt: skip
        with pytest.raises(ApiException) as refused:
            admin.patch(POLICIES, None, "default", {"spec": patch})
        assert refused.value.status == 422, patch
    jobs_before = setup.jobs()
    obj = policies.read()
    bad = {**obj, "spec": {**obj["spec"], "mode": "active", "incumbent": "lottery"}}  # as if the schema allowed it
    controller.refresh_policy(bad)
    run_slot(controller)
    status = policies.read()["status"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["SpecValid"]["status"] == "False" and conditions["SpecValid"]["reason"] == "InvalidSpec"
    assert (
        conditions["Ready"]["reason"] == "InvalidSpec"
        and "unknown heuristic 'lottery'" in conditions["Ready"]["message"]
    )
    assert status["mode"] == "shadow" and controller.policy.mode.value == "shadow"  # the last valid spec stays
    assert setup.writes_to_jobs() == []
    jobs_after = setup.jobs()
    assert {n: contract.replicas(j) for n, j in jobs_after.items() if n in jobs_before} == {
        n: contract.replicas(j) for n, j in jobs_before.items() if n in jobs_after
    }
    controller.events.flush()
    assert ("Warning", "InvalidSpec") in [(kind, reason) for kind, reason, _ in events_about(setup.kube, "default")]


def test_the_promotion_handshake_confirms_a_loaded_version_and_restores_a_failing_one(kube, policies, tmp_path):
    policies.create("shadow", canary={"namespaces": ["team-a"]})
    config = ControllerConfig("a", decision_log=tmp_path / "decisions", slot_s=3600.0)
    controller = Controller(kube.controller_api(), config, heuristic_loader("drf", failing=("3",)))
    stop = threading.Event()
    thread = threading.Thread(target=controller.run, args=(stop,), daemon=True)
    thread.start()
    promoter = kube.promoter_api()
    try:
        # v1 serving first, so that the promotion below is from v1 (a promotion that lands before the first load is
        # served with no previous version to name)
        deadline = time.monotonic() + 20
        while ((policies.read().get("status") or {}).get("loadedModel") or {}).get("version") != "1":
            assert time.monotonic() < deadline, "the controller did not load v1"
            time.sleep(0.05)
        result = promote_policy(promoter, 2, "canary", timeout_s=20, poll_s=0.05)
        assert result.confirmed and not result.restored, result.detail
        assert result.previous_version == "1" and result.version == "2" and result.mode == "canary"
        spec = policies.read()["spec"]
        assert spec["model"]["version"] == "2" and spec["mode"] == "canary"
        failed = promote_policy(promoter, 3, "active", timeout_s=20, poll_s=0.05)
        assert not failed.confirmed and failed.restored and failed.detail.startswith("LoadFailed")
        spec = policies.read()["spec"]
        assert spec["model"]["version"] == "2" and spec["mode"] == "canary"  # the previous spec is back
        deadline = time.time() + 10
        while time.time() < deadline:
            policy = policies.read()
            if policy["status"].get("observedGeneration") == policy["metadata"]["generation"]:
                break
            time.sleep(0.05)
        assert {c["type"]: c["status"] for c in policy["status"]["conditions"]}["Ready"] == "True"
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
    assert policies.read()["spec"]["model"]["version"] == "5"
    notes = [note for _, reason, note in events_about(kube, "default") if reason == "Promoted"]
    assert notes[-2:] == ["serving dl2-policy v2 (was v1)", "serving dl2-policy v5 (was v2)"]


def test_leader_failover_within_one_lease_period_and_a_deposed_leader_writes_nothing(
    setup, kube, policies, run_slot, tmp_path
):
    lease = LeaseConfig(lease_s=2.0, renew_deadline_s=1.5, retry_s=0.1)
    first = LeaseElector(kube.controller_api("a"), "a", lease).start()
    second = LeaseElector(kube.controller_api("b"), "b", lease).start()
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
        # within one lease period and its polling, plus an allowance for the API's latency when both of this
        # machine's cores run the suite (each poll is a read and a replace); the safety side is `not overlap`
        assert took_over <= lease.lease_s + 2 * lease.retry_s + API_LATENCY_ALLOWANCE_S
        assert not leader.is_leader()
        policies.create("active")
        setup.cluster = start_twin(kube.twin_api(), tiny_workload(num_jobs=4, num_nodes=1), CONFIG)
        config = ControllerConfig(leader.identity, decision_log=tmp_path / "decisions", clock="cluster")
        deposed = Controller(kube.controller_api(leader.identity), config, heuristic_loader(), elector=leader)
        setup.controllers.append(deposed)
        offset = kube.plane.audit_offset()
        assert run_slot(deposed) is None
        agent = f"{CONTROLLER_AGENT}/{leader.identity}"
        written = [
            e
            for e in kube.plane.audit_events(offset)
            if agent in e.user_agent and e.verb not in ("get", "list", "watch")
        ]
        assert written == []
        assert not (tmp_path / "decisions").exists()
    finally:
        first.stop()
        second.stop()


def test_metrics_and_health_endpoints(setup, tmp_path):
    _, controller = setup.start()
    health = HealthServer(controller.metrics, controller.health, "127.0.0.1", 0).start()
    try:
        setup.run(controller, max_slots=3)

        def get(path):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{health.port}{path}", timeout=5) as response:
                    return response.status, response.read().decode()
            except urllib.error.HTTPError as error:
                return error.code, error.read().decode()

        code, text = get("/metrics")
        assert code == 200
        for name in ("dl2_decisions_total", "dl2_resizes_total", "dl2_slot_duration_seconds_bucket",
                     "dl2_records_written_total", 'dl2_model_version{name="dl2-policy",version="1"} 1.0',
                     "dl2_slot_overruns_total 0.0"):  # fmt: skip
            assert name in text
        assert get("/healthz")[0] == 200 and get("/readyz") == (200, "ready\n")
        controller.health.ready, controller.health.reason = False, "LoadFailed"
        assert get("/readyz") == (503, "LoadFailed\n") and get("/nowhere")[0] == 404
    finally:
        health.stop()


def test_the_log_folder_holds_slot_segments_the_cluster_and_one_journal(setup, tmp_path):
    workload, controller = setup.start()
    reports = setup.run(controller, max_slots=4)
    folder = tmp_path / "decisions" / "dl2-local"
    described = json.loads((folder / "cluster.json").read_text())
    assert [node["gpu"] for node in described["nodes"]] == [n.capacity.gpu for n in workload.cluster.nodes]
    decided = [r.slot for r in reports if r.decided]
    # every decided slot but the last is a segment named by its slot; the last waits in the journal
    assert sorted(p.name for p in folder.glob("segment-*.jsonl")) == [
        f"segment-{s:09d}-000000.jsonl" for s in decided[:-1]
    ]
    assert [p.name for p in (folder / ".journal").iterdir()] == [f"slot-{decided[-1]:09d}.json"]


def test_without_a_policy_the_controller_is_off_and_writes_nothing(setup, kube, run_slot, tmp_path):
    setup.cluster = start_twin(kube.twin_api(), tiny_workload(num_jobs=4, num_nodes=1), CONFIG)
    config = ControllerConfig("a", decision_log=tmp_path / "decisions", clock="cluster")
    controller = Controller(kube.controller_api(), config, heuristic_loader())
    setup.controllers.append(controller)
    controller.refresh_policy(None)
    report = run_slot(controller)
    assert report.mode == "off" and report.jobs > 0 and not report.decided
    assert not controller.health.ready and "not found" in controller.health.reason
    writes = [e for e in setup.audit() if e.verb not in ("list", "watch")]
    assert writes == [] and not list((tmp_path / "decisions").rglob("segment-*"))


def test_on_a_cluster_of_two_gpu_types_the_records_name_each_workers_type(setup, tmp_path):
    """The twin labels its kwok nodes as GPU feature discovery would (`nvidia.com/gpu.product`); the controller
    reads each node's type from the label, describes the typed cluster in `cluster.json`, and each record names the
    type of every worker's node."""
    tiny = tiny_workload(num_jobs=6, num_nodes=2)
    capacity = tiny.cluster.nodes[0].capacity
    v100, k80 = (ACCELERATOR_TYPES[name].accelerator for name in ("V100", "K80"))
    workload = replace(tiny, cluster=ClusterSpec.mixed([(1, capacity, v100), (1, capacity, k80)], tiny.cluster.name))
    _, controller = setup.start(mode="shadow", workload=workload)
    setup.run(controller, max_slots=6)
    products = sorted(node["metadata"]["labels"].get(GPU_PRODUCT_LABEL) for node in setup.rest.list(NODES))
    assert products == ["Tesla-K80", "Tesla-V100-SXM2-16GB"]
    records, cluster = read_cluster_log(tmp_path / "decisions" / "dl2-local")
    assert [node.accelerator for node in cluster.nodes] == [v100, k80]
    placed = [r for r in records if r.applied_worker_nodes and r.worker_gpu > 0]
    assert placed
    for record in placed:
        names = tuple(cluster.nodes[node].accelerator.name for node in record.applied_worker_nodes)
        assert record.applied_worker_accelerators == names


def test_a_node_of_a_gpu_product_dl2_does_not_know_is_the_reference_type_with_one_warning(setup, kube, tmp_path):
    _, controller = setup.start(mode="shadow", workload=tiny_workload(num_jobs=4, num_nodes=2))
    names = sorted(node["metadata"]["name"] for node in setup.rest.list(NODES))
    product = "NVIDIA-A100-SXM4-40GB"  # no speeds known for it
    setup.rest.merge_patch(NODES, None, names[0], {"metadata": {"labels": {GPU_PRODUCT_LABEL: product}}})
    setup.run(controller, max_slots=4)
    controller.events.flush()
    warnings = [event for event in events_about(kube, names[0]) if event[1] == "UnknownAccelerator"]
    assert len(warnings) == 1 and product in warnings[0][2] and warnings[0][0] == "Warning"
    _, cluster = read_cluster_log(tmp_path / "decisions" / "dl2-local")
    assert cluster.accelerators == {None}  # sized as the reference GPU, not refused

"""The cluster twin on the real control plane: pods bound to kwok nodes, progress, finished jobs, a resize through
the API, a deleted job; and a heuristic deciding through the API gets exactly the simulator's JCTs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace

import pytest

from dl2.core import Resources
from dl2.kube import contract
from dl2.kube.rest import CONFIGMAPS, NAMESPACES, NODES, PYTORCHJOBS, VOLCANO_JOBS
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import speed_model
from dl2.truth import truth_named
from dl2.workload.synthetic import PRESETS, generate
from testbed.twin import reference_result
from testbed.twin.workloads import first_jobs, first_nodes, with_allreduce
from tests.builders import tiny_workload

CONFIG = SimConfig.realistic(seed=1)


def _jobs(rest):
    return [*rest.list(PYTORCHJOBS), *rest.list(VOLCANO_JOBS)]


def test_jobs_run_as_pods_on_kwok_nodes_progress_and_finish(kube, twin, training_pods):
    workload = tiny_workload()
    rest = kube.rest()
    with twin(workload, CONFIG, kueue_fraction=0.5, seed=2) as cluster:
        nodes = {n["metadata"]["name"]: n for n in rest.list(NODES)}
        assert len(nodes) == 2 and all(n["status"]["allocatable"][contract.GPU] == "8" for n in nodes.values())
        managed = rest.list(NAMESPACES, labelSelector="dl2.io/managed=true")
        assert sorted(ns["metadata"]["name"] for ns in managed) == ["team-a", "team-b"]
        progress: dict[str, float] = defaultdict(float)
        slots, seen_bound, seen_kinds, kueue = 0, set(), set(), set()
        while not cluster.done:
            cluster.advance()
            slots += 1
            clock = rest.get(CONFIGMAPS, "dl2-system", "dl2-clock")["data"]
            assert int(clock["slot"]) >= slots and float(clock["time_s"]) == int(clock["slot"]) * float(clock["slot_s"])
            used: dict[str, Resources] = defaultdict(Resources)
            jobs = {job["metadata"]["name"]: job for job in _jobs(rest)}
            pods_of: dict[str, list] = defaultdict(list)
            for pod in training_pods():
                labels = pod["metadata"]["labels"]
                owner = contract.pod_job_role(labels)
                assert owner is not None and not any(key.startswith("dl2.io/") for key in labels)  # operators' only
                job = jobs[owner[0]]
                pods_of[job["metadata"]["name"]].append(pod)
                operator = contract.KUBEFLOW_JOB_NAME if job["kind"] == "PyTorchJob" else contract.VOLCANO_JOB_NAME
                assert labels[operator] == job["metadata"]["name"] and owner[1] in ("worker", "ps")
                assert pod["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
                node = pod["spec"].get("nodeName")
                if node is not None:
                    seen_bound.add(job["metadata"]["name"])
                    assert node in nodes
                    used[node] += contract.resources_from(pod["spec"]["containers"][0]["resources"]["requests"])
            for name, total in used.items():  # the twin never overfills a node
                assert total.fits_in(contract.node_resources(nodes[name]))
            for name, job in jobs.items():
                seen_kinds.add(job["kind"])
                if contract.is_kueue_managed(job):
                    kueue.add(name)
                now = contract.progress_epochs(job)
                assert now >= progress[name]  # progress only grows
                progress[name] = now
                if not contract.is_finished(job):
                    workers, ps = contract.replicas(job)
                    assert len(pods_of[name]) == workers + ps
        assert seen_kinds == {"PyTorchJob", "Job"} and 0 < len(kueue) < len(workload.jobs)
        results = cluster.job_results()
        assert all(r["finish_s"] is not None for r in results) and len(seen_bound) == len(results)
        for job in _jobs(rest):
            assert contract.is_finished(job)
            spec = contract.job_spec(job)
            assert contract.progress_epochs(job) == pytest.approx(spec.declared_epochs)  # no estimate error here
            if job["kind"] == "PyTorchJob":
                assert [c["type"] for c in job["status"]["conditions"]] == ["Created", "Running", "Succeeded"]
                assert job["status"]["replicaStatuses"]["Worker"]["active"] == 0
            else:
                assert job["status"]["state"]["phase"] == "Completed"
        assert training_pods() == []  # a finished job's pods are cleaned up
        result = cluster.result()
        assert {j.job_id: j.jct_s for j in result.jobs} == {r["job_id"]: r["jct_s"] for r in results}


def test_kwok_runs_the_bound_pods_and_a_resize_changes_them_and_pays_the_rescale_cost(kube, twin, training_pods):
    workload = with_allreduce(tiny_workload(num_jobs=2, num_nodes=2), 1.0, 0)
    rest = kube.rest()
    with twin(workload, CONFIG) as cluster:
        cluster.advance()
        job = min(rest.list(PYTORCHJOBS), key=lambda job: contract.replicas(job))  # the one-worker job: far from done
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        before = len(training_pods(namespace, name))
        target = min(before + 2, job["spec"]["elasticPolicy"]["maxReplicas"])
        scale = {"spec": {"replicas": target}}
        rest.patch(PYTORCHJOBS, namespace, name, scale, subresource="scale")
        cluster.advance()
        pods = training_pods(namespace, name)
        assert sorted(p["metadata"]["name"] for p in pods) == sorted(f"{name}-worker-{i}" for i in range(target))
        assert rest.get(PYTORCHJOBS, namespace, name, "scale")["status"]["replicas"] == target
        record = next(r for r in cluster.job_results() if r["name"] == name)
        assert record["num_rescales"] == 1
        # kwok plays the kubelet: the bound pods become Running
        deadline = time.monotonic() + 20
        while any(p["status"].get("phase") != "Running" for p in pods):
            assert time.monotonic() < deadline, [p["status"].get("phase") for p in pods]
            time.sleep(0.1)
            pods = training_pods(namespace, name)


@pytest.mark.parametrize(("heuristic", "truth"), [("drf", None), ("optimus", None), ("optimus", "seed-1")])
def test_a_heuristic_deciding_through_the_api_gets_the_simulators_jcts(twin, heuristic_client, heuristic, truth):
    """DRF reads the jobs' specs and order; Optimus also their progress (the `dl2.io/progress-epochs` annotation)
    and the speed model. Both decide from what the API shows exactly as from the simulator's own view; on a
    cluster whose truth departs from the catalogue (new types, shifted speeds, interference, checkpoint
    resizes), the twin plays that truth exactly as `dl2 simulate --truth` does."""
    workload = tiny_workload(num_jobs=12, num_nodes=2)
    scheduler = make_scheduler(heuristic, speed_model(Mode.REALISTIC), False)
    played = None if truth is None else truth_named(truth)
    with twin(workload, CONFIG, truth=played) as cluster:
        controller = heuristic_client(scheduler, f"dl2-{heuristic}-client")
        try:
            slots = 0
            while not cluster.done:
                controller.step()
                cluster.advance()
                slots += 1
        finally:
            controller.close()
        through_api = {j.job_id: (j.finish_s, j.num_rescales) for j in cluster.result().jobs}
    reference = reference_result(workload, heuristic, CONFIG, truth=played)
    direct = {j.job_id: (j.finish_s, j.num_rescales) for j in reference.jobs}
    assert through_api == direct  # the same floats: the same allocations in every slot
    assert controller.resizes > len(workload.jobs) and controller.short_of_max > 0 and slots > 20  # contended


def test_a_deleted_job_is_cancelled_and_the_rest_finish(kube, twin, training_pods):
    workload = tiny_workload(num_jobs=4, num_nodes=2)
    rest = kube.rest()
    with twin(workload, CONFIG) as cluster:
        cluster.advance()
        victim = _jobs(rest)[0]
        resource = PYTORCHJOBS if victim["kind"] == "PyTorchJob" else VOLCANO_JOBS
        name, namespace = victim["metadata"]["name"], victim["metadata"]["namespace"]
        rest.request("DELETE", resource.path(namespace, name))
        cluster.advance()
        assert training_pods(namespace, name) == []
        _ends_with_only_cancelled(cluster, name)


@pytest.mark.parametrize("moment", ["_job_objects", "_settle"], ids=["after-listing", "before-settling"])
def test_a_job_deleted_mid_slot_is_cancelled_and_the_slot_goes_on_at_once(kube, twin, training_pods, moment):
    """A user deletes a running job while the twin is in a slot: after it listed the jobs (its writes for the job
    then find it gone), or after its writes (its pods, which the garbage collector removes, never run). The slot
    ends at once, as it would have without the deletion, and the job is cancelled; no 404, no wait for pods that
    will never run (the settle timeout)."""
    workload = tiny_workload(num_jobs=4, num_nodes=2)
    rest = kube.rest()
    with twin(workload, CONFIG, settle_timeout_s=60.0) as cluster:
        cluster.advance()
        running = [j for j in _jobs(rest) if any(p["spec"].get("nodeName") for p in training_pods(*_key(j)))]
        victim = running[0]
        resource = PYTORCHJOBS if victim["kind"] == "PyTorchJob" else VOLCANO_JOBS
        namespace, name = _key(victim)
        original = getattr(cluster, moment)
        deleting: list[float] = []

        def delete_once():
            started = time.monotonic()
            if not deleting:  # the user deletes the job; the garbage collector takes its pods
                rest.request("DELETE", resource.path(namespace, name))
                while training_pods(namespace, name):
                    assert time.monotonic() - started < 30, "the garbage collector left the job's pods"
                    time.sleep(0.05)
                deleting.append(time.monotonic() - started)

        def listed_then_deleted():
            objects = original()
            delete_once()
            return objects

        def deleted_then_settled():
            delete_once()
            return original()

        setattr(cluster, moment, listed_then_deleted if moment == "_job_objects" else deleted_then_settled)
        started = time.monotonic()
        cluster.advance()
        assert time.monotonic() - started - deleting[0] < 15  # the slot itself: seconds, not the settle timeout
        cluster.advance()
        assert training_pods(namespace, name) == []
        _ends_with_only_cancelled(cluster, name)


def test_a_job_deleted_as_it_is_submitted_is_cancelled(kube, twin, training_pods):
    """A user deletes a job the moment the twin created it, before its pods and first status: no 404."""
    workload = tiny_workload(num_jobs=4, num_nodes=2)
    rest = kube.rest()
    with twin(workload, CONFIG, settle_timeout_s=60.0) as cluster:
        create, deleted = cluster.rest.create, []

        def created_then_deleted(resource, namespace, body):
            stored = create(resource, namespace, body)
            if resource in (PYTORCHJOBS, VOLCANO_JOBS) and not deleted:
                deleted.append(_key(stored))
                rest.request("DELETE", resource.path(*deleted[0]))
            return stored

        cluster.rest.create = created_then_deleted  # the first job submitted after the first slot
        cluster.advance()
        assert deleted, "no job arrived after the first slot"
        cluster.run_to_end()
        results = {r["name"]: r for r in cluster.job_results()}
        assert results[deleted[0][1]]["cancelled"] and results[deleted[0][1]]["finish_s"] is None
        assert training_pods(*deleted[0]) == []
        assert cluster.done and cluster.status()["cancelled"] == 1


def _key(job):
    return job["metadata"]["namespace"], job["metadata"]["name"]


def test_workload_slices():
    workload = tiny_workload(num_jobs=6, num_nodes=4)
    sliced = first_nodes(first_jobs(workload, 2), 1)
    assert sliced.num_jobs == 2 and sliced.cluster.num_nodes == 1
    assert [j.spec.job_id for j in sliced.jobs] == [j.spec.job_id for j in workload.jobs[:2]]
    mixed = with_allreduce(generate(replace(PRESETS["synthetic-small"], num_jobs=40), 0, "ps"), 0.5, 1)
    kinds = [j.spec.architecture.value for j in mixed.jobs]
    assert 5 < kinds.count("allreduce") < 35
    assert all(
        j.spec.max_ps == 0 and j.spec.ps_demand == Resources()
        for j in mixed.jobs
        if j.spec.architecture.value == "allreduce"
    )


def _dl2(*arguments: str, **options):
    return subprocess.Popen(
        [sys.executable, "-m", "dl2.cli.main", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **options,
    )


@pytest.mark.slow
def test_dl2_cluster_runs_a_workload_on_its_own_control_plane_and_reports_jcts(tmp_path):
    report = tmp_path / "report.json"
    kubeconfig = tmp_path / "kubeconfig"
    process = _dl2(
        "cluster", "--simulate", "synthetic-small", "--jobs", "5", "--nodes", "2", "--tick-s", "0.01",
        "--allreduce-fraction", "0.5", "--exit-when-done", "--reference", "drf", "--out", str(report),
        "--kubeconfig", str(kubeconfig), "--seed", "2", "--folder", str(tmp_path / "cluster"), "--truth", "seed-3",
    )  # fmt: skip
    out, err = process.communicate(timeout=180)
    assert process.returncode == 0, err
    first = json.loads(out.splitlines()[0])
    assert first["url"].startswith("https://127.0.0.1:") and first["kubeconfig"] == str(kubeconfig)
    assert (tmp_path / "cluster" / "audit.log").exists()
    data = json.loads(report.read_text())
    assert data["status"]["done"] and len(data["jobs"]) == 5 and all(j["jct_s"] > 0 for j in data["jobs"])
    assert data["metrics"]["num_jobs"] == 5 and data["reference"]["scheduler"] == "drf"


@pytest.mark.slow
def test_dl2_cluster_serves_kubectl_until_sigterm_and_refuses_bad_options(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    process = _dl2("cluster", "--kubeconfig", str(kubeconfig), "--folder", str(tmp_path / "cluster"))
    try:
        first = json.loads(process.stdout.readline())
        version = subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig), "get", "--raw", "/version"],
            capture_output=True, text=True, check=True, timeout=30,
        )  # fmt: skip
        assert json.loads(version.stdout)["major"] == "1"
        for_serve = first["serve_kubeconfig"]
        denied = subprocess.run(
            ["kubectl", "--kubeconfig", for_serve, "auth", "can-i", "delete", "pods", "-A"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert denied.stdout.strip() == "no"  # the controller's kubeconfig is its ServiceAccount, under RBAC
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    bad = _dl2("cluster", "--jobs", "3")
    _, err = bad.communicate(timeout=60)
    assert bad.returncode == 2 and err.strip().splitlines() == [
        "dl2 cluster: error: --jobs, --nodes, --reference and --lockstep need --simulate"
    ]
    for argv, words in (
        (["--truth", "seed-3"], "--truth is how a simulated cluster's jobs behave"),
        (["--simulate", "synthetic-small", "--truth", "speedy"], "'speedy' is not allowed"),
    ):
        bad = _dl2("cluster", *argv)
        _, err = bad.communicate(timeout=60)
        assert bad.returncode == 2 and len(err.strip().splitlines()) == 1 and words in err, err


def _ends_with_only_cancelled(cluster, name: str) -> None:
    """Run the twin to its end: the job `name` is cancelled (no finish), every other job finishes."""
    cluster.run_to_end()
    results = {r["name"]: r for r in cluster.job_results()}
    assert results[name]["cancelled"] and results[name]["finish_s"] is None
    assert all(r["finish_s"] is not None for n, r in results.items() if n != name)
    assert cluster.done and cluster.status()["cancelled"] == 1

"""The simulated cluster end to end, through the official client: pods on nodes, progress, finished jobs, and a
heuristic deciding through the API gets exactly the simulator's JCTs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from dataclasses import replace

import pytest
from dl2.kube.apiserver import THIRD_PARTY_CRDS, LocalApiServer, contract
from kubernetes import client

from dl2.core import Resources
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import speed_model
from dl2.twin import ClusterOptions, reference_result, simulate_cluster
from dl2.twin.workloads import first_jobs, first_nodes, with_allreduce
from dl2.workload.mapping import TraceMapping
from dl2.workload.synthetic import PRESETS, generate
from tests.kube_helpers import PJ, VJ, HeuristicClient, api_client

CONFIG = SimConfig.realistic(seed=1)


def tiny_workload(num_jobs: int = 8, num_nodes: int = 2, seed: int = 3):
    """Half all-reduce PyTorchJobs, half parameter-server Volcano Jobs, on 8-GPU nodes."""
    spec = replace(
        PRESETS["synthetic-small"], num_jobs=num_jobs, num_nodes=num_nodes, mapping=TraceMapping(allreduce_fraction=0.5)
    )
    return generate(spec, seed, "tiny")


@pytest.fixture
def server():
    with LocalApiServer(crd_files=THIRD_PARTY_CRDS) as running:
        yield running


def _jobs(custom):
    return [*custom.list_cluster_custom_object(*PJ)["items"], *custom.list_cluster_custom_object(*VJ)["items"]]


def test_jobs_run_as_pods_on_nodes_progress_and_finish(server):
    workload = tiny_workload()
    cluster = simulate_cluster(server, workload, CONFIG, options=ClusterOptions(kueue_fraction=0.5, seed=2))
    api = api_client(server)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert len(nodes) == 2 and all(n.status.allocatable[contract.GPU] == "8" for n in nodes.values())
    managed = core.list_namespace(label_selector="dl2.io/managed=true").items
    assert sorted(ns.metadata.name for ns in managed) == ["team-a", "team-b"]
    progress: dict[str, float] = defaultdict(float)
    slots, seen_running, seen_kinds, kueue = 0, set(), set(), set()
    while not cluster.done:
        cluster.advance()
        slots += 1
        clock = core.read_namespaced_config_map("dl2-clock", "dl2-system").data
        assert int(clock["slot"]) >= slots and float(clock["time_s"]) == int(clock["slot"]) * float(clock["slot_s"])
        used: dict[str, Resources] = defaultdict(Resources)
        jobs = {job["metadata"]["name"]: job for job in _jobs(custom)}
        pods_of: dict[str, list] = defaultdict(list)
        for pod in core.list_pod_for_all_namespaces(label_selector=contract.JOB_LABEL).items:
            labels = pod.metadata.labels
            job = jobs[labels[contract.JOB_LABEL]]
            pods_of[job["metadata"]["name"]].append(pod)
            operator = contract.KUBEFLOW_JOB_NAME if job["kind"] == "PyTorchJob" else contract.VOLCANO_JOB_NAME
            assert labels[operator] == job["metadata"]["name"] and labels[contract.ROLE_LABEL] in ("worker", "ps")
            assert pod.metadata.owner_references[0].uid == job["metadata"]["uid"]
            if pod.status.phase == "Running":
                seen_running.add(job["metadata"]["name"])
                assert pod.spec.node_name in nodes
                used[pod.spec.node_name] += contract.resources_from(pod.spec.containers[0].resources.requests)
            else:
                assert (pod.status.phase == "Pending" and pod.spec.node_name is None) or pod.status.phase == "Succeeded"
        for name, total in used.items():  # the simulated kube-scheduler never overfills a node
            assert total.fits_in(contract.node_resources(api.sanitize_for_serialization(nodes[name])))
        for name, job in jobs.items():
            seen_kinds.add(job["kind"])
            if contract.is_kueue_managed(job):
                kueue.add(name)
            now = contract.progress_epochs(job)
            assert now >= progress[name]  # progress only grows
            progress[name] = now
            if not contract.is_finished(job):
                workers, ps = contract.replicas(job)
                assert sum(p.status.phase != "Succeeded" for p in pods_of[name]) == workers + ps
    assert seen_kinds == {"PyTorchJob", "Job"} and 0 < len(kueue) < len(workload.jobs)
    results = cluster.job_results()
    assert all(r["finish_s"] is not None for r in results) and len(seen_running) == len(results)
    for job in _jobs(custom):
        assert contract.is_finished(job)
        spec = contract.job_spec(job)
        assert contract.progress_epochs(job) == pytest.approx(spec.declared_epochs)  # exact epochs: no estimate error
        if job["kind"] == "PyTorchJob":
            assert [c["type"] for c in job["status"]["conditions"]] == ["Created", "Running", "Succeeded"]
            assert job["status"]["replicaStatuses"]["Worker"]["active"] == 0
        else:
            assert job["status"]["state"]["phase"] == "Completed"
    phases = {pod.status.phase for pod in core.list_pod_for_all_namespaces().items}
    assert phases == {"Succeeded"}
    result = cluster.result()
    assert {j.job_id: j.jct_s for j in result.jobs} == {r["job_id"]: r["jct_s"] for r in results}


def test_a_resize_through_the_api_changes_the_pods_and_pays_the_rescale_cost(server):
    workload = with_allreduce(tiny_workload(num_jobs=2, num_nodes=2), 1.0, 0)
    cluster = simulate_cluster(server, workload, CONFIG)
    api = api_client(server)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    cluster.advance()
    job = custom.list_cluster_custom_object(*PJ)["items"][0]
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    before = len(core.list_namespaced_pod(namespace, label_selector=f"{contract.JOB_LABEL}={name}").items)
    target = min(before + 2, job["spec"]["elasticPolicy"]["maxReplicas"])
    custom.patch_namespaced_custom_object_scale(*PJ[:2], namespace, PJ[2], name, {"spec": {"replicas": target}})
    cluster.advance()
    pods = core.list_namespaced_pod(namespace, label_selector=f"{contract.JOB_LABEL}={name}").items
    assert sorted(p.metadata.name for p in pods) == [f"{name}-worker-{i}" for i in range(target)]
    status = custom.get_namespaced_custom_object_scale(*PJ[:2], namespace, PJ[2], name)["status"]
    assert status["replicas"] == sum(p.status.phase == "Running" for p in pods)
    record = next(r for r in cluster.job_results() if r["name"] == name)
    assert record["num_rescales"] == 1


@pytest.mark.parametrize("heuristic", ["drf", "optimus"])
def test_a_heuristic_deciding_through_the_api_gets_the_simulators_jcts(server, heuristic):
    """DRF reads the jobs' specs and order; Optimus also their progress (the `dl2.io/progress-epochs` annotation)
    and the speed model. Both decide from what the API shows exactly as from the simulator's own view."""
    workload = tiny_workload(num_jobs=12, num_nodes=2)
    cluster = simulate_cluster(server, workload, CONFIG)
    scheduler = make_scheduler(heuristic, speed_model(Mode.REALISTIC), False)
    controller = HeuristicClient(api_client(server, f"dl2-{heuristic}-client"), scheduler)
    slots = 0
    while not cluster.done:
        controller.step()
        cluster.advance()
        slots += 1
    through_api = {j.job_id: (j.finish_s, j.num_rescales) for j in cluster.result().jobs}
    direct = {j.job_id: (j.finish_s, j.num_rescales) for j in reference_result(workload, heuristic, CONFIG).jobs}
    assert through_api == direct  # the same floats: the same allocations in every slot
    assert controller.resizes > len(workload.jobs) and controller.short_of_max > 0 and slots > 20  # contended


def test_a_deleted_job_is_cancelled_and_the_rest_finish(server):
    workload = tiny_workload(num_jobs=4, num_nodes=2)
    cluster = simulate_cluster(server, workload, CONFIG)
    api = api_client(server)
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    cluster.advance()
    victim = _jobs(custom)[0]
    group, version, plural = contract.kind_of(victim)
    name, namespace = victim["metadata"]["name"], victim["metadata"]["namespace"]
    custom.delete_namespaced_custom_object(group, version, namespace, plural, name)
    cluster.advance()
    assert core.list_namespaced_pod(namespace, label_selector=f"{contract.JOB_LABEL}={name}").items == []
    cluster.run_to_end()
    results = {r["name"]: r for r in cluster.job_results()}
    assert results[name]["cancelled"] and results[name]["finish_s"] is None
    assert all(r["finish_s"] is not None for n, r in results.items() if n != name)
    assert cluster.done and cluster.status()["cancelled"] == 1


def test_wall_clock_ticks_and_the_admin_endpoints(server):
    cluster = simulate_cluster(server, tiny_workload(num_jobs=3, num_nodes=1), CONFIG)

    def admin(method, path, body=None):
        request = urllib.request.Request(
            f"{server.url}/dl2/{path}", method=method, data=None if body is None else json.dumps(body).encode()
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    assert admin("GET", "cluster")["slot"] == cluster.status()["slot"]
    advanced = admin("POST", "cluster/advance", {"slots": 2})
    assert advanced["slot"] >= 2
    server.every(0.02, lambda: not cluster.cluster.advance()["done"])
    deadline = time.time() + 30
    while not cluster.done and time.time() < deadline:
        time.sleep(0.05)
    jobs = admin("GET", "cluster/jobs")["jobs"]
    assert len(jobs) == 3 and all(job["jct_s"] > 0 for job in jobs)


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


def test_dl2_cluster_runs_a_workload_and_reports_jcts(tmp_path):
    report = tmp_path / "report.json"
    kubeconfig = tmp_path / "kubeconfig"
    process = _dl2(
        "cluster",
        "--simulate",
        "synthetic-small",
        "--jobs",
        "5",
        "--nodes",
        "2",
        "--tick-s",
        "0.01",
        "--allreduce-fraction",
        "0.5",
        "--exit-when-done",
        "--reference",
        "drf",
        "--out",
        str(report),
        "--kubeconfig",
        str(kubeconfig),
        "--seed",
        "2",
    )
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    first = json.loads(out.splitlines()[0])
    assert first["url"].startswith("http://127.0.0.1:") and first["kubeconfig"] == str(kubeconfig)
    data = json.loads(report.read_text())
    assert data["status"]["done"] and len(data["jobs"]) == 5 and all(j["jct_s"] > 0 for j in data["jobs"])
    assert data["metrics"]["num_jobs"] == 5 and data["reference"]["scheduler"] == "drf"


def test_dl2_cluster_serves_until_sigterm_and_refuses_bad_options(tmp_path):
    process = _dl2("cluster", "--kubeconfig", str(tmp_path / "kubeconfig"))
    try:
        first = json.loads(process.stdout.readline())
        with urllib.request.urlopen(f"{first['url']}/version", timeout=5) as response:
            assert json.loads(response.read())["major"] == "1"
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0
    bad = _dl2("cluster", "--jobs", "3")
    _, err = bad.communicate(timeout=60)
    assert bad.returncode == 2 and err.strip().splitlines() == [
        "dl2 cluster: error: --jobs, --nodes, --reference and --lockstep need --simulate"
    ]

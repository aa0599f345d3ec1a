"""Harmony's placer as a kube-scheduler extender: the protocol's request and response shapes, the scores against
the placer's own choice, the HTTP server, and the simulated cluster, where pods of managed jobs land where the
extender scores highest and a refused, slow or broken extender never blocks scheduling."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from dl2.core import Architecture, InputError
from dl2.kube.apiserver import THIRD_PARTY_CRDS, LocalApiServer, contract
from dl2.twin import manifests, simulate_cluster
from dl2.twin.extender_scheduling import ExtenderPlacer
from dl2.kube.extender import (
    MAX_EXTENDER_PRIORITY,
    ClusterCache,
    ExtenderArgs,
    HarmonyExtender,
    best_hosts,
    filter_result,
    host_priorities,
)
from dl2.kube.extender_http import ExtenderClient, ExtenderServer, ExtenderUnavailable
from dl2.kube.observe import RawCluster, read_cluster, snapshot
from dl2.placement.config import JOB_INPUTS, SERVER_INPUTS, PlacerConfig
from dl2.placement.policy import HarmonyPlacer, NumpyPlacementPolicy
from dl2.schedulers.placement import place_sticky
from dl2.sim.config import SimConfig
from dl2.workload.mapping import TraceMapping
from dl2.workload.synthetic import PRESETS, generate
from tests.kube_helpers import api_client

CONFIG = SimConfig.realistic(seed=1)


def random_placer(seed: int = 0) -> HarmonyPlacer:
    """A policy network with seeded random weights: the protocol does not care how well it places."""
    rng = np.random.default_rng(seed)
    layers = [
        (rng.normal(size=(SERVER_INPUTS + JOB_INPUTS, 8)).astype(np.float32), rng.normal(size=8).astype(np.float32)),
        (rng.normal(size=(8, 1)).astype(np.float32), np.zeros(1, np.float32)),
    ]
    return HarmonyPlacer(NumpyPlacementPolicy(layers), PlacerConfig((8,)))


def tiny_workload(num_jobs: int = 8, num_nodes: int = 4, seed: int = 3):
    spec = replace(
        PRESETS["synthetic-small"], num_jobs=num_jobs, num_nodes=num_nodes, mapping=TraceMapping(allreduce_fraction=0.5)
    )
    return generate(spec, seed, "tiny")


# -- a cluster as the API shows it ------------------------------------------------------------------------------


def raw_cluster(running: dict[int, list[tuple[str, int]]], num_nodes: int = 4) -> tuple[RawCluster, Any]:
    """Jobs 0..n of a tiny workload as API objects; job i runs its (role, node) pods of `running[i]`, the last job
    runs none (it is the one being placed)."""
    workload = tiny_workload(num_jobs=len(running) + 1, num_nodes=num_nodes)
    cluster = workload.cluster
    nodes = [manifests.node(n, manifests.node_name(cluster.name, n.node_id, cluster.num_nodes)) for n in cluster.nodes]
    names = [node["metadata"]["name"] for node in nodes]
    jobs, pods = [], []
    for index, job in enumerate(workload.jobs):
        spec = replace(job.spec, arrival_s=float(index))
        obj = manifests.job(spec, f"job-{index}", "team-a", None)
        obj["metadata"]["uid"] = f"uid-{index}"
        jobs.append(obj)
        for count, (role, node) in enumerate(running.get(index, [])):
            pods.append(manifests.pod(spec, obj, role, count, names[node], "2026-01-01T00:00:00Z"))
    return RawCluster(("team-a",), tuple(jobs), tuple(pods), tuple(nodes)), names


def pending_pod(raw: RawCluster, index: int, role: str) -> dict[str, Any]:
    obj = raw.jobs[index]
    spec = snapshot(raw, 0.0, 0, 1.0, "kubernetes").view.jobs[index].spec
    return manifests.pod(spec, obj, role, 0, None, "2026-01-01T00:00:00Z")


def extender_for(raw: RawCluster, placer: HarmonyPlacer) -> HarmonyExtender:
    cache = ClusterCache(lambda: raw)
    cache.refresh()
    return HarmonyExtender(placer, cache)


# -- the protocol's shapes --------------------------------------------------------------------------------------


def test_extender_args_parse_both_shapes_and_name_the_bad_field() -> None:
    pod = {"metadata": {"name": "p", "namespace": "team-a"}, "spec": {}}
    by_name = ExtenderArgs.from_json({"Pod": pod, "NodeNames": ["a", "b"]})
    assert by_name.node_names == ("a", "b") and by_name.nodes is None
    assert by_name.to_json() == {"Pod": pod, "NodeNames": ["a", "b"]}
    node = {"metadata": {"name": "a"}, "status": {}}
    by_object = ExtenderArgs.from_json({"Pod": pod, "Nodes": {"items": [node]}, "NodeNames": None})
    assert by_object.node_names == ("a",) and by_object.nodes == (node,)
    for bad, field in [
        ({"NodeNames": ["a"]}, "Pod"),
        ({"Pod": {"spec": {}}, "NodeNames": ["a"]}, "Pod"),
        ({"Pod": pod, "NodeNames": "a"}, "NodeNames"),
        ({"Pod": pod}, "NodeNames"),
        ({"Pod": pod, "Nodes": {"items": [{"spec": {}}]}}, "Nodes.items"),
    ]:
        with pytest.raises(InputError, match=field):
            ExtenderArgs.from_json(bad)
    with pytest.raises(InputError, match="JSON object"):
        ExtenderArgs.from_json([])


def test_filter_result_and_host_priorities_have_the_protocol_fields() -> None:
    pod = {"metadata": {"name": "p"}}
    by_name = filter_result(ExtenderArgs(pod, ("a", "b"), None), ["a"], {"b": "full"})
    assert by_name == {
        "Nodes": None,
        "NodeNames": ["a"],
        "FailedNodes": {"b": "full"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    nodes = ({"metadata": {"name": "a"}}, {"metadata": {"name": "b"}})
    by_object = filter_result(ExtenderArgs(pod, ("a", "b"), nodes), ["b"], {"a": "full"})
    assert by_object["Nodes"] == {"items": [{"metadata": {"name": "b"}}]} and by_object["NodeNames"] is None
    assert host_priorities({"a": 3, "b": 10}) == [{"Host": "a", "Score": 3}, {"Host": "b", "Score": 10}]
    assert best_hosts(host_priorities({"a": 3, "b": 10, "c": 10})) == {"b", "c"}


# -- scores ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_best_scored_node_is_where_the_placer_itself_puts_the_task(seed: int) -> None:
    # jobs 0 and 1 run on nodes 0-2; job 2 asks for its first worker
    raw, names = raw_cluster({0: [("worker", 0), ("worker", 1)], 1: [("worker", 2), ("ps", 2)]})
    placer = random_placer(seed)
    extender = extender_for(raw, placer)
    priorities = extender.prioritize(ExtenderArgs(pending_pod(raw, 2, "worker"), tuple(names), None))
    assert [entry["Host"] for entry in priorities] == names
    assert all(0 <= entry["Score"] <= MAX_EXTENDER_PRIORITY for entry in priorities)
    # the placer in a placement round of its own, on the view the controller reads from the same objects
    view = snapshot(raw, 0.0, 0, 1.0, "kubernetes").view
    targets = [(len(j.allocation.worker_nodes), len(j.allocation.ps_nodes)) for j in view.jobs]
    targets[2] = (1, 0 if view.jobs[2].spec.architecture is Architecture.ALLREDUCE else 1)  # a PS job needs a PS
    placed = place_sticky(view, targets, placer).get(view.jobs[2].spec.job_id)
    assert placed.worker_nodes and names[placed.worker_nodes[0]] in best_hosts(priorities)
    assert max(entry["Score"] for entry in priorities) == MAX_EXTENDER_PRIORITY


def test_a_pod_of_no_managed_job_gets_no_say_and_a_full_node_fails_the_filter() -> None:
    # job 0 fills node 0's GPUs with workers; job 1's worker cannot go there
    raw, names = raw_cluster({0: [("worker", 0)] * 8})
    extender = extender_for(raw, random_placer())
    stranger = {"metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web"}}, "spec": {}}
    args = ExtenderArgs(stranger, tuple(names), None)
    assert {entry["Score"] for entry in extender.prioritize(args)} == {0}
    assert extender.filter(args)["NodeNames"] == names
    gpu = snapshot(raw, 0.0, 0, 1.0, "kubernetes").view.jobs[1].spec.worker_demand.gpu
    result = extender.filter(ExtenderArgs(pending_pod(raw, 1, "worker"), tuple(names), None))
    if gpu > 0:
        assert result["NodeNames"] == names[1:] and list(result["FailedNodes"]) == [names[0]]
    scores = {
        e["Host"]: e["Score"]
        for e in extender.prioritize(ExtenderArgs(pending_pod(raw, 1, "worker"), tuple(names), None))
    }
    assert gpu == 0 or scores[names[0]] == 0  # no logit for a node the pod does not fit on
    assert HarmonyExtender(random_placer(), ClusterCache(lambda: raw)).filter(args)["NodeNames"] == names  # no read yet


# -- over HTTP -------------------------------------------------------------------------------------------------


def post(url: str, body: bytes) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_http_server_speaks_the_protocol() -> None:
    raw, names = raw_cluster({0: [("worker", 1)]})
    with ExtenderServer(extender_for(raw, random_placer())) as server:
        args = {"Pod": pending_pod(raw, 1, "worker"), "NodeNames": names}
        status, priorities = post(f"{server.url}/prioritize", json.dumps(args).encode())
        assert status == 200 and sorted(entry["Host"] for entry in priorities) == sorted(names)
        status, result = post(f"{server.url}/filter", json.dumps(args).encode())
        assert status == 200 and result["NodeNames"] == names and result["Error"] == ""
        status, result = post(f"{server.url}/filter", b"{not json")
        assert status == 400 and "not JSON" in result["Error"]
        status, result = post(f"{server.url}/prioritize", json.dumps({"Pod": {}}).encode())
        assert status == 400 and "Pod" in result["error"]
        assert post(f"{server.url}/bind", b"{}")[0] == 404
        with urllib.request.urlopen(server.url.removesuffix("/extender") + "/healthz", timeout=5) as response:
            assert json.loads(response.read()) == {"status": "ok"}
        client = ExtenderClient(server.url, timeout_s=5)
        typed = ExtenderArgs.from_json(args)
        assert client.filter(typed) == names
        assert set(client.prioritize(typed)) == set(names)


# -- the simulated cluster -------------------------------------------------------------------------------------


@pytest.fixture
def server():
    with LocalApiServer(crd_files=THIRD_PARTY_CRDS) as running:
        yield running


def test_pods_of_managed_jobs_land_where_the_extender_scores_highest(server) -> None:
    workload = tiny_workload()
    api = api_client(server)
    cache = ClusterCache(lambda: read_cluster(api))
    with ExtenderServer(HarmonyExtender(random_placer(), cache)) as extender:
        cluster = simulate_cluster(server, workload, CONFIG, extender=ExtenderClient(extender.url, timeout_s=5))
        placer = cluster.cluster.placer
        assert isinstance(placer, ExtenderPlacer)
        from kubernetes import client

        core = client.CoreV1Api(api)
        before: set[tuple[str, str]] = set()
        landed = 0
        for _ in range(60):
            if cluster.done:
                break
            cache.refresh()  # the extender's informer catches up between slots
            seen = len(placer.decisions)
            cluster.advance()
            decided = {(d.namespace, d.job, d.role, d.node) for d in placer.decisions[seen:]}
            for decision in placer.decisions[seen:]:
                assert decision.node in best_hosts(host_priorities(decision.scores))
            pods = core.list_pod_for_all_namespaces(label_selector=contract.JOB_LABEL).items
            bound = {(pod.metadata.name, pod.spec.node_name): pod for pod in pods if pod.spec.node_name}
            for key in set(bound) - before:  # pods bound in this slot: each where the extender scored highest
                labels = bound[key].metadata.labels
                assert (
                    bound[key].metadata.namespace,
                    labels[contract.JOB_LABEL],
                    labels[contract.ROLE_LABEL],
                    key[1],
                ) in decided
                landed += 1
            before = set(bound)
    assert landed > 0 and placer.unavailable == 0
    assert any(len(set(d.scores.values())) > 1 for d in placer.decisions)  # the scores did discriminate
    assert any(d.node != d.default for d in placer.decisions)  # and the extender changed where pods went


class BadExtender(BaseHTTPRequestHandler):
    """Misbehaves as `server.mode` says: slow, an HTTP error, or a body of the wrong shape."""

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        mode = self.server.mode  # type: ignore[attr-defined]
        if mode == "slow":
            time.sleep(0.3)
        status, body = {"error": (500, b'{"error": "boom"}'), "shape": (200, b'{"unexpected": true}')}.get(
            mode, (200, b"[]")
        )
        try:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up (timeout)


def run_with(server: LocalApiServer, client: ExtenderClient | None) -> tuple[list[Any], Any]:
    cluster = simulate_cluster(server, tiny_workload(num_jobs=4, num_nodes=2), CONFIG, extender=client)
    started = time.perf_counter()
    cluster.run_to_end(max_slots=400)
    assert cluster.done
    return [(r["job_id"], r["jct_s"]) for r in cluster.job_results()], (
        cluster.cluster.placer,
        time.perf_counter() - started,
    )


@pytest.mark.parametrize("mode", ["refused", "slow", "error", "shape"])
def test_a_bad_or_slow_extender_never_blocks_scheduling(mode: str) -> None:
    with LocalApiServer(crd_files=THIRD_PARTY_CRDS) as plain:
        reference, _ = run_with(plain, None)
    bad = ThreadingHTTPServer(("127.0.0.1", 0), BadExtender)
    bad.mode = mode  # type: ignore[attr-defined]
    port = bad.server_address[1]
    if mode == "refused":
        bad.server_close()  # nothing listens on the port any more
    else:
        threading.Thread(target=bad.serve_forever, daemon=True).start()
    try:
        with LocalApiServer(crd_files=THIRD_PARTY_CRDS) as server:
            results, (placer, _) = run_with(server, ExtenderClient(f"http://127.0.0.1:{port}/extender", timeout_s=0.05))
    finally:
        if mode != "refused":
            bad.shutdown()
            bad.server_close()
    assert results == reference  # every job finished exactly as without the extender
    assert placer.unavailable > 0 and placer.decisions == []


def test_the_client_raises_unavailable_for_every_kind_of_failure() -> None:
    args = ExtenderArgs({"metadata": {"name": "p"}}, ("a",), None)
    with pytest.raises(ExtenderUnavailable):
        ExtenderClient("http://127.0.0.1:9/extender", timeout_s=0.2).filter(args)
    bad = ThreadingHTTPServer(("127.0.0.1", 0), BadExtender)
    threading.Thread(target=bad.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{bad.server_address[1]}/extender"
        for mode in ("error", "shape", "ok-list"):
            bad.mode = mode  # type: ignore[attr-defined]
            with pytest.raises(ExtenderUnavailable):
                ExtenderClient(url, timeout_s=1).filter(args)  # a list is not an ExtenderFilterResult
        bad.mode = "shape"  # type: ignore[attr-defined]
        with pytest.raises(ExtenderUnavailable):
            ExtenderClient(url, timeout_s=1).prioritize(args)
    finally:
        bad.shutdown()
        bad.server_close()


def test_dl2_extender_refuses_a_folder_that_is_not_a_placer(tmp_path, capsys) -> None:
    from dl2.cli.main import main

    assert main(["extender", "--placer", str(tmp_path)]) == 2
    assert "placer" in capsys.readouterr().err
    assert main(["extender", "--placer", str(tmp_path), "--refresh-s", "0"]) == 2
    assert "--refresh-s" in capsys.readouterr().err

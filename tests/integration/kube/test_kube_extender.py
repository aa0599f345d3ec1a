"""Harmony's placer as a kube-scheduler extender: the protocol's request and response shapes, the scores against
the placer's own choice, the HTTPS server (which answers only a client certificate its client CA signed), and the
real kube-scheduler with the shipped extender configuration and the Helm chart's certificates, where pods of managed
jobs land on the node the extender ranks first and a refused, slow or broken extender never blocks scheduling
(`ignorable: true`)."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from dl2.core import Architecture, InputError
from dl2.kube.cache import ClusterCache
from dl2.kube.extender import (
    MAX_EXTENDER_PRIORITY,
    ExtenderArgs,
    HarmonyExtender,
    SnapshotCache,
    best_hosts,
    filter_result,
    host_priorities,
)
from dl2.kube.extender_http import ExtenderClient, ExtenderServer, ExtenderUnavailable, ServerTLS, client_context
from dl2.kube.metrics import Metrics
from dl2.kube.observe import RawCluster, snapshot
from dl2.kube.rest import Rest
from dl2.placement.config import JOB_INPUTS, SERVER_INPUTS, PlacerConfig
from dl2.placement.policy import HarmonyPlacer, NumpyPlacementPolicy
from dl2.schedulers.placement import place_sticky
from dl2.sim.config import SimConfig
from testbed.controlplane.assets import AssetsMissing, helm
from testbed.controlplane.pki import CertificateAuthority
from testbed.twin import manifests
from tests.builders import tiny_workload

K8S = Path(__file__).resolve().parents[3] / "k8s"
SERVICE_NAME = "dl2-extender.dl2-system.svc"
"""The name kube-scheduler's urlPrefix gives the extender, which its serving certificate must carry."""
SCHEDULER_NAME = "dl2-scheduler"
CONFIG = SimConfig.realistic(seed=1)


def random_placer(seed: int = 0) -> HarmonyPlacer:
    """A policy network with seeded random weights: the protocol does not care how well it places."""
    rng = np.random.default_rng(seed)
    layers = [
        (rng.normal(size=(SERVER_INPUTS + JOB_INPUTS, 8)).astype(np.float32), rng.normal(size=8).astype(np.float32)),
        (rng.normal(size=(8, 1)).astype(np.float32), np.zeros(1, np.float32)),
    ]
    return HarmonyPlacer(NumpyPlacementPolicy(layers), PlacerConfig((8,)))


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
        obj = manifests.job(spec, f"job-{index}", "team-a", None, SCHEDULER_NAME)
        obj["metadata"]["uid"] = f"uid-{index}"
        jobs.append(obj)
        for count, (role, node) in enumerate(running.get(index, [])):
            plural = "pytorchjobs" if obj["kind"] == "PyTorchJob" else "jobs"
            pods.append(manifests.pod(spec, f"job-{index}", "team-a", plural, f"uid-{index}", role, count, names[node],
                                      SCHEDULER_NAME))  # fmt: skip
    return RawCluster(("team-a",), tuple(jobs), tuple(pods), tuple(nodes)), names


def pending_pod(raw: RawCluster, index: int, role: str) -> dict[str, Any]:
    obj = raw.jobs[index]
    spec = snapshot(raw, 0.0, 0, 1.0, "kubernetes").view.jobs[index].spec
    plural = "pytorchjobs" if obj["kind"] == "PyTorchJob" else "jobs"
    return manifests.pod(spec, obj["metadata"]["name"], "team-a", plural, obj["metadata"]["uid"], role, 0, None,
                         SCHEDULER_NAME)  # fmt: skip


def extender_for(raw: RawCluster, placer: HarmonyPlacer) -> HarmonyExtender:
    cache = SnapshotCache(lambda: raw)
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
    unread = HarmonyExtender(random_placer(), SnapshotCache(lambda: raw))
    assert unread.filter(args)["NodeNames"] == names  # no read yet


# -- over HTTPS ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    """Two CAs: the extender's, which signed its serving certificate (localhost, 127.0.0.1) and kube-scheduler's
    client certificate, and a stranger's, which signed a client certificate of its own."""

    server: ServerTLS
    ca: Path
    client: tuple[Path, Path]
    stranger: tuple[Path, Path]


@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> Certificates:
    folder = tmp_path_factory.mktemp("extender-pki")
    ca = CertificateAuthority(folder / "extender")
    serving = ca.issue("serving", "dl2-extender", server=True)
    client = ca.issue("client", "dl2-kube-scheduler")
    stranger = CertificateAuthority(folder / "stranger").issue("client", "dl2-kube-scheduler")
    return Certificates(
        ServerTLS(serving.cert, serving.key, ca.pair.cert),
        ca.pair.cert,
        (client.cert, client.key),
        (stranger.cert, stranger.key),
    )


def post(url: str, body: bytes, context: ssl.SSLContext | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_https_server_speaks_the_protocol(certificates) -> None:
    raw, names = raw_cluster({0: [("worker", 1)]})
    scheduler = client_context(certificates.ca, *certificates.client)
    with ExtenderServer(extender_for(raw, random_placer()), tls=certificates.server) as server:
        assert server.url.startswith("https://")
        args = {"Pod": pending_pod(raw, 1, "worker"), "NodeNames": names}
        status, priorities = post(f"{server.url}/prioritize", json.dumps(args).encode(), scheduler)
        assert status == 200 and sorted(entry["Host"] for entry in priorities) == sorted(names)
        status, result = post(f"{server.url}/filter", json.dumps(args).encode(), scheduler)
        assert status == 200 and result["NodeNames"] == names and result["Error"] == ""
        status, result = post(f"{server.url}/filter", b"{not json", scheduler)
        assert status == 400 and "not JSON" in result["Error"]
        status, result = post(f"{server.url}/prioritize", json.dumps({"Pod": {}}).encode(), scheduler)
        assert status == 400 and "Pod" in result["error"]
        assert post(f"{server.url}/bind", b"{}", scheduler)[0] == 404
        client = ExtenderClient(server.url, timeout_s=5, context=scheduler)
        typed = ExtenderArgs.from_json(args)
        assert client.filter(typed) == names
        assert set(client.prioritize(typed)) == set(names)


def test_the_extender_answers_only_a_client_certificate_its_ca_signed(certificates) -> None:
    """No certificate: 401 for the verbs (the kubelet's probes still reach /healthz, as they present none); a
    certificate of another CA: the handshake fails; plain HTTP on the port: no answer. None reaches the placer."""
    raw, names = raw_cluster({0: [("worker", 1)]})
    body = json.dumps({"Pod": pending_pod(raw, 1, "worker"), "NodeNames": names}).encode()
    anonymous = client_context(certificates.ca)
    stranger = client_context(certificates.ca, *certificates.stranger)
    with ExtenderServer(extender_for(raw, random_placer()), tls=certificates.server) as server:
        for verb in ("filter", "prioritize"):
            status, result = post(f"{server.url}/{verb}", body, anonymous)
            assert status == 401 and "client certificate" in result["error"]
        assert server.refused == 2
        with urllib.request.urlopen(
            server.url.removesuffix("/extender") + "/healthz", timeout=5, context=anonymous
        ) as response:
            assert json.loads(response.read()) == {"status": "ok"}
        typed = ExtenderArgs.from_json(json.loads(body))
        plain = server.url.replace("https://", "http://")
        for url, context in [(server.url, anonymous), (server.url, stranger), (plain, None)]:
            with pytest.raises(ExtenderUnavailable):
                ExtenderClient(url, timeout_s=5, context=context).prioritize(typed)
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            post(f"{server.url}/prioritize", body, stranger)
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            post(f"{plain}/prioritize", body)
        assert server.requests == 0
        # and the client that the CA signed is answered on the same server
        assert ExtenderClient(
            server.url, timeout_s=5, context=client_context(certificates.ca, *certificates.client)
        ).prioritize(typed)
        assert server.requests == 1


def test_renewed_certificates_are_used_without_a_restart(certificates, tmp_path) -> None:
    """As when cert-manager renews the Secrets and the kubelet updates the mounted files: the next handshake serves
    the new certificate and accepts only clients of the new CA."""
    raw, names = raw_cluster({0: [("worker", 1)]})
    typed = ExtenderArgs(pending_pod(raw, 1, "worker"), tuple(names), None)
    mounted = ServerTLS(tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt")

    def mount(server: ServerTLS) -> None:
        for source, target in zip(
            (server.cert_file, server.key_file, server.client_ca_file),
            (mounted.cert_file, mounted.key_file, mounted.client_ca_file),
            strict=True,
        ):
            staged = target.with_suffix(".new")
            staged.write_bytes(source.read_bytes())
            staged.replace(target)

    mount(certificates.server)
    renewed = CertificateAuthority(tmp_path / "renewed")
    serving, client = (
        renewed.issue("serving", "dl2-extender", server=True),
        renewed.issue("client", "dl2-kube-scheduler"),
    )
    with ExtenderServer(extender_for(raw, random_placer()), tls=mounted) as server:

        def caller(ca: Path, cert: Path, key: Path) -> ExtenderClient:
            return ExtenderClient(server.url, timeout_s=5, context=client_context(ca, cert, key))

        old, new = caller(certificates.ca, *certificates.client), caller(renewed.pair.cert, client.cert, client.key)
        assert old.prioritize(typed)
        with pytest.raises(ExtenderUnavailable):
            new.prioritize(typed)  # the server's certificate is not the renewed CA's yet
        time.sleep(0.01)  # a later modification time
        mount(ServerTLS(serving.cert, serving.key, renewed.pair.cert))
        assert new.prioritize(typed)
        with pytest.raises(ExtenderUnavailable):
            old.prioritize(typed)
        # the old CA's client certificate is refused, by a client that trusts the renewed server
        with pytest.raises(ExtenderUnavailable):
            caller(renewed.pair.cert, *certificates.client).prioritize(typed)
        assert server.requests == 2


# -- the real kube-scheduler ------------------------------------------------------------------------------------


def shipped_scheduler_configuration() -> dict[str, Any]:
    """The KubeSchedulerConfiguration of `k8s/scheduler-extender.yaml`'s ConfigMap."""
    for doc in yaml.safe_load_all((K8S / "scheduler-extender.yaml").read_text()):
        if doc and doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "dl2-kube-scheduler-config":
            return yaml.safe_load(doc["data"]["config.yaml"])
    raise AssertionError("no dl2-kube-scheduler-config in k8s/scheduler-extender.yaml")


class RecordingExtender(HarmonyExtender):
    """The extender with a fresh view at every request (the deployed one rebuilds it every 2 s) and a note of the
    scores it gave each pod."""

    def __init__(self, placer: HarmonyPlacer, cache: SnapshotCache) -> None:
        super().__init__(placer, cache)
        self.scores: dict[str, dict[str, int]] = {}

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        self.cache.refresh()
        priorities = super().prioritize(args)
        self.scores[args.pod["metadata"]["name"]] = {e["Host"]: e["Score"] for e in priorities}
        return priorities

    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        self.cache.refresh()
        return super().filter(args)


def chart_certificates(folder: Path) -> tuple[ServerTLS, dict[str, str]]:
    """The extender's serving certificate and kube-scheduler's client certificate as the Helm chart makes them
    (`helm template --show-only templates/extender-tls.yaml`, also how a kustomize install makes its Secrets): the
    extender's `ServerTLS` and the `tlsConfig` files for kube-scheduler."""
    try:
        binary = helm()
    except AssetsMissing as error:
        pytest.fail(f"{error} (make test builds it)")
    chart = K8S / "chart" / "dl2"
    done = subprocess.run([binary, "template", "dl2", str(chart), "--show-only", "templates/extender-tls.yaml"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for secret in [doc for doc in yaml.safe_load_all(done.stdout) if doc]:
        (folder / secret["metadata"]["name"]).mkdir()
        for key, value in secret["data"].items():
            (folder / secret["metadata"]["name"] / key).write_bytes(base64.b64decode(value))
    server, client = folder / "dl2-extender-tls", folder / "dl2-kube-scheduler-tls"
    files = {"caFile": "ca.crt", "certFile": "tls.crt", "keyFile": "tls.key"}
    return (
        ServerTLS(server / "tls.crt", server / "tls.key", server / "ca.crt"),
        {field: str(client / name) for field, name in files.items()},
    )


def start_scheduler(kube, url: str, tls: dict[str, str] | None = None, http_timeout: str = "2s") -> Any:
    """A second kube-scheduler with the shipped configuration, pointed at `url`, as the system:kube-scheduler
    user of this control plane (leader election off: one replica). `tls`: the shipped `tlsConfig`'s files, here
    (the extender's certificate is checked for the Service's name, which `url`'s 127.0.0.1 is not); None: plain
    HTTP, for the misbehaving extenders below."""
    shipped = shipped_scheduler_configuration()
    (extender,) = shipped["extenders"]
    assert extender["ignorable"] is True and extender["weight"] >= 1000
    assert extender["urlPrefix"].startswith(f"https://{SERVICE_NAME}:") and extender["enableHTTPS"] is True
    assert set(extender["tlsConfig"]) == {"caFile", "certFile", "keyFile"}  # mutual TLS
    configuration = kube.plane.default_scheduler_configuration()
    configuration["profiles"] = shipped["profiles"]
    extender = {**extender, "urlPrefix": url, "httpTimeout": http_timeout}
    if tls is None:
        extender = {**{k: v for k, v in extender.items() if k != "tlsConfig"}, "enableHTTPS": False}
    else:
        extender["tlsConfig"] = {**tls, "serverName": SERVICE_NAME}
    configuration["extenders"] = [extender]
    return kube.plane.start_scheduler(f"kube-scheduler-extender-{time.monotonic_ns()}", configuration)


def stop_scheduler(kube, scheduler: Any) -> None:
    scheduler.stop()
    kube.plane.components.remove(scheduler)


def test_pods_of_managed_jobs_land_on_the_node_the_extender_ranks_first(kube, twin, training_pods, tmp_path) -> None:
    """Over HTTPS, each side checking the other's certificate (the chart's), as the shipped configuration says."""
    workload = tiny_workload(num_nodes=4)
    server_tls, scheduler_tls = chart_certificates(tmp_path)
    informers = ClusterCache(Rest(kube.extender_api()), Metrics()).start()
    extender = RecordingExtender(random_placer(), SnapshotCache(informers.read))
    with ExtenderServer(extender, tls=server_tls) as server:
        scheduler = start_scheduler(kube, server.url, scheduler_tls)
        try:
            with twin(workload, CONFIG, scheduler_name=SCHEDULER_NAME) as cluster:
                for _ in range(12):
                    if cluster.done:
                        break
                    cluster.advance()
                pods = {p["metadata"]["name"]: p for p in training_pods()}
        finally:
            stop_scheduler(kube, scheduler)
            informers.stop()
    ranked = {name: scores for name, scores in extender.scores.items() if len(set(scores.values())) > 1}
    assert ranked, "the extender never discriminated between nodes"
    bound = [(name, pod["spec"]["nodeName"]) for name, pod in pods.items() if pod["spec"].get("nodeName")]
    checked = [(name, node) for name, node in bound if name in ranked]
    for name, node in checked:  # `pytest -s`: each pod, the node kube-scheduler bound it to, the extender's scores
        print(f"{name} -> {node}  extender: {dict(sorted(ranked[name].items(), key=lambda kv: -kv[1]))}")
    assert checked and all(node in best_hosts(host_priorities(ranked[name])) for name, node in checked)
    placed = {name for name, _ in bound}
    assert placed and placed <= set(extender.scores) | {n for n in placed if n not in extender.scores}
    assert server.refused == 0  # every call kube-scheduler made carried its client certificate


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


@pytest.mark.parametrize("mode", ["refused", "slow", "error"])
def test_with_the_extender_down_slow_or_failing_pods_still_schedule(kube, twin, training_pods, mode: str) -> None:
    bad = ThreadingHTTPServer(("127.0.0.1", 0), BadExtender)
    bad.mode = mode  # type: ignore[attr-defined]
    port = bad.server_address[1]
    if mode == "refused":
        bad.server_close()  # nothing listens on the port any more
    else:
        threading.Thread(target=bad.serve_forever, daemon=True).start()
    scheduler = start_scheduler(kube, f"http://127.0.0.1:{port}/extender", http_timeout="100ms")
    try:
        with twin(tiny_workload(num_jobs=2, num_nodes=2), CONFIG, scheduler_name=SCHEDULER_NAME) as cluster:
            started = time.monotonic()
            cluster.advance()
            waited = time.monotonic() - started
            pods = training_pods()
            bound = [pod for pod in pods if pod["spec"].get("nodeName")]
            refused = {
                pod["metadata"]["name"]: [c.get("message", "") for c in pod["status"].get("conditions") or []]
                for pod in pods
                if not pod["spec"].get("nodeName")
            }
            # every pod was decided by kube-scheduler alone: bound, or refused for want of room, not for the extender
            assert bound and all(messages and "Insufficient" in messages[0] for messages in refused.values()), refused
            assert waited < cluster.options.scheduling_timeout_s
            cluster.advance(3)
            assert cluster.status()["slot"] >= 4 and sum(cluster.simulation.progress) > 0  # the jobs train
    finally:
        stop_scheduler(kube, scheduler)
        if mode != "refused":
            bad.shutdown()
            bad.server_close()


def test_a_kube_scheduler_without_the_client_certificate_is_refused(kube, twin, training_pods, tmp_path) -> None:
    """kube-scheduler trusting the extender's certificate but presenting none of its own: every call is refused
    (401), none reaches the placer, and the pods are scheduled as without the extender (it is ignorable)."""
    server_tls, scheduler_tls = chart_certificates(tmp_path)
    raw, _ = raw_cluster({})
    extender = RecordingExtender(random_placer(), SnapshotCache(lambda: raw))
    with ExtenderServer(extender, tls=server_tls) as server:
        scheduler = start_scheduler(kube, server.url, {"caFile": scheduler_tls["caFile"]}, http_timeout="1s")
        try:
            with twin(tiny_workload(num_jobs=2, num_nodes=2), CONFIG, scheduler_name=SCHEDULER_NAME) as cluster:
                cluster.advance()
                bound = [pod for pod in training_pods() if pod["spec"].get("nodeName")]
        finally:
            stop_scheduler(kube, scheduler)
    assert bound and server.refused > 0
    assert server.requests == 0 and not extender.scores


def test_an_answer_of_the_wrong_shape_is_not_ignored_by_kube_scheduler(kube, twin, training_pods) -> None:
    """kube-scheduler ignores an ignorable extender that fails (refused, timed out, 5xx), not one that answers
    200 with a filter result that names no node: it reads that as every node filtered out, and the pod waits.
    Hence `dl2 extender` answers every request with a well-formed result (the protocol tests above)."""
    bad = ThreadingHTTPServer(("127.0.0.1", 0), BadExtender)
    bad.mode = "shape"  # type: ignore[attr-defined]
    threading.Thread(target=bad.serve_forever, daemon=True).start()
    scheduler = start_scheduler(kube, f"http://127.0.0.1:{bad.server_address[1]}/extender", http_timeout="100ms")
    try:
        with twin(tiny_workload(num_jobs=2, num_nodes=2), CONFIG, scheduler_name=SCHEDULER_NAME) as cluster:
            cluster.advance()
            pods = training_pods()
            assert pods and not any(pod["spec"].get("nodeName") for pod in pods)
    finally:
        stop_scheduler(kube, scheduler)
        bad.shutdown()
        bad.server_close()


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

    assert main(["extender", "--placer", str(tmp_path), "--insecure-http"]) == 2
    assert "placer" in capsys.readouterr().err
    assert main(["extender", "--placer", str(tmp_path), "--refresh-s", "0"]) == 2
    assert "--refresh-s" in capsys.readouterr().err


def test_dl2_extender_serves_https_with_client_certificates_or_says_what_is_missing(
    tmp_path, capsys, certificates
) -> None:
    """No TLS flags and no --insecure-http: refused, naming the three files; each file must exist and be PEM."""
    from dl2.cli.main import main

    placer = ["extender", "--placer", str(tmp_path)]
    tls = certificates.server
    files = ["--tls-cert-file", str(tls.cert_file), "--tls-key-file", str(tls.key_file)]
    for arguments, message in [
        ([], "HTTPS needs --tls-cert-file, --tls-key-file, --client-ca-file (or --insecure-http"),
        (files, "HTTPS needs --client-ca-file"),
        ([*files, "--client-ca-file", str(tmp_path / "absent.crt")], "absent.crt: no such file"),
        ([*files, "--client-ca-file", str(tls.key_file)], "--client-ca-file"),  # a key is no CA
        (["--insecure-http", *files], "--insecure-http serves plain HTTP: drop --tls-cert-file, --tls-key-file"),
    ]:
        assert main([*placer, *arguments]) == 2, arguments
        assert message in capsys.readouterr().err, arguments
    # with the three files it gets as far as the placer
    assert main([*placer, *files, "--client-ca-file", str(tls.client_ca_file)]) == 2
    assert "placer" in capsys.readouterr().err

"""Progress from a job's own metrics: Prometheus's answers read by hand, a real Prometheus scraping a training
job's exporter, and the controller recording and acting on the progress it measures there."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from dl2.kube import contract
from dl2.kube.progress_metrics import ProgressQuery, PrometheusProgress, QueryError, sample_value


def answer(kind: str, result: object) -> dict[str, object]:
    return {"status": "success", "data": {"resultType": kind, "result": result}}


def test_the_largest_sample_is_the_progress():
    vector = [{"metric": {"pod": "w-0"}, "value": [1.0, "2.5"]}, {"metric": {"pod": "w-1"}, "value": [1.0, "3"]}]
    assert sample_value(answer("vector", vector)) == 3.0
    assert sample_value(answer("scalar", [1.0, "4.25"])) == 4.25
    assert sample_value(answer("vector", [])) is None  # not scraped yet: no progress known
    nan_only = [{"metric": {}, "value": [1.0, "NaN"]}, {"metric": {}, "value": [1.0, "-1"]}]
    assert sample_value(answer("vector", nan_only)) is None  # not a count of epochs
    with pytest.raises(QueryError, match="a matrix is not a number of epochs"):
        sample_value(answer("matrix", []))
    with pytest.raises(QueryError, match="bad_data: parse error"):
        sample_value({"status": "error", "errorType": "bad_data", "error": "parse error"})


def test_a_job_names_its_query_in_an_annotation():
    job = {"metadata": {"annotations": {contract.PROGRESS_QUERY: ' max(epoch{job="a"}) '}}}
    assert contract.progress_query(job) == 'max(epoch{job="a"})'
    assert contract.progress_query({"metadata": {"annotations": {contract.PROGRESS_QUERY: " "}}}) is None
    assert contract.progress_query({"metadata": {}}) is None


@pytest.fixture(scope="module")
def exporter() -> Iterator[tuple[Gauge, str]]:
    """A training job's exporter: the epoch gauge its loop sets, on a free port."""
    from testbed.controlplane.processes import free_port

    registry = CollectorRegistry()
    epoch = Gauge("training_epoch", "Epochs done", ["job_name"], registry=registry)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        yield epoch, f"127.0.0.1:{port}"
    finally:
        server.shutdown()
        thread.join(5)


@pytest.fixture(scope="module")
def prometheus_url(exporter, tmp_path_factory) -> Iterator[str]:
    from testbed.controlplane.assets import AssetsMissing
    from testbed.controlplane.prometheus import prometheus

    try:
        with prometheus(tmp_path_factory.mktemp("prometheus"), [exporter[1]], scrape_interval_s=0.2) as url:
            yield url
    except AssetsMissing as error:
        pytest.fail(f"{error} (make test builds it)")


def scraped(source: PrometheusProgress, query: str, value: float, timeout_s: float = 20.0) -> None:
    """Wait until Prometheus answers `query` with `value` (it scrapes on its own schedule)."""
    deadline = time.monotonic() + timeout_s
    while source.query(query) != value:
        assert time.monotonic() < deadline, f"{query} never answered {value}"
        time.sleep(0.1)


def test_a_real_prometheus_answers_each_job_s_query(exporter, prometheus_url):
    epoch, _ = exporter
    epoch.labels("bert-7").set(2.5)
    source = PrometheusProgress(prometheus_url)
    scraped(source, 'max(training_epoch{job_name="bert-7"})', 2.5)
    queries = [
        ProgressQuery("team-a", "bert-7", 'max(training_epoch{job_name="bert-7"})'),
        ProgressQuery("team-a", "silent", 'max(training_epoch{job_name="never-exported"})'),
        ProgressQuery("team-a", "typo", "max(training_epoch{job_name=)"),
        ProgressQuery("team-a", "range", 'training_epoch{job_name="bert-7"}[1m]'),
    ]
    assert source.read(queries) == {("team-a", "bert-7"): 2.5}  # nothing for the silent job, no exception
    assert source.failures == 2  # the parse error and the range vector, counted
    assert PrometheusProgress("http://127.0.0.1:1", timeout_s=1).read(queries[:1]) == {}  # unreachable: no progress


@pytest.mark.slow
def test_progress_measured_from_metrics_drives_the_controller(kube, policies, exporter, prometheus_url, tmp_path):
    """End to end on the real control plane: a PyTorchJob that never writes `dl2.io/progress-epochs` but exports
    its epoch to Prometheus and names the query; the controller records the progress Prometheus measures, slot by
    slot, and resizes the job as for any other."""
    from dl2.core import NodeSpec, Resources
    from dl2.core.log_format import read_log
    from dl2.kube.controller import Controller, ControllerConfig
    from dl2.kube.rest import KUBEFLOW_PODS, NAMESPACES, NODES, PYTORCHJOBS, Resource
    from testbed.controlplane.apply import apply
    from testbed.controlplane.install import managed_namespace
    from testbed.twin import manifests
    from tests.builders import allreduce_job, heuristic_loader

    epoch, _ = exporter
    rest = kube.rest()
    namespace = "metrics-team"
    apply(rest, managed_namespace(namespace))  # labelled managed, and the controller's resize bound there
    job = manifests.job(allreduce_job("gpt").spec, "gpt", namespace)
    job["metadata"]["annotations"].pop(contract.PROGRESS_EPOCHS, None)
    job["metadata"]["annotations"][contract.PROGRESS_QUERY] = 'max(training_epoch{job_name="gpt"})'
    job = rest.create(PYTORCHJOBS, namespace, job)
    node = rest.create(NODES, None, manifests.node(NodeSpec(0, Resources(32, 512, 4096)), "metrics-node-0"))
    pod = manifests.pod(contract.job_spec(job), "gpt", namespace, "pytorchjobs", job["metadata"]["uid"], "worker", 0,
                        node["metadata"]["name"], "default-scheduler")  # fmt: skip
    pod_version = rest.create(KUBEFLOW_PODS, namespace, pod)["metadata"]["resourceVersion"]
    policies.create("active")
    config = ControllerConfig("metrics", decision_log=tmp_path / "decisions", clock="cluster",
                              prometheus_url=prometheus_url)  # fmt: skip
    controller = Controller(kube.controller_api("metrics"), config, heuristic_loader("drf"))
    assert controller.progress_source is not None
    try:
        controller.refresh_policy(policies.read())
        for slot, epochs in ((1, 1.5), (2, 4.0), (3, 5.0)):
            epoch.labels("gpt").set(epochs)
            scraped(controller.progress_source, 'max(training_epoch{job_name="gpt"})', epochs)
            barrier = {
                KUBEFLOW_PODS.key: int(pod_version),
                PYTORCHJOBS.key: int(rest.get(PYTORCHJOBS, namespace, "gpt")["metadata"]["resourceVersion"]),
            }
            controller.run_slot(slot, slot * 600.0, 600.0, barrier)
        final = rest.get(PYTORCHJOBS, namespace, "gpt")
    finally:
        controller.cache.stop()
        controller.events.stop()
        rest.request("DELETE", NODES.path(None, "metrics-node-0"))
        rest.request("DELETE", PYTORCHJOBS.path(namespace, "gpt"))
        # namespaces outlive a test on the session's control plane: later tests count the managed ones
        rest.merge_patch(NAMESPACES, None, namespace, {"metadata": {"labels": {contract.MANAGED_LABEL: None}}})
        bindings = Resource("rbac.authorization.k8s.io", "v1", "rolebindings")
        rest.request("DELETE", bindings.path(namespace, "dl2-job-resizer"))
    records = [r for r in read_log(tmp_path / "decisions" / "dl2-local") if r.job_id == "gpt"]
    assert [r.progress_epochs for r in records] == [1.5, 4.0]  # what Prometheus measured, slot by slot
    assert [r.observed_epochs for r in records] == [2.5, 1.0]
    assert contract.PROGRESS_EPOCHS not in final["metadata"]["annotations"]  # nothing but the metrics said it
    assert records[0].applied_workers > 1 and contract.replicas(final)[0] > 1

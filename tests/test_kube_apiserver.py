"""The local Kubernetes API server through the official `kubernetes` client (and kubectl) over a real socket."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient

from dl2.kube.apiserver import THIRD_PARTY_CRDS, Fault, FaultKind, LocalApiServer, load_records, permissions
from tests.kube_helpers import NS, PJ, VJ, WatchThread, api_client, namespace, pod, pytorchjob, volcano_job


@pytest.fixture
def server():
    with LocalApiServer(crd_files=THIRD_PARTY_CRDS, bookmark_interval_s=0.2) as running:
        yield running


@pytest.fixture
def api(server):
    api = api_client(server)
    namespace(api)
    return api


def test_discovery_through_the_dynamic_client(server, api):
    dynamic = DynamicClient(api)
    pytorchjobs = dynamic.resources.get(api_version="kubeflow.org/v1", kind="PyTorchJob")
    assert pytorchjobs.namespaced and pytorchjobs.name == "pytorchjobs"
    assert set(pytorchjobs.subresources) == {"status", "scale"}
    volcano = dynamic.resources.get(api_version="batch.volcano.sh/v1alpha1", kind="Job")
    assert volcano.short_names == ["vcjob", "vj"] and set(volcano.subresources) == {"status"}
    pods = dynamic.resources.get(api_version="v1", kind="Pod")
    assert set(pods.subresources) == {"status", "binding"}
    assert dynamic.resources.get(api_version="coordination.k8s.io/v1", kind="Lease").namespaced
    client.CustomObjectsApi(api).create_namespaced_custom_object(*PJ[:2], NS, PJ[2], pytorchjob("resnet"))
    assert [job.metadata.name for job in pytorchjobs.get(namespace=NS).items] == ["resnet"]
    groups = {group.name for group in client.ApisApi(api).get_api_versions().groups}
    assert groups == {"kubeflow.org", "batch.volcano.sh", "coordination.k8s.io", "apiextensions.k8s.io"}
    assert client.VersionApi(api).get_code().major == "1"


def test_a_crd_created_through_the_api_is_served_at_once(server, api):
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "schedulerpolicies.dl2.io"},
        "spec": {
            "group": "dl2.io",
            "scope": "Cluster",
            "names": {"plural": "schedulerpolicies", "singular": "schedulerpolicy", "kind": "SchedulerPolicy"},
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                }
            ],
        },
    }
    extensions = client.ApiextensionsV1Api(api)
    created = extensions.create_custom_resource_definition(crd)
    assert {c.type for c in created.status.conditions} >= {"Established"}
    custom = client.CustomObjectsApi(api)
    policy = custom.create_cluster_custom_object(
        "dl2.io",
        "v1alpha1",
        "schedulerpolicies",
        {
            "apiVersion": "dl2.io/v1alpha1",
            "kind": "SchedulerPolicy",
            "metadata": {"name": "default"},
            "spec": {"mode": "shadow"},
            "status": {"ignored": True},
        },
    )
    assert "status" not in policy  # a CR's status is written through /status only
    status = custom.patch_cluster_custom_object_status(
        "dl2.io", "v1alpha1", "schedulerpolicies", "default", {"status": {"observedGeneration": 1}}
    )
    assert status["status"] == {"observedGeneration": 1} and status["metadata"]["generation"] == 1
    extensions.delete_custom_resource_definition("schedulerpolicies.dl2.io")
    with pytest.raises(ApiException) as gone:
        custom.list_cluster_custom_object("dl2.io", "v1alpha1", "schedulerpolicies")
    assert gone.value.status == 404
    assert server.objects("v1/namespaces")  # the rest of the server is untouched


def test_create_get_delete_and_server_set_metadata(server, api):
    core = client.CoreV1Api(api)
    created = core.create_namespaced_pod(NS, pod("w-0"))
    assert created.metadata.uid and created.metadata.generation == 1 and created.metadata.namespace == NS
    assert created.metadata.creation_timestamp is not None
    generated = core.create_namespaced_pod(NS, {**pod(""), "metadata": {"generateName": "w-"}})
    assert generated.metadata.name.startswith("w-") and len(generated.metadata.name) == len("w-") + 5
    assert int(generated.metadata.resource_version) > int(created.metadata.resource_version)
    with pytest.raises(ApiException) as duplicate:
        core.create_namespaced_pod(NS, pod("w-0"))
    assert duplicate.value.status == 409 and json.loads(duplicate.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as no_namespace:
        core.create_namespaced_pod("nowhere", pod("w-0"))
    assert no_namespace.value.status == 404
    assert core.read_namespaced_pod("w-0", NS).metadata.uid == created.metadata.uid
    core.delete_namespaced_pod("w-0", NS)
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod("w-0", NS)
    assert missing.value.status == 404 and json.loads(missing.value.body)["reason"] == "NotFound"


def test_list_with_label_and_field_selectors_and_pages(server, api):
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(NS, pod("a", {"job": "j1", "role": "worker"}, node="node-1"))
    core.create_namespaced_pod(NS, pod("b", {"job": "j1", "role": "ps"}))
    core.create_namespaced_pod(NS, pod("c", {"job": "j2"}, node="node-2"))
    namespace(api, "team-b")
    core.create_namespaced_pod("team-b", pod("d", {"job": "j3"}))

    def names(**selectors):
        return sorted(p.metadata.name for p in core.list_pod_for_all_namespaces(**selectors).items)

    assert names(label_selector="job=j1") == ["a", "b"]
    assert names(label_selector="job!=j1") == ["c", "d"]
    assert names(label_selector="job in (j2,j3)") == ["c", "d"]
    assert names(label_selector="job notin (j2,j3),role") == ["a", "b"]
    assert names(label_selector="!role") == ["c", "d"]
    assert names(field_selector="spec.nodeName=") == ["b", "d"]  # what a scheduler asks: pods not yet bound
    assert names(field_selector="metadata.name=c") == ["c"]
    assert names(field_selector="metadata.namespace=team-b") == ["d"]
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod(NS, label_selector="job in (j1")
    assert bad.value.status == 400
    first = core.list_pod_for_all_namespaces(limit=3)
    assert [p.metadata.name for p in first.items] == ["a", "b", "c"] and first.metadata.remaining_item_count == 1
    rest = core.list_pod_for_all_namespaces(limit=3, _continue=first.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["d"] and rest.metadata._continue is None
    assert int(first.metadata.resource_version) == max(int(p.metadata.resource_version) for p in rest.items)  # d: last


def test_watch_from_a_resource_version_sees_later_changes_and_selector_moves(server, api):
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(NS, pod("a", {"job": "j1"}))
    core.create_namespaced_pod(NS, pod("b", {"job": "j2"}))
    listed = core.list_namespaced_pod(NS, label_selector="job=j1")
    watcher = WatchThread(
        core.list_namespaced_pod,
        stop_after=4,
        namespace=NS,
        label_selector="job=j1",
        resource_version=listed.metadata.resource_version,
    )
    time.sleep(0.2)
    core.patch_namespaced_pod("b", NS, {"metadata": {"annotations": {"x": "1"}}})  # never matches: not sent
    core.patch_namespaced_pod("a", NS, {"metadata": {"annotations": {"x": "1"}}})
    core.patch_namespaced_pod("b", NS, {"metadata": {"labels": {"job": "j1"}}})  # moves into the selector
    core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"job": "j9"}}})  # moves out of it
    core.create_namespaced_pod(NS, pod("c", {"job": "j1"}))
    events = watcher.wait_for(4)
    watcher.join()
    assert [(kind, name) for kind, name, _ in events] == [
        ("MODIFIED", "a"),
        ("ADDED", "b"),
        ("DELETED", "a"),
        ("ADDED", "c"),
    ]
    assert [int(rv) for _, _, rv in events] == sorted(int(rv) for _, _, rv in events)


def test_watch_from_an_expired_version_gets_410_and_the_client_raises_it():
    with LocalApiServer(history=3) as server:
        api = api_client(server)
        namespace(api)
        core = client.CoreV1Api(api)
        old = core.create_namespaced_config_map(NS, {"metadata": {"name": "cm"}, "data": {"n": "0"}})
        for n in range(1, 6):
            core.patch_namespaced_config_map("cm", NS, {"data": {"n": str(n)}})
        watcher = WatchThread(
            core.list_namespaced_config_map, namespace=NS, resource_version=old.metadata.resource_version
        )
        watcher.join()
        assert isinstance(watcher.error, ApiException) and watcher.error.status == 410  # after its one retry
        url = (
            f"{server.url}/api/v1/namespaces/{NS}/configmaps?watch=true&resourceVersion={old.metadata.resource_version}"
        )
        with urllib.request.urlopen(url, timeout=5) as response:
            event = json.loads(response.readline())
        assert event["type"] == "ERROR"
        assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
        assert event["object"]["kind"] == "Status" and "too old resource version" in event["object"]["message"]
        recent = core.list_namespaced_config_map(NS).metadata.resource_version
        assert (
            WatchThread(
                core.list_namespaced_config_map, namespace=NS, resource_version=recent, timeout_seconds=1
            ).wait_for(1, 3)
            == []
        )  # a recent version is fine
        core.patch_namespaced_config_map("cm", NS, {"data": {"n": "6"}})
        server.compact()  # as after an etcd compaction, every older version is gone
        after = WatchThread(core.list_namespaced_config_map, namespace=NS, resource_version=recent)
        after.join()
        assert isinstance(after.error, ApiException) and after.error.status == 410


def test_bookmarks_carry_the_current_resource_version(server, api):
    core = client.CoreV1Api(api)
    listed = core.list_namespaced_pod(NS)
    watcher = WatchThread(
        core.list_namespaced_pod,
        stop_after=3,
        namespace=NS,
        allow_watch_bookmarks=True,
        resource_version=listed.metadata.resource_version,
    )
    time.sleep(0.1)
    created = core.create_namespaced_pod(NS, pod("a"))
    events = watcher.wait_for(3)
    watcher.join()
    kinds = [kind for kind, _, _ in events]
    assert "ADDED" in kinds and "BOOKMARK" in kinds
    after_create = [rv for kind, _, rv in events[kinds.index("ADDED") + 1 :] if kind == "BOOKMARK"]
    assert after_create and int(after_create[0]) >= int(created.metadata.resource_version)
    assert int(watcher.watch.resource_version) >= int(created.metadata.resource_version)
    without = WatchThread(
        core.list_namespaced_pod, namespace=NS, timeout_seconds=1, resource_version=created.metadata.resource_version
    )
    without.join()
    assert without.events == []  # no bookmarks unless asked for
    streaming_list = (
        f"{server.url}/api/v1/namespaces/{NS}/pods?watch=true&sendInitialEvents=true"
        "&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1"
    )
    with urllib.request.urlopen(streaming_list, timeout=5) as response:
        added, end = (json.loads(response.readline()) for _ in range(2))
    assert added["type"] == "ADDED" and added["object"]["metadata"]["name"] == "a"
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_merge_json_and_strategic_merge_patches(server, api):
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(*PJ[:2], NS, PJ[2], pytorchjob("resnet"))
    merged = custom.patch_namespaced_custom_object(
        *PJ[:2],
        NS,
        PJ[2],
        "resnet",
        {
            "metadata": {"annotations": {"dl2.io/model": "resnet-50"}},
            "spec": {"elasticPolicy": {"rdzvBackend": None, "maxReplicas": 4}},
        },
    )
    assert merged["spec"]["elasticPolicy"] == {"minReplicas": 1, "maxReplicas": 4}  # null deleted a key
    custom.create_namespaced_custom_object(*VJ[:2], NS, VJ[2], volcano_job("vgg", ps=1, workers=2))
    patch = [
        {"op": "test", "path": "/spec/tasks/1/name", "value": "worker"},
        {"op": "replace", "path": "/spec/tasks/1/replicas", "value": 5},
        {"op": "add", "path": "/metadata/annotations", "value": {"dl2.io/max-workers": "8"}},
    ]
    patched = custom.patch_namespaced_custom_object(
        *VJ[:2], NS, VJ[2], "vgg", patch, _content_type="application/json-patch+json"
    )
    assert [t["replicas"] for t in patched["spec"]["tasks"]] == [1, 5]
    assert patched["metadata"]["annotations"] == {"dl2.io/max-workers": "8"}
    wrong_task = [
        {"op": "test", "path": "/spec/tasks/0/name", "value": "worker"},
        {"op": "replace", "path": "/spec/tasks/0/replicas", "value": 9},
    ]
    with pytest.raises(ApiException) as refused:
        custom.patch_namespaced_custom_object(
            *VJ[:2], NS, VJ[2], "vgg", wrong_task, _content_type="application/json-patch+json"
        )
    assert refused.value.status == 422
    assert custom.get_namespaced_custom_object(*VJ[:2], NS, VJ[2], "vgg")["spec"]["tasks"][0]["replicas"] == 1
    with pytest.raises(ApiException) as unsupported:  # as a real API server answers for a CRD
        custom.patch_namespaced_custom_object(
            *PJ[:2], NS, PJ[2], "resnet", {"spec": {}}, _content_type="application/strategic-merge-patch+json"
        )
    assert unsupported.value.status == 415
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(
        NS,
        {
            **pod("p"),
            "spec": {"containers": [{"name": "trainer", "image": "trainer:1"}, {"name": "sidecar", "image": "log:1"}]},
        },
    )
    # the client sends core kinds a strategic merge patch: containers merge by name
    updated = core.patch_namespaced_pod("p", NS, {"spec": {"containers": [{"name": "sidecar", "image": "log:2"}]}})
    assert [(c.name, c.image) for c in updated.spec.containers] == [("trainer", "trainer:1"), ("sidecar", "log:2")]


def test_scale_subresource_of_a_pytorchjob(server, api):
    custom = client.CustomObjectsApi(api)
    created = custom.create_namespaced_custom_object(*PJ[:2], NS, PJ[2], pytorchjob("resnet", workers=2))
    scale = custom.get_namespaced_custom_object_scale(*PJ[:2], NS, PJ[2], "resnet")
    assert scale["kind"] == "Scale" and scale["spec"] == {"replicas": 2} and scale["status"] == {"replicas": 0}
    scaled = custom.patch_namespaced_custom_object_scale(*PJ[:2], NS, PJ[2], "resnet", {"spec": {"replicas": 4}})
    assert scaled["spec"]["replicas"] == 4
    job = custom.get_namespaced_custom_object(*PJ[:2], NS, PJ[2], "resnet")
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4 and "replicas" not in job["spec"]
    assert job["metadata"]["generation"] == created["metadata"]["generation"] + 1
    selector = "training.kubeflow.org/job-name=resnet"
    custom.patch_namespaced_custom_object_status(
        *PJ[:2], NS, PJ[2], "resnet", {"status": {"replicaStatuses": {"Worker": {"active": 3, "selector": selector}}}}
    )
    scale = custom.get_namespaced_custom_object_scale(*PJ[:2], NS, PJ[2], "resnet")
    assert scale["status"] == {"replicas": 3, "selector": selector}
    replaced = custom.replace_namespaced_custom_object_scale(
        *PJ[:2], NS, PJ[2], "resnet", {**scale, "spec": {"replicas": 1}}
    )
    assert replaced["spec"]["replicas"] == 1
    with pytest.raises(ApiException) as stale:  # the Scale read before the last write carries an old version
        custom.replace_namespaced_custom_object_scale(*PJ[:2], NS, PJ[2], "resnet", scale)
    assert stale.value.status == 409
    with pytest.raises(ApiException) as negative:
        custom.patch_namespaced_custom_object_scale(*PJ[:2], NS, PJ[2], "resnet", {"spec": {"replicas": -1}})
    assert negative.value.status == 422
    with pytest.raises(ApiException) as none:  # Volcano's CRD declares no scale subresource
        custom.create_namespaced_custom_object(*VJ[:2], NS, VJ[2], volcano_job("vgg"))
        custom.get_namespaced_custom_object_scale(*VJ[:2], NS, VJ[2], "vgg")
    assert none.value.status == 404


def test_status_subresource_and_generation(server, api):
    custom = client.CustomObjectsApi(api)
    job = custom.create_namespaced_custom_object(*PJ[:2], NS, PJ[2], pytorchjob("resnet"))
    status = {"conditions": [{"type": "Running", "status": "True"}]}
    after_status = custom.patch_namespaced_custom_object_status(
        *PJ[:2],
        NS,
        PJ[2],
        "resnet",
        {
            "status": status,
            "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 7}}},
            "metadata": {"labels": {"ignored": "yes"}},
        },
    )
    assert after_status["status"] == status and after_status["metadata"]["generation"] == 1
    assert after_status["spec"] == job["spec"] and "labels" not in after_status["metadata"]  # only status changed
    annotated = custom.patch_namespaced_custom_object(
        *PJ[:2],
        NS,
        PJ[2],
        "resnet",
        {"metadata": {"annotations": {"dl2.io/progress-epochs": "1.5"}}, "status": {"conditions": []}},
    )
    assert annotated["status"] == status  # writes to the main resource keep the stored status
    assert annotated["metadata"]["generation"] == 1  # a metadata change is not a spec change
    resized = custom.patch_namespaced_custom_object(
        *PJ[:2], NS, PJ[2], "resnet", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}}
    )
    assert resized["metadata"]["generation"] == 2
    again = custom.patch_namespaced_custom_object(
        *PJ[:2], NS, PJ[2], "resnet", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}}
    )
    assert again["metadata"]["resourceVersion"] == resized["metadata"]["resourceVersion"]  # no change, no write


def test_stale_resource_versions_get_409(server, api):
    core = client.CoreV1Api(api)
    stale = core.create_namespaced_config_map(NS, {"metadata": {"name": "cm"}, "data": {"mode": "shadow"}})
    core.patch_namespaced_config_map("cm", NS, {"data": {"mode": "active"}})
    stale.data = {"mode": "canary"}
    with pytest.raises(ApiException) as update:
        core.replace_namespaced_config_map("cm", NS, stale)
    assert update.value.status == 409 and json.loads(update.value.body)["reason"] == "Conflict"
    with pytest.raises(ApiException) as patch:
        core.patch_namespaced_config_map(
            "cm", NS, {"metadata": {"resourceVersion": stale.metadata.resource_version}, "data": {"mode": "canary"}}
        )
    assert patch.value.status == 409
    fresh = core.read_namespaced_config_map("cm", NS)
    assert fresh.data == {"mode": "active"}
    fresh.data = {"mode": "canary"}
    assert core.replace_namespaced_config_map("cm", NS, fresh).data == {"mode": "canary"}


def test_pods_binding_sets_the_node_once(server, api):
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(NS, pod("w-0"))
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name="w-0"),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name="node-3"),
    )
    # the answer is a Status, which the generated client cannot read as a V1Binding (kubernetes-client/python#825)
    assert core.create_namespaced_pod_binding("w-0", NS, body, _preload_content=False).status == 201
    assert core.read_namespaced_pod("w-0", NS).spec.node_name == "node-3"
    with pytest.raises(ApiException) as again:
        core.create_namespaced_pod_binding("w-0", NS, body, _preload_content=False)
    assert again.value.status == 409


def test_finalizers_delay_deletion_and_namespaces_take_their_objects(server, api):
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(NS, {"metadata": {"name": "kept", "finalizers": ["dl2.io/records"]}})
    core.delete_namespaced_config_map("kept", NS)
    marked = core.read_namespaced_config_map("kept", NS)
    assert marked.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map(
        "kept", NS, {"metadata": {"$patch": "replace"}} | {"metadata": {"finalizers": None}}
    )
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map("kept", NS)
    assert gone.value.status == 404
    core.create_namespaced_pod(NS, pod("w-0"))
    core.delete_namespace(NS)
    assert server.objects("v1/pods", NS) == {} and NS not in server.objects("v1/namespaces")


@pytest.fixture
def default_configuration(server):
    """The client's process-wide default configuration pointed at the server (LeaseLock builds its own
    CoordinationV1Api()), restored afterwards."""
    previous = client.Configuration.get_default_copy()
    configuration = client.Configuration()
    configuration.host = server.url
    client.Configuration.set_default(configuration)
    yield configuration
    client.Configuration.set_default(previous)


def test_leader_election_with_the_clients_lease_lock(server, api, default_configuration):
    from kubernetes.leaderelection import electionconfig, leaderelection
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    namespace(api, "dl2-system")
    leaders: list[str] = []
    elections = []

    def candidate(identity, work):
        lock = LeaseLock("dl2-scheduler", "dl2-system", identity)
        election = leaderelection.LeaderElection(
            electionconfig.Config(
                lock,
                lease_duration=2,
                renew_deadline=1.5,
                retry_period=1,
                onstarted_leading=work,
                onstopped_leading=lambda: None,
            )
        )
        thread = threading.Thread(target=election.run, daemon=True)
        thread.start()
        elections.append((election, thread))

    def a_leads():
        leaders.append("a")
        time.sleep(1.0)
        raise RuntimeError("a crashes and stops renewing")

    candidate("a", a_leads)
    time.sleep(0.3)
    candidate("b", lambda: leaders.append("b"))
    deadline = time.time() + 10
    while "b" not in leaders and time.time() < deadline:
        time.sleep(0.1)
    assert leaders[:2] == ["a", "b"]  # b leads only after a's lease expired
    lease = client.CoordinationV1Api(api).read_namespaced_lease("dl2-scheduler", "dl2-system")
    assert lease.spec.holder_identity == "b" and lease.spec.lease_duration_seconds == 2
    renewals = [r for r in server.records() if r.resource == "leases" and r.verb == "update"]
    assert renewals and all(r.code in (200, 409) for r in renewals)
    for election, _ in elections:
        election.try_acquire_or_renew = lambda: False  # the client's LeaderElection has no stop()
    for _, thread in elections:
        thread.join(10)
        assert not thread.is_alive()


def test_error_faults_answer_instead_of_serving(server, api):
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(*PJ[:2], NS, PJ[2], pytorchjob("resnet", workers=2))
    for code, reason in ((409, "Conflict"), (500, "InternalError"), (429, "TooManyRequests")):
        server.add_fault(Fault(FaultKind.ERROR, code=code, verb="patch", resource="pytorchjobs/scale", count=1))
        with pytest.raises(ApiException) as failed:
            custom.patch_namespaced_custom_object_scale(*PJ[:2], NS, PJ[2], "resnet", {"spec": {"replicas": 5}})
        assert failed.value.status == code and json.loads(failed.value.body)["reason"] == reason
        if code == 429:
            assert failed.value.headers["Retry-After"] == "1"
        assert custom.get_namespaced_custom_object_scale(*PJ[:2], NS, PJ[2], "resnet")["spec"]["replicas"] == 2
    assert (
        custom.patch_namespaced_custom_object_scale(*PJ[:2], NS, PJ[2], "resnet", {"spec": {"replicas": 5}})["spec"][
            "replicas"
        ]
        == 5
    )  # counts used up
    server.add_fault(Fault(FaultKind.ERROR, code=500, user_agent="someone-else"))
    assert custom.get_namespaced_custom_object(*PJ[:2], NS, PJ[2], "resnet")  # other clients only
    assert [r.code for r in server.records() if r.rbac_resource == "pytorchjobs/scale" and r.verb == "patch"] == [
        409,
        500,
        429,
        200,
    ]


def test_probabilistic_faults_are_seeded():
    def outcomes(seed):
        with LocalApiServer(seed=seed) as server:
            server.add_fault(Fault(FaultKind.ERROR, code=500, verb="list", resource="configmaps", probability=0.5))
            core = client.CoreV1Api(api_client(server))
            codes = []
            for _ in range(40):
                try:
                    core.list_namespaced_config_map("default")
                    codes.append(200)
                except ApiException as error:
                    codes.append(error.status)
            return codes

    first = outcomes(7)
    assert first == outcomes(7) and first != outcomes(8)
    assert 5 < first.count(500) < 35 and set(first) == {200, 500}


def test_slow_responses_and_client_timeouts(server, api):
    core = client.CoreV1Api(api)
    server.add_fault(Fault(FaultKind.DELAY, delay_s=1.0, verb="get", resource="configmaps"))
    core.create_namespaced_config_map(NS, {"metadata": {"name": "cm"}})
    with pytest.raises(urllib3.exceptions.MaxRetryError) as timed_out:  # urllib3 retried, then gave up
        core.read_namespaced_config_map("cm", NS, _request_timeout=0.2)
    assert isinstance(timed_out.value.reason, urllib3.exceptions.ReadTimeoutError)
    assert core.list_namespaced_config_map(NS, _request_timeout=0.5).items  # lists are not delayed
    server.clear_faults()
    assert core.read_namespaced_config_map("cm", NS, _request_timeout=0.5).metadata.name == "cm"


def test_dropped_watches_are_resumed_by_the_client(server, api):
    core = client.CoreV1Api(api)
    listed = core.list_namespaced_pod(NS)
    watcher = WatchThread(
        core.list_namespaced_pod, stop_after=2, namespace=NS, resource_version=listed.metadata.resource_version
    )
    time.sleep(0.2)
    core.create_namespaced_pod(NS, pod("a"))
    watcher.wait_for(1)
    assert server.drop_watches("pods") == 1
    time.sleep(0.3)  # the client reconnects from the last version it saw
    core.create_namespaced_pod(NS, pod("b"))
    events = watcher.wait_for(2)
    watcher.join()
    assert [(kind, name) for kind, name, _ in events] == [("ADDED", "a"), ("ADDED", "b")]
    watches = [r for r in server.records() if r.verb == "watch" and r.resource == "pods"]
    assert len(watches) == 2
    server.add_fault(Fault(FaultKind.DROP_WATCH, delay_s=0.1, resource="configmaps", count=1))
    began = time.monotonic()
    dropped = WatchThread(core.list_namespaced_config_map, namespace=NS, timeout_seconds=5, _request_timeout=10)
    dropped.join()
    assert time.monotonic() - began < 4 and dropped.error is None  # closed by the fault, not by the timeout


def test_faults_set_on_a_running_server_through_the_admin_endpoint(server, api):
    def admin(method, path, body=None):
        request = urllib.request.Request(
            f"{server.url}/dl2/{path}", method=method, data=None if body is None else json.dumps(body).encode()
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    fault_id = admin("POST", "faults", {"kind": "error", "code": 503, "verb": "list", "resource": "pods"})["id"]
    assert admin("GET", "faults")["faults"][0]["fault"]["code"] == 503
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as failed:
        core.list_namespaced_pod(NS)
    assert failed.value.status == 503
    assert admin("DELETE", f"faults/{fault_id}") == {"removed": fault_id}
    assert core.list_namespaced_pod(NS).items == []
    with pytest.raises(urllib.error.HTTPError) as bad:
        admin("POST", "faults", {"kind": "error", "code": 200})
    assert bad.value.code == 400
    assert admin("POST", "watches/drop") == {"dropped": 0}
    recorded = admin("GET", "requests")["requests"]
    assert recorded and not any(r["non_resource_url"].startswith("/dl2/") for r in recorded)


def test_requests_are_recorded_in_rbac_terms(tmp_path):
    path = tmp_path / "requests.jsonl"
    with LocalApiServer(crd_files=THIRD_PARTY_CRDS, record_path=path) as server:
        api = api_client(server, user_agent="dl2-controller/test")
        namespace(api)
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        custom.create_namespaced_custom_object(*PJ[:2], NS, PJ[2], pytorchjob("resnet"))
        custom.patch_namespaced_custom_object_scale(*PJ[:2], NS, PJ[2], "resnet", {"spec": {"replicas": 3}})
        custom.patch_namespaced_custom_object_status(*PJ[:2], NS, PJ[2], "resnet", {"status": {}})
        custom.list_cluster_custom_object(*VJ)
        core.create_namespaced_pod(NS, pod("w-0"))
        body = {"metadata": {"name": "w-0"}, "target": {"kind": "Node", "name": "n"}}
        core.create_namespaced_pod_binding("w-0", NS, body, _preload_content=False)
        WatchThread(core.list_node, timeout_seconds=1).join()
        client.CoordinationV1Api(api_client(server, "other")).list_lease_for_all_namespaces()
        records = server.records()
    assert permissions(records, user_agent="dl2-controller") == {
        ("", "namespaces", "create"),
        ("kubeflow.org", "pytorchjobs", "create"),
        ("kubeflow.org", "pytorchjobs/scale", "patch"),
        ("kubeflow.org", "pytorchjobs/status", "patch"),
        ("batch.volcano.sh", "jobs", "list"),
        ("", "pods", "create"),
        ("", "pods/binding", "create"),
        ("", "nodes", "watch"),
    }
    scale = next(r for r in records if r.subresource == "scale")
    assert (scale.namespace, scale.name, scale.code, scale.user_agent) == (NS, "resnet", 200, "dl2-controller/test")
    assert permissions(records, user_agent="other") == {("coordination.k8s.io", "leases", "list")}
    assert load_records(path) == records  # the JSONL file holds the same records, one per line
    lines = path.read_text().splitlines()
    assert len(lines) == len(records) and all(json.loads(line)["verb"] for line in lines)


def test_kubeconfig_works_with_load_kube_config(server, tmp_path):
    path = server.write_kubeconfig(tmp_path / "kubeconfig")
    assert path.stat().st_mode & 0o777 == 0o600
    loaded = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=loaded)
    assert loaded.host == server.url
    core = client.CoreV1Api(client.ApiClient(loaded))
    assert {n.metadata.name for n in core.list_namespace().items} >= {"default", "kube-system"}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_get_get_raw_and_scale(server, api, tmp_path):
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(*PJ[:2], NS, PJ[2], pytorchjob("resnet", workers=2))
    client.CoreV1Api(api).create_namespaced_pod(NS, pod("resnet-worker-0", node="node-1"))

    def kubectl(*arguments: str) -> str:
        done = subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig), *arguments], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    table = kubectl("get", "pods", "-n", NS, "-o", "wide").splitlines()
    assert table[0].split()[:3] == ["NAME", "READY", "STATUS"] and "node-1" in table[1]
    assert kubectl("get", "pytorchjobs", "-n", NS).splitlines()[0].split() == ["NAME", "STATE", "AGE"]
    assert kubectl("get", "pytorchjobs", "-n", NS, "-o", "name").strip() == "pytorchjob.kubeflow.org/resnet"
    raw = json.loads(kubectl("get", "--raw", "/apis/kubeflow.org/v1"))
    assert {r["name"] for r in raw["resources"]} == {"pytorchjobs", "pytorchjobs/status", "pytorchjobs/scale"}
    assert "scaled" in kubectl("scale", "pytorchjob/resnet", "-n", NS, "--replicas=6")
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}))
    # no OpenAPI documents are served, so kubectl cannot validate client-side: --validate=false
    assert kubectl("apply", "-n", NS, "--validate=false", "-f", str(manifest)).strip() == "configmap/cm created"
    assert kubectl("apply", "-n", NS, "--validate=false", "-f", str(manifest)).strip() == "configmap/cm unchanged"
    assert custom.get_namespaced_custom_object_scale(*PJ[:2], NS, PJ[2], "resnet")["spec"]["replicas"] == 6
    assert any(
        r.rbac_resource == "pytorchjobs/scale" and r.verb == "patch" and "kubectl" in r.user_agent
        for r in server.records()
    )


def test_bad_crd_files_are_named(tmp_path):
    from dl2.core import InputError

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"kind": "ConfigMap", "metadata": {"name": "x"}}))
    with pytest.raises(InputError, match=r"bad\.yaml: no CustomResourceDefinition"):
        LocalApiServer(crd_files=[bad])
    with pytest.raises(InputError, match=r"missing\.yaml: file not found"):
        LocalApiServer(crd_files=[Path(tmp_path / "missing.yaml")])

"""The job contract (`dl2.kube.contract`): quantities, a job spec read back from its manifest, resize patches, and
errors that name the object."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dl2.core import Architecture, JobSpec, Resources
from dl2.kube import contract
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES
from testbed.twin import manifests


def json_patch(document, operations):
    """The two operations a resize uses (`test`, `replace`), as RFC 6902 applies them (a failed test raises)."""
    result = copy.deepcopy(document)
    for operation in operations:
        *parents, last = operation["path"].strip("/").split("/")
        target = result
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        key = int(last) if isinstance(target, list) else last
        if operation["op"] == "test":
            assert target[key] == operation["value"], operation
        else:
            assert operation["op"] == "replace", operation
            target[key] = operation["value"]
    return result


# -- the job contract ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("4", 4), ("500m", 0.5), ("24Gi", 24 * 2**30), ("1.5Ki", 1536), ("2k", 2000), ("1e3", 1000), (".5", 0.5)],
)
def test_quantities(text, value):
    assert float(contract.parse_quantity(text)) == value


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False))
def test_quantities_round_trip_exactly(value):
    assert float(contract.parse_quantity(contract.format_quantity(value))) == value
    gib = contract.parse_quantity(contract.format_quantity(value, "Gi")) / 2**30
    assert float(gib) == value


amounts = st.floats(min_value=0, max_value=512, allow_nan=False, allow_infinity=False)


@st.composite
def job_specs(draw):
    model = draw(st.sampled_from(MODEL_NAMES))
    allreduce = draw(st.booleans())
    max_workers = draw(st.integers(1, 32))
    max_ps = 0 if allreduce else draw(st.integers(1, 32))
    return JobSpec(
        job_id=draw(st.from_regex(r"[A-Za-z0-9_.:-]{1,20}", fullmatch=True)),
        model=model,
        arrival_s=draw(st.floats(min_value=0, max_value=1e7, allow_nan=False)),
        declared_epochs=draw(st.floats(min_value=0.001, max_value=1e5, allow_nan=False)),
        samples_per_epoch=draw(st.sampled_from([CATALOGUE[model].samples_per_epoch, 123.25])),
        worker_demand=Resources(draw(amounts), draw(amounts), draw(amounts)),
        ps_demand=Resources() if allreduce else Resources(0.0, draw(amounts), draw(amounts)),
        max_workers=max_workers,
        max_ps=max_ps,
        architecture=Architecture.ALLREDUCE if allreduce else Architecture.PS,
        requested_workers=draw(st.integers(1, max_workers)),
        requested_ps=0 if allreduce else draw(st.integers(1, max_ps)),
    )


@given(job_specs())
def test_a_job_spec_reads_back_exactly_from_its_manifest(spec):
    obj = manifests.job(spec, "job-0001-x", "team-a")
    obj["metadata"]["uid"] = "u"
    assert contract.job_spec(obj) == spec
    assert contract.replicas(obj) == (spec.requested_workers, spec.requested_ps)
    subresource, content_type, body = contract.resize(obj, 3, 2)
    assert subresource is None  # the job itself, so one request carries the controller's stamp too
    if spec.architecture is Architecture.ALLREDUCE:
        # the field the PyTorchJob's `scale` subresource reads, merge-patched
        assert content_type == "application/merge-patch+json"
        assert body == {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}}
        resized = copy.deepcopy(obj)
        resized["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3
        assert contract.replicas(resized) == (3, 0)
    else:
        resized = json_patch(obj, body)
        assert content_type == "application/json-patch+json" and contract.replicas(resized) == (3, 2)


def test_contract_errors_name_the_object():
    obj = manifests.job(
        JobSpec("j", "vgg-16", 0.0, 10.0, 115, Resources(1, 4, 24), Resources(0, 4, 8), 4, 4), "job-1", "ns"
    )
    del obj["metadata"]["annotations"][contract.DECLARED_EPOCHS]
    with pytest.raises(contract.ContractError, match=r"Job ns/job-1: missing annotation dl2\.io/declared-epochs"):
        contract.job_spec(obj)
    obj["metadata"]["annotations"][contract.DECLARED_EPOCHS] = "many"
    with pytest.raises(contract.ContractError, match="not a number"):
        contract.job_spec(obj)
    with pytest.raises(contract.ContractError, match="not a PyTorchJob or a Volcano Job"):
        contract.job_spec({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}})


@pytest.mark.parametrize(
    ("labels", "owner"),
    [
        # Kubeflow's training operator: the replica type in lower case; only workers are dl2's to size
        ({"training.kubeflow.org/job-name": "b", "training.kubeflow.org/replica-type": "worker"}, ("b", "worker")),
        ({"training.kubeflow.org/job-name": "b", "training.kubeflow.org/replica-type": "Worker"}, ("b", "worker")),
        ({"training.kubeflow.org/job-name": "bert", "training.kubeflow.org/replica-type": "master"}, None),
        # Volcano: the task's name
        ({"volcano.sh/job-name": "vgg", "volcano.sh/task-spec": "ps"}, ("vgg", "ps")),
        ({"volcano.sh/job-name": "vgg", "volcano.sh/task-spec": "worker"}, ("vgg", "worker")),
        ({"volcano.sh/job-name": "vgg", "volcano.sh/task-spec": "evaluator"}, None),
        # neither operator's: dl2's own labels are not read
        ({"dl2.io/job": "vgg", "dl2.io/role": "ps"}, None),
        ({}, None),
    ],
)
def test_a_pods_job_and_role_come_from_its_operators_labels(labels, owner):
    assert contract.pod_job_role(labels) == owner


def test_the_twins_pods_carry_only_their_operators_labels():
    """What a real operator adds: a PyTorchJob's pod is found by Kubeflow's labels, a Volcano Job's by Volcano's."""
    spec = JobSpec("j0", "vgg-16", 0.0, 10.0, 115, Resources(1, 4, 24), Resources(0, 4, 8), 4, 4)
    for plural, owner in (("pytorchjobs", ("job-0", "worker")), ("jobs", ("job-0", "worker"))):
        pod = manifests.pod(spec, "job-0", "team-a", plural, "uid", "worker", 0, None, "default-scheduler")
        labels = pod["metadata"]["labels"]
        assert contract.pod_job_role(labels) == owner and not any(k.startswith("dl2.io/") for k in labels)


def _pytorchjob(**metadata):
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j", **metadata}, "spec": {}}


def _applied(manager, fields):
    return {"manager": manager, "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": fields}


WORKER_REPLICAS = {"f:spec": {"f:pytorchReplicaSpecs": {"f:Worker": {"f:replicas": {}, "f:template": {}}}}}


@pytest.mark.parametrize(
    ("obj", "owner"),
    [
        (_pytorchjob(), None),
        # the training operator's HPA sizes an elastic PyTorchJob with metrics
        ({**_pytorchjob(), "spec": {"elasticPolicy": {"metrics": [{"type": "Resource"}]}}}, "hpa"),
        ({**_pytorchjob(), "spec": {"elasticPolicy": {"maxReplicas": 8}}}, None),
        # a server-side apply manager owning the replicas re-applies them; dl2's own managers and plain updates
        # (kubectl create, an operator's status writes) own nothing of the size
        (_pytorchjob(managedFields=[_applied("argocd-controller", WORKER_REPLICAS)]), "gitops"),
        (_pytorchjob(managedFields=[_applied("dl2-serve", WORKER_REPLICAS)]), None),
        (_pytorchjob(managedFields=[{**_applied("kubectl", WORKER_REPLICAS), "operation": "Update"}]), None),
        (_pytorchjob(managedFields=[_applied("flux", {"f:spec": {"f:runPolicy": {}}})]), None),
        # a Volcano Job's task list is atomic: applying it owns every task's replicas
        ({"kind": "Job", "metadata": {"managedFields": [_applied("flux", {"f:spec": {"f:tasks": {}}})]}}, "gitops"),
        # GitOps tools' tracking marks, and the annotation that hands the size to dl2
        (_pytorchjob(labels={"kustomize.toolkit.fluxcd.io/name": "apps"}), "gitops"),
        (_pytorchjob(annotations={"argocd.argoproj.io/tracking-id": "app:kubeflow.org/PyTorchJob:ns/j"}), "gitops"),
        (
            _pytorchjob(
                labels={"kustomize.toolkit.fluxcd.io/name": "apps"}, annotations={"dl2.io/allow-resize": "true"}
            ),
            None,
        ),
    ],
)
def test_a_jobs_size_owner_is_found_from_the_object(obj, owner):
    found = contract.size_owner(obj)
    assert (found.split(":")[0] if found else None) == owner


@pytest.mark.parametrize(
    ("gpu", "ps_mem_gb", "samples", "proxy"),
    [
        (True, 6.0, None, "vgg-16"),  # the only GPU model whose parameter servers take 6 GB (553 MB of weights)
        (True, 4.0, None, "resnet-50"),  # several take 4 GB: the first in the catalogue
        (True, None, 780.0, "seq2seq"),  # an all-reduce job: its samples per epoch
        (False, None, 349.0, "dssm"),  # CPU-only workers: a CPU-only model
        (False, None, None, "cnn-text-classification"),
    ],
)
def test_a_model_the_catalogue_lacks_gets_the_nearest_profile(gpu, ps_mem_gb, samples, proxy):
    assert contract.proxy_model(gpu, ps_mem_gb, samples) == proxy


def test_a_job_of_an_unknown_model_is_scheduled_under_its_proxy_not_refused():
    spec = JobSpec("j", "vgg-16", 0.0, 10.0, 115, Resources(1, 4, 24), Resources(0, 4, 6), 4, 4)
    obj = manifests.job(spec, "job-1", "ns")
    obj["metadata"]["annotations"][contract.MODEL] = "bert-large"
    parsed = contract.job_spec(obj)
    assert parsed.model == "vgg-16" and contract.unknown_model(obj) == "bert-large"
    assert parsed.samples_per_epoch == CATALOGUE["vgg-16"].samples_per_epoch
    obj["metadata"]["annotations"][contract.SAMPLES_PER_EPOCH] = "1000"  # its own, when it says
    assert (
        contract.job_spec(obj).samples_per_epoch == 1000.0
        and contract.unknown_model(manifests.job(spec, "j", "n")) is None
    )


def test_the_jobs_horizontal_pod_autoscalers_scale_are_found_by_their_target():
    def autoscaler(name, api_version, kind, target):
        return {
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": target}},
        }

    found = contract.autoscaled_jobs(
        [
            autoscaler("a", "kubeflow.org/v1", "PyTorchJob", "bert"),
            autoscaler("b", "batch.volcano.sh/v1alpha1", "Job", "vgg"),
            autoscaler("c", "apps/v1", "Deployment", "web"),  # not a training job
            autoscaler("d", "batch/v1", "Job", "etl"),  # a Job of another group
        ]
    )
    assert found == {
        ("ns", "PyTorchJob", "bert"): "hpa: HorizontalPodAutoscaler ns/a",
        ("ns", "Job", "vgg"): "hpa: HorizontalPodAutoscaler ns/b",
    }

"""The Helm chart (`k8s/chart/dl2`), rendered by the pinned helm (`make helm`): `helm lint --strict`; with default
values the same objects as `kubectl kustomize k8s/` but for the labels Helm adds; what each value does, on small
hand-checked renders; values the schema refuses, named in helm's message; and `helm template` applied with a
server-side dry run to the real control plane (the session's, with the CRDs installed first), every object accepted.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.controlplane.apply import install_crds
from testbed.controlplane.assets import AssetsMissing, helm, kubectl
from testbed.controlplane.install import POLICY_CRD

K8S = Path(__file__).resolve().parents[3] / "k8s"
CHART = K8S / "chart" / "dl2"
MONITORING_CRDS = (
    K8S / "third-party" / "monitoring.coreos.com_servicemonitors.yaml",
    K8S / "third-party" / "monitoring.coreos.com_prometheusrules.yaml",
)
HELM_LABELS = frozenset(
    {"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"}
)
"""The standard chart labels the chart adds to every object's metadata (never to selectors or pod templates)."""
KEEP = {"helm.sh/resource-policy": "keep"}
"""What the chart adds to the namespace, the decision log's claim (`storage.enabled`) and the policy: `helm uninstall`
leaves them."""
RBAC_KINDS = frozenset({"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"})
DIGEST = "sha256:" + "0123456789abcdef" * 4
CHART_MADE = frozenset(
    {("v1", "Secret", "dl2-system", "dl2-extender-tls"), ("v1", "Secret", "dl2-system", "dl2-kube-scheduler-tls")}
)
"""What only the chart makes (`extender.tls.create`): the extender's and kube-scheduler's certificates, which a
kustomize install makes once with the chart (`helm template --show-only templates/extender-tls.yaml`)."""
Key = tuple[str, str, str | None, str]
"""An object's identity: (apiVersion, kind, namespace, name)."""


@pytest.fixture(scope="module")
def helm_bin() -> str:
    try:
        return helm()
    except AssetsMissing as error:
        pytest.fail(f"{error} (make test builds it)")


def run_helm(helm_bin: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm_bin, *arguments], capture_output=True, text=True, timeout=60)


def render_text(helm_bin: str, *values: str) -> str:
    """`helm template` of the chart with CRDs, as an installer pipes it to kubectl."""
    done = run_helm(helm_bin, "template", "dl2", str(CHART), "--include-crds", *values)
    assert done.returncode == 0, done.stderr
    return done.stdout


def by_key(text: str) -> dict[Key, dict[str, Any]]:
    docs = [doc for doc in yaml.safe_load_all(text) if doc]
    keyed = {(d["apiVersion"], d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs}
    assert len(keyed) == len(docs), "two objects with one identity"
    return keyed


def render(helm_bin: str, *values: str) -> dict[Key, dict[str, Any]]:
    return by_key(render_text(helm_bin, *values))


def kustomize(folder: Path) -> dict[Key, dict[str, Any]]:
    done = subprocess.run([kubectl(), "kustomize", str(folder)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return by_key(done.stdout)


def without_helm_labels(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the base writes it: Helm's labels and its keep annotation gone (and `labels` or `annotations`
    with them, when nothing else is left)."""
    metadata = dict(obj["metadata"])
    labels = {k: v for k, v in (metadata.pop("labels", None) or {}).items() if k not in HELM_LABELS}
    annotations = {k: v for k, v in (metadata.pop("annotations", None) or {}).items() if k not in KEEP}
    kept = {"labels": labels} if labels else {}
    return {**obj, "metadata": {**metadata, **kept, **({"annotations": annotations} if annotations else {})}}


def one(objects: dict[Key, dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [obj for (_, k, _, n), obj in objects.items() if (k, n) == (kind, name)]
    return found


def deployments(objects: dict[Key, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: obj for (_, kind, _, name), obj in objects.items() if kind == "Deployment"}


def containers(objects: dict[Key, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every Deployment's containers by name."""
    return {
        c["name"]: c for obj in deployments(objects).values() for c in obj["spec"]["template"]["spec"]["containers"]
    }


@pytest.mark.parametrize(
    "values",
    [(), ("--set", "rbac.create=false,extender.enabled=false,networkPolicy.enabled=false,replicas=1"),
     ("--set", "monitoring.enabled=true,storage.enabled=true,storage.existingClaim=decisions,policy.create=false")],
    ids=["defaults", "minimal", "monitoring"],
)  # fmt: skip
def test_helm_lint_passes_strict(helm_bin, values):
    done = run_helm(helm_bin, "lint", "--strict", str(CHART), *values)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


def test_default_values_render_the_kustomize_base(helm_bin):
    """Same identities but for the certificates' Secrets, and each object equal to the base's but for Helm's
    labels; every object carries them but the CRD (Helm installs crds/ as they are, untemplated)."""
    chart, base = render(helm_bin), kustomize(K8S)
    assert set(chart) - set(base) == CHART_MADE
    assert sorted(set(chart) - CHART_MADE) == sorted(base)
    for key, obj in chart.items():
        if key in CHART_MADE:
            continue
        assert key[1] == "CustomResourceDefinition" or set(obj["metadata"].get("labels", {})) >= HELM_LABELS, key
        assert without_helm_labels(obj) == base[key], key
    kept = {key[1] for key, obj in chart.items() if obj["metadata"].get("annotations", {}).items() >= KEEP.items()}
    assert kept == {"Namespace", "SchedulerPolicy"}


def test_the_charts_copies_are_the_bases_files():
    """Helm reads only files inside the chart: the CRD and the alert rules are copies, kept equal here."""
    for copy, original in [
        (CHART / "crds" / "crd-schedulerpolicy.yaml", K8S / "crd-schedulerpolicy.yaml"),
        (CHART / "files" / "prometheusrule.yaml", K8S / "monitoring" / "prometheusrule.yaml"),
    ]:
        assert copy.read_bytes() == original.read_bytes(), f"cp {original} {copy}"


def test_monitoring_adds_the_objects_of_k8s_monitoring(helm_bin):
    default = render(helm_bin)
    chart = render(helm_bin, "--set", "monitoring.enabled=true", "--set", "monitoring.labels.release=prometheus")
    added = {key: obj for key, obj in chart.items() if key not in default}
    monitoring = kustomize(K8S / "monitoring")
    assert sorted(added) == sorted(monitoring)
    for key, obj in added.items():
        assert obj["metadata"]["labels"]["release"] == "prometheus"
        del obj["metadata"]["labels"]["release"]
        assert without_helm_labels(obj) == monitoring[key], key


def test_rbac_off_renders_no_roles_or_bindings_and_the_named_accounts(helm_bin):
    names = "serviceAccounts.controller=ops-dl2,serviceAccounts.extender=ops-extender"
    objects = render(helm_bin, "--set", f"rbac.create=false,serviceAccounts.create=false,{names}")
    assert {kind for _, kind, _, _ in objects} & (RBAC_KINDS | {"ServiceAccount"}) == set()
    accounts = {
        name: obj["spec"]["template"]["spec"]["serviceAccountName"] for name, obj in deployments(objects).items()
    }
    assert accounts == {
        "dl2-scheduler": "ops-dl2",
        "dl2-extender": "ops-extender",
        "dl2-kube-scheduler": "dl2-kube-scheduler",
    }


def test_account_names_follow_into_the_bindings(helm_bin):
    objects = render(helm_bin, "--set", "serviceAccounts.controller=ops-dl2")
    assert one(objects, "ServiceAccount", "ops-dl2")["metadata"]["namespace"] == "dl2-system"
    for kind, name in (("ClusterRoleBinding", "dl2-scheduler"), ("RoleBinding", "dl2-scheduler"),
                       ("RoleBinding", "dl2-job-resizer")):  # fmt: skip
        binding = one(objects, kind, name)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ops-dl2", "namespace": "dl2-system"}]
    (condition,) = one(objects, "ValidatingAdmissionPolicy", "dl2-scheduler-resizes-only")["spec"]["matchConditions"]
    assert condition["expression"] == "request.userInfo.username == 'system:serviceaccount:dl2-system:ops-dl2'"


def resize_bindings(objects: dict[Key, dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(kind, namespace) of each binding of the controller's resize, dl2-job-resizer."""
    return sorted(
        (kind, namespace)
        for (_, kind, namespace, name), obj in objects.items()
        if kind in RBAC_KINDS and name == "dl2-job-resizer" and kind != "ClusterRole"
    )


def test_one_rolebinding_per_managed_namespace_or_one_clusterrolebinding(helm_bin):
    """rbac.managedNamespaces: the resize bound in each (the default, the base's team-a); [] the cluster-wide mode."""
    assert resize_bindings(render(helm_bin)) == [("RoleBinding", "team-a")]
    listed = render(helm_bin, "--set", "rbac.managedNamespaces={team-b,team-c,ml-prod}")
    assert resize_bindings(listed) == [("RoleBinding", "ml-prod"), ("RoleBinding", "team-b"), ("RoleBinding", "team-c")]
    bindings = [obj for (_, kind, _, name), obj in listed.items() if (kind, name) == ("RoleBinding", "dl2-job-resizer")]
    assert {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in bindings} == {("ClusterRole", "dl2-job-resizer")}
    cluster_wide = render(helm_bin, "--set-json", "rbac.managedNamespaces=[]")
    assert resize_bindings(cluster_wide) == [("ClusterRoleBinding", None)]


def test_admission_policy_off_drops_both_policies_and_nothing_else(helm_bin):
    default, objects = render(helm_bin), render(helm_bin, "--set", "admissionPolicy.enabled=false")
    dropped = {(kind, name) for (_, kind, _, name) in set(default) - set(objects)}
    assert set(objects) < set(default)
    assert dropped == {
        (kind, name)
        for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
        for name in ("dl2-scheduler-resizes-only", "dl2-progress-reporter-progress-only")
    }


def test_extender_off_drops_its_objects_and_nothing_else(helm_bin):
    default, objects = render(helm_bin), render(helm_bin, "--set", "extender.enabled=false")
    dropped = {(kind, name) for (_, kind, _, name) in set(default) - set(objects)}
    assert set(objects) < set(default)
    assert dropped == {
        ("ConfigMap", "dl2-kube-scheduler-config"),
        ("ServiceAccount", "dl2-kube-scheduler"),
        ("ServiceAccount", "dl2-extender"),
        ("ClusterRole", "dl2-extender"),
        ("ClusterRoleBinding", "dl2-extender"),
        ("ClusterRoleBinding", "dl2-kube-scheduler-as-kube-scheduler"),
        ("ClusterRoleBinding", "dl2-kube-scheduler-as-volume-scheduler"),
        ("RoleBinding", "dl2-kube-scheduler-auth-reader"),
        ("Role", "dl2-kube-scheduler-lease"),
        ("RoleBinding", "dl2-kube-scheduler-lease"),
        ("Deployment", "dl2-kube-scheduler"),
        ("Deployment", "dl2-extender"),
        ("Service", "dl2-extender"),
        ("NetworkPolicy", "dl2-extender"),
        ("NetworkPolicy", "dl2-kube-scheduler"),
        ("Secret", "dl2-extender-tls"),
        ("Secret", "dl2-kube-scheduler-tls"),
    }


def controller(objects: dict[Key, dict[str, Any]]) -> dict[str, Any]:
    """The controller's pod spec."""
    return one(objects, "Deployment", "dl2-scheduler")["spec"]["template"]["spec"]


def test_records_go_to_the_bucket_by_default_with_no_claim(helm_bin):
    """Both replicas write to records.url (through the ConfigMap, as the base does), with the credentials Secret
    optional: workload identity needs none."""
    objects = render(helm_bin, "--set", "records.url=s3://team-bucket/dl2,records.credentialsSecret=minio-keys")
    assert not [key for key in objects if key[1] == "PersistentVolumeClaim"]
    assert one(objects, "ConfigMap", "dl2-scheduler-config")["data"]["DL2_DECISION_LOG"] == "s3://team-bucket/dl2"
    pod = controller(objects)
    (serve,) = pod["containers"]
    assert "--decision-log=$(DL2_DECISION_LOG)" in serve["args"]
    assert serve["envFrom"] == [
        {"configMapRef": {"name": "dl2-scheduler-config"}},
        {"secretRef": {"name": "minio-keys", "optional": True}},
    ]
    assert "decisions" not in {v["name"] for v in pod["volumes"]} | {m["name"] for m in serve["volumeMounts"]}
    # "": no Secret at all
    (serve,) = controller(render(helm_bin, "--set", "records.credentialsSecret="))["containers"]
    assert serve["envFrom"] == [{"configMapRef": {"name": "dl2-scheduler-config"}}]


def test_an_https_registry_s_private_ca_reaches_mlflow_s_client(helm_bin):
    """config.mlflowCaConfigMap: its ca.crt mounted, and MLFLOW_TRACKING_SERVER_CERT_PATH naming it."""
    values = "config.mlflowTrackingUri=https://mlflow.example.com,config.mlflowCaConfigMap=corp-ca"
    objects = render(helm_bin, "--set", values)
    assert (
        one(objects, "ConfigMap", "dl2-scheduler-config")["data"]["MLFLOW_TRACKING_URI"] == "https://mlflow.example.com"
    )
    pod = controller(objects)
    (serve,) = pod["containers"]
    assert {"name": "MLFLOW_TRACKING_SERVER_CERT_PATH", "value": "/etc/dl2/mlflow-ca/ca.crt"} in serve["env"]
    assert {"name": "mlflow-ca", "mountPath": "/etc/dl2/mlflow-ca", "readOnly": True} in serve["volumeMounts"]
    volume = {"name": "corp-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
    assert {"name": "mlflow-ca", "configMap": volume} in pod["volumes"]
    (serve,) = controller(render(helm_bin))["containers"]
    assert "MLFLOW_TRACKING_SERVER_CERT_PATH" not in {e["name"] for e in serve["env"]}


def test_the_controllers_account_carries_its_workload_identity(helm_bin):
    role = "arn:aws:iam::123456789012:role/dl2-decisions"
    objects = render(helm_bin, "--set", f"serviceAccounts.controllerAnnotations.eks\\.amazonaws\\.com/role-arn={role}")
    assert one(objects, "ServiceAccount", "dl2-scheduler")["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": role
    }
    assert "annotations" not in one(objects, "ServiceAccount", "dl2-extender")["metadata"]


def test_storage_enabled_puts_the_log_on_the_claim(helm_bin):
    """For a cluster with a ReadWriteMany class and no object storage: the claim, mounted where --decision-log
    points, and no bucket (records.url is not read, so the schema does not check it)."""
    objects = render(helm_bin, "--set", "storage.enabled=true", "--set-json", 'records.url=""')
    claim = one(objects, "PersistentVolumeClaim", "dl2-decisions")
    assert claim["metadata"]["annotations"] == KEEP and claim["spec"]["accessModes"] == ["ReadWriteMany"]
    pod = controller(objects)
    (serve,) = pod["containers"]
    assert "--decision-log=/var/lib/dl2/decisions" in serve["args"]
    assert {"name": "decisions", "mountPath": "/var/lib/dl2/decisions"} in serve["volumeMounts"]
    assert {"name": "decisions", "persistentVolumeClaim": {"claimName": "dl2-decisions"}} in pod["volumes"]
    assert serve["envFrom"] == [{"configMapRef": {"name": "dl2-scheduler-config"}}]
    assert "DL2_DECISION_LOG" not in one(objects, "ConfigMap", "dl2-scheduler-config")["data"]


def test_storage_values_reach_the_claim(helm_bin):
    enabled = ("--set", "storage.enabled=true")
    assert "storageClassName" not in one(render(helm_bin, *enabled), "PersistentVolumeClaim", "dl2-decisions")["spec"]
    values = "storage.storageClassName=efs-sc,storage.size=50Gi,storage.accessModes={ReadWriteOnce}"
    spec = one(render(helm_bin, *enabled, "--set", values), "PersistentVolumeClaim", "dl2-decisions")["spec"]
    assert spec == {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "efs-sc",
        "resources": {"requests": {"storage": "50Gi"}},
    }
    # "" is a class too: no dynamic provisioning, a volume bound by hand
    empty = render(helm_bin, *enabled, "--set-json", 'storage.storageClassName=""')
    assert one(empty, "PersistentVolumeClaim", "dl2-decisions")["spec"]["storageClassName"] == ""
    existing = render(helm_bin, *enabled, "--set", "storage.existingClaim=team-nfs")
    assert not [key for key in existing if key[1] == "PersistentVolumeClaim"]
    volumes = controller(existing)["volumes"]
    assert {"name": "decisions", "persistentVolumeClaim": {"claimName": "team-nfs"}} in volumes


def test_image_values(helm_bin):
    values = f"image.repository=registry.example.com/dl2,image.digest={DIGEST}"
    by_digest = containers(render(helm_bin, "--set", values))
    assert by_digest["dl2-serve"]["image"] == by_digest["dl2-extender"]["image"] == f"registry.example.com/dl2@{DIGEST}"
    tagged = containers(render(helm_bin, "--set", "image.tag=0.2.0,image.pullPolicy=Always"))
    assert (tagged["dl2-serve"]["image"], tagged["dl2-serve"]["imagePullPolicy"]) == ("dl2:0.2.0", "Always")
    scheduler = containers(render(helm_bin, "--set", f"extender.kubeScheduler.image.digest={DIGEST}"))
    assert scheduler["kube-scheduler"]["image"] == f"registry.k8s.io/kube-scheduler@{DIGEST}"


def test_replicas_and_resources(helm_bin):
    objects = render(helm_bin, "--set", "replicas=3,resources.limits.cpu=4,extender.replicas=1")
    assert one(objects, "Deployment", "dl2-scheduler")["spec"]["replicas"] == 3
    assert one(objects, "Deployment", "dl2-extender")["spec"]["replicas"] == 1
    assert containers(objects)["dl2-serve"]["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "limits": {"cpu": 4, "memory": "4Gi"},
    }
    # one replica: a PodDisruptionBudget of minAvailable 1 would block every drain, so there is none
    single = render(helm_bin, "--set", "replicas=1")
    assert not [key for key in single if key[1] == "PodDisruptionBudget"]


def test_the_canary_scope_reaches_the_policy(helm_bin):
    scope = "policy.canary.namespaces={team-b,team-c},policy.canary.jobSelector.matchLabels.tier=gold"
    spec = one(render(helm_bin, "--set", f"policy.mode=canary,{scope}"), "SchedulerPolicy", "default")["spec"]
    assert spec["mode"] == "canary"
    assert spec["canary"] == {"namespaces": ["team-b", "team-c"], "jobSelector": {"matchLabels": {"tier": "gold"}}}
    # a label's value is a string: --set would give true, which the schema refuses
    selector_only = ("--set", "policy.canary.namespaces=null",
                     "--set-string", "policy.canary.jobSelector.matchLabels.dl2\\.io/canary=true")  # fmt: skip
    spec = one(render(helm_bin, *selector_only), "SchedulerPolicy", "default")["spec"]
    assert spec["canary"] == {"jobSelector": {"matchLabels": {"dl2.io/canary": "true"}}}
    # a version given as a number (--set gives 3, not "3") is written as the CRD's string
    assert one(render(helm_bin, "--set", "policy.model.version=3"), "SchedulerPolicy", "default")["spec"]["model"] == {
        "name": "dl2-policy",
        "version": "3",
    }


def test_network_policy_off(helm_bin):
    assert not [key for key in render(helm_bin, "--set", "networkPolicy.enabled=false") if key[1] == "NetworkPolicy"]


def egress_to(policy: dict[str, Any]) -> list[tuple[list[dict[str, Any]], list[int]]]:
    """Each egress rule's peers and ports."""
    return [(rule["to"], [port["port"] for port in rule["ports"]]) for rule in policy["spec"]["egress"]]


def test_network_policy_peers_are_the_values(helm_bin):
    """Each destination's peers and ports come from networkPolicy's values; an empty peer list drops the rule (a
    rule with none would admit every address), so nothing is allowed there."""
    api = "networkPolicy.egress.apiServer.to[0].ipBlock.cidr=10.0.0.10/32"
    store = "networkPolicy.egress.objectStore.to[0].namespaceSelector.matchLabels.team=minio"
    prometheus = 'networkPolicy.metricsFrom=[{"podSelector": {"matchLabels": {"app": "prom"}}}]'
    objects = render(helm_bin, "--set", f"{api},{store},networkPolicy.egress.objectStore.ports={{9000}}",
                     "--set-json", "networkPolicy.egress.prometheus.to=[]", "--set-json", prometheus)  # fmt: skip
    minio = [{"namespaceSelector": {"matchLabels": {"team": "minio"}}}]
    controller_rules = egress_to(one(objects, "NetworkPolicy", "dl2-scheduler"))
    assert controller_rules[1:] == [
        ([{"ipBlock": {"cidr": "10.0.0.10/32"}}], [443, 6443]),
        (minio, [9000]),
        ([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mlflow"}}}], [5000, 443]),
    ]  # and no rule for Prometheus
    for name in ("dl2-extender", "dl2-kube-scheduler"):
        assert egress_to(one(objects, "NetworkPolicy", name))[1] == (
            [{"ipBlock": {"cidr": "10.0.0.10/32"}}],
            [443, 6443],
        )
    for name, port in (("dl2-scheduler", 8080), ("dl2-kube-scheduler", 10259)):
        assert one(objects, "NetworkPolicy", name)["spec"]["ingress"] == [
            {"from": [{"podSelector": {"matchLabels": {"app": "prom"}}}], "ports": [{"port": port, "protocol": "TCP"}]}
        ]
    closed = render(helm_bin, "--set-json", "networkPolicy.metricsFrom=[]")
    assert one(closed, "NetworkPolicy", "dl2-scheduler")["spec"]["ingress"] is None  # nothing may connect


def test_the_chart_makes_certificates_for_the_extender_s_service_or_takes_yours(helm_bin):
    """The serving certificate names the Service in the release's namespace, as kube-scheduler's urlPrefix does;
    both Secrets carry the one CA. With tls.create false no Secret is made and the pods mount the named ones."""
    from cryptography import x509

    objects = render(helm_bin, "--set", "namespace.name=ml-scheduling")
    config = yaml.safe_load(one(objects, "ConfigMap", "dl2-kube-scheduler-config")["data"]["config.yaml"])
    (extender,) = config["extenders"]
    assert extender["urlPrefix"] == "https://dl2-extender.ml-scheduling.svc:8888/extender"
    server, client = (one(objects, "Secret", name) for name in ("dl2-extender-tls", "dl2-kube-scheduler-tls"))
    assert server["type"] == client["type"] == "kubernetes.io/tls"
    assert server["data"]["ca.crt"] == client["data"]["ca.crt"]
    pem = base64.b64decode(server["data"]["tls.crt"])
    names = x509.load_pem_x509_certificate(pem).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert "dl2-extender.ml-scheduling.svc" in names.value.get_values_for_type(x509.DNSName)
    yours = render(
        helm_bin, "--set", "extender.tls.create=false,extender.tls.serverSecret=ours,extender.tls.clientSecret=theirs"
    )
    assert not [key for key in yours if key[1] == "Secret"]
    for deployment, secret in (("dl2-extender", "ours"), ("dl2-kube-scheduler", "theirs")):
        volumes = one(yours, "Deployment", deployment)["spec"]["template"]["spec"]["volumes"]
        assert {"name": "tls", "secret": {"secretName": secret}} in volumes


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("image.digest=sha256:abc", "at '/image/digest': 'sha256:abc' does not match pattern"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy': value must be one of"),
        ("replicas=0", "at '/replicas': minimum: got 0, want 1"),
        ("storage.accessModes={ReadWriteSometimes}", "at '/storage/accessModes/0': value must be one of"),
        ("storage.size=lots", "at '/storage/size': 'lots' does not match pattern"),
        (
            "records.url=REPLACE-WITH-YOUR-BUCKET/dl2",
            "at '/records/url': 'REPLACE-WITH-YOUR-BUCKET/dl2' does not match pattern",
        ),
        ("records.url=/var/lib/dl2/decisions", "at '/records/url': '/var/lib/dl2/decisions' does not match pattern"),
        ("records.credentialsSecret=Keys", "at '/records/credentialsSecret': 'Keys' does not match pattern"),
        ("storage.enabled=yes", "at '/storage/enabled': got string, want boolean"),
        ("policy.mode=Off", "at '/policy/mode': value must be one of 'off', 'shadow', 'canary', 'active'"),
        ("policy.mode=canary,policy.canary.namespaces=null", "at '/policy/canary': 'anyOf' failed"),
        ("policy.canary.namespaces={Team_A}", "at '/policy/canary/namespaces/0': 'Team_A' does not match pattern"),
        ("policy.guardrails.maxStepPerSlot=0", "at '/policy/guardrails/maxStepPerSlot': minimum: got 0, want 1"),
        ("rbac.create=maybe", "at '/rbac/create': got string, want boolean"),
        ("extender.enabled=yes", "at '/extender/enabled': got string, want boolean"),
        ("replica=3", "additional properties 'replica' not allowed"),
        (
            "networkPolicy.egress.apiServer.to[0].ipBlock.cidr=api.example.com",
            "at '/networkPolicy/egress/apiServer/to/0/ipBlock/cidr'",
        ),
        (
            "networkPolicy.egress.mlflow.ports={http}",
            "at '/networkPolicy/egress/mlflow/ports/0': got string, want integer",
        ),
        ("extender.tls.serverSecret=Ours", "at '/extender/tls/serverSecret': 'Ours' does not match pattern"),
    ],
)
def test_the_schema_refuses_bad_values_by_name(helm_bin, value, message):
    """`helm template` and `helm lint` both fail, naming the value (template: "values don't meet the specifications
    of the schema(s)...", lint: "[ERROR] values.yaml: - at ...")."""
    for command in (["template", "dl2"], ["lint", "--strict"]):
        done = run_helm(helm_bin, *command, str(CHART), "--set", value)
        output = done.stdout + done.stderr
        assert done.returncode != 0, f"helm {command[0]} took {value}"
        assert message in output, output


def dry_run(kube: Any, tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    """`kubectl apply --server-side --dry-run=server -f -` of `text` as the cluster's admin."""
    kubeconfig = kube.kubeconfig(tmp_path / "admin.kubeconfig")
    return subprocess.run(
        [kubectl(), "--kubeconfig", str(kubeconfig), "apply", "--server-side", "--dry-run=server", "-f", "-"],
        input=text, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    "values",
    [("--set", "monitoring.enabled=true"),
     ("--set", "rbac.create=false,extender.enabled=false,storage.enabled=true,storage.storageClassName=standard",
      "--set", "replicas=1",
      "--set", f"image.digest={DIGEST},policy.mode=canary,policy.canary.jobSelector.matchLabels.tier=gold")],
    ids=["defaults-and-monitoring", "small"],
)  # fmt: skip
def test_the_render_is_accepted_by_the_api_server(kube, tmp_path, helm_bin, values):
    """`helm template ... | kubectl apply --server-side --dry-run=server -f -`: the API server checks every object
    (schemas, the CRD's CEL rules, admission) and writes nothing. What must exist first, as for the kustomize base:
    the CRDs (dl2's and, for monitoring, the Prometheus Operator's) and the namespace (the session's plane has it)."""
    install_crds(kube.rest(), POLICY_CRD, *MONITORING_CRDS)
    text = render_text(helm_bin, *values)
    done = dry_run(kube, tmp_path, text)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == len(by_key(text)), done.stdout
    assert all(line.endswith(" serverside-applied (server dry run)") for line in lines), done.stdout


def test_the_api_server_refuses_what_the_schema_cannot_see(kube, tmp_path, helm_bin):
    """Crossed guardrails pass values.schema.json (JSON Schema compares no two values) and meet the CRD's CEL rule."""
    install_crds(kube.rest(), POLICY_CRD)
    text = render_text(helm_bin, "--set", "policy.guardrails.minReplicas=8,policy.guardrails.maxReplicas=4")
    done = dry_run(kube, tmp_path, text)
    assert done.returncode != 0
    assert "spec.guardrails.maxReplicas: Invalid value: maxReplicas must be at least minReplicas" in done.stderr

"""The shipped manifests (`k8s/`), offline: every object valid against the OpenAPI schemas of the Kubernetes release
the tests run (`kubernetes-validate`, strict: unknown fields are errors), the sample SchedulerPolicy valid against
the CRD's own schema and accepted by the controller's parser, and the security settings the Deployment promises.
What only a real API server can say (the CRD's structural schema, CEL rules, admission) is checked against one in
`tests/unit/kube/test_kube_policy_schema.py` and `tests/integration/kube/test_kube_install.py`."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from dl2.config import ConfigError
from dl2.kube.policy import Mode, parse_policy
from dl2.schedulers.registry import SCHEDULERS
from dl2.sim.record_store import is_url

K8S = Path(__file__).resolve().parents[3] / "k8s"
KUBERNETES = "1.36.0"
CUSTOM_KINDS = {"SchedulerPolicy", "Kustomization"}


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def manifests() -> list[tuple[str, dict]]:
    return [
        (f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc)
        for path in sorted(K8S.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in documents(path)
    ]


def by_kind(kind: str) -> list[dict]:
    return [doc for _, doc in manifests() if doc["kind"] == kind]


def named(kind: str, name: str) -> dict:
    (doc,) = [doc for doc in by_kind(kind) if doc["metadata"]["name"] == name]
    return doc


@pytest.mark.parametrize(("where", "doc"), [m for m in manifests() if m[1]["kind"] not in CUSTOM_KINDS])
def test_every_object_is_valid_for_kubernetes(where, doc):
    kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_the_kustomization_lists_every_manifest_and_they_exist():
    kustomization = documents(K8S / "kustomization.yaml")[0]
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert all((K8S / name).is_file() for name in listed)


def crd_schema() -> dict:
    (crd,) = by_kind("CustomResourceDefinition")
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def test_the_sample_policy_is_valid_for_the_crd_and_the_controller():
    (sample,) = by_kind("SchedulerPolicy")
    jsonschema.validate(sample, crd_schema())
    policy = parse_policy(sample)
    assert policy.mode is Mode.SHADOW and policy.model_version == "1"


def test_the_crd_knows_every_heuristic_the_controller_accepts():
    incumbent = crd_schema()["properties"]["spec"]["properties"]["incumbent"]
    assert set(incumbent["enum"]) == set(SCHEDULERS)


def test_rbac_grants_no_secrets_no_wildcards_and_no_cluster_admin():
    roles = [*by_kind("ClusterRole"), *by_kind("Role")]
    assert {role["metadata"]["name"] for role in roles} == {
        "dl2-scheduler",
        "dl2-job-resizer",
        "dl2-policy-promoter",
        "dl2-extender",
        "dl2-kube-scheduler-lease",
        "dl2-progress-reporter",
    }
    for role in roles:
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(key, []), (role["metadata"]["name"], rule)
            assert "secrets" not in rule["resources"]
    for binding in [*by_kind("ClusterRoleBinding"), *by_kind("RoleBinding")]:
        assert binding["roleRef"]["name"] != "cluster-admin"
    extender = named("ClusterRole", "dl2-extender")
    assert {verb for rule in extender["rules"] for verb in rule["verbs"]} == {"list", "watch"}  # it writes nothing
    (promoter,) = [r for r in by_kind("ClusterRole") if r["metadata"]["name"] == "dl2-policy-promoter"]
    assert promoter["rules"] == [
        {"apiGroups": ["dl2.io"], "resources": ["schedulerpolicies"], "resourceNames": ["default"],
         "verbs": ["get", "patch"]},
    ]  # fmt: skip


def test_the_controller_writes_jobs_only_where_a_rolebinding_puts_it():
    """Cluster-wide the controller reads jobs; its patch is dl2-job-resizer, which the base binds per namespace only
    (the cluster-wide mode is the component `cluster-wide/`)."""
    job_resources = {"pytorchjobs", "jobs"}
    cluster_wide = named("ClusterRole", "dl2-scheduler")
    for rule in cluster_wide["rules"]:
        if job_resources & set(rule["resources"]):
            assert set(rule["verbs"]) == {"list", "watch"}, rule
    resizer = named("ClusterRole", "dl2-job-resizer")
    assert {verb for rule in resizer["rules"] for verb in rule["verbs"]} == {"patch"}
    bindings = [
        b
        for b in [*by_kind("ClusterRoleBinding"), *by_kind("RoleBinding")]
        if b["roleRef"]["name"] == "dl2-job-resizer"
    ]
    assert [(b["kind"], b["metadata"]["namespace"]) for b in bindings] == [("RoleBinding", "team-a")]
    (sample,) = by_kind("SchedulerPolicy")
    assert sample["spec"]["canary"]["namespaces"] == ["team-a"]  # the base binds the sample's scope
    component = documents(K8S / "cluster-wide" / "clusterrolebinding.yaml")
    assert [(b["kind"], b["roleRef"]["name"]) for b in component] == [("ClusterRoleBinding", "dl2-job-resizer")]


def test_the_admission_policies_bind_the_controller_and_the_reporter_role():
    """The controller's policy matches its ServiceAccount by name; the reporter's, the marker verb its role grants."""
    account = named("ServiceAccount", "dl2-scheduler")
    user = f"system:serviceaccount:{account['metadata']['namespace']}:{account['metadata']['name']}"
    controller = named("ValidatingAdmissionPolicy", "dl2-scheduler-resizes-only")
    (condition,) = controller["spec"]["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == '{user}'"
    reporter = named("ValidatingAdmissionPolicy", "dl2-progress-reporter-progress-only")
    (condition,) = reporter["spec"]["matchConditions"]
    role = named("ClusterRole", "dl2-progress-reporter")
    assert all("report-progress" in rule["verbs"] for rule in role["rules"])
    assert "check('report-progress')" in condition["expression"]
    for policy in (controller, reporter):
        (binding,) = [
            b
            for b in by_kind("ValidatingAdmissionPolicyBinding")
            if b["spec"]["policyName"] == policy["metadata"]["name"]
        ]
        assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"


def test_the_deployment_is_locked_down_and_highly_available():
    deployment = named("Deployment", "dl2-scheduler")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert spec["replicas"] == 2 and pod["serviceAccountName"] == "dl2-scheduler"
    assert (
        pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    )
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert set(container["resources"]["requests"]) == {"cpu", "memory"} and "memory" in container["resources"]["limits"]
    (pdb,) = by_kind("PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]
    args = " ".join(container["args"])
    assert "--identity=$(POD_NAME)" in args and "--decision-log=$(DL2_DECISION_LOG)" in args
    # the replicas share the log through object storage, not a volume; the keys' Secret is optional (workload identity)
    assert "decisions" not in {volume["name"] for volume in pod["volumes"]}
    assert {"secretRef": {"name": "dl2-object-store", "optional": True}} in container["envFrom"]


def test_the_deployment_s_arguments_are_ones_dl2_serve_accepts():
    from dl2.cli.main import build_parser
    from dl2.kube.settings import LEASE_KEYS, PLACEHOLDER_BUCKET, SERVE_KEYS, ControllerConfig

    deployment = named("Deployment", "dl2-scheduler")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["dl2", "serve"]
    values = {**named("ConfigMap", "dl2-scheduler-config")["data"], "POD_NAME": "dl2-scheduler-0"}
    shipped = values["DL2_DECISION_LOG"]
    values["DL2_DECISION_LOG"] = shipped.replace(PLACEHOLDER_BUCKET, "my-bucket")  # what the install asks to set
    args = [re.sub(r"\$\((\w+)\)", lambda m: values[m[1]], arg) for arg in container["args"]]  # as the kubelet
    parsed = build_parser().parse_args(["serve", *args])
    assert parsed.metrics_port == 8080 and parsed.identity == "dl2-scheduler-0"
    # the settings as `dl2 serve` builds them: every value the manifests pass is one they accept
    config = SERVE_KEYS.build(SERVE_KEYS.from_args(parsed), base=ControllerConfig(parsed.identity))
    lease = LEASE_KEYS.build_from_args(parsed)
    assert (config.policy_name, config.slot_s, config.placer) == ("default", 600.0, values["DL2_INCUMBENT_PLACER"])
    assert config.cluster_name == values["DL2_CLUSTER_NAME"] and lease.name == "dl2-scheduler"
    assert is_url(config.decision_log) and str(config.decision_log).startswith("s3://my-bucket/")
    with pytest.raises(ConfigError, match="the shipped placeholder: set your bucket, DL2_DECISION_LOG"):
        replace(config, decision_log=shipped)  # as shipped, it is refused at start rather than failing every slot
    assert config.prometheus_url == ""  # no Prometheus configured: progress from the annotation only


def test_the_third_party_crds_are_attributed():
    readme = (K8S / "third-party" / "README.md").read_text()
    for path in (K8S / "third-party").glob("*.yaml"):
        assert path.name in readme
    assert "Apache" in readme


def scheduler_configuration() -> dict:
    return yaml.safe_load(named("ConfigMap", "dl2-kube-scheduler-config")["data"]["config.yaml"])


def test_the_second_scheduler_profile_consults_the_extender_and_can_ignore_it():
    from dl2.kube.extender import FILTER_VERB, PRIORITIZE_VERB

    configuration = scheduler_configuration()
    assert configuration["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert configuration["kind"] == "KubeSchedulerConfiguration"
    assert [profile["schedulerName"] for profile in configuration["profiles"]] == ["dl2-scheduler"]
    (extender,) = configuration["extenders"]
    known = {
        "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "bindVerb", "weight", "enableHTTPS", "tlsConfig",
        "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable",
    }  # fmt: skip
    assert set(extender) <= known  # KubeSchedulerConfiguration v1's Extender fields (strict decoding refuses others)
    assert (extender["filterVerb"], extender["prioritizeVerb"]) == (FILTER_VERB, PRIORITIZE_VERB)
    assert (
        extender["ignorable"] is True and "bindVerb" not in extender
    )  # kube-scheduler binds; a dead extender is skipped
    assert extender["nodeCacheCapable"] is True  # node names in ExtenderArgs, which dl2's extender parses
    # one point of the extender's 0-10 scale (x 10 x weight) outweighs every score plugin together (13 x 100 at most)
    assert extender["weight"] * 10 > 13 * 100 and extender["httpTimeout"].endswith("s")
    leader = configuration["leaderElection"]
    lease = named("Role", "dl2-kube-scheduler-lease")
    assert [leader["resourceName"]] == lease["rules"][1]["resourceNames"]
    assert leader["resourceNamespace"] == lease["metadata"]["namespace"]


def test_the_extender_url_reaches_the_extender_s_service_and_its_arguments_parse():
    from urllib.parse import urlparse

    from dl2.cli.main import build_parser

    (extender,) = scheduler_configuration()["extenders"]
    url = urlparse(extender["urlPrefix"])
    service = named("Service", "dl2-extender")
    assert url.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert url.port in {port["port"] for port in service["spec"]["ports"]}
    deployment = named("Deployment", "dl2-extender")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["dl2", "extender"]
    parsed = build_parser().parse_args(["extender", *container["args"]])
    assert parsed.prefix == url.path and parsed.port == url.port
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "dl2-extender"
    scheduler = named("Deployment", "dl2-kube-scheduler")["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in scheduler["volumes"]}
    assert volumes["config"]["configMap"]["name"] == "dl2-kube-scheduler-config"


def mounted_secrets(deployment: str) -> dict[str, str]:
    """Mount path -> Secret name of a Deployment's one container."""
    pod = named("Deployment", deployment)["spec"]["template"]["spec"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    (container,) = pod["containers"]
    return {m["mountPath"]: secrets[m["name"]] for m in container["volumeMounts"] if m["name"] in secrets}


def test_kube_scheduler_and_the_extender_speak_mutual_tls():
    """kube-scheduler calls https and presents a client certificate from its Secret; the extender serves with its
    own Secret's certificate and requires clients its ca.crt signed; its probes are HTTPS too."""
    from dl2.cli.main import build_parser

    (extender,) = scheduler_configuration()["extenders"]
    assert extender["urlPrefix"].startswith("https://") and extender["enableHTTPS"] is True
    tls = extender["tlsConfig"]
    assert set(tls) == {"caFile", "certFile", "keyFile"}  # no `insecure`: the extender's certificate is checked
    mounts = mounted_secrets("dl2-kube-scheduler")
    for field, key in [("caFile", "ca.crt"), ("certFile", "tls.crt"), ("keyFile", "tls.key")]:
        folder, name = tls[field].rsplit("/", 1)
        assert name == key and mounts[folder] == "dl2-kube-scheduler-tls"
    deployment = named("Deployment", "dl2-extender")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    parsed = build_parser().parse_args(["extender", *container["args"]])
    assert not parsed.insecure_http
    (folder,) = mounted_secrets("dl2-extender")
    assert mounted_secrets("dl2-extender")[folder] == "dl2-extender-tls"
    assert (parsed.tls_cert_file, parsed.tls_key_file, parsed.client_ca_file) == (
        Path(folder) / "tls.crt",
        Path(folder) / "tls.key",
        Path(folder) / "ca.crt",
    )
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS" and container[probe]["httpGet"]["path"] == "/healthz"


def test_every_network_policy_rule_names_its_peers():
    """A rule without `from`/`to` admits every address: each one names whom (metrics: the monitoring namespace only)."""
    policies = by_kind("NetworkPolicy")
    assert {p["metadata"]["name"] for p in policies} == {"dl2-scheduler", "dl2-extender", "dl2-kube-scheduler"}
    for policy in policies:
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        for rule in policy["spec"]["ingress"]:
            assert rule["from"] and rule["ports"], policy["metadata"]["name"]
        for rule in policy["spec"]["egress"]:
            assert rule["to"] and rule["ports"], policy["metadata"]["name"]
    monitoring = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    (metrics,) = named("NetworkPolicy", "dl2-scheduler")["spec"]["ingress"]
    assert metrics == {"from": monitoring, "ports": [{"port": 8080, "protocol": "TCP"}]}
    (extender,) = named("NetworkPolicy", "dl2-extender")["spec"]["ingress"]
    assert extender["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "dl2-kube-scheduler"}}}]


def exported_series() -> set[str]:
    """Every series name the controller's metrics registry can expose (counters as *_total, histograms' parts)."""
    from dl2.kube.metrics import Metrics

    names = set()
    for family in Metrics().registry.collect():
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(family.type, ("",))
        names |= {family.name + suffix for suffix in suffixes}
    return names


def test_every_alert_reads_a_metric_the_controller_exports():
    rule = yaml.safe_load((K8S / "monitoring" / "prometheusrule.yaml").read_text())
    alerts = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    assert {"Dl2SlotsStalled", "Dl2NoLeader", "Dl2FallbackActive", "Dl2ModelLoadFailing", "Dl2SlotOverrun"} <= {
        a["alert"] for a in alerts
    }
    exported = exported_series()
    for alert in alerts:
        used = set(re.findall(r"\bdl2_[a-z_]+", alert["expr"]))
        assert used and used <= exported, (alert["alert"], used - exported)
        assert alert["labels"]["severity"] in ("warning", "critical") and alert["annotations"]["summary"]
    monitor = yaml.safe_load((K8S / "monitoring" / "servicemonitor.yaml").read_text())
    service = named("Service", "dl2-scheduler")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}

"""`ControlPlane`: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok on loopback.

    with ControlPlane(folder) as plane:
        api = plane.admin_client()                              # system:masters, by client certificate
        plane.write_kubeconfig(path)                            # the same for kubectl
        token = plane.service_account_token("dl2-system", "dl2-scheduler")
        plane.write_kubeconfig(path, token=token)               # a ServiceAccount, as a pod would be
        plane.audit_events()                                    # every request RBAC judged, who sent it

The API server authenticates client certificates (CA in `pki/`) and ServiceAccount tokens, authorizes with RBAC
only (nothing is allowed that a Role does not grant), runs the default admission plugins (PodSecurity,
ServiceAccount, ...) and writes an audit log of every request by anyone but the control plane's own components
and the cluster twin. kwok plays the kubelet of every Node annotated `kwok.x-k8s.io/node: fake` (heartbeats,
pods Running, deletions confirmed). Real nodes' kubelets (`testbed.controlplane.nodes`) serve logs and exec through
the API server, which dials them by InternalIP with a client certificate of its own. Every process dies with the one
that started it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import shutil
import socket
import ssl
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.controlplane import assets
from testbed.controlplane.pki import CertificateAuthority, KeyPair
from testbed.controlplane.processes import Component, client_context, free_port, https_ok, wait_until

ADMIN = "dl2-admin"
TWIN = "dl2-twin"
"""The user of the cluster twin (it plays the job operators and the training processes)."""
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_IP = "10.0.1.1"
"""The address kwok's Nodes report (nothing serves there); no Service range holds it."""
SERVICE_NETWORKS = ipaddress.IPv4Network("10.0.0.0/16")
"""A control plane's Service range is a /24 of it, drawn at start (`service_range`): its first address is the
`kubernetes` Service's ClusterIP, which real nodes route to the API server on this machine
(`nodes.service.ApiService`); test beds side by side each route their own."""
POD_CIDR = "10.64.0.0/12"
CONTEXT = "dl2-local"
POOL_SIZE = 32
"""Connections a client keeps: its informers' watches, parallel writes and the rest."""
QUIET_USERS = ("system:kube-controller-manager", "system:kube-scheduler", "system:apiserver", "kwok", TWIN)
"""Left out of the audit log: the control plane's components and the twin (a busy simulated cluster would fill it)."""


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One request as the API server's audit log has it (stage `ResponseComplete`, or `ResponseStarted` of a
    watch that never completed)."""

    user: str
    verb: str
    api_group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    user_agent: str
    uri: str
    received: str

    @property
    def rbac_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    @property
    def permission(self) -> tuple[str, str, str]:
        """(API group, resource[/subresource], verb): what a Role grants."""
        return self.api_group, self.rbac_resource, self.verb

    @classmethod
    def from_json(cls, event: dict[str, Any]) -> AuditEvent:
        ref = event.get("objectRef") or {}
        return cls(
            user=str((event.get("user") or {}).get("username", "")),
            verb=str(event.get("verb", "")),
            api_group=str(ref.get("apiGroup", "")),
            resource=str(ref.get("resource", "")),
            subresource=str(ref.get("subresource", "")),
            namespace=str(ref.get("namespace", "")),
            name=str(ref.get("name", "")),
            code=int((event.get("responseStatus") or {}).get("code") or 0),
            user_agent=str(event.get("userAgent", "")),
            uri=str(event.get("requestURI", "")),
            received=str(event.get("requestReceivedTimestamp", "")),
        )


def last_line_end(path: Path, chunk: int = 65_536) -> int:
    """The offset just after the last newline of `path` (0 when it has none or does not exist)."""
    if not path.exists():
        return 0
    with path.open("rb") as stream:
        end = stream.seek(0, 2)
        while end > 0:
            start = max(0, end - chunk)
            stream.seek(start)
            data = stream.read(end - start)
            found = data.rfind(b"\n")
            if found >= 0:
                return start + found + 1
            end = start
    return 0


def read_audit_log(path: Path, offset: int = 0, end: int | None = None) -> tuple[list[AuditEvent], int]:
    """Events of the audit log from byte `offset` to `end` (the end of the file: None; whole lines only) and the
    offset after them."""
    events: dict[str, tuple[str, AuditEvent]] = {}
    if not path.exists():
        return [], offset
    with path.open("rb") as stream:
        stream.seek(offset)
        data = stream.read() if end is None else stream.read(max(0, end - offset))
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        if not line.strip():
            continue
        event = json.loads(line)
        stage = event.get("stage")
        if stage not in ("ResponseComplete", "ResponseStarted", "Panic"):
            continue
        audit_id = str(event.get("auditID"))
        if stage == "ResponseStarted" and audit_id in events:
            continue
        events[audit_id] = (stage, AuditEvent.from_json(event))
    return [event for _, event in events.values()], offset + end


class ControlPlane:
    def __init__(self, folder: Path | None = None, *, port: int = 0, scheduler: bool = True, kwok: bool = True) -> None:
        """`folder` holds the PKI, etcd's data, the logs and the audit log (a temporary one, removed on stop, when
        None); `port` is the API server's (0: a free one). `scheduler`, `kwok`: run the default kube-scheduler and
        kwok (a test of its own scheduler may not want the default one)."""
        self._owned = folder is None
        self.folder = Path(tempfile.mkdtemp(prefix="dl2-controlplane-")) if folder is None else folder
        self.with_scheduler = scheduler
        self.with_kwok = kwok
        self.bin = assets.require()
        self.pki = self.folder / "pki"
        self.logs = self.folder / "logs"
        self.audit_log = self.folder / "audit.log"
        self.port = port
        self.url = ""
        self.components: list[Component] = []
        self.users: dict[str, KeyPair] = {}
        self.ca: Path = self.pki / "ca.crt"
        self.service_cidr = service_range()
        """Its Services' range; the first address is the `kubernetes` Service's."""

    # -- running ----------------------------------------------------------------------------------------------

    def start(self, timeout_s: float = 90.0) -> ControlPlane:
        started = time.monotonic()
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started
        return self

    def _start(self, timeout_s: float) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        ca = CertificateAuthority(self.pki)
        service_ip = str(next(self.service_cidr.hosts()))
        serving = ca.issue("apiserver", "kube-apiserver", server=True, addresses=(service_ip,))
        signing = ca.signing_key()
        # the API server's identity towards kubelets (logs, exec, port-forward, node proxy): a real node's kubelet
        # authenticates it by the control plane's CA and authorizes it by webhook (RBAC: system:masters), as
        # kubeadm's `apiserver-kubelet-client`
        kubelet_client = ca.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",))
        self.users = {
            ADMIN: ca.issue("admin", ADMIN, ("system:masters",)),
            "system:kube-controller-manager": ca.issue("controller-manager", "system:kube-controller-manager"),
            "system:kube-scheduler": ca.issue("scheduler", "system:kube-scheduler"),
            "kwok": ca.issue("kwok", "kwok", ("system:masters",)),
            TWIN: ca.issue("twin", TWIN, ("system:masters",)),
        }
        etcd_port, peer_port = free_port(), free_port()
        etcd = Component(
            "etcd",
            [
                str(self.bin / "etcd"),
                f"--data-dir={self.folder / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",  # a throwaway store: durability is not what it is for
                "--log-level=warn",
            ],
            self.logs,
        ).start()
        self.components.append(etcd)
        self.port = self.port or free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        policy = self.folder / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(_audit_policy(), sort_keys=False))
        apiserver = Component(
            "kube-apiserver",
            [
                str(self.bin / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                # no Endpoints for the `kubernetes` Service: a loopback address is refused there
                "--endpoint-reconciler-type=none",
                f"--secure-port={self.port}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={ca.pair.cert}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={signing.cert}",
                f"--service-account-signing-key-file={signing.key}",
                f"--service-cluster-ip-range={self.service_cidr}",
                "--authorization-mode=RBAC",
                f"--kubelet-client-certificate={kubelet_client.cert}",
                f"--kubelet-client-key={kubelet_client.key}",
                # a node by its InternalIP first: a real node's Hostname (its name) resolves nowhere here, its
                # InternalIP is where its kubelet listens; kwok's Nodes say 10.0.1.1, where nothing serves their
                # pods' logs, as nothing did by their Hostname. The kubelets' serving certificates are self-signed
                # (no --kubelet-certificate-authority), as in a kubeadm cluster without serverTLSBootstrap
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-maxsize=0",
                "--profiling=false",
                "--v=1",
            ],
            self.logs,
        ).start()
        self.components.append(apiserver)
        context = client_context(ca.pair.cert, self.users[ADMIN].cert, self.users[ADMIN].key)
        deadline = time.monotonic() + timeout_s
        wait_until(
            lambda: https_ok(f"{self.url}/readyz", context), timeout_s, "kube-apiserver ready", [etcd, apiserver]
        )
        manager_kubeconfig = self.write_kubeconfig(
            self.folder / "controller-manager.kubeconfig", user="system:kube-controller-manager"
        )
        manager = Component(
            "kube-controller-manager",
            [
                str(self.bin / "kube-controller-manager"),
                f"--kubeconfig={manager_kubeconfig}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={signing.key}",
                f"--root-ca-file={ca.pair.cert}",
                "--secure-port=0",
                f"--cluster-cidr={POD_CIDR}",
                f"--service-cluster-ip-range={self.service_cidr}",
                "--profiling=false",
                "--v=1",
            ],
            self.logs,
        ).start()
        self.components.append(manager)
        if self.with_scheduler:
            self.start_scheduler("kube-scheduler", self.default_scheduler_configuration())
        if self.with_kwok:
            kwok = Component(
                "kwok",
                [
                    str(self.bin / "kwok"),
                    f"--kubeconfig={self.write_kubeconfig(self.folder / 'kwok.kubeconfig', user='kwok')}",
                    f"--config={self.bin / assets.KWOK_STAGES}",
                    "--manage-all-nodes=false",
                    f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                    f"--cidr={POD_CIDR}",
                    f"--node-ip={KWOK_NODE_IP}",
                    "--node-lease-duration-seconds=40",
                ],
                self.logs,
            ).start()
            self.components.append(kwok)
        remaining = max(1.0, deadline - time.monotonic())
        wait_until(self._default_service_account, remaining, "the default ServiceAccount", self.components)

    def _default_service_account(self) -> bool:
        from kubernetes.client.exceptions import ApiException

        from dl2.kube.rest import SERVICEACCOUNTS, Rest

        try:
            Rest(self.admin_client()).get(SERVICEACCOUNTS, "default", "default")
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    def default_scheduler_configuration(self, **profile: Any) -> dict[str, Any]:
        """A `KubeSchedulerConfiguration` for a scheduler of this control plane (leader election off)."""
        kubeconfig = self.write_kubeconfig(self.folder / "scheduler.kubeconfig", user="system:kube-scheduler")
        return {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 200, "burst": 400},
            "leaderElection": {"leaderElect": False},
            "profiles": [{"schedulerName": "default-scheduler", **profile}],
        }

    def start_scheduler(self, name: str, configuration: dict[str, Any]) -> Component:
        """Another kube-scheduler with its own configuration (a profile with an extender, say); stopped with the
        control plane, or by `Component.stop()`."""
        path = self.folder / f"{name}.config.yaml"
        path.write_text(yaml.safe_dump(configuration, sort_keys=False))
        scheduler = Component(
            name, [str(self.bin / "kube-scheduler"), f"--config={path}", "--secure-port=0", "--v=1"], self.logs
        ).start()
        self.components.append(scheduler)
        return scheduler

    def stop(self) -> None:
        for component in reversed(self.components):
            component.stop()
        self.components.clear()
        if self._owned:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def check(self) -> None:
        """RuntimeError if a component has exited."""
        for component in self.components:
            component.check()

    # -- clients ----------------------------------------------------------------------------------------------

    def kubeconfig(self, user: str = ADMIN, token: str | None = None, server: str | None = None) -> dict[str, Any]:
        """A kubeconfig for a certificate user of the control plane, or for a bearer `token` (a ServiceAccount's);
        `server` another address of the API (the fault proxy's)."""
        cluster: dict[str, Any] = {"server": server or self.url}
        if cluster["server"].startswith("https:"):
            cluster["certificate-authority"] = str(self.ca)
        if token is not None:
            credentials: dict[str, Any] = {"token": token}
        else:
            pair = self.users[user]
            credentials = {"client-certificate": str(pair.cert), "client-key": str(pair.key)}
        name = CONTEXT if token is None and user == ADMIN else f"{CONTEXT}-{user if token is None else 'token'}"
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": CONTEXT, "cluster": cluster}],
            "users": [{"name": name, "user": credentials}],
            "contexts": [{"name": name, "context": {"cluster": CONTEXT, "user": name}}],
            "current-context": name,
        }

    def write_kubeconfig(
        self, path: Path, user: str = ADMIN, token: str | None = None, server: str | None = None
    ) -> Path:
        """Written atomically, readable by its owner only (it holds a credential)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(yaml.safe_dump(self.kubeconfig(user, token, server), sort_keys=False))
        temporary.chmod(0o600)
        os.replace(temporary, path)
        return path

    def configuration(self, user: str = ADMIN, token: str | None = None, server: str | None = None) -> Any:
        """A `kubernetes.client.Configuration` for the user (or token); urllib3's own retries off."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = server or self.url
        configuration.ssl_ca_cert = str(self.ca)
        if token is not None:
            configuration.api_key = {"authorization": token}
            configuration.api_key_prefix = {"authorization": "Bearer"}
        else:
            configuration.cert_file = str(self.users[user].cert)
            configuration.key_file = str(self.users[user].key)
        configuration.retries = False
        configuration.connection_pool_maxsize = POOL_SIZE
        return configuration

    def client(
        self, user: str = ADMIN, token: str | None = None, server: str | None = None, user_agent: str | None = None
    ) -> Any:
        from kubernetes import client

        api = client.ApiClient(self.configuration(user, token, server))
        if user_agent is not None:
            api.user_agent = user_agent
        return api

    def admin_client(self, user_agent: str | None = None) -> Any:
        return self.client(ADMIN, user_agent=user_agent)

    def ssl_context(self, user: str = ADMIN) -> ssl.SSLContext:
        pair = self.users[user]
        return client_context(self.ca, pair.cert, pair.key)

    def service_account_token(self, namespace: str, name: str, expiration_s: int = 86_400) -> str:
        """A token of the ServiceAccount (created if it does not exist), from the TokenRequest API as the kubelet
        gets one for a pod."""
        from kubernetes.client.exceptions import ApiException

        from dl2.kube.rest import SERVICEACCOUNTS, Rest

        rest = Rest(self.admin_client())
        try:
            rest.create(SERVICEACCOUNTS, namespace, {"metadata": {"name": name}})
        except ApiException as error:
            if error.status != 409:
                raise
        request: dict[str, Any] = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest"}
        request["spec"] = {"audiences": [], "expirationSeconds": expiration_s}
        path = SERVICEACCOUNTS.path(namespace, name, "token")
        return str(rest.request("POST", path, request)["status"]["token"])

    # -- the audit log ----------------------------------------------------------------------------------------

    def audit_events(self, offset: int = 0) -> list[AuditEvent]:
        return read_audit_log(self.audit_log, offset)[0]

    def audit_offset(self) -> int:
        """Where the audit log's last whole line ends now (events after it: `audit_events(offset)`). Not the
        file's size: the API server may be part-way through writing a line, and an offset inside it would make
        the next read start with half an event."""
        return last_line_end(self.audit_log)

    def iter_logs(self) -> Iterator[tuple[str, str]]:
        for component in self.components:
            yield component.name, component.tail(40)


def service_range() -> ipaddress.IPv4Network:
    """A /24 of `SERVICE_NETWORKS` whose first address is not one of this machine's (another test bed's `kubernetes`
    Service routed here: binding to it works only where it is local)."""
    kwok = ipaddress.ip_address(KWOK_NODE_IP)
    ranges = [subnet for subnet in SERVICE_NETWORKS.subnets(new_prefix=24) if kwok not in subnet]
    for candidate in random.sample(ranges, len(ranges)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((str(next(candidate.hosts())), 0))
            except OSError:
                return candidate  # not an address here: free
    raise RuntimeError(f"every /24 of {SERVICE_NETWORKS} has its first address on this machine")


def _audit_policy() -> dict[str, Any]:
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "None", "users": list(QUIET_USERS)},
            {"level": "None", "userGroups": ["system:serviceaccounts:kube-system", "system:nodes"]},
            {"level": "Metadata"},
        ],
    }

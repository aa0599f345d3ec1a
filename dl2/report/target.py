"""Where a training job's progress goes: the job (kind, namespace, name) and the API server (address, token, CA),
from explicit arguments or, by default, from the pod's environment and its ServiceAccount's files.

Environment (set in the job's pod template; `docs/reporting.md` shows the downward-API snippet):

- `DL2_JOB_NAME`: the job's name (downward API: the pod's label `training.kubeflow.org/job-name` or
  `volcano.sh/job-name`). Unset: nothing is reported.
- `DL2_JOB_KIND`: `PyTorchJob` (Kubeflow, the default) or `Job` (Volcano; `VolcanoJob` is accepted too).
- `DL2_JOB_NAMESPACE`: the job's namespace; default: the ServiceAccount's `namespace` file (the pod's).
- `DL2_REPORT`: `0`/`false`: this process never reports; `1`/`true`: it does, whatever its rank.
- `RANK`, else `VC_TASK_INDEX`: the process's global rank (torchrun and Kubeflow set `RANK`, Volcano's `env`
  plugin the task index): only rank 0 reports; neither set: the process reports.
- `DL2_REPORT_INTERVAL_S`: least seconds between two writes (default 60).
- `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`: the API server, as the kubelet sets them in every pod;
  the token and CA are the ServiceAccount's files under `/var/run/secrets/kubernetes.io/serviceaccount/`.

Standard library only: this runs inside training containers that have none of dl2's dependencies.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

PROGRESS_EPOCHS = "dl2.io/progress-epochs"
"""The annotation the controller reads (`dl2.kube.contract.PROGRESS_EPOCHS`; a test checks they agree)."""
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where the kubelet mounts a pod's ServiceAccount token, the cluster's CA and the pod's namespace."""

ENV_JOB_NAME = "DL2_JOB_NAME"
ENV_JOB_KIND = "DL2_JOB_KIND"
ENV_JOB_NAMESPACE = "DL2_JOB_NAMESPACE"
ENV_REPORT = "DL2_REPORT"
ENV_INTERVAL_S = "DL2_REPORT_INTERVAL_S"
RANK_VARIABLES = ("RANK", "VC_TASK_INDEX")
"""The global rank as torchrun and the Kubeflow operator set it; else the task index Volcano's `env` plugin sets."""

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class TargetError(ValueError):
    """The job or the API server cannot be determined (names what is missing)."""


@dataclass(frozen=True, slots=True)
class JobKind:
    """One of the two job kinds of the job contract, as the API addresses it."""

    kind: str
    group: str
    version: str
    plural: str


PYTORCHJOB = JobKind("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs")
VOLCANO_JOB = JobKind("Job", "batch.volcano.sh", "v1alpha1", "jobs")
_KINDS = {
    "pytorchjob": PYTORCHJOB,
    "pytorchjobs": PYTORCHJOB,
    "job": VOLCANO_JOB,
    "jobs": VOLCANO_JOB,
    "volcanojob": VOLCANO_JOB,
    "volcano": VOLCANO_JOB,
}


def job_kind(text: str) -> JobKind:
    """`PyTorchJob` or `Job` (Volcano), case-insensitive; plurals and `VolcanoJob` accepted."""
    found = _KINDS.get(text.strip().lower().replace("-", "").replace("_", ""))
    if found is None:
        raise TargetError(f"unknown job kind {text!r}: PyTorchJob (Kubeflow) or Job (Volcano)")
    return found


@dataclass(frozen=True, slots=True)
class JobRef:
    """The job a process reports on."""

    kind: JobKind
    namespace: str
    name: str

    @property
    def path(self) -> str:
        """The job's URL path on the API server."""
        kind, namespace, name = self.kind, quote(self.namespace, safe=""), quote(self.name, safe="")
        return f"/apis/{kind.group}/{kind.version}/namespaces/{namespace}/{kind.plural}/{name}"

    def __str__(self) -> str:
        return f"{self.kind.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ApiServer:
    """The API server and the credential a reporter sends."""

    url: str
    """`https://host:port`, no trailing slash."""
    token: str | None = None
    """A bearer token given outright (tests, out-of-cluster use)."""
    token_path: Path | None = None
    """Or a file read at every request: the kubelet rotates projected ServiceAccount tokens in place."""
    ca_path: Path | None = None
    """The CA that signed the API server's certificate; None: the system's trust store."""

    def bearer(self) -> str | None:
        if self.token is not None:
            return self.token
        if self.token_path is not None:
            return self.token_path.read_text().strip()
        return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def resolve_job(
    name: str | None,
    kind: str | JobKind | None,
    namespace: str | None,
    environ: Mapping[str, str],
    service_account: Path = SERVICE_ACCOUNT,
) -> JobRef:
    """The job from the arguments, each missing one from the environment (see the module docstring)."""
    name = name or environ.get(ENV_JOB_NAME) or None
    if not name:
        raise TargetError(f"no job name: pass name= or set {ENV_JOB_NAME} (docs/reporting.md)")
    kind = kind or environ.get(ENV_JOB_KIND) or PYTORCHJOB
    namespace = namespace or environ.get(ENV_JOB_NAMESPACE) or _read(service_account / "namespace")
    if not namespace:
        raise TargetError(f"no namespace: pass namespace=, set {ENV_JOB_NAMESPACE} or run in a pod")
    return JobRef(kind if isinstance(kind, JobKind) else job_kind(kind), namespace, name)


def in_cluster_url(environ: Mapping[str, str]) -> str | None:
    """The API server's address from the variables the kubelet sets in every pod (an IPv6 host bracketed)."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        return None
    try:
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
    except ValueError:
        pass  # a host name
    return f"https://{host}:{port}"


def resolve_server(
    url: str | None,
    token: str | None,
    ca_path: str | Path | None,
    environ: Mapping[str, str],
    service_account: Path = SERVICE_ACCOUNT,
) -> ApiServer:
    """The API server from the arguments, else in-cluster: the service's variables and the ServiceAccount's files."""
    url = url or in_cluster_url(environ)
    if not url:
        raise TargetError("no API server: pass server= or run in a pod (KUBERNETES_SERVICE_HOST/PORT)")
    token_path = None
    if token is None:
        token_path = service_account / "token"
        if not token_path.is_file():
            raise TargetError(f"no token: pass token= or mount the ServiceAccount's token ({token_path})")
    if ca_path is None and (service_account / "ca.crt").is_file():
        ca_path = service_account / "ca.crt"
    return ApiServer(url.rstrip("/"), token, token_path, Path(ca_path) if ca_path is not None else None)


def is_rank_zero(environ: Mapping[str, str]) -> bool:
    """Whether this process reports: `DL2_REPORT` if set, else rank 0 (`RANK`, else `VC_TASK_INDEX`), else yes (one
    process). A rank that is not a number says no: better no report than one per process."""
    override = environ.get(ENV_REPORT, "").strip().lower()
    if override in _TRUE or override in _FALSE:
        return override in _TRUE
    for variable in RANK_VARIABLES:
        value = environ.get(variable)
        if value is not None and value.strip():
            return value.strip() == "0"
    return True


def interval_from(environ: Mapping[str, str], default_s: float) -> float:
    """`DL2_REPORT_INTERVAL_S`, or the default when unset or not a non-negative number."""
    text = environ.get(ENV_INTERVAL_S, "").strip()
    try:
        value = float(text) if text else default_s
    except ValueError:
        return default_s
    return value if value >= 0 else default_s

"""A Kubernetes API server on one machine (kmock on loopback), with a simulated-cluster mode.

(The job contract is in `dl2.kube.apiserver.contract`.)
"""

from dl2.kube.apiserver.faults import Fault, FaultKind
from dl2.kube.apiserver.recording import RequestRecord, load_records, permissions
from dl2.kube.apiserver.server import THIRD_PARTY_CRDS, LocalApiServer

__all__ = ["THIRD_PARTY_CRDS", "Fault", "FaultKind", "LocalApiServer", "RequestRecord", "load_records", "permissions"]

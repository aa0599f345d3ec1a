"""Real nodes: a containerd and a kubelet per Node, joined to a running `ControlPlane`, running real pods with runc.

    with ControlPlane() as plane, RealNodes(plane, count=2) as nodes:
        nodes.names                                        # ["dl2-real-0", "dl2-real-1"], both Ready
        nodes.import_image(binary, "dl2.local/mine:1")     # a static binary as an image, into every node

Each node is a containerd (Debian's, with runc) with its own root, state and socket, and a kubelet of the control
plane's release (`make real-nodes`) with its own root directory, port and pod subnet: one containerd per kubelet,
because a kubelet stops every pod its runtime holds that it does not know of. The kubelet authenticates with a
client certificate from the control plane's CA (CN `system:node:<name>`, O `system:nodes`); the API server
authorizes with RBAC only (no Node authorizer), so the `system:node` ClusterRole is bound to the group
`system:nodes`, as clusters did before 1.8. Pods get an address of their node's /24 (the Node's spec.podCIDR) on
one bridge for the run (the CNI bridge plugin, host-local addresses): a pod reaches another node's pods on the
link, without the host forwarding. Each node's first address is on the bridge too: the Node's InternalIP, where
its kubelet listens (webhook authentication and authorization: only the control plane CA's clients get in).
No registry is reachable: images are static binaries packed here (`images`), pause among them.

Everything a run makes is under one folder (a temporary `/tmp/dl2-nodes-*` by default; kept short, as unix
sockets are under it), and `stop()`, on success and failure alike, takes it all back: pods deleted through the
API, tasks killed, kubelets and containerd stopped, their shims killed, mounts under the folder (root filesystems,
network namespaces, projected volumes) unmounted, cgroups, bridges, log links, Nodes and the binding removed. A run
whose process was killed is swept by the next one's start (`host.sweep_stale`).

This machine has cgroup v1, denies lowering `oom_score_adj`, and no systemd manages its cgroups: the settings that
make a kubelet run here are in `config`, each with its reason.

Modules: `layout` (what is needed, where a node keeps its things), `config` (containerd, CNI, kubelet), `host`
(bridges, shims, mounts, cgroups, sweeping), `images` (OCI archives of static binaries), `real` (`RealNodes`;
its kubelets' certificates come from the control plane's CA, `pki.CertificateAuthority.load`).
"""

from testbed.controlplane.nodes.layout import (
    HELLO_IMAGE,
    NODE_LABEL,
    PAUSE_IMAGE,
    NodeLayout,
    NodesUnavailable,
    missing,
    require,
)
from testbed.controlplane.nodes.real import RealNodes

__all__ = [
    "HELLO_IMAGE",
    "NODE_LABEL",
    "PAUSE_IMAGE",
    "NodeLayout",
    "NodesUnavailable",
    "RealNodes",
    "missing",
    "require",
]

"""The configuration of a real node's containerd, its pod network (CNI) and its kubelet: what makes them run on
this machine (cgroup v1, no systemd managing cgroups, lowering `oom_score_adj` denied, two kubelets side by side),
each setting with its reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.controlplane.nodes.layout import CNI_BIN, PAUSE_IMAGE, NodeLayout
from testbed.controlplane.pki import KeyPair


def containerd_configuration(node: NodeLayout) -> str:
    """containerd's configuration (version 2): whatever is not set here keeps containerd's default."""
    state = node.state
    return f"""version = 2
root = "{node.folder / "root"}"
state = "{state}"
# no OOM score for containerd itself: this machine denies lowering oom_score_adj
oom_score = 0

[grpc]
  address = "{node.socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{node.folder / "opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # this machine denies lowering oom_score_adj (write /proc/self/oom_score_adj: permission denied); without this
  # runc fails every pod sandbox with "can't get final child's PID from pipe: EOF"
  restrict_oom_score_adj = true
  # network namespaces under the state folder, not /var/run/netns: what cleanup unmounts is all under the folder
  netns_mounts_under_state_dir = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # cgroupfs, as the kubelet's cgroupDriver: no systemd manages this machine's cgroups (cgroup v1)
        SystemdCgroup = false
        # runc's state under this node's, not /run/containerd/runc: two nodes' runc never share it
        Root = "{state / "runc"}"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{node.cni_conf}"
    max_conf_num = 1
"""


def cni_configuration(node: NodeLayout) -> dict[str, Any]:
    """The pod network: a veth per pod on the run's bridge, an address of the node's subnet (host-local, its
    records under the node's folder), a default route to the bridge's address. One link for every node's pods, as
    nodes on one switch: a pod reaches a pod of another node without the host forwarding a packet. Not a gateway
    (`isGateway` would make the plugin turn on the host's `net.ipv4.ip_forward`), no IP masquerade (iptables rules):
    pod traffic stays on this machine, and nothing of the host's configuration changes."""
    return {
        "cniVersion": "1.0.0",
        "name": f"dl2-{node.name}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [
                        [
                            {
                                "subnet": str(node.network),
                                "rangeStart": str(node.subnet[2]),
                                "rangeEnd": str(node.subnet[-2]),
                                "gateway": node.gateway,
                            }
                        ]
                    ],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node.folder / "cni" / "ipam"),
                },
            },
            {"type": "loopback"},
        ],
    }


def kubelet_configuration(node: NodeLayout, ca: Path) -> dict[str, Any]:
    """The KubeletConfiguration: what makes a kubelet run on this machine (cgroup v1, shared with another
    kubelet, no systemd), each with its reason."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # its API on the node's own address (the bridge's), only clients of the control plane's CA get in
        "address": node.address,
        "port": node.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.healthz_port,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": node.endpoint,
        # cgroup v1: the kubelet refuses it since 1.35 unless told; this machine has no cgroup v2
        "failCgroupV1": False,
        # cgroupfs, as containerd's runc (SystemdCgroup = false): no systemd manages this machine's cgroups
        "cgroupDriver": "cgroupfs",
        # no kubepods/ QoS hierarchy: its name is fixed, so two kubelets on one machine would share it, each
        # sizing it to its own allocatable and removing (killing) the pod cgroups under it it does not know, the
        # other's pods; pods' cgroups are then containerd's default, /k8s.io/<container> in each hierarchy
        "cgroupsPerQOS": False,
        # node allocatable is enforced on the kubepods cgroup, which is off above; an empty list is required then
        "enforceNodeAllocatable": [],
        # the kubelet refuses to start where swap is on unless told (none here now; a machine of this kind may)
        "failSwapOn": False,
        # ephemeral-storage accounting needs the root filesystem's stats, which the kubelet's cadvisor cannot get
        # here ("cannot find filesystem info for device /dev/vda"); for the same reason its eviction manager does
        # not run (the thresholds below stay as a statement of intent)
        "localStorageCapacityIsolation": False,
        # images cannot be pulled again (no registry): never garbage-collect them
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # two kubelets and a shared, busy disk: evict only when nearly nothing is left, not at the 10-15% defaults
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        # no iptables chains on the host (KUBE-FIREWALL, canaries): there is no kube-proxy here, and the test bed
        # would have to remove them after
        "makeIPTablesUtilChains": False,
        # its containers' logs under the node's folder (the default /var/log/pods is shared by every kubelet)
        "podLogsDir": str(node.pod_logs),
        "maxPods": 32,
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
    }


def kubeconfig(server: str, ca: Path, credentials: KeyPair) -> dict[str, Any]:
    """The kubelet's: the API server at `server`, checked against the control plane's CA, and the node's client
    certificate."""
    user = {"client-certificate": str(credentials.cert), "client-key": str(credentials.key)}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "dl2-local", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "node", "user": user}],
        "contexts": [{"name": "node", "context": {"cluster": "dl2-local", "user": "node"}}],
        "current-context": "node",
    }


def to_json(value: Any) -> str:
    """CNI configuration files are JSON."""
    return json.dumps(value, indent=2)

"""The simulated-cluster mode of the local API server: a workload's jobs run on its nodes by dl2's simulator.

with LocalApiServer(crd_files=THIRD_PARTY_CRDS) as server:
    cluster = simulate_cluster(server, workload, SimConfig.realistic(seed=0))
    ...                     # a controller resizes jobs through the API
    cluster.advance()       # one simulated slot (or server.every(tick_s, ...) for wall-clock ticks)
    cluster.job_results()   # JCT of every finished job
"""

from __future__ import annotations

from dl2.core import Workload
from dl2.kube.apiserver.server import LocalApiServer
from dl2.kube.apiserver.sim import manifests
from dl2.kube.apiserver.sim.cluster import ClusterHandle, ClusterOptions, SimulatedCluster
from dl2.kube.apiserver.sim.extender_scheduling import ExtenderPlacer
from dl2.kube.extender_http import ExtenderClient
from dl2.schedulers.placement import Placer
from dl2.schedulers.registry import PLACERS, make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import SimResult, simulate


def simulate_cluster(
    server: LocalApiServer,
    workload: Workload,
    config: SimConfig | None = None,
    placer: str = "load-balance",
    options: ClusterOptions | None = None,
    extender: ExtenderClient | None = None,
) -> ClusterHandle:
    """Start a simulated cluster on a running server (nodes, namespaces, clock, the first slot's jobs); with
    `extender`, its scheduler consults that scheduler extender for every pod (`ExtenderPlacer`)."""
    if placer not in PLACERS:
        raise KeyError(f"unknown placer {placer!r}; known: {', '.join(PLACERS)}")
    config = config or SimConfig.realistic()

    def build() -> SimulatedCluster:
        chosen: Placer = PLACERS[placer]()
        if extender is not None:
            cluster_spec = workload.cluster
            names = [
                manifests.node_name(cluster_spec.name, n.node_id, cluster_spec.num_nodes) for n in cluster_spec.nodes
            ]
            chosen = ExtenderPlacer(chosen, extender, names)
        cluster = SimulatedCluster(server.verbs, workload, config, chosen, options)
        if isinstance(chosen, ExtenderPlacer):
            chosen.pod_of = cluster.pending_pod
        cluster.start()
        return cluster

    cluster = server.call(build)
    server.attach_cluster(cluster)
    return ClusterHandle(cluster, server.call)


def reference_result(workload: Workload, scheduler: str, config: SimConfig, placer: str = "load-balance") -> SimResult:
    """The same workload and configuration run by the simulator with a heuristic deciding (what `dl2 simulate`
    reports), to compare with the JCTs obtained through the API."""
    speed = speed_model(Mode.REALISTIC)
    return simulate(workload, make_scheduler(scheduler, speed, False, placer), config, speed, interference_model())


__all__ = ["ClusterHandle", "ClusterOptions", "SimulatedCluster", "reference_result", "simulate_cluster"]

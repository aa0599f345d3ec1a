"""The cluster twin: a workload's jobs, run by dl2's simulator, against a real API server (`ClusterTwin`).

    with ControlPlane() as plane:
        twin = start_twin(plane.client(TWIN), workload, SimConfig.realistic(seed=0))
        ...                     # a controller resizes jobs through the API
        twin.advance()          # one simulated slot
        twin.job_results()      # JCT of every finished job

The controller (`dl2.kube`) never imports this package; the twin follows the same job contract
(`dl2.kube.contract`) and clock (`dl2.kube.clock`) from the other side.
"""

from __future__ import annotations

from typing import Any

from dl2.core import Workload
from dl2.schedulers.registry import PLACERS, make_scheduler
from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import SimResult, simulate
from dl2.truth import Truth, realise
from dl2.truth.run import run_on
from dl2.twin.cluster import ClusterTwin, TwinOptions


def start_twin(
    api: Any,
    workload: Workload,
    config: SimConfig | None = None,
    placer: str = "load-balance",
    options: TwinOptions | None = None,
    truth: Truth | None = None,
) -> ClusterTwin:
    """Create the twin's nodes, namespaces and clock through `api` (a client with the twin's credentials) and
    submit the first slot's jobs; `placer` is the heuristic that places tasks unless `options.scheduler_name`
    leaves that to a kube-scheduler. With a `truth`, the jobs run as it says (`dl2.truth`), not as the catalogue
    that the controller reads."""
    if placer not in PLACERS:
        raise KeyError(f"unknown placer {placer!r}; known: {', '.join(PLACERS)}")
    config = config or SimConfig.realistic()
    if truth is None:
        return ClusterTwin(api, workload, config, PLACERS[placer](), options).start()
    cluster = realise(truth, workload)
    return ClusterTwin(
        api, cluster.workload, cluster.config(config), PLACERS[placer](), options, cluster.speed, cluster.interference
    ).start()


def reference_result(
    workload: Workload, scheduler: str, config: SimConfig, placer: str = "load-balance", truth: Truth | None = None
) -> SimResult:
    """The same workload and configuration run by the simulator with a heuristic deciding (what `dl2 simulate`
    reports), to compare with the JCTs obtained through the API."""
    if truth is not None:
        return run_on(
            realise(truth, workload), lambda speed, compat: make_scheduler(scheduler, speed, compat, placer), config
        )
    speed = speed_model(Mode.REALISTIC)
    return simulate(workload, make_scheduler(scheduler, speed, False, placer), config, speed, interference_model())


__all__ = ["ClusterTwin", "TwinOptions", "reference_result", "start_twin"]

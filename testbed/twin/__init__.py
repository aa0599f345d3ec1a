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
from dl2.sim.run import SchedulerBuilder, interference_model, speed_model
from dl2.sim.simulator import SimResult, simulate
from dl2.truth import Truth, realise, truth_named
from dl2.truth.run import run_on
from testbed.twin.cluster import ClusterTwin, TwinOptions


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
    return simulated(workload, lambda speed, compat: make_scheduler(scheduler, speed, compat, placer), config, truth)


def truth_of(name: str) -> Truth | None:
    """The truth a cluster's jobs follow, by name (`dl2.truth.truth_named`: a scenario, `seed-N` or `drawn-N`);
    None for '' (the catalogue itself). For what may start a twin but must not read a truth itself (the lifecycle):
    a name in, an opaque value out, `ConfigError` for an unknown name."""
    return truth_named(name) if name else None


def simulated(workload: Workload, build: SchedulerBuilder, config: SimConfig, truth: Truth | None = None) -> SimResult:
    """The workload run by the simulator under `truth` (None: the catalogue) with `build`'s scheduler, which reads
    the catalogue's speeds: what the cluster twin gives the same scheduler, without the API."""
    if truth is not None:
        return run_on(realise(truth, workload), build, config)
    speed = speed_model(Mode.REALISTIC)
    return simulate(workload, build(speed, False), config, speed, interference_model())


__all__ = ["ClusterTwin", "TwinOptions", "reference_result", "simulated", "start_twin", "truth_of"]

"""Runs on a cluster whose truth departs from the catalogue: a scheduler reading the catalogue, or the same
scheduler reading the truth."""

from __future__ import annotations

from dl2.sim.config import Mode, SimConfig
from dl2.sim.run import SchedulerBuilder, catalogue_speed
from dl2.sim.simulator import SimResult, simulate
from dl2.truth.realise import TrueCluster


def run_on(cluster: TrueCluster, build: SchedulerBuilder, config: SimConfig, oracle: bool = False) -> SimResult:
    """`build`'s scheduler on the cluster. It is handed the catalogue's speed model, as a deployment has it; with
    `oracle`, the truth's and the jobs labelled with their true types, which no deployment has. That measures what
    knowing the truth is worth to this scheduler; it is no ceiling (a heuristic reading the truth still decides as
    that heuristic, and a learned policy can beat it)."""
    if config.mode is not Mode.REALISTIC:
        raise ValueError("a truth is played in realistic mode (compatibility mode is the authors' catalogue)")
    if oracle:
        scheduler, workload = build(cluster.speed, False), cluster.oracle_workload()
    else:
        scheduler, workload = build(catalogue_speed(), False), cluster.workload
    return simulate(workload, scheduler, cluster.config(config), cluster.speed, cluster.interference)

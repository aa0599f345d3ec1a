"""How faithfully a learned placer copies the heuristic it imitated, decision by decision, and why it departs.

A diagnostic of where a copy departs from its teacher under DRF, not a result. The placer runs a workload greedily
under an allocation policy; at each of its decisions the heuristic is asked where it would put the same task
in the same state (DAgger's labelling, `HarmonyPlacer.teacher`), and the two servers are compared. A departure
is put down to the first reason that holds: one of the two leaves the task unplaced (a placer trained with
`--skip`, a heuristic such as `isolate-strict`); the two servers' rows are equal (no placer that reads rows can
tell them apart); the heuristic used a server the job already holds; the placer took a server more loaded
(dominant utilisation, `NodeState.utilisation`) than the least loaded; or the least loaded were tied and the
heuristic took the lowest index among them, which a server's row does not show the placer.

    .venv/bin/python benchmarks/harmony_fidelity.py [--placer models/harmony-placer-philly] [--imitated isolate-strict]
        [--workload synthetic-philly] [--seed 21000] [--scheduler drf] [--out harmony_fidelity.json]

The default workload is a validation seed of the placer's training, at full size (never a test workload).
Prints a table and writes `benchmarks/results/harmony_fidelity.json`.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np
from common import environment, print_table, write_json

from dl2.placement.candidates import candidates, job_inputs
from dl2.placement.policy import HarmonyPlacer
from dl2.schedulers.placement import Demand, NodeState, Placer
from dl2.schedulers.registry import PLACERS, make_scheduler
from dl2.sim.config import SimConfig
from dl2.sim.run import interference_model, speed_model
from dl2.sim.simulator import Simulation
from dl2.workload.source import workload

SAME = "same server"
PLACER_LEAVES = "placer: leaves the task unplaced, the heuristic places it"
HEURISTIC_LEAVES = "heuristic: leaves the task unplaced, the placer places it"
SAME_ROW = "a server with the same row (indistinguishable)"
OWN = "heuristic: a server the job holds"
MORE_LOADED = "placer: more loaded than the least loaded"
TIED_FULL = "tie at utilisation 1 (GPUs taken): lowest index"
TIED = "tie below utilisation 1: lowest index"
REASONS = (SAME, PLACER_LEAVES, HEURISTIC_LEAVES, SAME_ROW, OWN, MORE_LOADED, TIED_FULL, TIED)


class Comparison:
    """The teacher `HarmonyPlacer` consults: computes the placer's own choice, compares, returns the heuristic's."""

    name = "comparison"

    def __init__(self, placer: HarmonyPlacer, heuristic: Placer) -> None:
        self.placer = placer
        self.heuristic = heuristic
        self.counts: Counter[tuple[str, str]] = Counter()

    def choose(self, state: NodeState, demand: Demand, job_nodes: Sequence[int]) -> int:
        tenancy = state.tenancy
        assert tenancy is not None
        rank, is_ps = tenancy.placing, tenancy.placing_ps
        nodes, rows = candidates(state, tenancy, rank, demand, self.placer.may_skip(tenancy, rank, is_ps))
        choice = int(np.argmax(self.placer.policy.logits(rows, job_inputs(tenancy, rank, is_ps))))
        own = int(nodes[choice]) if choice < len(nodes) else -1
        label = self.heuristic.choose(state, demand, job_nodes)
        self.counts["ps" if is_ps else "worker", self.reason(state, demand, job_nodes, nodes, rows, own, label)] += 1
        return label

    @staticmethod
    def reason(
        state: NodeState,
        demand: Demand,
        job_nodes: Sequence[int],
        nodes: np.ndarray,
        rows: np.ndarray,
        own: int,
        label: int,
    ) -> str:
        if own == label:
            return SAME
        if own < 0 or label < 0:
            return PLACER_LEAVES if own < 0 else HEURISTIC_LEAVES
        if np.array_equal(rows[np.searchsorted(nodes, own)], rows[np.searchsorted(nodes, label)]):
            return SAME_ROW
        if state.first_fitting(job_nodes, demand) == label:
            return OWN
        utilisation = state.utilisation_of_all()
        if utilisation[own] > utilisation[label] + 1e-9:
            return MORE_LOADED
        return TIED_FULL if utilisation[label] >= 1.0 - 1e-9 else TIED


class Silent:
    """The hook the teacher's labels go to: nothing is recorded (the comparison counts)."""

    def decided(self, job: np.ndarray, rows: np.ndarray, choice: int, probability: float) -> None:
        pass

    def job_placed(self, state: NodeState, rank: int, kept: dict[int, tuple[int, int]]) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--placer", default="models/harmony-placer-philly")
    parser.add_argument("--imitated", default="isolate-strict", choices=sorted(PLACERS))
    parser.add_argument("--workload", default="synthetic-philly", help="a source (`dl2.workload.source`)")
    parser.add_argument("--seed", type=int, default=21000)
    parser.add_argument("--scheduler", default="drf")
    parser.add_argument("--out", default="harmony_fidelity.json", help="JSON file name under benchmarks/results")
    args = parser.parse_args()
    started = time.perf_counter()
    placer = HarmonyPlacer.from_dir(args.placer)
    comparison = Comparison(placer, PLACERS[args.imitated]())
    placer.teacher, placer.hook = comparison, Silent()
    config = SimConfig.realistic(args.seed)
    speed = speed_model(config.mode)
    simulation = Simulation(workload(args.workload, args.seed), config, speed, interference_model())
    policy = make_scheduler(args.scheduler, speed, False, placer)
    while not simulation.done:
        simulation.apply(policy.schedule(simulation.begin_slot()))
        placer.finish_job()
    report, rows = {}, []
    for role in ("worker", "ps"):
        total = sum(comparison.counts[role, reason] for reason in REASONS)
        report[role] = {reason: comparison.counts[role, reason] for reason in REASONS} | {"decisions": total}
        for reason in REASONS:
            count = comparison.counts[role, reason]
            rows.append([role, reason, f"{count:,}", f"{count / max(total, 1):.1%}"])
    title = f"{args.placer} against {args.imitated}: {args.workload} seed {args.seed}, {args.scheduler}"
    print_table(title, ["task", "decision", "count", "share"], rows)
    write_json(
        args.out,
        {
            "environment": environment(),
            "placer": args.placer,
            "imitated": args.imitated,
            "workload": args.workload,
            "seed": args.seed,
            "scheduler": args.scheduler,
            "decisions": report,
            "tasks_asked": placer.tasks_asked,
            "tasks_left": placer.tasks_left,
            "wall_s": time.perf_counter() - started,
        },
    )


if __name__ == "__main__":
    main()

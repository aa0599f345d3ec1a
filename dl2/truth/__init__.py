"""The truth of a simulated cluster: how its jobs really behave against the catalogue that policies read.

Only what stands for the cluster reads it: the cluster twin (`testbed.twin`), `dl2 simulate --truth` and the
benchmarks. Policies, heuristics, the controller and the lifecycle never import it (import-linter contracts in
pyproject.toml): they learn the truth, if at all, from the cluster's feedback.

    cluster = realise(truth_named("speed-shift"), workload)
    simulate(cluster.workload, scheduler, cluster.config(config), cluster.speed, cluster.interference)
"""

from dl2.truth.model import NewJobType, ScalingKnee, SlowNodes, SpeedShift, Truth
from dl2.truth.realise import TrueCluster, realise
from dl2.truth.scenarios import MIXED_SCENARIOS, SCENARIOS, draw, generate, truth_named

__all__ = [
    "MIXED_SCENARIOS",
    "SCENARIOS",
    "NewJobType",
    "ScalingKnee",
    "SlowNodes",
    "SpeedShift",
    "TrueCluster",
    "Truth",
    "draw",
    "generate",
    "realise",
    "truth_named",
]

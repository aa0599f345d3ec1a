"""The gate's evidence from the clusters (`pipelines.promote.cluster_evidence`): the challenger and the champion
paired in each collected cluster log's calibrated twin, for realistic-mode lifecycles only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dl2.core.log_format import CLUSTER_FILE, cluster_to_json
from dl2.placement.samples import record_run
from dl2.rl.in_twin import twin_jcts_h
from dl2.rl.learned import LearnedScheduler
from dl2.schedulers.registry import make_scheduler
from dl2.sim.calibrated import calibrated_world
from dl2.sim.config import SimConfig
from dl2.sim.decision_log import write_segment
from dl2.sim.run import catalogue_speed, interference_model
from dl2.workload.registry import load_workloads
from pipelines import params as params_module
from pipelines.collect import clusters_dir
from pipelines.params import Params
from pipelines.promote import cluster_evidence, gate_settings
from pipelines.promotion.gate import ClusterEvidence
from pipelines.stage import Layout
from testbed.twin.workloads import first_jobs, first_nodes

ROOT = Path(__file__).resolve().parents[3]
CHAMPION = ROOT / "models" / "dl2-philly"
REALISTIC = ["workloads.mode=realistic", "warmup.packed=false", "finetune.credit=returns", "online.twin.workloads=2"]


def _evidence(params: Params, layout: Layout, challenger: Path, champion: Path | None) -> ClusterEvidence | None:
    """What the gate finds, from its settings as the decision records them."""
    return cluster_evidence(gate_settings(params, layout), layout, challenger, champion)


def _cluster_log(layout: Layout, name: str) -> Path:
    """A collected log of the Philly week's first 10 jobs on 3 nodes under DRF, with its cluster.json."""
    workload = first_jobs(first_nodes(load_workloads("philly", seed=0)[0], 3), 10)
    records = record_run(workload, make_scheduler("drf", catalogue_speed(), False), SimConfig.realistic(seed=0),
                         catalogue_speed(), interference_model())  # fmt: skip
    log = clusters_dir(layout) / name
    write_segment(log, records, 0)
    (log / CLUSTER_FILE).write_text(json.dumps(cluster_to_json(workload.cluster)))
    return log


def test_the_champion_against_itself_is_not_faster_on_the_cluster(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    params = params_module.load(smoke=True, overrides=REALISTIC)
    assert _evidence(params, layout, CHAMPION, CHAMPION) is None  # no cluster log yet
    log = _cluster_log(layout, "dl2-local")
    assert _evidence(params, layout, CHAMPION, None) is None  # no champion: the incumbents decide

    evidence = _evidence(params, layout, CHAMPION, CHAMPION)
    assert evidence is not None and evidence.logs == ("dl2-local",) and evidence.workloads == 2
    assert (evidence.mean, evidence.low, evidence.high) == (0.0, 0.0, 0.0) and not evidence.faster
    world, _ = calibrated_world(log)
    hours = twin_jcts_h(log, world, LearnedScheduler.from_dir(CHAMPION, compat=False), params.online.twin)
    assert len(hours) == 2 and all(h > 0 for h in hours)

    # two logs: their twins' workloads are paired together
    shutil.copytree(log, clusters_dir(layout) / "other")
    evidence = _evidence(params, layout, CHAMPION, CHAMPION)
    assert evidence is not None and evidence.logs == ("dl2-local", "other") and evidence.workloads == 4


def test_only_a_realistic_lifecycle_learning_in_the_twin_consults_it(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    _cluster_log(layout, "dl2-local")
    compat = params_module.load(smoke=True)
    assert compat.workloads.mode == "compat" and _evidence(compat, layout, CHAMPION, CHAMPION) is None
    off = params_module.load(smoke=True, overrides=[*REALISTIC, "online.learn_in_twin=false"])
    assert _evidence(off, layout, CHAMPION, CHAMPION) is None
    assert gate_settings(off, layout)["cluster_logs"] == {} and gate_settings(off, layout)["cluster_twin"] is None


def test_the_decision_key_follows_the_cluster_logs(tmp_path: Path) -> None:
    """A log that grows is new evidence: the gate's settings (and so its decision key) change with it."""
    layout = Layout(tmp_path)
    params = params_module.load(smoke=True, overrides=REALISTIC)
    log = _cluster_log(layout, "dl2-local")
    before = gate_settings(params, layout)
    assert list(before["cluster_logs"]) == ["dl2-local"] and before["cluster_twin"] == {
        "workloads": 2,
        "max_workloads": 2,
        "seed": 1000,
    }
    segment = sorted(log.glob("segment-*.jsonl"))[-1]
    segment.write_text(segment.read_text() + segment.read_text().splitlines(keepends=True)[-1])
    assert gate_settings(params, layout)["cluster_logs"] != before["cluster_logs"]


def test_the_lifecycle_says_what_the_twin_gave() -> None:
    from pipelines.steps import twin_lines

    verdict = {"log": "/r/data/feedback/clusters/dl2-local", "teacher": "speedup-hull", "kept": False,
               "predicted_difference": {"mean": -0.032, "low": -0.081, "high": 0.017},
               "running_in_twin_h": [3.1, 2.9, 3.4, 3.0, 2.8, 3.3]}  # fmt: skip
    assert twin_lines([verdict]) == [
        "  online, in the twin calibrated from dl2-local: re-warmed on speedup-hull, -3.2% [-8.1%, +1.7%] average "
        "JCT against the running policy on 6 workloads (not kept: the interval is not below zero)"
    ]
    placed = {**verdict, "teacher": "optimus", "placer": "isolate-strict", "running_placer": "binpack", "kept": True,
              "predicted_difference": {"mean": -0.25, "low": -0.3, "high": -0.2}}  # fmt: skip
    assert twin_lines([placed]) == [
        "  online, in the twin calibrated from dl2-local: re-warmed on optimus placing with isolate-strict (the "
        "running policy: binpack), -25.0% [-30.0%, -20.0%] average JCT against the running policy on 6 workloads "
        "(kept)"
    ]
    assert twin_lines([{**placed, "placer": "binpack"}])[0].startswith(  # the same placement goes unsaid
        "  online, in the twin calibrated from dl2-local: re-warmed on optimus, -25.0%"
    )
    assert twin_lines({"skipped": "a compat-mode policy"}) == [
        "  online, in the calibrated twin: skipped (a compat-mode policy)"
    ]
    assert twin_lines(None) == []
    calibrated = {**verdict, "calibration": {
        "interference_scale": 1.9, "co_located_records": 120, "types_seen": 4, "types_kept": {
            "vgg-16/0.0/0.0/0.0/0.0": {"factors": [1.3, 0.8, 1.0, 1.0]},
            "vgg-16/1.0/4.0/24.0/4.0": {"factors": [1.2, 0.8, 1.0, 1.0]},  # finer: said through its label's
        },
    }}  # fmt: skip
    assert twin_lines([calibrated])[0] == (
        "  online, what the records of dl2-local show: interference x1.90 the profiled (120 co-located records); "
        "1 job types recalibrated: vgg-16 compute time x1.30, communication x0.80"
    )
    signature_only = {**verdict, "calibration": {**calibrated["calibration"], "types_kept": {
        "vgg-16/1.0/4.0/24.0/4.0": {"factors": [1.2, 0.8, 1.0, 1.0]},  # its label not kept: said by its demand
        "wlm/0.0/0.0/0.0/0.0": {"factors": [1.0, 1.5, 1.0, 1.0]},
    }}}  # fmt: skip
    assert twin_lines([signature_only])[0].endswith(
        "2 job types recalibrated: vgg-16 (1 GPU, 4 CPU, 24 GB, PS 4 GB) compute time x1.20, communication x0.80; "
        "wlm compute time x1.00, communication x1.50"
    )

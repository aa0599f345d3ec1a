"""Stage `feedback`: a simulated cluster that logs its decisions, so fine-tuning from logged feedback runs end to
end without a real cluster. Writes `data/feedback/simulated/<source>-<seed>/` (decision-log segments and the
cluster's `cluster.json`).

Each log is one workload of the training source (seeds in the `feedback` block) run by
`dl2.sim.decision_log.log_run`: the incumbent heuristic and the warm-up policy both decide every slot, and
`feedback.log_mode` says whose decision is applied (shadow: the incumbent's, as a cluster does before trusting a
policy). Every log passes the decision-log suite before the folder is put in place. Logs from a real cluster
(the Kubernetes controller writes the same records) go next to it under `data.feedback`.

    python -m pipelines.feedback [--smoke]
"""

from __future__ import annotations

from collections.abc import Sequence

from dl2.core.log_format import CLUSTER_FILE, cluster_to_json
from pipelines.code import code_version
from pipelines.params import Params
from pipelines.stage import Layout, StageFailed, StageResult, main_without_arguments, published_folder, write_json
from pipelines.workloads import require_within


def run(params: Params, layout: Layout | None = None) -> StageResult:
    from dl2.rl.learned import LearnedScheduler
    from dl2.rl.training import sim_config
    from dl2.schedulers.registry import make_scheduler
    from dl2.sim.config import Mode
    from dl2.sim.decision_log import log_run
    from dl2.sim.run import interference_model, speed_model
    from dl2.workload.source import workload
    from pipelines.validate import failure_text, validate_log

    layout = layout or Layout()
    f = params.feedback
    seeds = range(f.seed_offset, f.seed_offset + f.episodes)
    require_within(layout, params, "feedback", seeds)
    model = layout.model("warmup")
    output = layout.simulated_feedback
    outputs = (layout.relative(output),)
    version = code_version("pipelines.feedback")
    mode = Mode(params.workloads.mode)
    speed, compat = speed_model(mode), mode is Mode.COMPAT
    logs = {}
    with published_folder(output, ".simulated.") as staging:
        for seed in seeds:
            jobs = workload(params.workloads.train_source, seed)
            name = f"{params.workloads.train_source}-{seed}"
            incumbent = make_scheduler(f.incumbent, speed, compat)
            proposer = LearnedScheduler.from_dir(model, compat=compat)
            directory = staging / name
            records, avg_jct = log_run(
                jobs, incumbent, proposer, f.log_mode, sim_config(mode.value, seed), speed,
                interference_model(), directory, model_version="staging/warmup",
            )  # fmt: skip
            write_json(directory / CLUSTER_FILE, cluster_to_json(jobs.cluster))
            report = validate_log(directory, params, layout)
            if not report["success"]:
                raise StageFailed(failure_text(report, layout.relative(directory)))
            logs[name] = {"records": records, "avg_jct_s": avg_jct, "seed": seed}
        write_json(staging / "MANIFEST.json", {"code_version": version, "log_mode": f.log_mode, "logs": logs})
    return StageResult("feedback", outputs, version, summary={"logs": len(logs)})


def cli(argv: Sequence[str] | None = None) -> int:
    return main_without_arguments("feedback", "Simulate a cluster that logs its decisions (shadow mode).", run, argv)


if __name__ == "__main__":
    raise SystemExit(cli())

"""The closed loop on a local Kubernetes cluster: the champion runs in the cluster, its decision records become
training feedback, the fine-tuned challenger goes through the gate, and the controller runs what the gate leaves.

1. shadow: a Philly slice on a local cluster (a real control plane on loopback, `testbed.controlplane`, with the
   cluster twin running the jobs in realistic mode, `testbed.twin`) with `dl2 serve` (a separate process, as its
   ServiceAccount under the shipped RBAC) running the champion in shadow mode: every decision recorded under
   `data.incoming`, no job resized (jobs keep the sizes they asked for).
2. learn: `pipelines.collect` turns the records into versioned feedback, `dvc repro` reruns what they made stale
   (the `online` stage learns from them, `evaluate` re-evaluates), the result is registered as challenger, and
   the gate decides; its confirmation is the SchedulerPolicy handshake with the controller (`dl2.kube.promotion`), as
   the promotion gate's ServiceAccount.
3. active: the same slice again, the controller running the champion in active mode; the JCTs obtained through
   the API next to `dl2 simulate`'s for the same workload and policy, the incumbent's, and the shadow run's.

The outcome is kept in `reports/cluster_loop.json` and each version's figures on its logged model in MLflow (the
champion before the loop and the version active after it, side by side in the registry); a run whose champion
already ran in active mode on the same slice shows it again and changes nothing.

    python -m pipelines.cluster_loop [--json]     # the slice: params.yaml `cluster`
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from dl2.core import DecisionRecord, Workload
from dl2.io import print_json, to_json, write_json_atomic
from pipelines.params import ClusterParams, Params
from pipelines.stage import Layout, StageFailed, read_json_object

CLUSTER_NAME = "dl2-local"
SLOT_TIMEOUT_S = 120.0
HANDSHAKE_TIMEOUT_S = 120.0
"""How long the operator's step from shadow to active waits for the controller (the gate's own confirmation has
`pipelines.promotion.confirmation.CONFIRM_TIMEOUT_S`)."""
REPORT = "cluster_loop.json"


def load_slice(cluster: ClusterParams) -> Workload:
    """The first `cluster.jobs` jobs of the workload on its first `cluster.nodes` nodes."""
    from dl2.workload.registry import load_workloads
    from testbed.twin.workloads import first_jobs, first_nodes

    workload = load_workloads(cluster.workload, seed=cluster.seed)[0]
    return first_jobs(first_nodes(workload, cluster.nodes), cluster.jobs)


@dataclass(frozen=True, slots=True)
class Run:
    """One pass of the slice through the API."""

    mode: str
    version: int
    avg_jct_h: float
    p99_jct_h: float
    slots: int
    records: int
    resizes: int
    wall_s: float

    def to_json_dict(self) -> dict[str, Any]:
        return to_json(self)  # type: ignore[no-any-return]


class LocalCluster:
    """A cluster twin on a real control plane, and `dl2 serve` as a separate process deciding its slots."""

    def __init__(
        self, workload: Workload, placer: str, folder: Path, decisions: Path, mlflow_uri: str, seed: int, truth: str
    ) -> None:
        from dl2.sim.config import SimConfig
        from testbed.twin import truth_of
        from testbed.twin.local import LocalCluster as Local

        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        config = SimConfig.realistic(seed=seed)
        self.local = Local(folder / "cluster", workload, config, placer, truth=truth_of(truth)).start()
        assert self.local.twin is not None
        self.twin = self.local.twin
        self.decisions = decisions
        self.command = [
            sys.executable, "-m", "dl2.cli.main", "serve", "--kubeconfig", str(self.local.serve_kubeconfig),
            "--clock", "cluster", "--decision-log", str(decisions), "--cluster-name", CLUSTER_NAME, "--mlflow-uri",
            mlflow_uri, "--model-cache", str(folder / "model-cache"), "--placer", placer, "--metrics-port", "0",
            "--metrics-host", "127.0.0.1", "--no-leader-election", "--log-level", "WARNING",
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None

    def create_policy(self, mode: str, version: int | None, incumbent: str) -> None:
        self.local.create_policy(mode, version, incumbent)

    def start_controller(self) -> None:
        log = (self.folder / "serve.log").open("wb")
        self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT)

    def api(self) -> Any:
        """The promotion gate's client (its ServiceAccount: get and patch of the one policy)."""
        return self.local.promoter_api()

    def run_to_end(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Advance slot by slot as the controller reports each done, then wait for the final slot's records."""
        from testbed.twin.lockstep import clock_slot, controller_done, run_lockstep

        slots = 0
        rest = self.twin.rest
        while not self.twin.done:
            slots += run_lockstep(self.twin, SLOT_TIMEOUT_S, max_slots=1, waiting=self._alive)
            if progress is not None:
                progress(self.twin.status()["finished"], len(self.twin.jobs))
        started = time.monotonic()
        while not controller_done(rest) and time.monotonic() - started < SLOT_TIMEOUT_S:
            self._alive(clock_slot(rest))
            time.sleep(0.02)
        return slots

    def _alive(self, slot: int) -> None:
        if self.process is not None and self.process.poll() is not None:
            tail = (self.folder / "serve.log").read_text(errors="replace").strip().splitlines()[-5:]
            raise StageFailed(
                f"cluster loop: dl2 serve exited with {self.process.returncode} at slot {slot}: " + " | ".join(tail)
            )

    def resizes(self) -> int:
        """Resize requests the controller sent (PyTorchJob scale and Volcano job patches), from the audit log."""
        return self.local.resizes()

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.local.stop()


@contextmanager
def local_cluster(
    workload: Workload, placer: str, folder: Path, decisions: Path, mlflow_uri: str, seed: int, truth: str = ""
) -> Iterator[LocalCluster]:
    cluster = LocalCluster(workload, placer, folder, decisions, mlflow_uri, seed, truth)
    try:
        yield cluster
    finally:
        cluster.close()


def pass_through(cluster: LocalCluster, mode: str, version: int, started: float, say: Callable[[str], None]) -> Run:
    from dl2.sim.metrics import summarize

    def progress(finished: int, total: int) -> None:
        if finished and (finished == total or finished % 10 == 0):
            say(f"    {finished}/{total} jobs finished")

    slots = cluster.run_to_end(progress)
    summary = summarize(cluster.twin.result(f"dl2-policy v{version} ({mode})"))
    log = cluster.decisions / CLUSTER_NAME
    records = len(_records(log)) if log.exists() else 0
    return Run(
        mode, version, summary.avg_jct_s / 3600, summary.p99_jct_s / 3600, slots, records, cluster.resizes(),
        time.perf_counter() - started,
    )  # fmt: skip


def _records(log: Path) -> list[DecisionRecord]:
    from dl2.core.log_format import read_log

    return read_log(log)


def decision_lines(records: Sequence[DecisionRecord], incumbent: str, limit: int = 8) -> list[str]:
    """The first records where the policy would decide differently from the incumbent (else the first ones)."""
    differing = [r for r in records if (r.proposed_workers, r.proposed_ps) != (r.incumbent_workers, r.incumbent_ps)]
    shown = (differing or list(records))[:limit]
    header = f"{'slot':>5}  {'job':<14} {'held':>7} {incumbent + ' (w,ps)':>12} {'policy (w,ps)':>14} {'applied':>8}"
    lines = [f"    {header}"]
    for r in shown:
        lines.append(
            f"    {round(r.time_s / r.slot_s):>5}  {r.job_id[:14]:<14} {f'{r.held_workers},{r.held_ps}':>7}"
            f" {f'{r.incumbent_workers},{r.incumbent_ps}':>12} {f'{r.proposed_workers},{r.proposed_ps}':>14}"
            f" {f'{r.applied_workers},{r.applied_ps}':>8}"
        )
    lines.append(f"    ({len(differing)} of {len(records)} records where the policy differs from {incumbent})")
    return lines


def simulated(workload: Workload, model_dir: Path, placer: str, cluster: ClusterParams) -> dict[str, float]:
    """`dl2 simulate` of the same slice under the cluster's truth: the policy (as the controller runs it), the
    incumbent, and the jobs at their asked sizes (what the shadow pass runs)."""
    from dl2.rl.lookahead import load_policy
    from dl2.schedulers.registry import make_scheduler

    builders = {
        "policy": lambda speed, compat: load_policy(model_dir, compat=False),
        "incumbent": lambda speed, compat: make_scheduler(cluster.incumbent, speed, False, placer),
    }
    return {name: slice_h(workload, build, cluster) for name, build in builders.items()} | {
        "asked-sizes": asked_sizes_h(workload, placer, cluster)
    }


def asked_sizes_h(workload: Workload, placer: str, cluster: ClusterParams) -> float:
    """`dl2 simulate` of the slice under the cluster's truth with the jobs at their asked sizes, placed by `placer`."""
    from dl2.schedulers.registry import make_scheduler

    return slice_h(workload, lambda speed, compat: make_scheduler("asked-sizes", speed, False, placer), cluster)


def slice_h(workload: Workload, build: Any, cluster: ClusterParams) -> float:
    """Average JCT (h) of `build`'s scheduler on the slice under the cluster's truth (`dl2 simulate`)."""
    from dl2.sim.config import SimConfig
    from dl2.sim.metrics import summarize
    from testbed.twin import simulated as simulate_slice
    from testbed.twin import truth_of

    result = simulate_slice(workload, build, SimConfig.realistic(seed=cluster.seed), truth_of(cluster.truth))
    return summarize(result).avg_jct_s / 3600


def champion_version() -> int | None:
    from pipelines import registry

    champion = registry.alias(registry.CHAMPION)
    return champion.version if champion is not None else None


def model_placer(version: int, folder: Path) -> tuple[Path, str]:
    """The version's model folder (downloaded) and the placement its config names (the cluster places alike)."""
    from dl2.rl.model_io import load_config
    from pipelines import registry

    model_dir = registry.download(version, folder / f"v{version}")
    config, _ = load_config(model_dir)
    return model_dir, config.placer


def result_lines(report: dict[str, Any]) -> list[str]:
    shadow, active, sim = report["shadow"], report["active"], report["simulate"]
    width = 44
    lines = [
        f"  {'run of ' + report['slice']['workload'] + ' slice':<{width}} {'avg JCT (h)':>12} {'p99 (h)':>9}"
        f" {'slots':>6} {'records':>8} {'resizes':>8}",
        f"  {'shadow: jobs at their asked sizes, v' + str(shadow['version']) + ' recording':<{width}}"
        f" {shadow['avg_jct_h']:>12.2f} {shadow['p99_jct_h']:>9.2f} {shadow['slots']:>6} {shadow['records']:>8}"
        f" {shadow['resizes']:>8}",
        f"  {'active: v' + str(active['version']) + ' through the API':<{width}} {active['avg_jct_h']:>12.2f}"
        f" {active['p99_jct_h']:>9.2f} {active['slots']:>6} {active['records']:>8} {active['resizes']:>8}",
        f"  {'simulator (dl2 simulate), v' + str(active['version']):<{width}} {sim['policy']:>12.2f}",
        f"  {'simulator, ' + report['slice']['incumbent'] + ' (the incumbent)':<{width}} {sim['incumbent']:>12.2f}",
    ]
    if "asked-sizes" in sim:  # a report of an earlier version may lack it
        lines.append(f"  {'simulator, jobs at their asked sizes':<{width}} {sim['asked-sizes']:>12.2f}")
    placement = report.get("placement") or {}
    if "asked-sizes, placed as the active version" in sim:
        label = f"simulator, asked sizes, {placement.get('active')}"
        lines.append(f"  {label:<{width}} {sim['asked-sizes, placed as the active version']:>12.2f}")
    before = report.get("simulate_before")
    if before and before["version"] != active["version"]:
        label = f"simulator, v{before['version']} (the champion before the loop)"
        lines.append(f"  {label:<{width}} {before['policy']:>12.2f}")
    return lines


def cluster_figures(report: dict[str, Any]) -> dict[int, dict[str, float]]:
    """Per registered version, the slice's figures it earned (average JCT, h): the champion before the loop its
    shadow pass and its simulated run under the cluster's truth, the version active after the loop (the same one
    when nothing was promoted) its pass through the API and its simulated run; beside both, the jobs at their
    asked sizes, which dl2 must beat."""
    shadow, active, sim = report["shadow"], report["active"], report["simulate"]
    before = report.get("simulate_before") or {"version": shadow["version"], "policy": sim["policy"]}
    asked = {"cluster.asked_sizes_avg_jct_h": sim["asked-sizes"]} if "asked-sizes" in sim else {}
    figures = {
        shadow["version"]: {
            "cluster.shadow_avg_jct_h": shadow["avg_jct_h"],
            "cluster.simulated_avg_jct_h": before["policy"],
            **asked,
        }
    }
    figures.setdefault(active["version"], dict(asked))
    figures[active["version"]] |= {
        "cluster.active_avg_jct_h": active["avg_jct_h"],
        "cluster.active_p99_jct_h": active["p99_jct_h"],
        "cluster.simulated_avg_jct_h": sim["policy"],
    }
    return figures


def log_cluster_figures(report: dict[str, Any], layout: Layout) -> None:
    """The loop as an MLflow run of its own, and each version's figures on its logged model, so that the registry
    shows the champion before and after the loop side by side with their test and gate figures."""
    import mlflow

    from pipelines import registry, tracking

    with tracking.stage_run("cluster_loop", params=report["slice"], root=layout.root):
        for version, figures in cluster_figures(report).items():
            mlflow.log_metrics({f"v{version}.{name}": value for name, value in figures.items()})
            model_id = registry.logged_model_id(version)
            if model_id:
                mlflow.log_metrics(figures, model_id=model_id)


@dataclass(frozen=True, slots=True)
class Passes:
    """The two passes of the loop over one slice, each on a fresh local cluster."""

    workload: Workload
    placer: str
    """The placement the cluster uses: the champion's (the controller and `dl2 simulate` place alike)."""
    folder: Path
    decisions: Path
    mlflow_uri: str
    cluster: ClusterParams
    say: Callable[[str], None]

    def shadow(self, champion: int) -> Run:
        """The champion in shadow mode: every decision recorded, no job resized."""
        self.say(f"  a. shadow: dl2 serve runs the champion v{champion}, records every decision, resizes nothing")
        started = time.perf_counter()
        with self._cluster("shadow") as cluster:
            cluster.create_policy("shadow", champion, self.cluster.incumbent)
            cluster.start_controller()
            return pass_through(cluster, "shadow", champion, started, self.say)

    def learn_then_active(
        self, champion: int, learn: Learn, reports: Path, placer_of: Callable[[int], str]
    ) -> tuple[str, Run]:
        """With the controller up (mode off), `learn` with the handshake as the gate's confirmation; then the
        champion (the promoted challenger, else the one before) in active mode over the slice. A promoted version
        that places otherwise (`placer_of(version)`: the learning in the twin chose its placement) runs its pass on
        a fresh cluster that places as it does: placement is the cluster's scheduler configuration, set at start."""
        from dl2.kube.promotion import confirm_hook, promote_policy

        started = time.perf_counter()
        with self._cluster("active") as cluster:
            cluster.create_policy("off", champion, self.cluster.incumbent)
            cluster.start_controller()
            api = cluster.api()
            before = read_json_object(reports / "promotion.json")
            outcome = learn(confirm_hook(api, mode="active"))  # the gate prints its own outcome
            after = read_json_object(reports / "promotion.json")
            # only a decision this gate took has the controller's answer (an earlier one is not this cluster's)
            confirmation = ((after or {}).get("confirmation") or {}) if after != before else {}
            if confirmation.get("detail"):
                self.say(f"    the controller's answer: {confirmation['detail']}")
            version = champion_version() or champion
            if version == champion:  # nothing promoted: the operator's step from shadow to active
                handshake = promote_policy(api, champion, "active", timeout_s=HANDSHAKE_TIMEOUT_S)
                if not handshake.confirmed:
                    raise StageFailed(f"cluster loop: the controller did not run v{champion}: {handshake.detail}")
                self.say(f"    {handshake.detail}")
            placer = placer_of(version)
            if placer == self.placer:
                self.say(f"  c. active: the controller runs the champion v{version} and resizes jobs")
                return outcome, pass_through(cluster, "active", version, started, self.say)
        placed = replace(self, placer=placer)
        self.say(f"  c. active: v{version} places with {placer} (v{champion}: {self.placer}), so a cluster that places")
        self.say(f"     alike runs it; the controller runs the champion v{version} and resizes jobs")
        with placed._cluster("active-placed") as cluster:
            cluster.create_policy("active", version, self.cluster.incumbent)
            cluster.start_controller()
            return outcome, pass_through(cluster, "active", version, started, self.say)

    @contextmanager
    def _cluster(self, name: str) -> Iterator[LocalCluster]:
        with local_cluster(
            self.workload, self.placer, self.folder / name, self.decisions, self.mlflow_uri, self.cluster.seed,
            self.cluster.truth,
        ) as cluster:  # fmt: skip
            yield cluster


Learn = Callable[[Callable[[int, Any, float], tuple[bool, str]]], str]
"""(the gate's confirmation) -> the gate's outcome line: collect, dvc repro, register, gate."""


def up_to_date(
    params: Params, layout: Layout, champion: int | None, say: Callable[[str], None]
) -> dict[str, Any] | None:
    """The report to show instead of running: the loop is off, there is no champion, or the champion already ran
    this slice in active mode (None: run the loop)."""
    if not params.cluster.enabled:
        say("  skipped (cluster.enabled is false)")
        return {}
    if champion is None:
        say("  no champion: nothing to run in the cluster")
        return {}
    previous = read_json_object(layout.reports / REPORT)
    if previous and previous.get("slice") == to_json(params.cluster) and previous["active"]["version"] == champion:
        where = layout.relative(layout.reports / REPORT)
        say(f"  up to date: v{champion} already ran in active mode on this slice ({where})")
        for line in result_lines(previous):
            say(line)
        return previous
    return None


def run(params: Params, layout: Layout, learn: Learn, say: Callable[[str], None] = print) -> dict[str, Any]:
    """The loop: shadow pass, `learn(confirmation)`, active pass. Returns the report (also written to
    reports/cluster_loop.json)."""
    from pipelines.tracking import configure

    champion = champion_version()
    shown = up_to_date(params, layout, champion, say)
    if shown is not None or champion is None:
        return shown or {}
    workload, decisions = load_slice(params.cluster), layout.root / params.data.incoming
    nodes = len(workload.cluster.nodes)
    behaves = f"its jobs as the truth {params.cluster.truth} says" if params.cluster.truth else "as the catalogue"
    say(f"  {params.cluster.workload} slice: {len(workload.jobs)} jobs on {nodes} nodes (realistic mode, {behaves})")
    with tempfile.TemporaryDirectory(prefix="dl2-loop-", dir=layout.root / "work") as scratch:
        folder = Path(scratch)
        located = cache(lambda version: model_placer(version, folder))  # each version downloaded once
        model_dir, placer = located(champion)
        passes = Passes(workload, placer, folder, decisions, configure(), params.cluster, say)
        shadow = passes.shadow(champion)
        say(f"    {shadow.records} decision records in {layout.relative(decisions / CLUSTER_NAME)}; some decisions:")
        for line in decision_lines(_records(decisions / CLUSTER_NAME), params.cluster.incumbent):
            say(line)
        say("  b. learn: collect the records, dvc repro (the online stage learns from them), register, gate")
        outcome, active = passes.learn_then_active(champion, learn, layout.reports, lambda version: located(version)[1])
        before = simulated(workload, model_dir, placer, params.cluster)
        active_placer = placer
        if active.version != champion:
            model_dir, active_placer = located(active.version)
        reference = simulated(workload, model_dir, placer, params.cluster) if active.version != champion else before
        if active_placer != placer:  # how much of the change is the placement alone: dl2 off, placed anew
            reference["asked-sizes, placed as the active version"] = asked_sizes_h(
                workload, active_placer, params.cluster
            )
    report = {
        "slice": to_json(params.cluster),
        "shadow": shadow.to_json_dict(),
        "gate": outcome,
        "active": active.to_json_dict(),
        "simulate": reference,
        "simulate_before": {"version": champion, "policy": before["policy"]},
        "placement": {"before": placer, "active": active_placer},
        "records": layout.relative(decisions / CLUSTER_NAME),
    }
    write_json_atomic(layout.reports / REPORT, report)
    log_cluster_figures(report, layout)
    for line in result_lines(report):
        say(line)
    return report


def exit_on_sigterm() -> None:
    """SIGTERM (a timeout, `kill`, Airflow) exits through `finally` blocks, so the controller process and the API
    server this run started are stopped with it."""
    import signal

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.cluster_loop", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    from pipelines import params as params_module
    from pipelines.steps import learn_from_cluster

    params, layout = params_module.load(), Layout()
    try:
        learn = learn_from_cluster(params, layout)
        report = run(params, layout, learn)
    except StageFailed as failure:
        print(str(failure), file=sys.stderr)
        return 1
    if args.json:
        print_json(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())

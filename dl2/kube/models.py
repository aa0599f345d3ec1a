"""The policy the controller runs: a pinned model version loaded, smoke-tested and swapped in, with the incumbent
heuristic as the fallback (DL2 §7: when the model errs or its input is out of range, the cluster's existing
scheduler decides).

A loader maps (registered model name, version) to a `Scheduler`. `mlflow_loader` downloads the version's dl2
model folder from the MLflow registry (`artifacts/policy` under the version's artefacts, as the pipelines
register it) into a cache and opens it with `LearnedScheduler`; `directory_loader` reads `<root>/<name>/<version>`
for clusters without a registry and for tests. A new model is loaded into a new object and smoke-tested on a
fixed small cluster before it replaces the running one; if anything fails, the last good model keeps serving.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from dl2.core import (
    Allocation,
    Architecture,
    Attribution,
    ClusterSpec,
    ClusterView,
    JobAllocation,
    JobSpec,
    JobView,
    Resources,
    Scheduler,
    decision_attribution,
)
from dl2.resolve import trained_scheduler
from dl2.schedulers.registry import make_scheduler
from dl2.sim.config import Mode
from dl2.sim.run import speed_model
from dl2.workload.catalogue import CATALOGUE

Loader = Callable[[str, str], Scheduler]
"""(registered model name, version) -> a scheduler; raises on any failure."""

ARTIFACT = "policy"
"""Where a registered version keeps its dl2 model folder, under the version's artefacts (`pipelines.pyfunc`)."""
SMOKE_BUDGET_S = 5.0
"""Longest a smoke-test decision may take (three jobs on two nodes; a sound model needs milliseconds), after one
untimed decision that compiles what a policy compiles on first use (numba's kernels, where no cache is
writable: seconds)."""


def directory_loader(root: Path) -> Loader:
    """Versions as folders: `<root>/<name>/<version>` holds a dl2 model folder."""

    def load(name: str, version: str) -> Scheduler:
        folder = root / name / version
        if not folder.is_dir():
            raise FileNotFoundError(f"no model folder {folder}")
        return trained_scheduler(folder)

    return load


MLFLOW_REQUESTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
"""How the controller's registry requests go unless the environment says otherwise: one try of at most 10 s. A load
runs in the slot loop, and `PolicyRuntime` tries a failed version again every 30 s; MLflow's own default (7 retries
with growing backoff, 120 s each) kept a controller whose registry did not resolve from reporting anything for
over four minutes."""


def mlflow_loader(cache_dir: Path, tracking_uri: str | None = None) -> Loader:
    """Versions from the MLflow registry (`MLFLOW_TRACKING_URI` unless `tracking_uri` is given), downloaded once
    into `cache_dir/<name>/<version>`; its requests as `MLFLOW_REQUESTS` says, unless set in the environment."""
    for variable, value in MLFLOW_REQUESTS.items():
        os.environ.setdefault(variable, value)

    def load(name: str, version: str) -> Scheduler:
        folder = cache_dir / name / version
        if not folder.is_dir():
            download_version(name, version, folder, tracking_uri)
        return trained_scheduler(folder)

    return load


def download_version(name: str, version: str, destination: Path, tracking_uri: str | None = None) -> Path:
    """A registered version's dl2 model folder, downloaded next to `destination` and renamed into place."""
    import mlflow
    from mlflow import MlflowClient

    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise ValueError("no MLflow tracking URI: set MLFLOW_TRACKING_URI or --mlflow-uri")
    registry = MlflowClient(tracking_uri=uri, registry_uri=uri)
    root = registry.get_model_version_download_uri(name, version).rstrip("/")
    destination.parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    with tempfile.TemporaryDirectory(dir=destination.parent, prefix=f".{destination.name}.") as staging:
        fetched = mlflow.artifacts.download_artifacts(artifact_uri=f"{root}/artifacts/{ARTIFACT}", dst_path=staging)
        if destination.exists():
            shutil.rmtree(destination)
        Path(fetched).rename(destination)
    return destination


@dataclass(frozen=True, slots=True)
class LoadedModel:
    name: str
    version: str
    scheduler: Scheduler
    loaded_at: str
    """UTC time of the swap (RFC 3339)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A slot's proposal and the incumbent's allocation, and which one proposed."""

    proposal: Allocation
    incumbent: Allocation
    proposer: str
    """`<model>/<version>`, or `incumbent/<heuristic>` when the incumbent stood in."""
    fallback: str | None
    """Why the incumbent stood in (None: the model decided)."""
    attribution: Attribution | None = None
    """Where the model runs inside a search: which of its candidates proposed the slot's allocation
    (`decision_attribution`); the decision records carry it."""


def smoke_view() -> ClusterView:
    """A fixed small cluster: two 8-GPU nodes, a parameter-server job and an all-reduce job, one running."""
    node = Resources(gpu=8.0, cpu=64.0, mem_gb=256.0)
    cluster = ClusterSpec.homogeneous(2, node, kind="smoke", name="smoke")
    model = next(iter(CATALOGUE))
    worker, ps = Resources(gpu=1.0, cpu=4.0, mem_gb=16.0), Resources(cpu=4.0, mem_gb=16.0)
    ps_job = JobSpec("smoke-ps", model, 0.0, 10.0, CATALOGUE[model].samples_per_epoch, worker, ps, 8, 4)
    allreduce = JobSpec(
        "smoke-ar", model, 600.0, 20.0, CATALOGUE[model].samples_per_epoch, worker, Resources(), 8, 0,
        Architecture.ALLREDUCE, 2, 0,
    )  # fmt: skip
    running = JobAllocation((0, 0), (0,))
    jobs = (JobView(ps_job, 2.0, 0.0, running, 0.0, 600.0, 0), JobView(allreduce, 0.0, 0.0, JobAllocation(), 0, 0, 0))
    return ClusterView(1200.0, 2, 600.0, cluster, jobs, Allocation({"smoke-ps": running}))


def check_allocation(view: ClusterView, allocation: Allocation) -> str | None:
    """None if the allocation is one the cluster could apply: known jobs, within their limits, on real nodes."""
    known = {job.spec.job_id: job.spec for job in view.jobs}
    for job_id, placed in allocation.jobs.items():
        spec = known.get(job_id)
        if spec is None:
            return f"allocation for unknown job {job_id!r}"
        if placed.num_workers > spec.max_workers or placed.num_ps > spec.max_ps:
            return f"job {job_id}: {placed.num_workers} workers / {placed.num_ps} PS exceed its limits"
        if any(not 0 <= n < view.cluster.num_nodes for n in (*placed.worker_nodes, *placed.ps_nodes)):
            return f"job {job_id}: placed on a node the cluster does not have"
    return None


def input_problem(view: ClusterView) -> str | None:
    """Why a view as a whole is outside what a policy can be trusted with (DL2 §7), or None. A job's own inputs
    out of range quarantine that job alone (`dl2.kube.quarantine`), before the view is made."""
    if not (math.isfinite(view.time_s) and view.slot_s > 0):
        return f"bad clock (time {view.time_s}, slot {view.slot_s} s)"
    return None


class PolicyRuntime:
    """The loaded model and the incumbent, and the decision of each slot with the fallback rules."""

    def __init__(self, loader: Loader, placer: str = "load-balance", retry_s: float = 30.0) -> None:
        self.loader = loader
        self.placer = placer
        self.retry_s = retry_s
        self.current: LoadedModel | None = None
        self.load_error: str | None = None
        """Why the last load of the wanted version failed (None: it did not)."""
        self.attempts = 0
        """Loads tried (a version that failed is not tried again within `retry_s`)."""
        self._failed: dict[tuple[str, str], float] = {}
        self._incumbents: dict[str, Scheduler] = {}

    def ensure(self, name: str, version: str) -> bool:
        """Make `name/version` the running model if it is not; False if it could not be loaded (the previous
        model, if any, keeps running). A failed version is retried after `retry_s`."""
        current = self.current
        if current is not None and (current.name, current.version) == (name, version):
            self.load_error = None
            return True
        failed_at = self._failed.get((name, version))
        if failed_at is not None and time.monotonic() - failed_at < self.retry_s:
            return False
        self.attempts += 1
        try:
            candidate = self.loader(name, version)
            problem = smoke_test(candidate)
        except Exception as error:  # any failure of a model is a failed load, never a crash of the controller
            problem = f"{type(error).__name__}: {error}"
        if problem is not None:
            self.load_error = f"{name} v{version}: {problem}"
            self._failed[(name, version)] = time.monotonic()
            return False
        self.current = LoadedModel(name, version, candidate, datetime.now(UTC).isoformat(timespec="seconds"))
        self.load_error = None
        self._failed.pop((name, version), None)
        return True

    def incumbent(self, name: str) -> Scheduler:
        scheduler = self._incumbents.get(name)
        if scheduler is None:
            scheduler = make_scheduler(name, speed_model(Mode.REALISTIC), False, self.placer)
            scheduler.reset()
            self._incumbents[name] = scheduler
        return scheduler

    def decide(self, view: ClusterView, incumbent_name: str) -> Decision:
        """The running model's proposal (the last good one, if the wanted version failed to load), or the
        incumbent's with the reason when the model cannot be used."""
        usual = self.incumbent(incumbent_name).schedule(view)
        stand_in = f"incumbent/{incumbent_name}"
        model = self.current
        if model is None:
            return Decision(usual, usual, stand_in, "no-model")
        problem = input_problem(view)
        if problem is not None:
            return Decision(usual, usual, stand_in, f"input-out-of-range: {problem}")
        try:
            proposal = model.scheduler.schedule(view)
        except Exception as error:  # DL2 §7: a model that errs is replaced by the incumbent for the slot
            return Decision(usual, usual, stand_in, f"model-error: {type(error).__name__}: {error}")
        problem = check_allocation(view, proposal)
        if problem is not None:
            return Decision(usual, usual, stand_in, f"invalid-output: {problem}")
        return Decision(proposal, usual, f"{model.name}/{model.version}", None, decision_attribution(model.scheduler))


def smoke_test(scheduler: Scheduler) -> str | None:
    """None if the scheduler decides a fixed small cluster soundly and quickly, else what went wrong."""
    view = smoke_view()
    scheduler.reset()
    scheduler.schedule(view)  # the warm-up: compilation is not a decision's latency
    scheduler.reset()
    started = time.perf_counter()
    allocation = scheduler.schedule(view)
    elapsed = time.perf_counter() - started
    scheduler.reset()
    if not isinstance(allocation, Allocation):
        return f"returned {type(allocation).__name__}, not an Allocation"
    problem = check_allocation(view, allocation)
    if problem is not None:
        return f"smoke test: {problem}"
    if elapsed > SMOKE_BUDGET_S:
        return f"smoke test: one decision took {elapsed:.1f} s (budget {SMOKE_BUDGET_S:g} s)"
    return None

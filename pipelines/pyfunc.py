"""`dl2-policy` as an MLflow pyfunc: a cluster state in, an allocation out.

Input: a DataFrame with one row per active job (its spec, progress and held tasks, as in a decision record) and,
repeated on every row, the slot (`time_s`, `slot_s`) and the cluster (`num_nodes` identical nodes of `node_gpu`,
`node_cpu`, `node_mem_gb`). Optional `held_worker_nodes` / `held_ps_nodes` ("0,0,3") give where the held tasks
run, so a sticky placer can keep them there; without them the held counts are kept on node 0, as
`dl2.rl.feedback` does for logged records. Output: one row per input job (same order): `job_id`, `workers`, `ps`,
`worker_nodes`, `ps_nodes` (node indices as "0,0,3"; "" for none).

The model is logged from code (this file is its code; MLflow's models-from-code, so a version holds no pickle, as
a model folder holds no code) with the dl2 model folder as an artefact, loaded by `dl2.rl.lookahead.load_policy`.
The dl2 package travels with it (`code_paths`): a policy's weights mean something only with the observation
encoder and decision procedure they were trained with, so a version keeps the code it was evaluated with and loads
where this repository is not installed (in a process that has already imported `dl2`, that copy is used).
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlflow.models
import mlflow.pyfunc
import pandas as pd
from mlflow.pyfunc.model import PythonModel

from dl2.core import JOB_STATE_FIELDS, DecisionRecord

if TYPE_CHECKING:
    from mlflow.models import ModelSignature
    from mlflow.models.model import ModelInfo

    from dl2.core import Allocation, ClusterView, Workload

ARTIFACT = "policy"
"""Key (and folder name) of the dl2 model folder among the MLflow model's artefacts."""

MLFLOW_TYPES = {"text": "string", "integer": "long", "real": "double"}
JOB_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (name, MLFLOW_TYPES[DecisionRecord.field_kinds()[name]]) for name in JOB_STATE_FIELDS
)
"""One row per job: the state fields of a decision record (`dl2.core.JOB_STATE_FIELDS`), in their kinds."""
SLOT_COLUMNS: tuple[tuple[str, str], ...] = (("time_s", "double"), ("slot_s", "double"))
CLUSTER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("num_nodes", "long"),
    ("node_gpu", "double"),
    ("node_cpu", "double"),
    ("node_mem_gb", "double"),
)
OPTIONAL_COLUMNS: tuple[tuple[str, str], ...] = (("held_worker_nodes", "string"), ("held_ps_nodes", "string"))
OUTPUT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("job_id", "string"),
    ("workers", "long"),
    ("ps", "long"),
    ("worker_nodes", "string"),
    ("ps_nodes", "string"),
)
REQUIRED_COLUMNS = JOB_COLUMNS + SLOT_COLUMNS + CLUSTER_COLUMNS
_SHARED = tuple(name for name, _ in SLOT_COLUMNS + CLUSTER_COLUMNS)


# -- cluster state <-> DataFrame ----------------------------------------------------------------------------------


def view_from_frame(frame: pd.DataFrame, where: str = "input") -> ClusterView:
    """The scheduler's view of one slot (jobs in arrival order; ties keep the row order)."""
    from dl2.core import EMPTY_JOB_ALLOCATION, Allocation, ClusterSpec, ClusterView, InputError, JobView, Resources
    from dl2.workload.catalogue import CATALOGUE

    missing = [name for name, _ in REQUIRED_COLUMNS if name not in frame.columns]
    if missing:
        raise InputError(where, f"missing columns: {', '.join(missing)}")
    if frame.empty:
        raise InputError(where, "no jobs (an empty cluster needs no decision)")
    for name in _SHARED:
        if frame[name].nunique(dropna=False) != 1:
            raise InputError(where, "must be the same on every row (one slot of one cluster)", field=name)
    first = frame.iloc[0]
    num_nodes, slot_s = int(first["num_nodes"]), float(first["slot_s"])
    if num_nodes < 1 or not slot_s > 0:
        raise InputError(where, f"need num_nodes >= 1 and slot_s > 0, got {num_nodes} and {slot_s}")
    capacity = Resources(float(first["node_gpu"]), float(first["node_cpu"]), float(first["node_mem_gb"]))
    cluster = ClusterSpec.homogeneous(num_nodes, capacity, name="input")
    jobs, placed = [], {}
    for number, (_, row) in enumerate(frame.iterrows(), start=1):
        if row["model"] not in CATALOGUE:
            raise InputError(where, f"unknown model {row['model']!r}", row=number, field="model")
        try:
            spec = _job_spec(row)
            allocation, known = _held(row, num_nodes)
        except ValueError as error:
            raise InputError(where, str(error), row=number) from None
        if spec.job_id in placed:
            raise InputError(where, f"duplicate job id {spec.job_id!r}", row=number, field="job_id")
        # without node lists the held tasks are counted on node 0 (what the observation needs) but kept out of
        # `previous`: a sticky placer must not be told that they run there
        placed[spec.job_id] = allocation if known else EMPTY_JOB_ALLOCATION
        jobs.append(JobView(spec, float(row["progress_epochs"]), 0.0, allocation, 0.0, 0.0, 0))
    ordered = sorted(jobs, key=lambda job: job.spec.arrival_s)  # stable: ties keep the row order
    time_s = float(first["time_s"])
    previous = Allocation({job_id: a for job_id, a in placed.items() if not a.is_empty})
    return ClusterView(time_s, int(time_s // slot_s), slot_s, cluster, tuple(ordered), previous)


def frame_from_view(view: ClusterView) -> pd.DataFrame:
    """The input frame of a view (the inverse of `view_from_frame` for homogeneous clusters)."""
    node = view.cluster.nodes[0].capacity
    rows = []
    for job in view.jobs:
        spec = job.spec
        rows.append(
            {
                "job_id": spec.job_id,
                "model": spec.model,
                "architecture": spec.architecture.value,
                "arrival_s": spec.arrival_s,
                "declared_epochs": spec.declared_epochs,
                "progress_epochs": job.progress_epochs,
                "samples_per_epoch": spec.samples_per_epoch,
                "worker_gpu": spec.worker_demand.gpu,
                "worker_cpu": spec.worker_demand.cpu,
                "worker_mem_gb": spec.worker_demand.mem_gb,
                "ps_cpu": spec.ps_demand.cpu,
                "ps_mem_gb": spec.ps_demand.mem_gb,
                "max_workers": spec.max_workers,
                "max_ps": spec.max_ps,
                "held_workers": job.allocation.num_workers,
                "held_ps": job.allocation.num_ps,
                "time_s": view.time_s,
                "slot_s": view.slot_s,
                "num_nodes": view.cluster.num_nodes,
                "node_gpu": node.gpu,
                "node_cpu": node.cpu,
                "node_mem_gb": node.mem_gb,
                "held_worker_nodes": _nodes_text(job.allocation.worker_nodes),
                "held_ps_nodes": _nodes_text(job.allocation.ps_nodes),
            }
        )
    return _typed(pd.DataFrame(rows), REQUIRED_COLUMNS + OPTIONAL_COLUMNS)


def frame_from_allocation(job_ids: Sequence[str], allocation: Allocation) -> pd.DataFrame:
    """The output frame: one row per job of `job_ids`, in that order (jobs given nothing have zeros)."""
    rows = []
    for job_id in job_ids:
        placed = allocation.get(job_id)
        rows.append(
            {
                "job_id": job_id,
                "workers": placed.num_workers,
                "ps": placed.num_ps,
                "worker_nodes": _nodes_text(placed.worker_nodes),
                "ps_nodes": _nodes_text(placed.ps_nodes),
            }
        )
    return _typed(pd.DataFrame(rows, columns=[name for name, _ in OUTPUT_COLUMNS]), OUTPUT_COLUMNS)


def example_frame(workload: Workload, num_jobs: int = 3) -> pd.DataFrame:
    """An input example: the first jobs of `workload`, all arrived, none started, on the workload's cluster."""
    from dl2.core import EMPTY_JOB_ALLOCATION, Allocation, ClusterView, JobView

    jobs = workload.jobs[:num_jobs]
    time_s = max(job.spec.arrival_s for job in jobs)
    slot = int(time_s // workload.slot_s)
    views = tuple(JobView(job.spec, 0.0, 0.0, EMPTY_JOB_ALLOCATION, 0.0, 0.0, 0) for job in jobs)
    view = ClusterView(slot * workload.slot_s, slot, workload.slot_s, workload.cluster, views, Allocation())
    return frame_from_view(view)


# -- the MLflow model ---------------------------------------------------------------------------------------------


class Dl2Policy(PythonModel):
    """A trained dl2 policy (greedy decisions) behind MLflow's pyfunc interface."""

    def load_context(self, context: Any) -> None:
        from dl2.rl.lookahead import load_policy

        self.scheduler = load_policy(context.artifacts[ARTIFACT])

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        from dl2.core import Allocation

        frame = pd.DataFrame(model_input)
        if frame.empty:  # no active job: nothing to allocate
            return frame_from_allocation([], Allocation())
        view = view_from_frame(frame)
        return frame_from_allocation([str(job_id) for job_id in frame["job_id"]], self.scheduler.schedule(view))


def signature() -> ModelSignature:
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema, TensorSpec

    inputs: list[ColSpec | TensorSpec] = [ColSpec(kind, name) for name, kind in REQUIRED_COLUMNS]
    inputs += [ColSpec(kind, name, required=False) for name, kind in OPTIONAL_COLUMNS]
    outputs: list[ColSpec | TensorSpec] = [ColSpec(kind, name) for name, kind in OUTPUT_COLUMNS]
    return ModelSignature(inputs=Schema(inputs), outputs=Schema(outputs))


def pip_requirements() -> list[str]:
    """What loading needs, pinned to the installed versions, so that restoring the model's environment
    (`mlflow models serve`, `mlflow.pyfunc.get_model_dependencies`) rebuilds the one it was evaluated in.

    torch is pinned as installed: the CPU build (`+cpu`) lives only in the project's wheel folder
    (`$PIP_FIND_LINKS`, default `/opt/wheels`), so then the requirements name that folder with `--find-links`;
    PyPI's build (no local label) restores from PyPI. (Listing them also spares MLflow's own inference, which
    re-imports torch: 7-9 s.)"""
    import os

    names = ["mlflow", "torch", "pandas", "cloudpickle", "numba"]
    names += [re.split(r"[<>=!~ ;\[]", spec, maxsplit=1)[0] for spec in importlib.metadata.requires("dl2") or []]
    pins = []
    for name in dict.fromkeys(names):
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:  # an optional one (numba) that is not installed
            continue
    if "+" not in importlib.metadata.version("torch"):
        return pins
    wheels = (os.environ.get("PIP_FIND_LINKS") or "/opt/wheels").split()
    return [*(f"--find-links {location}" for location in wheels), *pins]


def log_policy(model_dir: Path, input_example: pd.DataFrame, name: str = "dl2-policy") -> ModelInfo:
    """Log `model_dir` as a pyfunc model in the active run (with signature, example, pinned requirements, code)."""
    import dl2

    with tempfile.TemporaryDirectory(prefix="dl2-log-") as staging:
        # fixed names inside the model: artifacts/policy (see `registry.download`) and code/dl2
        folder = shutil.copytree(model_dir, Path(staging) / ARTIFACT)
        code = shutil.copytree(
            Path(dl2.__file__).parent, Path(staging) / "dl2", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
        # MLflow's decorators (`format_docstring`, `trace_disabled`) are unannotated and erase log_model's type
        info: ModelInfo = mlflow.pyfunc.log_model(
            name=name,
            python_model=Path(__file__),
            artifacts={ARTIFACT: str(folder)},
            signature=signature(),
            input_example=input_example,
            pip_requirements=pip_requirements(),
            code_paths=[str(code)],
        )
        return info


def _job_spec(row: pd.Series) -> Any:
    from dl2.core import Architecture, JobSpec, Resources

    architecture = Architecture(str(row["architecture"]))
    allreduce = architecture is Architecture.ALLREDUCE
    return JobSpec(
        job_id=str(row["job_id"]),
        model=str(row["model"]),
        arrival_s=float(row["arrival_s"]),
        declared_epochs=float(row["declared_epochs"]),
        samples_per_epoch=float(row["samples_per_epoch"]),
        worker_demand=Resources(float(row["worker_gpu"]), float(row["worker_cpu"]), float(row["worker_mem_gb"])),
        ps_demand=Resources(0.0, float(row["ps_cpu"]), float(row["ps_mem_gb"])),
        max_workers=int(row["max_workers"]),
        max_ps=int(row["max_ps"]),
        architecture=architecture,
        requested_ps=0 if allreduce else 1,
    )


def _held(row: pd.Series, num_nodes: int) -> tuple[Any, bool]:
    """The job's held tasks, and whether their nodes are known."""
    from dl2.core import EMPTY_JOB_ALLOCATION, JobAllocation

    workers, ps = int(row["held_workers"]), int(row["held_ps"])
    if workers < 0 or ps < 0:
        raise ValueError("negative held task count")
    if not workers and not ps:
        return EMPTY_JOB_ALLOCATION, True
    worker_nodes = _parse_nodes(row.get("held_worker_nodes"), workers, num_nodes, "held_worker_nodes")
    ps_nodes = _parse_nodes(row.get("held_ps_nodes"), ps, num_nodes, "held_ps_nodes")
    if worker_nodes is None or ps_nodes is None:
        return JobAllocation((0,) * workers, (0,) * ps), False
    return JobAllocation(worker_nodes, ps_nodes), True


def _parse_nodes(text: Any, count: int, num_nodes: int, column: str) -> tuple[int, ...] | None:
    if text is None or text is pd.NA or (isinstance(text, float) and pd.isna(text)):
        return None if count else ()
    try:
        nodes = tuple(int(part) for part in str(text).split(",") if part.strip())
    except ValueError:
        raise ValueError(f"{column} must be comma-separated node indices, got {text!r}") from None
    if len(nodes) != count:
        raise ValueError(f"{column} lists {len(nodes)} nodes for {count} tasks")
    if any(not 0 <= node < num_nodes for node in nodes):
        raise ValueError(f"{column} names a node outside 0..{num_nodes - 1}")
    return nodes


def _nodes_text(nodes: Sequence[int]) -> str:
    return ",".join(str(node) for node in nodes)


_DTYPES = {"string": "str", "double": "float64", "long": "int64"}


def _typed(frame: pd.DataFrame, columns: Sequence[tuple[str, str]]) -> pd.DataFrame:
    return frame.astype({name: _DTYPES[kind] for name, kind in columns if name in frame.columns})


mlflow.models.set_model(Dl2Policy())  # models-from-code: MLflow runs this file to get the model

"""Workloads drawn the way the DL2 authors' generator draws them (`trace.py`), for training and validation.

The authors' 10 validation workloads (`dl2-official-small`, `dl2-official-default`) are test data: a learned
policy must never train or select checkpoints on them. This generator produces more workloads from the same
distribution with other seeds: every slot up to `arrivals_per_slot` jobs arrive (Uniform: exactly that many;
Poisson: a Poisson count capped at it), each job's model is uniform over the eight types and its epochs are
the type's fixed fraction of `max_epochs` (their FIX_JOB_LEN), demands in their slot units.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dl2.core import ClusterSpec, Job, JobSpec, Resources, Workload
from dl2.workload.catalogue import CATALOGUE, MODEL_NAMES


@dataclass(frozen=True, slots=True)
class AuthorsSetting:
    """One of the authors' cluster settings (`parameters.py` / `params_template.py`)."""

    name: str
    num_nodes: int
    num_jobs: int
    arrivals_per_slot: int
    max_epochs: float
    max_tasks_per_job: int
    """Cap on workers, and the same cap on PS."""
    slot_s: float = 1200.0


SETTINGS = {
    "small": AuthorsSetting(
        "small", num_nodes=48, num_jobs=60, arrivals_per_slot=3, max_epochs=80_000, max_tasks_per_job=32
    ),
    "default": AuthorsSetting(
        "default", num_nodes=500, num_jobs=200, arrivals_per_slot=10, max_epochs=30_000, max_tasks_per_job=16
    ),
    # not the authors': a miniature of "small" for tests and smoke runs (seconds per episode)
    "tiny": AuthorsSetting(
        "tiny", num_nodes=6, num_jobs=10, arrivals_per_slot=2, max_epochs=4_000, max_tasks_per_job=8
    ),
}


def generate_authors_workload(
    setting: AuthorsSetting, seed: int, arrivals: str = "uniform", without: tuple[str, ...] = ()
) -> Workload:
    """A workload of `setting` drawn with `seed` (uniform or poisson arrivals). `without`: job types left out of
    the mix (the others stay uniform), to warm a policy up without them (DL2 §6.4, unseen job types)."""
    if arrivals not in ("uniform", "poisson"):
        raise ValueError(f"arrivals must be 'uniform' or 'poisson', got {arrivals!r}")
    unknown = sorted(set(without) - set(MODEL_NAMES))
    if unknown:
        raise ValueError(f"unknown job type(s) {', '.join(unknown)}; known: {', '.join(MODEL_NAMES)}")
    models = [name for name in MODEL_NAMES if name not in without]
    if not models:
        raise ValueError("every job type is left out")
    rng = np.random.default_rng(seed)
    cluster = ClusterSpec.homogeneous(
        setting.num_nodes, Resources(gpu=8.0, cpu=8.0), kind="dl2-slots", name=setting.name
    )
    jobs: list[Job] = []
    slot = 0
    while len(jobs) < setting.num_jobs:
        count = setting.arrivals_per_slot
        if arrivals == "poisson":
            count = min(setting.arrivals_per_slot, int(rng.poisson(setting.arrivals_per_slot)))
        for _ in range(min(count, setting.num_jobs - len(jobs))):
            profile = CATALOGUE[models[int(rng.integers(len(models)))]]
            epochs = float(int(profile.epochs_fraction * setting.max_epochs))
            spec = JobSpec(
                job_id=str(len(jobs) + 1),
                model=profile.name,
                arrival_s=slot * setting.slot_s,
                declared_epochs=epochs,
                samples_per_epoch=float(profile.samples_per_epoch),
                worker_demand=profile.compat_worker_demand,
                ps_demand=profile.compat_ps_demand,
                max_workers=setting.max_tasks_per_job,
                max_ps=setting.max_tasks_per_job,
            )
            jobs.append(Job(spec, epochs))
        slot += 1
    suffix = f"-without-{'+'.join(without)}" if without else ""
    return Workload(
        f"authors-{setting.name}-{arrivals}{suffix}/{seed}", cluster, tuple(jobs), setting.slot_s, source="generator"
    )

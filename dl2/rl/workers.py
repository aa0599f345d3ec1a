"""Rollout workers: episodes run in parallel processes on this machine, or on a Ray cluster.

The same picklable `EpisodeTask` goes to either backend, so training on several simulated clusters at once
(DL2 §6.5: each worker may draw from a different cluster and workload source) is a matter of the tasks given.
Workers need NumPy only; torch stays in the learner.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Sequence
from typing import Any, Protocol

from dl2.rl.deviation import DeviationBatch, DeviationTask, run_deviations
from dl2.rl.perturbation import PerturbationBatch, PerturbationTask, run_perturbations
from dl2.rl.rollout import Episode, EpisodeTask, run_episode


class RolloutPool(Protocol):
    def run(self, tasks: Sequence[EpisodeTask]) -> list[Episode]: ...

    def run_perturbations(self, tasks: Sequence[PerturbationTask]) -> list[PerturbationBatch]: ...

    def run_deviations(self, tasks: Sequence[DeviationTask]) -> list[DeviationBatch]: ...

    def close(self) -> None: ...


def _init_worker() -> None:
    # one thread per worker: the policy is a small MLP and the machine's cores are the workers
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


class LocalPool:
    """`processes` worker processes (0: run in this process, for tests and debugging)."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._pool: Any = None
        if processes > 0:
            context = multiprocessing.get_context("fork")
            self._pool = context.Pool(processes, initializer=_init_worker, maxtasksperchild=50)

    def run(self, tasks: Sequence[EpisodeTask]) -> list[Episode]:
        if self._pool is None:
            return [run_episode(task) for task in tasks]
        return list(self._pool.map(run_episode, tasks, chunksize=1))

    def run_perturbations(self, tasks: Sequence[PerturbationTask]) -> list[PerturbationBatch]:
        if self._pool is None:
            return [run_perturbations(task) for task in tasks]
        return list(self._pool.map(run_perturbations, tasks, chunksize=1))

    def run_deviations(self, tasks: Sequence[DeviationTask]) -> list[DeviationBatch]:
        if self._pool is None:
            return [run_deviations(task) for task in tasks]
        return list(self._pool.map(run_deviations, tasks, chunksize=1))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None


class RayPool:
    """Rollouts as Ray tasks (`pip install dl2[ray]`). `address`: an existing cluster (`ray://head:10001`,
    `auto`, or the `RAY_ADDRESS` environment variable); none starts a local instance with `num_cpus` CPUs. The
    workers run the same picklable tasks as the process pool, so a seed gives the same results."""

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        import ray

        self._started = not ray.is_initialized()
        if self._started:
            local = address is None and not os.environ.get("RAY_ADDRESS")
            ray.init(
                address=address,
                num_cpus=num_cpus if local else None,
                include_dashboard=False,
                log_to_driver=False,
                runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}},
            )
        self._remote = ray.remote(run_episode)
        self._remote_perturbations = ray.remote(run_perturbations)
        self._remote_deviations = ray.remote(run_deviations)
        self._ray = ray

    def run(self, tasks: Sequence[EpisodeTask]) -> list[Episode]:
        return list(self._ray.get([self._remote.remote(task) for task in tasks]))

    def run_perturbations(self, tasks: Sequence[PerturbationTask]) -> list[PerturbationBatch]:
        return list(self._ray.get([self._remote_perturbations.remote(task) for task in tasks]))

    def run_deviations(self, tasks: Sequence[DeviationTask]) -> list[DeviationBatch]:
        return list(self._ray.get([self._remote_deviations.remote(task) for task in tasks]))

    def close(self) -> None:
        if self._started:  # a Ray session someone else started is theirs to end
            self._ray.shutdown()


def make_pool(backend: str, processes: int, address: str | None = None) -> RolloutPool:
    """`local`: `processes` worker processes here; `ray`: Ray tasks on `address` (none: a local instance)."""
    if backend == "local":
        return LocalPool(processes)
    if backend == "ray":
        return RayPool(address, num_cpus=processes or None)
    raise ValueError(f"unknown rollout backend {backend!r}; use 'local' or 'ray'")

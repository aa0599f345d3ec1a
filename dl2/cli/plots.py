"""Plots for comparisons: JCT CDFs per scheduler and the cluster's GPU allocation over time (PNG)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dl2.sim.run import GridRun


def plot_comparison(
    runs: Sequence[GridRun], path: Path, title: str, time_unit_s: float = 3600.0, unit: str = "h"
) -> None:
    """Left: JCT CDF of each scheduler (all its runs pooled). Right: allocated GPU fraction per slot (first run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    schedulers = list(dict.fromkeys(run.scheduler for run in runs))
    figure, (cdf_axes, util_axes) = plt.subplots(1, 2, figsize=(13, 4.8))
    for name in schedulers:
        own = [run for run in runs if run.scheduler == name]
        jct = np.sort(np.concatenate([[job.jct_s / time_unit_s for job in run.result.jobs] for run in own]))
        cdf_axes.plot(jct, np.arange(1, jct.size + 1) / jct.size, label=name)
        first = own[0].result
        util_axes.plot(
            np.array(first.slot_start_s) / time_unit_s, first.allocated_gpu_fraction, label=name, linewidth=0.9
        )
    cdf_axes.set_xscale("log")
    cdf_axes.set_xlabel(f"job completion time ({unit}, log scale)")
    cdf_axes.set_ylabel("fraction of jobs")
    cdf_axes.set_title("JCT CDF")
    cdf_axes.grid(True, alpha=0.3)
    cdf_axes.legend()
    util_axes.set_xlabel(f"time ({unit})")
    util_axes.set_ylabel("allocated GPUs / cluster GPUs")
    util_axes.set_title(f"GPU allocation over time ({runs[0].result.workload}, seed {runs[0].seed})")
    util_axes.set_ylim(0, 1.05)
    util_axes.grid(True, alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp.png")
    figure.savefig(temporary, dpi=110)
    plt.close(figure)
    temporary.replace(path)

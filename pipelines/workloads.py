"""Stage `workloads`: which workloads train, validate and test the policy, their statistics, and a proof that
the three sets are disjoint. Writes `reports/workloads.json` (all of it) and `data/workloads/training.json`
(what the training stages may draw on: source, seed blocks, validation seeds).

Training draws workloads from `workloads.train_source` in fixed seed blocks, one per use (warm-up
demonstrations, the warm-up's held-out workload, RL episodes, simulated feedback); validation and test use the
seeds in params.yaml. The blocks do not depend on training budgets, so changing `finetune.iterations` does not
invalidate this stage (and everything after it); each training stage checks that its seeds stay inside its
block (`require_within`). Disjointness is shown twice: by seeds (sets of one generated source must not share a
seed; a fixed source, e.g. the authors' reference files, may not be both trained on and tested on) and by
content (a fingerprint of every validation and test workload, none equal to each other or to the first
workloads of each training block).

    python -m pipelines.workloads [--smoke]
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dl2.core import Workload
from dl2.workload.source import is_generated, workloads_of
from pipelines.code import code_version
from pipelines.params import Params
from pipelines.stage import Layout, StageFailed, StageResult, main_without_arguments, write_json

BLOCK = 10_000
"""Seeds per training block."""
SAMPLE = 2
"""Workloads of each training block described and fingerprinted."""


def training_blocks(params: Params) -> dict[str, tuple[int, int]]:
    """[start, end) seed block of each use of the training source (the warm-up's and RL's seed offsets)."""
    warm = params.warmup
    rl = params.finetune.rl.train_seed_offset
    return {
        "warmup": (warm.seed_offset, warm.held_out_seed),
        "warmup_held_out": (warm.held_out_seed, warm.held_out_seed + 1),
        "rl": (rl, rl + BLOCK),
        "feedback": (params.feedback.seed_offset, params.feedback.seed_offset + BLOCK),
    }


def test_workloads(params: Params) -> list[tuple[int, tuple[Workload, ...]]]:
    """(seed, workloads) of the held-out test set."""
    return [(seed, workloads_of(params.workloads.test, seed)) for seed in params.workloads.test_seeds]


def fingerprint(workload: Workload) -> str:
    """Content hash of a workload: cluster size and every job's spec except its id."""
    jobs = [
        (
            j.spec.model,
            j.spec.arrival_s,
            j.spec.declared_epochs,
            j.spec.samples_per_epoch,
            j.spec.max_workers,
            j.spec.max_ps,
            j.spec.architecture.value,
            j.true_epochs,
        )
        for j in workload.jobs
    ]
    document = json.dumps([workload.cluster.num_nodes, workload.slot_s, jobs])
    return hashlib.sha256(document.encode()).hexdigest()[:16]


def _entry(seed: int, workload: Workload) -> dict[str, Any]:
    from dl2.workload.describe import describe

    return {"seed": seed, "name": workload.name, "fingerprint": fingerprint(workload), "describe": describe(workload)}


def build(params: Params, layout: Layout) -> dict[str, Any]:
    """The report's content (without the digest)."""
    from pipelines.ingest import load_folder

    w = params.workloads
    blocks = training_blocks(params)
    train = [
        _entry(seed, workloads_of(w.train_source, seed)[0])
        for start, end in blocks.values()
        for seed in range(start, min(end, start + SAMPLE))
    ]
    validation = [_entry(seed, workloads_of(w.train_source, seed)[0]) for seed in w.validation_seeds]
    test = [_entry(seed, workload) for seed, workloads in test_workloads(params) for workload in workloads]
    checks = disjointness(params, blocks, train, validation, test)
    traces = {name: _describe_trace(load_folder(layout.ingested(name))) for name in params.data.traces}
    return {
        "mode": w.mode,
        "train": {"source": w.train_source, "blocks": {k: list(v) for k, v in blocks.items()}, "sample": train},
        "validation": {"source": w.train_source, "seeds": list(w.validation_seeds), "workloads": validation},
        "test": {"source": w.test, "seeds": list(w.test_seeds), "workloads": test},
        "traces": traces,
        "disjoint": {"ok": all(c["ok"] for c in checks), "checks": checks},
    }


def _describe_trace(workload: Workload) -> dict[str, Any]:
    from dl2.workload.describe import describe

    return describe(workload)


def disjointness(
    params: Params,
    blocks: dict[str, tuple[int, int]],
    train: list[dict[str, Any]],
    validation: list[dict[str, Any]],
    test: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    w = params.workloads
    checks = []

    def check(claim: str, ok: bool) -> None:
        checks.append({"claim": claim, "ok": bool(ok)})

    spans = sorted(blocks.values())
    check(
        "training blocks do not overlap",
        all(a[1] <= b[0] for a, b in itertools.pairwise(spans)),
    )
    in_blocks = [s for s in w.validation_seeds if any(a <= s < b for a, b in spans)]
    check(f"validation seeds {list(w.validation_seeds)} lie outside every training block", not in_blocks)
    check(
        f"training source {w.train_source!r} draws a new workload per seed (else validation would train)",
        is_generated(w.train_source),
    )
    if w.test == w.train_source:
        clash = [s for s in w.test_seeds if any(a <= s < b for a, b in spans) or s in w.validation_seeds]
        check(f"test seeds {list(w.test_seeds)} lie outside the training blocks and validation seeds", not clash)
    else:
        check(f"test source {w.test!r} differs from the training source {w.train_source!r}", True)
    seen_train = {e["fingerprint"] for e in train}
    seen_validation = {e["fingerprint"] for e in validation}
    seen_test = {e["fingerprint"] for e in test}
    check("no validation workload equals a sampled training workload", not seen_validation & seen_train)
    check("no test workload equals a sampled training workload", not seen_test & seen_train)
    check("no test workload equals a validation workload", not seen_test & seen_validation)
    return checks


def run(params: Params, layout: Layout | None = None) -> StageResult:
    from pipelines.validate import require_valid

    layout = layout or Layout()
    require_valid(layout, params.data.traces)
    outputs = (layout.relative(layout.workloads_report), layout.relative(layout.training_manifest))
    version = code_version("pipelines.workloads")
    report = {"code_version": version, **build(params, layout)}
    if not report["disjoint"]["ok"]:
        failed = [c["claim"] for c in report["disjoint"]["checks"] if not c["ok"]]
        raise StageFailed("workloads: training, validation and test sets overlap:\n  " + "\n  ".join(failed))
    training = {
        "mode": params.workloads.mode,
        "train_source": params.workloads.train_source,
        "blocks": report["train"]["blocks"],
        "validation_seeds": list(params.workloads.validation_seeds),
    }
    write_json(layout.training_manifest, training)
    write_json(layout.workloads_report, report)
    return StageResult("workloads", outputs, version, summary={"test": len(report["test"]["workloads"])})


def require_within(layout: Layout, params: Params, block: str, seeds: Sequence[int]) -> Path:
    """Check a training stage against `data/workloads/training.json`: same source, mode and validation seeds as
    its params, and its seeds inside its block. Returns the manifest's path (the stage's input); StageFailed
    when it is missing, stale or a seed lies outside."""
    path = layout.training_manifest
    rerun = "run: python -m pipelines.workloads"
    try:
        manifest = json.loads(path.read_text())
        start, end = manifest["blocks"][block]
    except (OSError, ValueError, KeyError):
        raise StageFailed(f"{layout.relative(path)} is missing or malformed; {rerun}") from None
    w = params.workloads
    if (manifest["train_source"], manifest["mode"], manifest["validation_seeds"]) != (
        w.train_source,
        w.mode,
        list(w.validation_seeds),
    ):
        raise StageFailed(f"{layout.relative(path)} was written for other workloads parameters; {rerun}")
    outside = [s for s in seeds if not start <= s < end]
    if outside:
        raise StageFailed(f"seeds {outside[:3]} of '{block}' fall outside its block [{start}, {end}): lower the budget")
    return path


def training_dataset(layout: Layout) -> Any:
    """The workloads training (and checkpoint selection) may draw on, as an MLflow dataset."""
    from pipelines.tracking import dataset, md5_file

    manifest = json.loads(layout.training_manifest.read_text())
    name = f"{manifest['train_source']} ({manifest['mode']}, seed blocks)"
    return dataset(name, md5_file(layout.training_manifest), layout.relative(layout.training_manifest))


def test_dataset(params: Params) -> Any:
    """The held-out test workloads, as an MLflow dataset whose digest hashes their content (fingerprints)."""
    from pipelines.tracking import dataset

    prints = [fingerprint(w) for _, workloads in test_workloads(params) for w in workloads]
    digest = hashlib.md5(json.dumps(prints).encode()).hexdigest()
    w = params.workloads
    return dataset(f"{w.test} seeds {list(w.test_seeds)} ({w.mode})", digest, w.test)


def cli(argv: Sequence[str] | None = None) -> int:
    return main_without_arguments("workloads", "Choose and describe the train/validation/test workloads.", run, argv)


if __name__ == "__main__":
    raise SystemExit(cli())

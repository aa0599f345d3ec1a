"""Stage `ingest`: copy a trace folder into `data/ingested/<name>/` with a manifest of sha256s.

The source is a shipped folder `data/traces/<name>` (by name) or any folder with a `jobs.csv` in the common
schema (data/README.md). The dl2 loaders check it first (every row, and the cluster file next to it), so bad
input is refused with one line naming the file, row and field, and nothing is written. The copy is written
under a temporary name and renamed into place. `data/ingested` is a DVC output: `dvc repro` copies again only
when a trace (or this code) changed, and `dvc push` stores the exact bytes in the remote.

    python -m pipelines.ingest philly                 # a shipped trace
    python -m pipelines.ingest /path/to/mytrace       # any folder with jobs.csv (ingested as 'mytrace')
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Sequence
from pathlib import Path

from dl2.core import InputError, Workload
from dl2.paths import traces_dir
from pipelines.code import code_version
from pipelines.params import Params
from pipelines.stage import Layout, StageResult, files_of, main, published_folder, sha256_file, write_json

MANIFEST = "MANIFEST.json"


def source_folder(name_or_path: str) -> tuple[str, Path]:
    """(name, folder) of a shipped trace name or a folder path."""
    path = Path(name_or_path)
    if path.is_dir():
        return path.resolve().name, path
    shipped = traces_dir() / name_or_path
    if shipped.is_dir():
        return name_or_path, shipped
    known = sorted(p.name for p in traces_dir().iterdir() if p.is_dir())
    raise InputError(name_or_path, f"no such trace folder; shipped traces: {', '.join(known)}")


def load_folder(folder: Path) -> Workload:
    """The trace folder's jobs on its cluster, through the dl2 loaders (which check every row, and the cluster
    file next to the jobs: `nodes_gpu.csv` (Alibaba-style), `vc_nodes.csv` (Philly-style), else Philly's)."""
    from dl2.workload.traces import alibaba_cluster, load_trace_csv, philly_cluster

    jobs = folder / "jobs.csv"
    if not jobs.is_file():
        raise InputError(str(folder), "no jobs.csv here (a trace folder holds jobs.csv in the common schema)")
    if (folder / "nodes_gpu.csv").is_file():
        cluster = alibaba_cluster(folder / "nodes_gpu.csv")
    elif (folder / "vc_nodes.csv").is_file():
        cluster = philly_cluster(folder / "vc_nodes.csv")
    else:
        cluster = philly_cluster()
    return load_trace_csv(jobs, cluster, name=folder.resolve().name)


def ingest_one(name_or_path: str, layout: Layout) -> StageResult:
    name, source = source_folder(name_or_path)
    files = [p for p in files_of(source) if p.name != MANIFEST]
    destination = layout.ingested(name)
    outputs = (layout.relative(destination),)
    rows = load_folder(source).num_jobs
    version = code_version("pipelines.ingest")
    manifest = {
        "name": name,
        "source": layout.relative(source),
        "code_version": version,
        "jobs": rows,
        "files": {str(p.relative_to(source)): sha256_file(p) for p in files},
    }
    with published_folder(destination, f".{name}.") as staging:
        for path in files:
            target = staging / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        write_json(staging / MANIFEST, manifest)
    return StageResult("ingest", outputs, version, summary={"name": name, "jobs": rows})


def run(params: Params, layout: Layout | None = None, traces: Sequence[str] = ()) -> StageResult:
    """Ingest `traces` (names or folders; default: params.data.traces)."""
    layout = layout or Layout()
    results = [ingest_one(item, layout) for item in (traces or params.data.traces)]
    if len(results) == 1:
        return results[0]
    return StageResult(
        "ingest",
        tuple(o for r in results for o in r.outputs),
        results[0].code_version,
        summary={"traces": [dict(r.summary) for r in results]},
    )


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("traces", nargs="*", help="trace names under data/traces or folders (default: data.traces)")


def _run(params: Params, args: argparse.Namespace) -> StageResult:
    return run(params, traces=args.traces)


def cli(argv: Sequence[str] | None = None) -> int:
    return main("ingest", "Copy trace folders into data/ingested with a manifest of sha256s.", _run, _arguments, argv)


if __name__ == "__main__":
    raise SystemExit(cli())

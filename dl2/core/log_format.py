"""The decision log's file format, read back: records as JSON Lines (`DecisionRecord`, one object a line, every
field checked), the cluster they come from as `cluster.json` beside them. Below the simulator so that what only
reads a log (a workload rebuilt from a cluster's records, a calibration, the lifecycle's validation) needs no
simulator; writing a log while simulating is `dl2.sim.decision_log`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dl2.core.cluster import Accelerator, ClusterSpec, NodeSpec
from dl2.core.decision import DecisionRecord
from dl2.core.errors import InputError
from dl2.core.inputs import parse_json, read_json, read_lines
from dl2.core.limits import MAX_NODE_CAPACITY, MAX_NODES, MAX_TASKS_PER_JOB
from dl2.core.resources import Resources

MODES = ("shadow", "canary", "active", "simulated")
MAX_TEXT = 256
"""Longest text field of a record (ids, names, versions)."""
MAX_COUNT = MAX_TASKS_PER_JOB
"""Largest task count of a record (held, proposed, applied, limits)."""
MAX_CANDIDATES = 16
"""Most names in a record's totals (a search's candidates)."""


NODE_FIELDS = tuple(name for name, kind in DecisionRecord.field_kinds().items() if kind == "nodes")
"""Lists of node indices; optional (a log written without placement leaves them out)."""
OPTIONAL_FIELDS: dict[str, Any] = {
    **{name: [] for name in NODE_FIELDS},
    **{name: 1.0 for name, kind in DecisionRecord.field_kinds().items() if kind == "probability"},
    **{name: "" for name, kind in DecisionRecord.field_kinds().items() if kind == "label"},
    **{name: {} for name, kind in DecisionRecord.field_kinds().items() if kind == "totals"},
    **{name: [] for name, kind in DecisionRecord.field_kinds().items() if kind == "types"},
}
"""Fields a record may leave out, with the value that stands for them (no placement known; a deterministic
decision; a policy that decided alone; every worker on the reference accelerator, or a log written before types
were recorded)."""
CLUSTER_FILE = "cluster.json"
"""Next to a log's segments: the cluster its records come from (records name it, but fine-tuning needs its
nodes)."""


def segment_name(slot: int) -> str:
    """The segment of one slot's records, written once (the controller's log, in any store): a writer that
    restarts and writes the same slot again adds nothing."""
    return f"segment-{slot:09d}-000000.jsonl"


def records_by_slot(records: Sequence[DecisionRecord]) -> dict[float, list[DecisionRecord]]:
    """One cluster's records grouped by their slot's start, in log order (records of several clusters are an
    error: a slot is one cluster's)."""
    clusters = {r.cluster for r in records}
    if len(clusters) > 1:
        raise ValueError(f"records from several clusters ({sorted(clusters)}): split the log by cluster first")
    by_slot: dict[float, list[DecisionRecord]] = {}
    for record in records:
        by_slot.setdefault(record.time_s, []).append(record)
    return by_slot


def records_text(records: Sequence[DecisionRecord]) -> str:
    """Records as JSON Lines, the text of a segment."""
    return "".join(json.dumps(record.to_json_dict(), sort_keys=True) + "\n" for record in records)


def cluster_to_json(cluster: ClusterSpec) -> dict[str, Any]:
    """The cluster description written as `cluster.json` next to a log; a node's `accelerator` (name and memory of
    its type) only where it is not the reference accelerator, so a homogeneous cluster's file reads as before."""
    nodes = []
    for n in cluster.nodes:
        node: dict[str, Any] = {
            "gpu": n.capacity.gpu,
            "cpu": n.capacity.cpu,
            "mem_gb": n.capacity.mem_gb,
            "kind": n.kind,
        }
        if n.accelerator is not None:
            node["accelerator"] = {"name": n.accelerator.name, "mem_gb": n.accelerator.mem_gb}
        nodes.append(node)
    return {"name": cluster.name, "nodes": nodes}


def cluster_from_json(data: Any, where: str) -> ClusterSpec:
    """A `cluster.json` document as a cluster: a name and 1 to `MAX_NODES` nodes of bounded capacities."""
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        raise InputError(where, "expected an object with a name and nodes", field="name")
    nodes = data.get("nodes")
    if not isinstance(nodes, list) or not 1 <= len(nodes) <= MAX_NODES:
        raise InputError(where, f"expected a list of 1 to {MAX_NODES:,} nodes", field="nodes")
    specs = []
    for index, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("kind"), str):
            raise InputError(where, "expected an object with gpu, cpu, mem_gb and kind", row=index + 1, field="nodes")
        amounts = []
        for name in ("gpu", "cpu", "mem_gb"):
            value = node.get(name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InputError(where, f"expected a number, got {value!r:.80}", row=index + 1, field=name)
            if not (math.isfinite(value) and 0 <= value <= MAX_NODE_CAPACITY):
                raise InputError(where, f"must be from 0 to {MAX_NODE_CAPACITY:g}, got {value:.6g}", row=index + 1,
                                 field=name)  # fmt: skip
            amounts.append(float(value))
        accelerator = _accelerator_from_json(node.get("accelerator"), where, index + 1)
        specs.append(NodeSpec(index, Resources(*amounts), node["kind"], accelerator))
    return ClusterSpec(tuple(specs), data["name"])


def _accelerator_from_json(value: Any, where: str, row: int) -> Accelerator | None:
    """A node's `accelerator` in `cluster.json`: absent or null for the reference accelerator."""
    if value is None:
        return None
    name = value.get("name") if isinstance(value, dict) else None
    if not isinstance(name, str) or not 0 < len(name) <= MAX_TEXT:
        raise InputError(where, "expected an object with a name (and mem_gb)", row=row, field="accelerator")
    mem_gb = value.get("mem_gb")
    if mem_gb is not None and record_problem(mem_gb, "real") is not None:
        raise InputError(where, f"expected a non-negative number or null, got {mem_gb!r:.80}", row=row,
                         field="accelerator.mem_gb")  # fmt: skip
    return Accelerator(name, None if mem_gb is None else float(mem_gb))


def read_cluster(path: Path) -> ClusterSpec:
    """A log's `cluster.json`."""
    return cluster_from_json(read_json(path), str(path))


def segments(location: Path) -> list[Path]:
    """The log's files in order: a folder of segments, or a single .jsonl file."""
    if location.is_dir():
        return sorted(location.glob("segment-*.jsonl"))
    if location.is_file():
        return [location]
    raise InputError(str(location), "no decision log here")


def read_log(location: Path, cluster: ClusterSpec | None = None) -> list[DecisionRecord]:
    """All records, validated: a bad line names the file, line and field. With `cluster` (the log's
    `cluster.json`), each record must also be of that cluster and placed on its nodes."""
    records = []
    for path in segments(location):
        for number, line in enumerate(read_lines(path), start=1):
            if line.strip():
                record = parse_record(line, str(path), number)
                if cluster is not None:
                    check_in_cluster(record, cluster, str(path), number)
                records.append(record)
    return records


def read_cluster_log(location: Path) -> tuple[list[DecisionRecord], ClusterSpec]:
    """A log folder's records and its `cluster.json`, each record checked against that cluster."""
    cluster = read_cluster(location / CLUSTER_FILE)
    return read_log(location, cluster), cluster


def check_in_cluster(record: DecisionRecord, cluster: ClusterSpec, where: str, number: int) -> None:
    """A record of `cluster`, on its nodes: what reads placements indexes the cluster's nodes with them."""
    if record.cluster != cluster.name:
        message = f"a record of cluster {record.cluster!r:.80} in a log of {cluster.name!r:.80} (its {CLUSTER_FILE})"
        raise InputError(where, message, row=number, field="cluster")
    for name in NODE_FIELDS:
        outside = [node for node in getattr(record, name) if node >= len(cluster.nodes)]
        if outside:
            message = f"node {outside[0]} is not one of the cluster's {len(cluster.nodes)} nodes ({CLUSTER_FILE})"
            raise InputError(where, message, row=number, field=name)


def record_problem(value: Any, kind: str) -> str | None:
    """Why `value` cannot be a record field of `kind` (None if it can): the one type and range check that the
    controller, the fine-tune reader and the decision-log suite's typed frame share."""
    if kind == "text":
        if not isinstance(value, str) or not value:
            return f"expected a non-empty string, got {value!r:.80}"
        if len(value) > MAX_TEXT:
            return f"expected at most {MAX_TEXT} characters, got {len(value):,}"
        return None
    if kind == "label":
        if not isinstance(value, str) or len(value) > MAX_TEXT:
            return f"expected a string of at most {MAX_TEXT} characters, got {value!r:.80}"
        return None
    if kind == "totals":
        return _totals_problem(value)
    if kind == "types":
        if (
            not isinstance(value, list | tuple)
            or len(value) > MAX_COUNT
            or not all(isinstance(name, str) and len(name) <= MAX_TEXT for name in value)
        ):
            return f"expected a list of accelerator type names, got {value!r:.80}"
        return None
    if kind == "nodes":
        if not isinstance(value, list | tuple) or not all(
            isinstance(node, int) and not isinstance(node, bool) and 0 <= node <= MAX_COUNT for node in value
        ):
            return f"expected a list of node indices, got {value!r:.80}"
        return None
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            return f"expected a whole number from 0 to {MAX_COUNT:,}, got {value!r:.80}"
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return f"expected a finite non-negative number, got {value!r:.80}"
    if kind == "probability" and not 0 < value <= 1:
        return f"expected a probability in (0, 1], got {value!r:.80}"
    return None


def _totals_problem(value: Any) -> str | None:
    if not isinstance(value, dict) or len(value) > MAX_CANDIDATES:
        return f"expected an object of at most {MAX_CANDIDATES} names to seconds, got {value!r:.80}"
    for name, seconds in value.items():
        if not name or len(name) > MAX_TEXT:
            return f"expected names of 1 to {MAX_TEXT} characters, got {name!r:.80}"
        if seconds is not None and record_problem(seconds, "real") is not None:
            return f"expected seconds (a finite non-negative number) or null for {name!r:.80}, got {seconds!r:.80}"
    return None


def parse_record(line: str, where: str, number: int) -> DecisionRecord:
    data = parse_json(line, where, number)
    if not isinstance(data, dict):
        raise InputError(where, "expected a JSON object", row=number)
    unknown = sorted(set(data) - set(DecisionRecord.field_names()))
    if unknown:
        raise InputError(where, "unknown field", row=number, field=str(unknown[0])[:80])
    values: dict[str, Any] = {}
    for name, kind in DecisionRecord.field_kinds().items():
        if name in OPTIONAL_FIELDS:  # no placement known; a deterministic decision; a policy deciding alone
            value = data.get(name, OPTIONAL_FIELDS[name])
            problem = record_problem(value, kind)
            if problem is not None:
                raise InputError(where, problem, row=number, field=name)
            values[name] = tuple(value) if kind in ("nodes", "types") else dict(value) if kind == "totals" else value
            continue
        if name not in data:
            raise InputError(where, "missing", row=number, field=name)
        problem = record_problem(data[name], kind)
        if problem is not None:
            raise InputError(where, problem, row=number, field=name)
        values[name] = data[name]
    if values["mode"] not in MODES:
        raise InputError(where, f"unknown mode {values['mode']!r}", row=number, field="mode")
    if values["architecture"] not in ("ps", "allreduce"):
        raise InputError(where, f"unknown architecture {values['architecture']!r}", row=number, field="architecture")
    types, workers = values["applied_worker_accelerators"], values["applied_worker_nodes"]
    if types and len(types) != len(workers):
        message = f"{len(types)} accelerator types for {len(workers)} worker nodes (one per worker, or none)"
        raise InputError(where, message, row=number, field="applied_worker_accelerators")
    return DecisionRecord(**values)

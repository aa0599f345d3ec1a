"""What a horizon on the lookahead's continuations costs in JCT, from runs of `benchmarks/lookahead.py`.

Each file is one run of `lookahead.py` over the same cells (the loop benchmark's 19) with its continuations played
one way (`--horizon H --beyond estimate|sparse --growth G`); the first file is the reference, continuations played
to the end. Per file: the mean and worst change of the two lookahead rows (over the heuristics in the catalogue's
world; with the champion as a third candidate in the calibrated world) against the reference, both against the best
heuristic placed alike, and who decided the contested slots of the second row (the network's share; in brackets,
where it alone proposed the applied allocation). What each costs is `benchmarks/lookahead_latency.py`'s: the
seconds the runs took are in the JSON, but runs that shared the cores differently do not compare.

    .venv/bin/python benchmarks/lookahead_horizons.py results/lookahead.json results/lookahead_h2_sparse4.json ...

Prints the table and writes `benchmarks/results/lookahead_horizons.json`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from common import RESULTS, print_table, write_json
from lookahead import CELLS
from truth_scenarios import CHAMPION, HEURISTICS

ROWS = ("lookahead, catalogue", "lookahead + champion, calibrated")


def read(path: str) -> dict[str, Any]:
    candidate = Path(path)
    data: dict[str, Any] = json.loads((candidate if candidate.exists() else RESULTS / candidate.name).read_text())
    return data


def label(data: dict[str, Any]) -> str:
    arguments = data["arguments"]
    horizon = arguments.get("horizon", 0)
    if not horizon:
        return "to the end"
    beyond = arguments.get("beyond", "estimate")
    return f"{horizon} slots, then {beyond}" + (f" x{arguments.get('growth', 2)}" if beyond == "sparse" else "")


def figures(data: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    network = Path(CHAMPION).name
    changes: dict[str, list[float]] = {row: [] for row in ROWS}
    against_best: dict[str, list[float]] = {row: [] for row in ROWS}
    contested = decided = alone = 0
    seconds = {row: 0.0 for row in ROWS}
    for cell, base in zip(data["cells"], reference["cells"], strict=True):
        if (cell["truth"], cell["seed"]) != (base["truth"], base["seed"]):
            raise SystemExit(f"the runs cover other cells: {cell['truth']}:{cell['seed']} against {base['truth']}")
        hours, base_hours = cell["avg_jct_h"], base["avg_jct_h"]
        best = min(hours[name] for name in HEURISTICS)
        for row in ROWS:
            changes[row].append(hours[row] / base_hours[row] - 1)
            against_best[row].append(hours[row] / best - 1)
            seconds[row] += cell["lookahead_costs"][row]["seconds"]
        costs = cell["lookahead_costs"][ROWS[1]]
        contested += costs.get("contested", 0)
        decided += costs.get("decided", {}).get(network, 0)
        alone += costs.get("decided_alone", {}).get(network, 0)
    return {
        "variant": label(data),
        "arguments": data["arguments"],
        "vs_to_the_end": {row: {"mean": float(np.mean(v)), "worst": float(np.max(v))} for row, v in changes.items()},
        "vs_best_heuristic": {row: float(np.mean(v)) for row, v in against_best.items()},
        "seconds": seconds,
        "contested_slots": contested,
        "network_decided": decided / contested if contested else None,
        "network_alone": alone / contested if contested else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="runs of lookahead.py, the first played to the end")
    parser.add_argument("--out", default="lookahead_horizons.json", help="file name under benchmarks/results/")
    args = parser.parse_args()
    runs = [read(path) for path in args.files]
    reference = runs[0]
    if len(reference["cells"]) != len(CELLS):
        print(f"note: {len(reference['cells'])} cells, not the loop benchmark's {len(CELLS)}")
    rows = [figures(data, reference) for data in runs]
    table = []
    for row in rows:
        change, best = row["vs_to_the_end"], row["vs_best_heuristic"]
        table.append([
            row["variant"],
            *(f"{change[name]['mean']:+.2%} ({change[name]['worst']:+.1%})" for name in ROWS),
            *(f"{best[name]:+.2%}" for name in ROWS),
            f"{row['network_decided']:.0%} ({row['network_alone']:.0%})" if row["network_decided"] is not None else "-",
        ])  # fmt: skip
    print_table(
        f"lookahead continuations on {len(reference['cells'])} cells: mean change (worst cell) against playing them"
        " to the end",
        ["continuations", *(f"{name}: vs to the end" for name in ROWS),
         *(f"{name}: vs best heuristic" for name in ROWS), "network decided (alone)"],
        table,
    )  # fmt: skip
    print(f"wrote {write_json(args.out, {'files': args.files, 'variants': rows})}")


if __name__ == "__main__":
    main()

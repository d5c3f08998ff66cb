"""Does activation patching recover the gradient circuit? Precision and recall against the ledger over a
distribution of compiled ground-truth models (docs/interp.md, "Scoring a circuit-discovery method").

Draws ``--count`` models with ``icdl.inspect.groundtruth.write`` (the default prior: five variants, depth
2-4, width 1-3, ReLU/sigmoid/tanh, 1-3 GD steps, 3-8 examples), and on each model's clean and label-flipped
prompts (4 per model, one batch) runs the three methods of ``icdl.inspect.patching`` on GD step 1. Truth is
each model's ledger: the label circuit's edges, and its sublayers for the node-level methods. A component
counts as found when its effect exceeds ``--threshold``. Run with one thread::

    OMP_NUM_THREADS=1 python benchmarks/patching_groundtruth.py --count 120 \
        --out docs/results/patching_groundtruth.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from icdl.inspect.groundtruth import load, write
from icdl.inspect.ledger import circuit_nodes, label_circuit_of
from icdl.inspect.patching import THRESHOLD, Score, edge_patching, node_patching, resid_patching, score
from icdl.io import atomic_write_json

METHODS = ("resid", "node", "edge")


def _pr(s: Score) -> dict[str, Any]:
    return {"tp": s.tp, "fp": s.fp, "fn": s.fn, "precision": s.precision, "recall": s.recall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threshold", type=float, default=THRESHOLD)
    ap.add_argument(
        "--models", type=Path, default=None, help="keep the drawn models here (default: a temp dir)"
    )
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.models or Path(tmp) / "gt"
        write(root, args.count, args.seed, progress=lambda it, n: tqdm(it, total=n, desc="draw"))
        drawn = time.perf_counter() - start
        total = {m: Score(0, 0, 0) for m in METHODS}
        by_variant: dict[str, dict[str, Score]] = defaultdict(lambda: {m: Score(0, 0, 0) for m in METHODS})
        perfect = dict.fromkeys(METHODS, 0)
        misses: list[dict[str, Any]] = []
        smallest_found, largest_missed = float("inf"), 0.0
        for g in tqdm(load(root), total=args.count, desc="patch"):
            H, Hc = g.prompts["H"], g.prompts["H_corrupt"]
            truth = {tuple(e) for e in label_circuit_of(g.ledger["edges"], 0)}
            edges = edge_patching(g.model, H, Hc)
            effects = {
                "resid": resid_patching(g.model, H, Hc),
                "node": node_patching(g.model, H, Hc),
                "edge": edges,
            }
            truths = {"resid": circuit_nodes(truth), "node": circuit_nodes(truth), "edge": truth}
            for m in METHODS:
                s = score(effects[m], truths[m], args.threshold)
                total[m] += s
                by_variant[g.card["variant"]][m] += s
                perfect[m] += s.fp == 0 and s.fn == 0
            for k, v in edges.items():
                if k in truth:
                    smallest_found = min(smallest_found, v)
                else:
                    largest_missed = max(largest_missed, v)
                if (v > args.threshold) != (k in truth):
                    misses.append({"model": g.name, "card": g.card, "edge": list(k), "effect": v})
    result = {
        "command": "OMP_NUM_THREADS=1 python "
        + " ".join(["benchmarks/patching_groundtruth.py", *sys.argv[1:]]),
        "models": args.count,
        "seed": args.seed,
        "threshold": args.threshold,
        "seconds": time.perf_counter() - start,
        "draw_seconds": drawn,
        "methods": {m: {**_pr(total[m]), "perfect_models": perfect[m]} for m in METHODS},
        "by_variant": {v: {m: _pr(s[m]) for m in METHODS} for v, s in sorted(by_variant.items())},
        "edge_effect_smallest_in_circuit": smallest_found,
        "edge_effect_largest_outside_circuit": largest_missed,
        "edge_mismatches": misses[:50],
    }
    atomic_write_json(args.out, result)
    print(json.dumps({k: result[k] for k in ("models", "seconds", "methods")}, indent=1))


if __name__ == "__main__":
    main()

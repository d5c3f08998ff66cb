"""The reference-size construction table of README.md and docs/construction.md ("Measured"), with the verdict.

Runs ``icdl construct -N 3 -K 16 --in-dim 8 --out-dim 1 -n 64 -L 10 --json --yes`` (float64, seed 0) for
each case below as a subprocess, writes each JSON to ``docs/results/construct_reference/CASE.json`` and prints
one markdown row per case: max heads, max |w_TF - w_GD|, the prediction error, the measured applied-gradient
error eps = max_l eps_l, the variant's a-priori step budget (docs/construction.md, "What PASS guarantees"),
their ratio, the L_f estimate, the trajectory error ||w_TF - w_GD||_2 after L steps, Corollary 1.1 at the
budget, relu' window hits, arguments out of range, and the verdict with its failed conditions.

    OMP_NUM_THREADS=1 python benchmarks/construct_reference.py            # run every case, print the table
    python benchmarks/construct_reference.py --from-json                  # the table of the committed JSON
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BASE = ["-N", "3", "-K", "16", "--in-dim", "8", "--out-dim", "1", "-n", "64", "-L", "10", "--json", "--yes"]
CASES: dict[str, list[str]] = {
    "relu": [],
    "relu_box0.5": ["--projection", "box", "--box", "0.5"],
    "sigmoid_eps1e-4": ["--activation", "sigmoid", "--eps", "1e-4"],
    "tanh_eps1e-4": ["--activation", "tanh", "--eps", "1e-4"],
    "softplus_eps1e-4": ["--activation", "softplus", "--eps", "1e-4"],
    "no-ewml": ["--variant", "no-ewml"],
    "no-ewml_box0.5": ["--variant", "no-ewml", "--projection", "box", "--box", "0.5"],
}
OUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "construct_reference"
COLUMNS = (
    "| case | max heads | max abs err w | pred. err | ε (grad err) | budget | ε/budget | L_f est. "
    "| traj. err | Cor. 1.1 at budget | window hits | out of range | verdict |"
)


def run(name: str) -> dict[str, Any]:
    """Run one case's command; its JSON (with the command and the load) is written to ``OUT/name.json``."""
    args = [*BASE, *CASES[name]]
    load = os.getloadavg()
    r = subprocess.run([sys.executable, "-m", "icdl", "construct", *args], capture_output=True, text=True)
    if r.returncode not in (0, 4, 5):
        raise SystemExit(f"{name}: exit {r.returncode}: {r.stderr.strip()}")
    d = json.loads(r.stdout)
    d["command"] = "icdl construct " + " ".join(args)
    d["load_before"] = load
    from icdl.io import atomic_write_text

    atomic_write_text(OUT / f"{name}.json", json.dumps(d, indent=1, allow_nan=True) + "\n")
    return d


def markdown(name: str, d: dict[str, Any]) -> str:
    """One table row of a case's JSON (``—`` where a check does not apply)."""

    def opt(v: Any) -> str:
        return "—" if v is None else str(v)

    ratio = d["eps_grad"] / d["grad_budget"] if d["grad_budget"] > 0 else math.nan
    verdict = d["verdict"]
    if d["failures"]:
        verdict += " " + ", ".join(sorted({f.split(":")[0] for f in d["failures"]}))
    return (
        f"| {name} | {d['max_heads']} | {d['max_abs_err_weights']:.1e} | {d['max_abs_err_prediction']:.1e} | "
        f"{d['eps_grad']:.1e} | {d['grad_budget']:.1e} | {ratio:.2g} | {d['lipschitz_f']:.3g} | "
        f"{d['trajectory_error']:.1e} | {d['corollary_bound_budget']:.1e} | {opt(d['delta_window_count'])} | "
        f"{opt(d['out_of_range_count'])} | {verdict} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from-json", action="store_true", help="render the committed JSON, run nothing")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated (default: all)")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    print(COLUMNS)
    print("|---" * COLUMNS.count(" | ") + "|---|")
    for name in args.cases.split(","):
        d = json.loads((OUT / f"{name}.json").read_text()) if args.from_json else run(name)
        print(markdown(name, d), flush=True)


if __name__ == "__main__":
    main()

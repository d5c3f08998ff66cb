"""Construction tables of README.md and docs/construction.md, with the verdict, from ``icdl construct``.

Sets of cases (``--set``): ``reference`` (default) runs ``icdl construct -N 3 -K 16 --in-dim 8 --out-dim 1
-n 64 -L 10 --json --yes`` (float64, seed 0; "Measured" in docs/construction.md, README "Compile"); ``rows``
the rows-vs-paper smooth-activation grid of "Weights in their own tokens" (``-N 3 -K 8``, defaults
otherwise); ``softplus`` that section's range example (``-N 3 -K 4 --in-dim 3 --out-dim 2 -n 6 -L 3 --lr 0.5
--activation softplus --eps 1e-4 --seed 1`` at several ranges). Each case runs as a subprocess, its JSON
goes to ``docs/results/construct_SET/CASE.json``, and one markdown row per case is printed: sublayers per
step, D, max heads, max |w_TF - w_GD|, the prediction error, the measured applied-gradient error
eps = max_l eps_l, the variant's a-priori step budget (docs/construction.md, "What PASS guarantees"), their
ratio, the L_f estimate, the trajectory error ||w_TF - w_GD||_2 after L steps, Corollary 1.1 at the budget,
relu' window hits, arguments out of range, and the verdict with its failed conditions.

    OMP_NUM_THREADS=1 python benchmarks/construct_reference.py [--set rows]  # run the cases, print the table
    python benchmarks/construct_reference.py --from-json [--set rows]        # the table of the committed JSON
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

from icdl.construct.check.report import verdict_label

REFERENCE = ["-N", "3", "-K", "16", "--in-dim", "8", "--out-dim", "1", "-n", "64", "-L", "10"]
SOFTPLUS = ["-N", "3", "-K", "4", "--in-dim", "3", "--out-dim", "2", "-n", "6", "-L", "3", "--lr", "0.5"]
SOFTPLUS += ["--activation", "softplus", "--eps", "1e-4", "--seed", "1"]
SETS: dict[str, tuple[list[str], dict[str, list[str]]]] = {
    "reference": (
        REFERENCE,
        {
            "relu": [],
            "relu_box0.5": ["--projection", "box", "--box", "0.5"],
            "sigmoid_eps1e-4": ["--activation", "sigmoid", "--eps", "1e-4"],
            "tanh_eps1e-4": ["--activation", "tanh", "--eps", "1e-4"],
            "softplus_eps1e-4": ["--activation", "softplus", "--eps", "1e-4"],
            "no-ewml": ["--variant", "no-ewml"],
            "no-ewml_box0.5": ["--variant", "no-ewml", "--projection", "box", "--box", "0.5"],
        },
    ),
    "rows": (
        ["-N", "3", "-K", "8"],
        {
            f"{v}_{a}_eps{e}": ["--variant", v, "--activation", a, "--eps", e]
            for a in ("sigmoid", "tanh")
            for e in ("1e-2", "1e-3", "1e-4")
            for v in ("rows", "paper")
        },
    ),
    "softplus": (
        SOFTPLUS,
        {
            "paper_R10": ["--variant", "paper", "--range", "10"],
            "rows_R10": ["--variant", "rows", "--range", "10"],
            "rows_R60": ["--variant", "rows", "--range", "60"],
            "rows_auto": ["--variant", "rows", "--range", "auto"],
        },
    ),
}
RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
COLUMNS = (
    "| case | sublayers/step | D | max heads | max abs err w | pred. err | ε (grad err) | budget | ε/budget "
    "| L_f est. | traj. err | Cor. 1.1 at budget | window hits | out of range | verdict |"
)


def run(out: Path, base: list[str], name: str, extra: list[str]) -> dict[str, Any]:
    """Run one case's command; its JSON (with the command and the load) is written to ``out/name.json``."""
    args = [*base, *extra, "--json", "--yes"]
    load = os.getloadavg()
    r = subprocess.run([sys.executable, "-m", "icdl", "construct", *args], capture_output=True, text=True)
    if r.returncode not in (0, 4, 5, 6):  # 4 DEGENERATE, 5 FAIL, 6 INCONCLUSIVE: a verdict all the same
        raise SystemExit(f"{name}: exit {r.returncode}: {r.stderr.strip()}")
    d = json.loads(r.stdout)
    d["command"] = "icdl construct " + " ".join(args)
    d["load_before"] = load
    from icdl.io import atomic_write_text

    atomic_write_text(out / f"{name}.json", json.dumps(d, indent=1, allow_nan=True) + "\n")
    return d


def markdown(name: str, d: dict[str, Any]) -> str:
    """One table row of a case's JSON (``—`` where a check does not apply)."""

    def opt(v: Any) -> str:
        return "—" if v is None else str(v)

    ratio = d["eps_grad"] / d["grad_budget"] if d["grad_budget"] > 0 else math.nan
    verdict = verdict_label(d["verdict"], d["failures"])
    return (
        f"| {name} | {d['sublayers_per_step']} | {d['embedding_dim']} | {d['max_heads']} | "
        f"{d['max_abs_err_weights']:.1e} | {d['max_abs_err_prediction']:.1e} | "
        f"{d['eps_grad']:.1e} | {d['grad_budget']:.1e} | {ratio:.2g} | {d['lipschitz_f']:.3g} | "
        f"{d['trajectory_error']:.1e} | {d['corollary_bound_budget']:.1e} | {opt(d['delta_window_count'])} | "
        f"{opt(d['out_of_range_count'])} | {verdict} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", dest="which", choices=list(SETS), default="reference", help="the set of cases")
    ap.add_argument("--from-json", action="store_true", help="render the committed JSON, run nothing")
    ap.add_argument("--cases", default=None, help="comma-separated (default: all of the set)")
    args = ap.parse_args()
    base, cases = SETS[args.which]
    out = RESULTS / f"construct_{args.which}"
    out.mkdir(parents=True, exist_ok=True)
    print(COLUMNS)
    print("|---" * COLUMNS.count(" | ") + "|---|")
    for name in args.cases.split(",") if args.cases else cases:
        path = out / f"{name}.json"
        d = json.loads(path.read_text()) if args.from_json else run(out, base, name, cases[name])
        print(markdown(name, d), flush=True)


if __name__ == "__main__":
    main()

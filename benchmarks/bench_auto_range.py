"""The cost of ``--range auto`` against the fixed default R = 10 on the commands README and
docs/construction.md show (docs/construction.md, "Ranges that fit the prompt").

Each command runs as ``python -m icdl construct ... --json`` twice, with ``--range 10`` and ``--range auto``;
one markdown row per run: the range(s) used, stored/unique parameters, max heads, compile and whole-command
wall seconds, ``out_of_range_count``, ``max_abs_err_weights`` and the verdict. ``--out FILE`` writes the
JSON objects (the lines the table is made of).

    OMP_NUM_THREADS=1 python benchmarks/bench_auto_range.py --out docs/results/auto_range.json

``--timing``: seconds of the bound pass against reference GD at three sizes. ``--sweep``: instead, where
the automatic range resolves without a box as L grows (no compilation: only
[`icdl.construct.bounds.ranges.auto_ranges`][icdl.construct.bounds.ranges.auto_ranges] on the prompts of seeds
0-4 of the CLI's default network N=3, K=8, d_x=4, n=32, lr 0.1, eps 1e-3), for the paper's and the softmax
variant's needs: how many of the 5 prompts get a range, and the largest R.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from icdl.construct.check.report import verdict_label

README = "-N 3 -K 16 --in-dim 8 --out-dim 1 -n 64 -L 10"
COMMANDS: dict[str, str] = {
    "CLI defaults (N=3 K=8 d_x=4 n=32 L=5)": "",
    "README relu": README,
    "README relu box 0.5": f"{README} --projection box --box 0.5",
    "README sigmoid eps 1e-4": f"{README} --activation sigmoid --eps 1e-4",
    "README tanh eps 1e-4": f"{README} --activation tanh --eps 1e-4",
    "README softplus eps 1e-4": f"{README} --activation softplus --eps 1e-4",
    "docs rows tanh eps 1e-3": "--variant rows -N 3 -K 8 --activation tanh --eps 1e-3",
    "docs paper tanh eps 1e-3": "--variant paper -N 3 -K 8 --activation tanh --eps 1e-3",
    "docs rows softplus example": (
        "--variant rows -N 3 -K 4 --in-dim 3 --out-dim 2 -n 6 -L 3 --lr 0.5 --activation softplus "
        "--eps 1e-4 --seed 1"
    ),
    "docs softmax N=3 K=8": "--variant softmax -N 3 -K 8 --in-dim 3 --out-dim 2 -n 16 -L 5",
    "issue 18 finding 2 (softmax, box 0.7)": (
        "--variant softmax -N 2 -K 3 --in-dim 2 --out-dim 1 -n 24 -L 2 --lr 0.3 --projection box "
        "--box 0.7 --seed 109"
    ),
}

KEYS = (
    "radius", "weight_range", "out_of_range_count", "max_abs_err_weights", "verdict", "failures", "max_heads",
    "eps_grad", "grad_budget", "trajectory_error", "corollary_bound_budget",
)  # fmt: skip


def run(args: list[str]) -> dict[str, object]:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "icdl", "construct", *args, "--json", "--yes"],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
    )
    wall = time.perf_counter() - t0
    if out.returncode not in (0, 4, 5, 6):  # 4 DEGENERATE, 5 FAIL, 6 INCONCLUSIVE: a report all the same
        return {
            "error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"rc {out.returncode}",
            "wall": wall,
        }
    r = json.loads(out.stdout)
    row = {k: r.get(k) for k in KEYS}
    row.update(
        stored=r["parameters"]["stored"],
        unique=r["parameters"]["unique"],
        seconds_compile=r["seconds_compile"],
        wall=wall,
    )
    return row


def sweep() -> None:
    from icdl.construct.compile import sample_task_info
    from icdl.construct.variants.registry import get_variant
    from icdl.errors import InputError
    from icdl.nets import NetSpec

    print("| activation | variant | " + " | ".join(f"L={L}" for L in (5, 10, 20, 50)) + " |")
    print("|---|---|---|---|---|---|")
    from icdl.construct.bounds.ranges import auto_ranges

    for act in ("relu", "sigmoid", "tanh", "softplus"):
        for variant in ("paper", "softmax"):
            needs = get_variant(variant).range_needs
            cells = []
            for L in (5, 10, 20, 50):
                radii = []
                for seed in range(5):
                    spec = NetSpec(3, 8, 4, 1, activation=act)
                    tk = sample_task_info(spec, 32, seed=seed)
                    try:
                        a = auto_ranges(
                            spec, "squared", lr=0.1, steps=L, box=None, x=tk.x, y=tk.y, x_query=tk.x_query,
                            w0=tk.w0, eps=1e-3, needs=needs, delta=1e-9,
                        )  # fmt: skip
                        radii.append(a.radius)
                    except InputError:
                        pass
                cells.append(f"{len(radii)}/5, R <= {max(radii):g}" if radii else "0/5")
            print(f"| {act} | {variant} | " + " | ".join(cells) + " |", flush=True)


def timing() -> None:
    """Seconds of the bound pass (auto_ranges) against reference GD on the same prompt (seed 0, lr 0.1, no
    box, eps 1e-3, ReLU) at three sizes."""
    from icdl.construct.bounds.ranges import auto_ranges
    from icdl.construct.compile import sample_task_info
    from icdl.construct.variants.registry import get_variant
    from icdl.nets import NetSpec, reference_gd

    for N, K, dx, n, L, variant in ((3, 16, 8, 64, 10, "paper"), (6, 64, 16, 256, 50, "rows"),
                                    (8, 256, 16, 1024, 100, "rows")):  # fmt: skip
        spec = NetSpec(N, K, dx, 1)
        tk = sample_task_info(spec, n, seed=0)
        t0 = time.perf_counter()
        a = auto_ranges(
            spec, "squared", lr=0.1, steps=L, box=None, x=tk.x, y=tk.y, x_query=tk.x_query, w0=tk.w0,
            eps=1e-3, needs=get_variant(variant).range_needs, delta=1e-9,
        )  # fmt: skip
        t1 = time.perf_counter()
        reference_gd(spec, "squared", tk.w0, tk.x, tk.y, lr=0.1, steps=L)
        t2 = time.perf_counter()
        print(f"N={N} K={K} d_x={dx} n={n} L={L} {variant}: R={a.radius:g}  auto_ranges {t1 - t0:.2f} s  "
              f"reference_gd {t2 - t1:.2f} s  (load {os.getloadavg()[0]:.1f})", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the JSON rows here")
    ap.add_argument("--only", default=None, help="run only commands whose name contains this")
    ap.add_argument("--sweep", action="store_true", help="where auto resolves without a box as L grows")
    ap.add_argument("--timing", action="store_true", help="seconds of the bound pass against reference GD")
    a = ap.parse_args()
    if a.sweep or a.timing:
        sweep() if a.sweep else timing()
        return
    rows = []
    print(
        "| command | --range | R (weights) | stored | unique | max heads | compile s | wall s "
        "| out of range | w err | ε / budget | verdict |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, line in COMMANDS.items():
        args = line.split()
        if a.only and a.only not in name:
            continue
        for rng in ("10", "auto"):
            r = run([*args, "--range", rng])
            r.update(command=" ".join(["icdl construct", *args, "--range", rng]), name=name, range=rng)
            rows.append(r)
            if "error" in r:
                print(f"| {name} | {rng} | {r['error']} ||||||||||")
                continue
            wr = "" if r["weight_range"] is None else f" ({r['weight_range']:g})"
            print(
                f"| {name} | {rng} | {r['radius']:g}{wr} | {r['stored']:,} | {r['unique']:,} "
                f"| {r['max_heads']} | {r['seconds_compile']:.2f} | {r['wall']:.1f} "
                f"| {r['out_of_range_count']} | {r['max_abs_err_weights']:.2g} "
                f"| {r['eps_grad'] / r['grad_budget']:.2g} | {verdict_label(r['verdict'], r['failures'])}"
                + " |",
                flush=True,
            )
    if a.out:
        from icdl.io import atomic_write_text

        atomic_write_text(a.out, json.dumps({"load": os.getloadavg(), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

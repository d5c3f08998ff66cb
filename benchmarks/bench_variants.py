"""Compare the registered construction variants (docs/construction.md, "Variants compared").

For every variant in ``icdl.construct.VARIANTS`` and every point (N, K, n, L) of one small grid (ReLU
network, d_x = 3, d_y = 2, squared loss, float64, seed 0, lr 0.1), compile, run and verify, and print one
markdown row: sublayers per step, heads per step (all attention/EWML heads of one block), the largest
sublayer's heads, embedding dimension D, parameters (unique stored coefficients: one block + readout),
non-zeros (all L blocks + readout), compile seconds, forward seconds (median of 3 untraced passes), the
errors max |w_TF - w_GD| and |prediction - f(w_GD, x_query)|, and the verdict's numbers (docs/construction.md,
"What PASS guarantees"): the measured applied-gradient error eps = max_l eps_l, the variant's a-priori step
budget, their ratio, the trajectory error ||w_TF - w_GD||_2 after L steps, Corollary 1.1 at the budget (local
L_f estimate, verify's default), the verdict and its failed conditions. ``--out JSON`` also writes the rows.

    OMP_NUM_THREADS=1 python benchmarks/bench_variants.py --out docs/results/variants.json
    OMP_NUM_THREADS=1 python benchmarks/bench_variants.py --grid 2,4,8,3 --variants paper,compact

``--eps`` and ``--range`` (default 1e-3 and 4; ``--range auto`` as in ``icdl construct``) only matter
for variants with approximate products (softmax).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from icdl.construct.check.report import verdict_label
from icdl.io import portable_command

GRID = ((2, 4, 16, 5), (3, 8, 16, 5), (3, 16, 32, 5))


COLUMNS = (
    "| variant | N | K | n | L | sublayers/step | heads/step | max heads | D | parameters | non-zeros "
    "| compile s | forward s | max abs err w | pred. err | eps (grad err) | budget | eps/budget | traj. err "
    "| Cor. 1.1 at budget | verdict |"
)


def row(variant: str, N: int, K: int, n: int, L: int, eps: float, radius: float | str) -> dict[str, Any]:
    from icdl.construct import GDConfig, compile_gd_transformer, sample_task, verify
    from icdl.nets import NetSpec

    spec = NetSpec(N, K, 3, 2)
    x, y, xq, w0, _ = sample_task(spec, n, seed=0)
    prompt = (x, y, xq, w0) if radius == "auto" else None
    cfg = GDConfig.create(spec, lr=0.1, steps=L, n=n, eps=eps, radius=radius, variant=variant, prompt=prompt)
    t0 = time.perf_counter()
    model = compile_gd_transformer(cfg)
    t_compile = time.perf_counter() - t0
    H = model.build_prompt(x, y, xq, w0)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        model(H)
        times.append(time.perf_counter() - t0)
    rep = verify(model, x, y, xq, w0)
    s = model.summary()
    return {
        "variant": variant, "N": N, "K": K, "n": n, "L": L, "eps_target": eps, "radius": cfg.radius,
        "weight_range": cfg.weight_range, "range_auto": cfg.auto_range,
        "sublayers_per_step": s["sublayers_per_step"], "heads_per_step": sum(i.heads for i in model.infos()),
        "max_heads": s["max_heads"], "embedding_dim": s["embedding_dim"],
        "unique_parameters": s["parameters"]["unique"], "nonzero_parameters": s["nonzero_parameters"],
        "seconds_compile": t_compile, "seconds_forward": statistics.median(times),
        "max_abs_err_weights": rep.max_abs_err_weights, "max_abs_err_prediction": rep.max_abs_err_prediction,
        "eps_grad": rep.eps_grad, "grad_budget": rep.grad_budget, "trajectory_error": rep.trajectory_error,
        "corollary_bound_budget": rep.corollary_bound_budget, "lipschitz_f": rep.lipschitz_f,
        "out_of_range_count": rep.out_of_range_count, "weights_moved": rep.weights_moved,
        "verdict": rep.verdict, "failures": rep.failures,
    }  # fmt: skip


def markdown(r: dict[str, Any]) -> str:
    """One table row of ``r`` (a [`row`] result); a FAIL lists its failed conditions' labels."""
    ratio = r["eps_grad"] / r["grad_budget"] if r["grad_budget"] > 0 else float("nan")
    verdict = verdict_label(r["verdict"], r["failures"])
    return (
        f"| {r['variant']} | {r['N']} | {r['K']} | {r['n']} | {r['L']} | {r['sublayers_per_step']} | "
        f"{r['heads_per_step']} | {r['max_heads']} | {r['embedding_dim']} | {r['unique_parameters']:,} | "
        f"{r['nonzero_parameters']:,} | {r['seconds_compile']:.3f} | {r['seconds_forward']:.3f} | "
        f"{r['max_abs_err_weights']:.1e} | {r['max_abs_err_prediction']:.1e} | {r['eps_grad']:.1e} | "
        f"{r['grad_budget']:.1e} | {ratio:.2g} | {r['trajectory_error']:.1e} | "
        f"{r['corollary_bound_budget']:.1e} | {verdict} |"
    )


def main() -> None:
    from icdl.construct import VARIANTS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", nargs="*", help="points N,K,n,L (default: the docs grid)")
    default = ["paper", *(v for v in VARIANTS if v != "paper")]
    ap.add_argument("--variants", default=",".join(default), help="comma-separated (default: all)")
    ap.add_argument("--eps", type=float, default=1e-3)
    ap.add_argument("--range", dest="radius", default="4", help="R, or 'auto'")
    ap.add_argument("--out", type=Path, default=None, help="also write the rows to this JSON file")
    args = ap.parse_args()
    radius = args.radius if args.radius == "auto" else float(args.radius)
    grid = [tuple(int(v) for v in p.split(",")) for p in args.grid] if args.grid else GRID
    print(COLUMNS)
    print("|---" * COLUMNS.count(" | ") + "|---|")
    rows = []
    for point in grid:
        for v in args.variants.split(","):
            rows.append(row(v, *point, eps=args.eps, radius=radius))
            print(markdown(rows[-1]), flush=True)
    if args.out is not None:
        from icdl.io import atomic_write_text

        command = "python benchmarks/bench_variants.py " + portable_command(sys.argv[1:])
        out = {"command": command, "load": os.getloadavg(), "rows": rows}
        atomic_write_text(args.out, json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""GD error of the explicit softmax-attention construction (``--variant softmax``) as a function of eps.

For each activation and eps: compile, verify against reference GD (icdl.construct.check.verify) and print one
markdown row: sublayers per step, attention heads, embedding dim D, hidden units per step, unique stored
coefficients, compile and forward seconds (one prompt, float64, this process), max |w_TF - w_GD|,
prediction error, the gradient error eps_l (max over steps) and its a-priori budget
(icdl.construct.bounds.budget), the trajectory error ||w_TF - w_GD||_2 after L steps and Corollary 1.1 at the
budget, the largest range ratio of a product factor along the reference trajectory (<= 1: the products' range
assumption holds) and the verdict (docs/construction.md, "What PASS guarantees").

    OMP_NUM_THREADS=1 python benchmarks/bench_softmax_eps.py --out docs/results/softmax_eps.json  # the docs
    OMP_NUM_THREADS=1 python benchmarks/bench_softmax_eps.py --point 2,3,2,1,6,3 --eps 1e-2,1e-3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any


def row(
    spec_args: tuple[int, ...], act: str, eps: float, radius: float, seed: int
) -> tuple[str, dict[str, Any]]:
    """One markdown row of the table and the same measurements as a dict (for ``--out``)."""
    import torch

    from icdl.construct import compile_gd_transformer, sample_task, verify
    from icdl.construct.variants.softmax import model_products, range_ratios, surrogate
    from icdl.nets import NetSpec, reference_gd

    N, K, dx, dy, n, L = spec_args
    spec = NetSpec(N, K, dx, dy, activation=act)
    x, y, xq, w0, _ = sample_task(spec, n, seed=seed)
    t0 = time.perf_counter()
    model = compile_gd_transformer(spec, lr=0.1, steps=L, n=n, eps=eps, radius=radius, variant="softmax")
    t_compile = time.perf_counter() - t0
    H = model.build_prompt(x, y, xq, w0)
    t0 = time.perf_counter()
    model(H)
    t_forward = time.perf_counter() - t0
    rep = verify(model, x, y, xq, w0)
    # The products' range assumption along the reference trajectory (<= 1: every product within eps).
    prods = model_products(model)
    x_all, y_all = torch.cat([x, xq[None]]), torch.cat([y, torch.zeros(1, dy, dtype=y.dtype)])
    t = torch.cat([torch.ones(n, dtype=x.dtype), torch.zeros(1, dtype=x.dtype)])
    ratio = 0.0
    for w in reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=L):
        sur = surrogate(spec, prods, model.terms.r, model.terms.r_prime, model.terms.u, w, x_all, y_all, t)
        ratio = max(ratio, *range_ratios(prods, sur, w).values())
    s = model.summary()
    hidden = sum(m.info.hidden for m in model.block_layers)
    heads = sum(m.info.heads for m in model.block_layers)
    data = {
        "activation": act,
        "eps": eps,
        "sublayers_per_step": model.sublayers_per_step,
        "heads": heads,
        "embedding_dim": s["embedding_dim"],
        "hidden": hidden,
        "unique_parameters": s["parameters"]["unique"],
        "seconds_compile": t_compile,
        "seconds_forward": t_forward,
        "max_abs_err_weights": rep.max_abs_err_weights,
        "max_abs_err_prediction": rep.max_abs_err_prediction,
        "eps_grad": rep.eps_grad,
        "grad_budget": rep.grad_budget,
        "trajectory_error": rep.trajectory_error,
        "corollary_bound_budget": rep.corollary_bound_budget,
        "range_ratio": ratio,
        "verdict": rep.verdict,
    }
    return data_row(data), data


def data_row(d: dict[str, Any]) -> str:
    """The markdown row of one measurement."""
    return (
        f"| {d['activation']} | {d['eps']:.0e} | {d['sublayers_per_step']} | {d['heads']} | "
        f"{d['embedding_dim']} | {d['hidden']} | {d['unique_parameters']} | {d['seconds_compile']:.2f} | "
        f"{d['seconds_forward']:.2f} | {d['max_abs_err_weights']:.1e} | {d['max_abs_err_prediction']:.1e} | "
        f"{d['eps_grad']:.1e} | {d['grad_budget']:.1e} | {d['trajectory_error']:.1e} | "
        f"{d['corollary_bound_budget']:.1e} | {d['range_ratio']:.2f} | {d['verdict']} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--point", default="3,4,3,1,16,5", help="N,K,d_x,d_y,n,L (default 3,4,3,1,16,5)")
    ap.add_argument("--activations", default="relu,sigmoid", help="comma-separated activations")
    ap.add_argument("--eps", default="1e-2,1e-3,1e-4", help="comma-separated eps values")
    ap.add_argument("--radius", type=float, default=10.0, help="range R assumed for the product factors")
    ap.add_argument("--seed", type=int, default=0, help="prompt seed (icdl.construct.sample_task)")
    ap.add_argument("--out", type=Path, help="also write the rows and the command to this JSON file")
    a = ap.parse_args()
    point = tuple(int(v) for v in a.point.split(","))
    print(f"N,K,d_x,d_y,n,L = {point}, radius {a.radius}, seed {a.seed}")
    print(
        "| act | eps | sublayers/step | heads/step | D | hidden/step | unique coef. | compile s | forward s "
        "| max abs err w | pred. err | ε (grad err) | budget | traj. err | Cor. 1.1 at budget | range ratio "
        "| verdict |"
    )
    print("|---" * 17 + "|")
    rows = []
    for act in a.activations.split(","):
        for eps in (float(e) for e in a.eps.split(",")):
            line, data = row(point, act, eps, a.radius, a.seed)
            rows.append(data)
            print(line, flush=True)
    if a.out is not None:
        from icdl.io import atomic_write_json, portable_command

        command = "python benchmarks/bench_softmax_eps.py " + portable_command(sys.argv[1:])
        atomic_write_json(a.out, {"command": command, "point": point, "radius": a.radius, "rows": rows})


if __name__ == "__main__":
    main()

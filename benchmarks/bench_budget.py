"""Measured gradient error against the a-priori budget (icdl.construct.bounds.budget), every variant and
activation.

For each variant, activation and seed: compile ``NetSpec(3, 3, 2, 1)`` (n = 6, L = 3, lr = 0.2; eps 1e-3 and
R = 10, softmax eps 1e-2 and R = 4: the cases of tests/construct/bounds/test_budget.py), verify on
``sample_task(spec, 6, seed)`` and print one markdown row: verdict, the measured ``max_l eps_l``, the largest
step budget, the largest step ratio ``eps_l / budget_l``, the largest ``budget_l / ||∇L_n||`` (a step at or
above 1/2 cannot tell GD from no update: INCONCLUSIVE), the budget's parts (approximation, tolerance) and
the out-of-range count (docs/construction.md, "What PASS guarantees"); ``--json PATH`` also writes the rows.

    OMP_NUM_THREADS=1 python benchmarks/bench_budget.py --json docs/results/budget.json   # the docs table
    OMP_NUM_THREADS=1 python benchmarks/bench_budget.py --dtype float32 --variants paper,softmax
"""

from __future__ import annotations

import argparse
import json
import math

CASES = {
    "paper": ("relu", "sigmoid", "tanh", "softplus"),
    "compact": ("relu", "sigmoid", "tanh", "softplus"),
    "no-ewml": ("relu",),
    "rows": ("relu", "sigmoid", "tanh", "softplus"),
    "softmax": ("relu", "sigmoid", "tanh", "softplus"),
}


def row(variant: str, act: str, seed: int, dtype: str) -> dict:
    from icdl.construct import compile_gd_transformer, sample_task, verify
    from icdl.nets import NetSpec

    spec = NetSpec(3, 3, 2, 1, activation=act)
    eps, radius = (1e-2, 4.0) if variant == "softmax" else (1e-3, 10.0)
    model = compile_gd_transformer(
        spec, lr=0.2, steps=3, n=6, eps=eps, radius=radius, variant=variant, dtype=dtype
    )
    x, y, xq, w0, _ = sample_task(spec, 6, seed=seed)
    rep = verify(model, x, y, xq, w0)
    ratio = max(s.grad_l2 / s.budget_l2 for s in rep.steps)
    parts = rep.extra["budget_parts"]
    loose = max(s.budget_l2 / s.grad_norm if s.grad_norm > 0 else 0.0 for s in rep.steps)
    return {
        "variant": variant, "activation": act, "seed": seed, "dtype": dtype, "verdict": rep.verdict,
        "failures": rep.failures, "inconclusive": rep.inconclusive, "eps_grad": rep.eps_grad,
        "grad_budget": rep.grad_budget, "max_step_ratio": ratio, "max_budget_over_grad": loose,
        "approximation": parts["approximation"], "tolerance": parts["tolerance"],
        "out_of_range_count": rep.out_of_range_count, "max_abs_err_f": rep.max_abs_err_f,
        "prediction_bound": rep.prediction_bound,
    }  # fmt: skip


def markdown(r: dict) -> str:
    oor = "—" if r["out_of_range_count"] is None else str(r["out_of_range_count"])
    return (
        f"| {r['variant']} | {r['activation']} | {r['seed']} | {r['verdict']} | {r['eps_grad']:.1e} | "
        f"{r['grad_budget']:.1e} | {r['max_step_ratio']:.3g} | {r['max_budget_over_grad']:.3g} | "
        f"{r['approximation']:.1e} | {r['tolerance']:.1e} | {oor} | {r['max_abs_err_f']:.1e} | "
        f"{r['prediction_bound']:.1e} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(CASES), help="comma-separated variants")
    ap.add_argument("--seeds", default="100,101,102", help="comma-separated prompt seeds")
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    ap.add_argument("--json", default=None, help="also write the rows (and the command) to this JSON file")
    a = ap.parse_args()
    print(
        "| variant | act | seed | verdict | ε measured | budget | max step ratio | max budget / ‖∇L‖ "
        "| approximation | tolerance | out of range | ‖f(w_TF) − f(w_GD)‖ | prediction bound |"
    )
    print("|---" * 13 + "|")
    rows = []
    for variant in a.variants.split(","):
        for act in CASES[variant]:
            for seed in (int(s) for s in a.seeds.split(",")):
                rows.append(row(variant, act, seed, a.dtype))
                print(markdown(rows[-1]), flush=True)
    if a.json:
        cmd = "OMP_NUM_THREADS=1 python benchmarks/bench_budget.py " + " ".join(
            f"--{k} {v}" for k, v in (("variants", a.variants), ("seeds", a.seeds), ("dtype", a.dtype))
        )
        clean = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
                 for r in rows]  # fmt: skip
        with open(a.json, "w") as f:
            json.dump({"command": cmd, "rows": clean}, f, indent=1)


if __name__ == "__main__":
    main()

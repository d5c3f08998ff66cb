"""Measured gradient error against the a-priori budget (icdl.construct.budget), every variant and activation.

For each variant, activation and seed: compile ``NetSpec(3, 3, 2, 1)`` (n = 6, L = 3, lr = 0.2; eps 1e-3 and
R = 10, softmax eps 1e-2 and R = 4: the cases of tests/construct/test_budget.py), verify on
``sample_task(spec, 6, seed)`` and print one markdown row: verdict, the measured ``max_l eps_l``, the largest
step budget, the largest step ratio ``eps_l / budget_l``, the budget's parts (approximation, tolerance) and
the out-of-range count (docs/construction.md, "What PASS guarantees").

    OMP_NUM_THREADS=1 python benchmarks/bench_budget.py                       # the docs table
    OMP_NUM_THREADS=1 python benchmarks/bench_budget.py --dtype float32 --variants paper,softmax
"""

from __future__ import annotations

import argparse

CASES = {
    "paper": ("relu", "sigmoid", "tanh", "softplus"),
    "compact": ("relu", "sigmoid", "tanh", "softplus"),
    "no-ewml": ("relu",),
    "rows": ("relu", "sigmoid", "tanh", "softplus"),
    "softmax": ("relu", "sigmoid", "tanh", "softplus"),
}


def row(variant: str, act: str, seed: int, dtype: str) -> str:
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
    oor = "—" if rep.out_of_range_count is None else str(rep.out_of_range_count)
    return (
        f"| {variant} | {act} | {seed} | {rep.verdict} | {rep.eps_grad:.1e} | {rep.grad_budget:.1e} | "
        f"{ratio:.3g} | {parts['approximation']:.1e} | {parts['tolerance']:.1e} | {oor} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(CASES), help="comma-separated variants")
    ap.add_argument("--seeds", default="100,101,102", help="comma-separated prompt seeds")
    ap.add_argument("--dtype", default="float64", choices=("float64", "float32"))
    a = ap.parse_args()
    print(
        "| variant | act | seed | verdict | ε measured | budget | max step ratio | approximation "
        "| tolerance | out of range |"
    )
    print("|---" * 10 + "|")
    for variant in a.variants.split(","):
        for act in CASES[variant]:
            for seed in (int(s) for s in a.seeds.split(",")):
                print(row(variant, act, seed, a.dtype), flush=True)


if __name__ == "__main__":
    main()

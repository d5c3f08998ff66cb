"""Compare the registered construction variants (docs/construction.md, "Variants compared").

For every variant in ``icdl.construct.VARIANTS`` and every point (N, K, n, L) of one small grid (ReLU
network, d_x = 3, d_y = 2, squared loss, float64, seed 0, lr 0.1), compile, run and verify, and print one
markdown row: sublayers per step, heads per step (all attention/EWML heads of one block), the largest
sublayer's heads, embedding dimension D, parameters (unique stored coefficients: one block + readout),
non-zeros (all L blocks + readout), compile seconds, forward seconds (median of 3 untraced passes), and the
errors max |w_TF - w_GD| and |prediction - f(w_GD, x_query)|.

    OMP_NUM_THREADS=1 python benchmarks/bench_variants.py
    OMP_NUM_THREADS=1 python benchmarks/bench_variants.py --grid 2,4,8,3 --variants paper,compact

``--eps`` and ``--range`` (default 1e-3 and 4) only matter for variants with approximate products (softmax).
"""

from __future__ import annotations

import argparse
import statistics
import time

GRID = ((2, 4, 16, 5), (3, 8, 16, 5), (3, 16, 32, 5))


def row(variant: str, N: int, K: int, n: int, L: int, eps: float, radius: float) -> str:
    from icdl.construct import GDConfig, compile_gd_transformer, sample_task, verify
    from icdl.nets import NetSpec

    spec = NetSpec(N, K, 3, 2)
    cfg = GDConfig(spec=spec, lr=0.1, steps=L, n=n, eps=eps, radius=radius, variant=variant)
    x, y, xq, w0, _ = sample_task(spec, n, seed=0)
    t0 = time.perf_counter()
    model = compile_gd_transformer(cfg)
    t_compile = time.perf_counter() - t0
    H = model.build_prompt(x, y, xq, w0)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        model(H)
        times.append(time.perf_counter() - t0)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    s = model.summary()
    heads = sum(i.heads for i in model.infos())
    return (
        f"| {variant} | {N} | {K} | {n} | {L} | {s['sublayers_per_step']} | {heads} | {s['max_heads']} | "
        f"{s['embedding_dim']} | {s['parameters']['unique']:,} | {s['nonzero_parameters']:,} | "
        f"{t_compile:.3f} | {statistics.median(times):.3f} | {rep.max_abs_err_weights:.1e} | "
        f"{rep.max_abs_err_prediction:.1e} | {'yes' if rep.passed else 'NO'} |"
    )


def main() -> None:
    from icdl.construct import VARIANTS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", nargs="*", help="points N,K,n,L (default: the docs grid)")
    default = ["paper", *(v for v in VARIANTS if v != "paper")]
    ap.add_argument("--variants", default=",".join(default), help="comma-separated (default: all)")
    ap.add_argument("--eps", type=float, default=1e-3)
    ap.add_argument("--range", dest="radius", type=float, default=4.0)
    args = ap.parse_args()
    grid = [tuple(int(v) for v in p.split(",")) for p in args.grid] if args.grid else GRID
    print(
        "| variant | N | K | n | L | sublayers/step | heads/step | max heads | D | parameters | non-zeros "
        "| compile s | forward s | max abs err w | pred. err | verified |"
    )
    print("|---" * 16 + "|")
    for point in grid:
        for v in args.variants.split(","):
            print(row(v, *point, eps=args.eps, radius=args.radius), flush=True)


if __name__ == "__main__":
    main()

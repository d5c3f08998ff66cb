"""Benchmark the row-token construction (``--variant rows``) against the paper's layout and a lean GD loop.

Three modes (float64, one thread unless --threads; the machine may be shared, so times are upper bounds):

    OMP_NUM_THREADS=1 python benchmarks/bench_rows.py --ratio          # forward / lean GD, every variant
    OMP_NUM_THREADS=1 python benchmarks/bench_rows.py --scale          # N=6 K=64 d_x=16 n=256 L=50, rows
    OMP_NUM_THREADS=1 python benchmarks/bench_rows.py --grid --json docs/results/rows_grid.json \
        --plot docs/results/rows_vs_paper.png                          # paper vs rows over a small grid

Reported per run: embedding dimension D, tokens, max heads, stored parameters, non-zero parameters (dense
form), peak RSS (ru_maxrss of a fresh subprocess, torch itself included), compile and forward seconds
(steady state: the best single call of --repeats runs of consecutive calls, each about 0.2 s, interleaved
with the GD loop's runs), the lean GD loop's seconds (plain matmuls: forward, backward, update; checked
against ``icdl.nets.reference_gd``), the ratio, the FLOPs the forward performs
(matmul and gather multiply-adds actually executed, 2 per MAC; :func:`performed_flops`) with the achieved
GFLOP/s, the machine's float64 matmul rate (one 512 x 512 matmul), and max |w_TF - w_GD| (w read from the
row tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from icdl.io import atomic_write_json

RATIO_POINT = (3, 16, 8, 1, 64, 10)  # N, K, d_x, d_y, n, L
SCALE_POINT = (6, 64, 16, 1, 256, 50)
K_SWEEP = [(3, K, 8, 1, 64, 10) for K in (4, 8, 16, 32, 64)]  # the plot's x axis
GRID = [*K_SWEEP, (2, 16, 8, 1, 32, 10), (4, 16, 4, 3, 64, 10), (6, 32, 16, 1, 128, 10)]


def performed_flops(model: Any, batch: int = 1) -> int:
    """Multiply-add FLOPs (2 per MAC) one forward pass executes: for :class:`RowAttention` the score
    matmuls (distinct heads per part) and value matmul over its token ranges (groups merged as its forward
    merges them); for the generic ReLU
    attention every head's ``T x T`` scores and values (its fast paths excluded: an upper bound); EWML per
    token; MLPs ``2 T`` per stored non-zero read and write (they gather, they do not multiply dense
    matrices)."""
    import torch

    from icdl.construct.engine.layers import EWML, ReLUAttention, ReLUMLP
    from icdl.construct.engine.row_layers import RowAttention, RowMLP, _merged_groups

    T = model.layout.prefix_tokens + model.n + 1

    def count(m: Any) -> int:
        if isinstance(m, RowAttention):
            total = 0
            # the groups the forward evaluates: merged while small (flat plan), else the builder's groups
            probe = torch.zeros(batch, T, m.dim, dtype=m.q_coef.dtype)
            groups = _merged_groups(m, T) if m._plan(probe) is not None else m._groups
            for hs, queries, keys, parts in groups:
                tq, tk = len(range(T)[queries]), len(range(T)[keys])
                score = sum(int(first.numel()) * (cols.stop - cols.start) for cols, first, _ in parts)
                value = (hs.stop - hs.start) * int(m.v_src.shape[1])
                total += 2 * batch * tq * tk * (score + value)
            return total
        if isinstance(m, (ReLUAttention, EWML)):
            return batch * m.info.flops(T, model.embedding_dim)
        if isinstance(m, RowMLP):
            return sum(
                2
                * batch
                * len(range(T)[toks])
                * (int((m.w1_coef[us] != 0).sum()) + int((m.w2_coef[us] != 0).sum()))
                for us, toks in m._groups
            )
        if isinstance(m, ReLUMLP):
            return 2 * batch * T * (int((m.w1_coef != 0).sum()) + int((m.w2_coef != 0).sum()))
        raise TypeError(type(m).__name__)

    per_block = sum(count(m) for m in model.block_layers)
    return model.steps * per_block + sum(count(m) for m in model.readout_layers)


def lean_gd(Vs: list[Any], x: Any, y: Any, lr: float, steps: int) -> list[Any]:
    """Plain float64 GD on ``L_n = (1/(2n)) sum_i ||f(x_i) - y_i||^2`` for a bias-free ReLU network
    (ReLU at every layer, as ``NetSpec(output="same")``): matmuls only."""
    import torch

    n = x.shape[0]
    Vs = [V.clone() for V in Vs]
    for _ in range(steps):
        acts, masks = [x], []
        for V in Vs:
            z = acts[-1] @ V.T
            masks.append(z > 0)
            acts.append(torch.relu(z))
        delta = (acts[-1] - y) * masks[-1] / n
        for j in range(len(Vs) - 1, -1, -1):
            grad = delta.T @ acts[j]
            if j > 0:
                delta = (delta @ Vs[j]) * masks[j - 1]
            Vs[j] -= lr * grad
    return Vs


def matmul_rate(size: int = 512, repeats: int = 5) -> float:
    """GFLOP/s of one float64 ``size x size`` matmul on this process's threads (best of ``repeats``)."""
    import torch

    a = torch.randn(size, size, dtype=torch.float64)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best / 1e9


def run_point(
    variant: str, N: int, K: int, dx: int, dy: int, n: int, L: int, repeats: int, check: bool
) -> dict[str, Any]:
    import resource

    import torch

    from icdl.construct import compile_gd_transformer, sample_task, verify
    from icdl.nets import NetSpec, forward, reference_gd, unflatten

    spec = NetSpec(N, K, dx, dy)
    x, y, xq, w0, _ = sample_task(spec, n, seed=0)
    t0 = time.perf_counter()
    model = compile_gd_transformer(spec, lr=0.1, steps=L, n=n, variant=variant)
    t_compile = time.perf_counter() - t0
    H = model.build_prompt(x, y, xq, w0)
    fw, gd = [], []
    Vs = unflatten(spec, w0)
    # steady state: after a first call (which builds the sublayers' plans), each repeat times a run of
    # consecutive calls lasting about 0.2 s (one call where a call takes longer), the forward's run and the
    # lean loop's in turn; the best single call of each is reported
    t0 = time.perf_counter()
    out = model(H)
    inner = max(1, min(50, int(0.2 / max(time.perf_counter() - t0, 1e-6))))
    lean = lean_gd(Vs, x, y, 0.1, L)
    for _ in range(repeats):
        for _ in range(inner):
            t0 = time.perf_counter()
            out = model(H)
            fw.append(time.perf_counter() - t0)
        for _ in range(inner):
            t0 = time.perf_counter()
            lean = lean_gd(Vs, x, y, 0.1, L)
            gd.append(time.perf_counter() - t0)
    ref = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=L)
    w_lean = torch.cat([V.reshape(-1) for V in lean])
    assert float((w_lean - ref[-1]).abs().max()) <= 1e-10 * max(1.0, float(ref.abs().max()))
    W = model.read_weights(out)[0]
    pred_err = float((model.read_prediction(out)[0] - forward(spec, ref[-1], xq[None])[0]).abs().max())
    t_fw, t_gd = min(fw), min(gd)  # the least disturbed call on a shared machine
    flops = performed_flops(model)
    counts = model.parameter_counts()
    res: dict[str, Any] = {
        "variant": variant,
        "N": N,
        "K": K,
        "d_x": dx,
        "d_y": dy,
        "n": n,
        "L": L,
        "embedding_dim": model.embedding_dim,
        "tokens": int(H.shape[1]),
        "max_heads": model.max_heads,
        "sublayers_per_step": model.sublayers_per_step,
        "parameters_stored": counts["stored"],
        "parameters_nonzero": counts["nonzero"],
        "seconds_compile": t_compile,
        "seconds_forward": t_fw,
        "seconds_lean_gd": t_gd,
        "ratio": t_fw / t_gd,
        "flops": flops,
        # the lean loop's multiply-adds (2 per MAC): forward, backward and the gradient, 6 n P per step
        "flops_lean_gd": 6 * n * spec.num_params * L,
        "flop_ratio": flops / (6 * n * spec.num_params * L),
        "gflops_per_s": flops / t_fw / 1e9,
        "matmul_gflops_per_s": matmul_rate(),
        "max_abs_err_weights": float((W - ref[-1]).abs().max()),
        "max_abs_err_prediction": pred_err,
        "gd_moves_w": float((ref[-1] - ref[0]).abs().max()),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "threads": torch.get_num_threads(),
    }
    if check:  # per-sublayer verification on 2 steps (the trace keeps every state: memory ~ L)
        m2 = compile_gd_transformer(spec, lr=0.1, steps=2, n=n, variant=variant)
        rep = verify(m2, x, y, xq, w0, lipschitz_iters=0)
        res["verify_2_steps_passed"] = rep.passed
        res["verify_2_steps_max_sublayer_err"] = rep.max_sublayer_err
    return res


def _subprocess(variant: str, point: tuple[int, ...], repeats: int, threads: int, check: bool) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [sys.executable, __file__, "--point", ",".join(map(str, point)), "--variant", variant]
    cmd += ["--repeats", str(repeats), "--threads", str(threads)] + (["--check"] if check else [])
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


COLS = [
    ("variant", "{}"),
    ("N", "{}"),
    ("K", "{}"),
    ("d_x", "{}"),
    ("n", "{}"),
    ("L", "{}"),
    ("embedding_dim", "{}"),
    ("tokens", "{}"),
    ("max_heads", "{}"),
    ("parameters_stored", "{:,}"),
    ("parameters_nonzero", "{:,}"),
    ("peak_rss_mb", "{:.0f}"),
    ("seconds_compile", "{:.3f}"),
    ("seconds_forward", "{:.3f}"),
    ("seconds_lean_gd", "{:.4f}"),
    ("ratio", "{:.1f}"),
    ("flop_ratio", "{:.1f}"),
    ("flops", "{:.2e}"),
    ("gflops_per_s", "{:.2f}"),
    ("max_abs_err_weights", "{:.1e}"),
]


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| " + " | ".join(c for c, _ in COLS) + " |", "|" + "---|" * len(COLS)]
    out += ["| " + " | ".join(f.format(r[c]) for c, f in COLS) + " |" for r in rows]
    return "\n".join(out)


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """Embedding dimension (theory formulas, measured points) and forward time against K for both
    layouts, on the K sweep of the grid (N=3, d_x=8, d_y=1, n=64, L=10)."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from icdl import theory
    from icdl.construct.variants.rows import rows_embedding_dim
    from icdl.nets import NetSpec

    N, _, dx, dy, n, L = K_SWEEP[0]
    ks = list(range(2, 129))
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.plot(ks, [theory.embedding_dim(NetSpec(N, k, dx, dy)) for k in ks], label="paper layout (formula)")
    a.plot(ks, [rows_embedding_dim(NetSpec(N, k, dx, dy)) for k in ks], label="row tokens (formula)")
    for v, mk in (("paper", "o"), ("rows", "s")):
        pts = [
            (r["K"], r)
            for r in rows
            if r["variant"] == v and (r["N"], r["d_x"], r["n"], r["L"]) == (N, dx, n, L)
        ]
        a.plot([k for k, _ in pts], [r["embedding_dim"] for _, r in pts], mk, color="k", ms=4)
        b.plot([k for k, _ in pts], [r["seconds_forward"] for _, r in pts], mk + "-", label=f"{v}")
    lean = [
        (r["K"], r["seconds_lean_gd"]) for r in rows if r["variant"] == "rows" and r["N"] == N and r["n"] == n
    ]
    b.plot([k for k, _ in lean], [t for _, t in lean], "x:", label="lean GD loop")
    a.set(
        xlabel="K",
        ylabel="embedding dimension D",
        xscale="log",
        yscale="log",
        title=f"N={N}, d_x={dx}, d_y={dy}",
    )
    b.set(
        xlabel="K",
        ylabel="forward seconds (float64, 1 thread)",
        xscale="log",
        yscale="log",
        title=f"n={n}, L={L} GD steps",
    )
    ticks = sorted({p[1] for p in K_SWEEP})
    for ax in (a, b):
        ax.set_xticks(ticks, labels=[str(k) for k in ticks])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    a.legend()
    b.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ratio", action="store_true", help="forward / lean GD at N=3 K=16 d_x=8 n=64 L=10")
    ap.add_argument("--scale", action="store_true", help="rows at N=6 K=64 d_x=16 n=256 L=50")
    ap.add_argument("--grid", action="store_true", help="paper vs rows over a small grid")
    ap.add_argument("--point", help="one point N,K,d_x,d_y,n,L in this process (prints JSON)")
    ap.add_argument("--variant", default="rows")
    ap.add_argument("--check", action="store_true", help="also run verify() on 2 steps at the same size")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="also write the rows to this JSON file")
    ap.add_argument("--plot", help="with --grid: write the D / forward-time plot (PNG) here")
    ap.add_argument("--from-json", help="re-plot and re-print a --json file instead of measuring")
    args = ap.parse_args()

    if args.point:
        import torch

        torch.set_num_threads(args.threads)
        N, K, dx, dy, n, L = (int(v) for v in args.point.split(","))
        print(json.dumps(run_point(args.variant, N, K, dx, dy, n, L, args.repeats, args.check)))
        return
    rows: list[dict[str, Any]] = []
    if args.from_json:
        with open(args.from_json) as f:
            rows = json.load(f)
    if args.ratio:
        for v in ("paper", "compact", "no-ewml", "rows"):
            rows.append(_subprocess(v, RATIO_POINT, args.repeats, args.threads, False))
    if args.scale:
        rows.append(_subprocess("rows", SCALE_POINT, 1, args.threads, True))
    if args.grid:
        for point in GRID:
            for v in ("paper", "rows"):
                rows.append(_subprocess(v, point, args.repeats, args.threads, False))
    print(table(rows))
    if args.scale:
        r = rows[-1]
        print(
            f"scale: compile + forward = {r['seconds_compile'] + r['seconds_forward']:.1f} s; "
            f"verify() on 2 steps passed: {r['verify_2_steps_passed']} "
            f"(max sublayer err {r['verify_2_steps_max_sublayer_err']:.1e})"
        )
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        atomic_write_json(args.json, rows, indent=2)


if __name__ == "__main__":
    main()

"""Benchmark the compiled GD transformer: compile time, forward time, peak memory, forward / reference GD.

Each grid point runs in a fresh subprocess (so the peak RSS is its own), single-threaded unless --threads.

    OMP_NUM_THREADS=1 python benchmarks/bench_construct.py                 # default grid, markdown table
    python benchmarks/bench_construct.py --quick --json out.json           # small grid, also write JSON
    python benchmarks/bench_construct.py --point 3,16,64,10 --activation sigmoid --eps 1e-4

Columns: N, K, d_x, d_y, n, L, activation, eps; D (embedding dim); max heads; compile s; forward s (median of
--repeats runs of all (2N+4)L + readout sublayers on one prompt, float64); reference s (median, plain torch GD
with the Lemma 1 gradient); ratio = forward / reference; peak RSS MB (resource.ru_maxrss of the subprocess,
which includes ~300 MB of torch itself); max |w_TF - w_GD|.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from icdl.io import atomic_write_json

DEFAULT_GRID = [
    (2, 8, 16, 10),
    (3, 8, 16, 10),
    (3, 16, 16, 10),
    (3, 16, 64, 10),
    (3, 16, 256, 10),
    (3, 32, 64, 10),
    (4, 16, 64, 10),
    (6, 16, 64, 10),
    (3, 16, 64, 50),
]
QUICK_GRID = [(2, 8, 16, 5), (3, 16, 64, 10)]


def run_point(
    N: int, K: int, n: int, L: int, act: str, eps: float, dx: int, dy: int, repeats: int
) -> dict[str, Any]:
    """Measure one configuration in this process."""
    import resource

    import torch

    from icdl.construct import compile_gd_transformer, sample_task
    from icdl.nets import NetSpec, reference_gd

    spec = NetSpec(N, K, dx, dy, activation=act)
    x, y, xq, w0, _ = sample_task(spec, n, seed=0)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    model = compile_gd_transformer(spec, lr=0.1, steps=L, n=n, eps=eps)
    t_compile = time.perf_counter() - t0
    H = model.build_prompt(x, y, xq, w0)
    fw, rf = [], []
    out = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = model(H)
        fw.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ref = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=L)
        rf.append(time.perf_counter() - t0)
    assert out is not None
    err = float((model.read_weights(out)[0] - ref[-1]).abs().max())
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t_fw, t_rf = statistics.median(fw), statistics.median(rf)
    return {
        "N": N,
        "K": K,
        "d_x": dx,
        "d_y": dy,
        "n": n,
        "L": L,
        "activation": act,
        "eps": eps,
        "embedding_dim": model.embedding_dim,
        "max_heads": model.max_heads,
        "sublayers": model.num_sublayers + model.readout_sublayers,
        "seconds_compile": t_compile,
        "seconds_forward": t_fw,
        "seconds_reference": t_rf,
        "ratio": t_fw / t_rf,
        "peak_rss_mb": rss1 / 1024,
        "rss_growth_mb": (rss1 - rss0) / 1024,
        "max_abs_err_weights": err,
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="two grid points only")
    ap.add_argument("--point", help="one point N,K,n,L (runs in-process)")
    ap.add_argument("--activation", default="relu")
    ap.add_argument("--eps", type=float, default=1e-4)
    ap.add_argument("--in-dim", type=int, default=8)
    ap.add_argument("--out-dim", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="also write the rows to this JSON file")
    ap.add_argument("--sigmoid", action="store_true", help="add sigmoid (eps=--eps) rows for the grid")
    args = ap.parse_args()

    if args.point:
        import torch

        torch.set_num_threads(args.threads)
        N, K, n, L = (int(v) for v in args.point.split(","))
        print(
            json.dumps(
                run_point(N, K, n, L, args.activation, args.eps, args.in_dim, args.out_dim, args.repeats)
            )
        )
        return

    grid = QUICK_GRID if args.quick else DEFAULT_GRID
    acts = ["relu", "sigmoid"] if args.sigmoid else [args.activation]
    rows = []
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    for act in acts:
        for N, K, n, L in grid:
            cmd = [
                sys.executable,
                __file__,
                "--point",
                f"{N},{K},{n},{L}",
                "--activation",
                act,
                "--eps",
                str(args.eps),
                "--in-dim",
                str(args.in_dim),
                "--out-dim",
                str(args.out_dim),
                "--repeats",
                str(args.repeats),
                "--threads",
                str(args.threads),
            ]
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
            rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"done {act} N={N} K={K} n={n} L={L}: forward {r['seconds_forward']:.3f}s", file=sys.stderr)
    cols = ["N", "K", "n", "L", "act", "D", "max heads", "compile s", "forward s", "reference s", "ratio"]
    cols += ["peak RSS MB", "max err w"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        act = r["activation"] + ("" if r["activation"] == "relu" else f" (eps {r['eps']:g})")
        print(
            f"| {r['N']} | {r['K']} | {r['n']} | {r['L']} | {act} | {r['embedding_dim']} | "
            f"{r['max_heads']} | "
            f"{r['seconds_compile']:.3f} | {r['seconds_forward']:.3f} | {r['seconds_reference']:.4f} | "
            f"{r['ratio']:.0f} | {r['peak_rss_mb']:.0f} | {r['max_abs_err_weights']:.1e} |"
        )
    if args.json:
        atomic_write_json(args.json, rows, indent=2)


if __name__ == "__main__":
    main()

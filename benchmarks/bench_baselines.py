"""Wall time and R²(k) of every baseline on a typical evaluation batch (docs/baselines.md).

Prompts: ``--prompts`` x ``--points`` points, d = 20, x ~ N(-2, I), labels from fresh 6-layer bias-free ReLU
networks (width 64, He scaling, linear output) — the CPU configuration of docs/protocol.md.
Run with one thread, e.g.::

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/bench_baselines.py --out bench.json

``--tuned`` instead times only the tuned baselines ``ridge_tuned`` and ``kernel`` (icdl.icl.baselines.kernel)
on ``--tuned-prompts`` x ``--tuned-points`` prompts of the centred task (configs/cpu-centred.yaml), λ tuned
on 640 held-out prompts first::

    OMP_NUM_THREADS=2 python benchmarks/bench_baselines.py --tuned --threads 2

The paper's MLP baseline is expensive (one 6-layer width-200 network per prompt and k); it runs on
``--mlp-prompts`` prompts and the prefix lengths ``--mlp-ks`` only, and its time is reported per k.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from icdl import nets
from icdl.icl import metrics
from icdl.icl.baselines import kernel as kr
from icdl.icl.baselines import simple as bl
from icdl.io import portable_path

SHOW_K = (0, 1, 2, 5, 10, 20, 30, 45)


def _prompts(B: int, n: int, d: int, depth: int, width: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    spec = nets.NetSpec(depth, width, d, 1, output="linear")
    w = nets.init_weights(spec, (B,), generator=g, fan_in_scaling=True)
    xs = torch.randn(B, n, d, generator=g) - 2
    return xs, nets.forward(spec, w, xs)


def _row(name: str, seconds: float, preds: torch.Tensor, ys: torch.Tensor, **meta: object) -> dict:
    res = metrics.evaluate(name, preds, ys, meta={"seconds": seconds, **meta})
    shown = {k: res.r2[k] for k in SHOW_K if k < len(res.r2)}
    print(f"{name:28s} {seconds:8.2f} s  " + " ".join(f"k={k}:{v:.3f}" for k, v in shown.items()), flush=True)
    return res.to_dict()


def bench_tuned(num: int, points: int, seed: int) -> None:
    """Wall time of tuning (640 held-out prompts) and predicting (``num`` prompts) for the tuned baselines."""
    from icdl.config import load_config
    from icdl.icl.tasks import sample_batch

    task = load_config("cpu-centred").task

    def draw(n_prompts: int, s: int) -> tuple[torch.Tensor, torch.Tensor]:
        pb = sample_batch(task, n_prompts, seed=s, points=points)
        return pb.xs.double(), pb.ys.double()

    xs, ys = draw(num, seed)
    xv, yv = draw(640, seed + 1)
    for base in (kr.RidgeTunedBaseline(), kr.KernelBaseline(depth=task.depth, width=task.width)):
        t = time.perf_counter()
        base.tune(xv, yv)
        tune_s = time.perf_counter() - t
        t = time.perf_counter()
        preds = base(xs, ys)
        pred_s = time.perf_counter() - t
        r2 = metrics.r2_curve(preds, ys)
        print(
            f"{base.name:12s} tune {tune_s:6.1f} s ({len(base.lambdas)} λ x 640 prompts), "
            f"predict {pred_s:6.1f} s "
            f"({num} prompts x {points} points, {len(set(base.lam_per_k(points)))} distinct λ); "
            f"mean R² k=1..{points - 1}: {float(r2[1:].mean()):.3f}",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=640)
    ap.add_argument("--points", type=int, default=46)
    ap.add_argument("--dim", type=int, default=20)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--target-width", type=int, default=64)
    ap.add_argument("--gd-steps", type=int, default=5)
    ap.add_argument("--mlp-prompts", type=int, default=128)
    ap.add_argument("--mlp-ks", default="1,5,10,20,30,45")
    ap.add_argument("--mlp-width", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--tuned", action="store_true", help="time only ridge_tuned and kernel (see above)")
    ap.add_argument("--tuned-prompts", type=int, default=6400)
    ap.add_argument("--tuned-points", type=int, default=76)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.tuned:
        bench_tuned(args.tuned_prompts, args.tuned_points, args.seed)
        return

    xs, ys = _prompts(args.prompts, args.points, args.dim, args.depth, args.target_width, args.seed)
    xv, yv = _prompts(128, args.points, args.dim, args.depth, args.target_width, args.seed + 1)
    rows = []
    closed = [
        bl.ZeroBaseline(),
        bl.AveragingBaseline(),
        bl.LeastSquaresBaseline(),
        bl.LeastSquaresBaseline(intercept=False),
        bl.LeastSquaresBaseline(ridge=1.0),
        bl.KNNBaseline(),
    ]
    for base in closed:
        t = time.perf_counter()
        preds = base(xs, ys)
        rows.append(_row(base.name, time.perf_counter() - t, preds, ys))

    spec = nets.NetSpec(args.depth, args.target_width, args.dim, 1, output="linear")
    gd = bl.GDBaseline(spec, steps=args.gd_steps)
    t = time.perf_counter()
    gd.tune_step_size(xv, yv)
    tune_s = time.perf_counter() - t
    t = time.perf_counter()
    preds = gd(xs, ys)
    rows.append(_row(gd.name, time.perf_counter() - t, preds, ys, tuning=gd.tuning, tune_seconds=tune_s))
    print(f"  GD tuning on 128 prompts: {tune_s:.1f} s, chosen lr {gd.lr:g}", flush=True)

    ks = [int(k) for k in args.mlp_ks.split(",") if k]
    ks = [k for k in ks if k < args.points]
    mlp = bl.MLPBaseline(depth=args.depth, width=args.mlp_width, ks=ks, chunk=160)
    xm, ym = xs[: args.mlp_prompts], ys[: args.mlp_prompts]
    t = time.perf_counter()
    trace = mlp.trace(xm, ym)
    mlp_s = time.perf_counter() - t
    best, epochs = trace.best(ym)
    per_k = mlp_s / max(len(ks), 1)
    meta = {"ks": ks, "prompts": args.mlp_prompts, "seconds_per_k": per_k}
    rows.append(_row(f"{mlp.name.rsplit('_', 1)[0]}_last", mlp_s, trace.last(), ym, **meta))
    rows.append(_row(f"{mlp.name.rsplit('_', 1)[0]}_best", mlp_s, best, ym, best_epochs=epochs, **meta))
    print(f"  MLP: {per_k:.1f} s per k on {args.mlp_prompts} prompts; best epochs {epochs}", flush=True)

    if args.out is not None:
        report = {
            "args": vars(args) | {"out": portable_path(args.out)},
            "torch": torch.__version__,
            "rows": rows,
        }
        fd, tmp = tempfile.mkstemp(dir=args.out.parent or ".", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(report, f, indent=1)
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()

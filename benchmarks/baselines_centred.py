"""R²(k) of the tuned baselines ``ridge_tuned`` and ``kernel`` on the centred task (docs/baselines.md).

Prompts come from :func:`icdl.icl.tasks.sample_batch` with the task of ``configs/cpu-centred.yaml``
(d = 8, N(0, I) inputs, 3-layer bias-free ReLU targets of width 64, He-scaled, labels standardised per
task), in batches of 64 (batch b = step b of a seed, as ``icdl evaluate`` draws them). λ is tuned per k
on ``--tune-prompts`` HELD-OUT prompts (seed ``--seed + 1``), then the baselines are scored on
``--prompts`` test prompts (seed ``--seed``). Also records the averaging and ridge_1 (intercept) baselines
for reference, and the wall time. Run with one thread::

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/baselines_centred.py \
        --out docs/results/baselines_centred.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from icdl.config import TaskConfig, load_config
from icdl.icl import metrics
from icdl.icl.baselines import kernel as kr
from icdl.icl.baselines import simple as bl
from icdl.icl.baselines.gd_target import GDTargetBaseline
from icdl.icl.tasks import net_spec, sample_batch
from icdl.io import portable_path

SHOW_K = (5, 10, 20, 30, 40)


def prompts(task: TaskConfig, num: int, points: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``num`` prompts of ``points`` points in batches of 64 (float64)."""
    parts = [
        sample_batch(task, 64, seed=seed, step=b, points=points, count=min(64, num - s))
        for b, s in enumerate(range(0, num, 64))
    ]
    return torch.cat([p.xs for p in parts]).double(), torch.cat([p.ys for p in parts]).double()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="cpu-centred")
    ap.add_argument("--prompts", type=int, default=640)
    ap.add_argument("--tune-prompts", type=int, default=640)
    ap.add_argument("--points", type=int, default=46)
    ap.add_argument("--seed", type=int, default=987_654_321)
    ap.add_argument("--gd-target", action="store_true", help="also gd_target (slow), tuned on 32 prompts")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    task = load_config(args.config).task
    xs, ys = prompts(task, args.prompts, args.points, args.seed)
    xv, yv = prompts(task, args.tune_prompts, args.points, args.seed + 1)
    rows: dict[str, dict] = {}
    tuned = [
        kr.RidgeTunedBaseline(),
        kr.KernelBaseline.for_task(task),
    ]
    todo: list[bl.Baseline] = [bl.AveragingBaseline(), bl.LeastSquaresBaseline(ridge=1.0), *tuned]
    if args.gd_target:
        todo.append(GDTargetBaseline(net_spec(task)))
    for base in todo:
        t = time.perf_counter()
        tuning = None
        if isinstance(base, kr.TunedKernelRidge):
            base.tune(xv, yv)
            tuning = {"lam": base.lam, "grid": list(base.lambdas), "num_prompts": args.tune_prompts}
        elif isinstance(base, GDTargetBaseline):
            base.tune(xv[:32], yv[:32])
            tuning = base.tuning
        preds = base(xs, ys)
        secs = time.perf_counter() - t
        r2 = metrics.r2_curve(preds, ys).tolist()
        rows[base.name] = {
            "r2": r2,
            "r2_at": {str(k): r2[k] for k in SHOW_K if k < len(r2)},
            "mean_r2_k1_30": sum(r2[1:31]) / 30,
            "mean_r2_k31_45": sum(r2[31:46]) / len(r2[31:46]),
            "seconds": secs,
            "tuning": tuning,
        }
        shown = " ".join(f"k={k}:{r2[k]:.3f}" for k in SHOW_K if k < len(r2))
        print(
            f"{base.name:12s} {secs:7.1f} s  {shown}  mean k=31-45: {rows[base.name]['mean_r2_k31_45']:.3f}"
        )
    if args.out is not None:
        report = {
            "args": vars(args) | {"out": portable_path(args.out)},
            "task": task.model_dump(mode="json"),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "pooling": "pooled",
            "baselines": rows,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=args.out.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(report, f, indent=1)
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()

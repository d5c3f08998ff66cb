"""Wall time of the full baseline panel of ``icdl evaluate`` on one condition (docs/baselines.md, budgets).

Runs the baselines exactly as ``icdl evaluate`` does (``icdl.icl.evaluation.baseline_runs.run_baselines``,
the evaluation's defaults: 1,280 test prompts of the ``in-distribution`` suite's condition — 1.5x the training
length —, held-out prompts for tuning, ``mlp_tuned`` on the first 320 prompts, ``gd_target`` on the first
128 tuned on 32) for a config with optional overrides, and records each baseline's seconds, the total,
the threads and the load average::

    OMP_NUM_THREADS=2 python benchmarks/bench_panel.py --config cpu-centred \
        --out docs/results/bench_panel_cpu-centred.json
    OMP_NUM_THREADS=2 python benchmarks/bench_panel.py --config cpu-centred \
        --set task.dim=4 --set train.curriculum.dims.end=4 --out docs/results/bench_panel_d4-centred.json

The budget (issue 20) is 30 minutes for the whole panel on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from icdl.config import load_config
from icdl.icl.evaluation import baseline_runs, metrics
from icdl.icl.evaluation.evaluate import EvalOptions, parse_baselines
from icdl.icl.suites import EVAL_SEED, build_suite
from icdl.io import atomic_write_json

PANEL = "averaging,ridge,knn,ridge_tuned,kernel,mlp_tuned,gd_target"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--config", default="cpu-centred")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--baselines", default=PANEL)
    ap.add_argument("--prompts", type=int, default=None, help="test prompts [suite default, 1280]")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.overrides)
    opts = EvalOptions(baselines=parse_baselines(args.baselines), cost=False)
    st = build_suite("in-distribution", cfg, prompts=args.prompts, seed=EVAL_SEED)
    cond = st.conditions[0]
    pb = baseline_runs.draw_prompts(cond, st.prompts, st.seed)
    load0 = os.getloadavg()
    ranges = baseline_runs.k_ranges(st.train_examples, cond.points - 1)
    out = {
        "config": args.config,
        "overrides": args.overrides,
        "task": cfg.task.model_dump(mode="json"),
        "points": cond.points,
        "test_prompts": st.prompts,
        "threads": args.threads,
        "loadavg_start": [round(v, 2) for v in load0],
        "baselines": {},
    }
    total = 0.0
    for name in opts.baselines or ():
        (p,) = baseline_runs.run_baselines([name], cond, pb, cfg, st, opts, lambda what: None)
        m = p.preds.shape[0]
        r2 = metrics.r2_curve(p.preds.double(), pb.ys[:m].double())
        total += p.seconds
        out["baselines"][p.name] = {
            "kind": p.kind,
            "seconds": round(p.seconds, 2),
            "prompts": m,
            "mean_r2": {f"{lo}-{hi}": round(float(r2[lo : hi + 1].nanmean()), 4) for lo, hi in ranges},
            "fallbacks": p.meta.get("fallbacks"),
            "chosen": {key: p.meta[key] for key in ("lr", "steps") if key in p.meta} or None,
            "loadavg_after": round(os.getloadavg()[0], 2),
            "cpu_seconds_total": round(time.process_time(), 1),  # this process so far (load: wall > CPU)
        }
        if p.kind == "gd_target":  # the held-out grid: which (lr, steps) pairs are worth their cost
            out["baselines"][p.name]["tuning_mse"] = (p.meta.get("tuning") or {}).get("mse")
        out["total_seconds"] = round(total, 1)
        print(f"{p.name:<14} {p.seconds:8.1f} s  {out['baselines'][p.name]['mean_r2']}", flush=True)
        if args.out:  # after every baseline: a killed run keeps what it measured
            atomic_write_json(args.out, out)
    out["cpu_seconds"] = round(time.process_time(), 1)
    out["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    if args.out:
        atomic_write_json(args.out, out)
    print(f"total {total:.0f} s with {args.threads} threads, load {load0[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    if not args.out:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

"""The paper's cost comparison (App. A.3) re-measured for our models: one ICL forward pass against training
the 6-layer target network on the prompt for 100 epochs (issue 28, item 4).

The paper reports 3.3 GFLOP for the transformer's forward pass (``2 N_params T``, 22.4M parameters, T = 76)
against 7.6 GFLOP for training a 6-layer width-200 network on the 75 context examples for 100 epochs
(``6 P D``), and 1.38 s for the forward pass on an A100 against 4 s of training. For each attention (the
``paper-relu`` and ``paper-softmax`` presets: 12 blocks x 8 heads x 256, the paper's model size; weights
untrained, since neither FLOPs nor time depend on them) and 76-point prompts of the 6-layer task, this
records ``icdl.icl.training.cost.measure_cost``: the FLOP rules and the exact matmul count of the forward
pass, the MLP baseline's ``6 P D``, and the measured seconds of one forward pass over ``--prompts`` prompts
(median of 3) against training one network per prompt for 100 full-batch Adam epochs (once), on this
machine's CPU with ``--threads`` threads.

    OMP_NUM_THREADS=1 python benchmarks/bench_cost.py --out docs/results/cost_paper.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

from icdl.config import load_config
from icdl.icl.models import build_model
from icdl.icl.training.cost import measure_cost
from icdl.io import atomic_write_json


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", default="paper-relu,paper-softmax")
    p.add_argument("--depth", type=int, default=6, help="the target's depth (the paper's comparison: 6)")
    p.add_argument("--points", type=int, default=76, help="points per prompt (75 examples + the query)")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows: list[dict[str, Any]] = []
    for preset in args.presets.split(","):
        cfg = load_config(preset)
        cfg = cfg.model_copy(update={"task": cfg.task.model_copy(update={"depth": args.depth})})
        torch.manual_seed(0)
        model = build_model(cfg.model, cfg.task.dim, cfg.task.out_dim).eval()
        res = measure_cost(model, cfg, points=args.points, prompts=args.prompts, seed=0)
        res.update(preset=preset, attention=cfg.model.attention, target_depth=args.depth)
        rows.append(res)
        icl, mlp = res["icl"], res["mlp"]
        print(
            f"{preset}: ICL {icl['num_params']:,} params, "
            f"{icl['flops_rule_points'] / 1e9:.2f} GFLOP (2 N T), "
            f"exact {icl['flops_exact'] / 1e9:.2f} GFLOP, {icl['seconds_per_prompt'] * 1e3:.1f} ms/prompt; "
            f"MLP {mlp['num_params']:,} params, {mlp['flops_rule'] / 1e9:.2f} GFLOP (6 P D), "
            f"{mlp['seconds_per_prompt'] * 1e3:.0f} ms/prompt; time ratio {res['seconds_ratio']:.1f}",
            flush=True,
        )
    if args.out is not None:
        atomic_write_json(
            args.out,
            {
                "command": "python benchmarks/bench_cost.py " + " ".join(sys.argv[1:]),
                "threads": args.threads,
                "rows": rows,
            },
        )


if __name__ == "__main__":
    main()

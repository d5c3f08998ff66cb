"""Cost of in-context learning vs training the baseline network on the prompt: FLOPs and wall time.

The paper (App. A.3) says the trained transformer reaches the 6-layer network's R² with "3.3 billion vs.
7.6 billion FLOPs": ``2 N_params T`` for one forward pass (22M parameters, T = 76) against ``6 P D`` for
training the width-200 network (P = 168,000, D = 75 examples x 100 epochs); docs/protocol.md, FLOPs rebuilds
both numbers. This module computes the same two rules for a run, an exact matmul count of the ICL
forward pass (analytic, cross-checked against ``torch.utils.flop_counter``), and MEASURED wall times
here: one ICL forward pass over a batch of prompts against the MLP baseline's training on the same
prompts (its full context, all epochs).

FLOP convention: 2 FLOPs per multiply-add, matmuls only (layer norms, activations, softmax, residual
additions and Adam's element-wise update are not counted).
"""

from __future__ import annotations

import itertools
import statistics
import time
from typing import Any

import torch
from torch import Tensor

from icdl.config import Config, ModelConfig
from icdl.icl.baselines.simple import MLPBaseline
from icdl.icl.models import ICLTransformer
from icdl.icl.tasks import sample_batch
from icdl.paper_results import FLOPS as PAPER_FLOPS
from icdl.theory import training_flops, transformer_forward_flops

__all__ = ["count_flops", "icl_forward_flops", "measure_cost", "mlp_num_params", "mlp_training_flops"]


def icl_forward_flops(cfg: ModelConfig, d_x: int, d_y: int, points: int) -> int:
    """Exact matmul FLOPs of one [`ICLTransformer`][icdl.icl.models.ICLTransformer] forward pass on one prompt
    of ``points`` points.

    ``T = 2 * points`` interleaved tokens of width ``d_tok = max(d_x, d_y)``; per block: the fused qkv
    map ``2 T d 3d``, scores ``2 T^2 d`` and values ``2 T^2 d`` (all heads; the full ``T x T`` product is
    computed and then masked, as the implementation does), the output map ``2 T d^2`` and the MLP
    ``4 T d d_mlp``; plus the read-in ``2 T d_tok d`` and the read-out on the ``points`` x-tokens
    ``2 points d d_y``.
    """
    T, d = 2 * points, cfg.d_model
    per_block = 6 * T * d * d + 4 * T * T * d + 2 * T * d * d + 4 * T * d * cfg.d_mlp
    return 2 * T * max(d_x, d_y) * d + cfg.layers * per_block + 2 * points * d * d_y


def count_flops(model: ICLTransformer, xs: Tensor, ys: Tensor) -> int:
    """FLOPs of ``model(xs, ys)`` as counted by ``torch.utils.flop_counter.FlopCounterMode`` (2 per
    multiply-add). It equals [`icl_forward_flops`][icdl.icl.training.cost.icl_forward_flops] for ReLU
    attention; for softmax attention on CPU the counter does not see the fused attention kernel and misses its
    ``4 T^2 d`` FLOPs per block."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(xs, ys)
    return int(counter.get_total_flops())


def mlp_num_params(depth: int, width: int, d_x: int, d_y: int, *, bias: bool = True) -> int:
    """Parameters of the baseline MLP ``d_x -> width -> ... -> width -> d_y`` (``depth`` linear layers)."""
    sizes = [d_x, *([width] * (depth - 1)), d_y]
    return sum(a * b + (b if bias else 0) for a, b in itertools.pairwise(sizes))


def mlp_training_flops(depth: int, width: int, d_x: int, d_y: int, examples: int, epochs: int) -> float:
    """``6 P D`` for training the baseline MLP on ``examples`` points for ``epochs`` full-batch epochs
    (``D = examples * epochs``), one prompt."""
    return training_flops(mlp_num_params(depth, width, d_x, d_y), examples * epochs)


def _time(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure_cost(
    model: ICLTransformer,
    cfg: Config,
    *,
    points: int,
    prompts: int = 64,
    mlp_width: int = 200,
    mlp_epochs: int = 100,
    mlp_lr: float = 5e-3,
    seed: int = 0,
    repeats: int = 3,
) -> dict[str, Any]:
    """FLOPs and measured wall times of ICL vs training the MLP baseline, for prompts of ``points`` points.

    Both sides see the same ``prompts`` prompts of the training task (drawn with ``seed``): the ICL model
    predicts every prefix in one forward pass (median of ``repeats`` timed passes after a warm-up); the
    MLP baseline (``task.depth`` layers, ``mlp_width`` wide) trains one network per prompt on the full
    context ``k = points - 1`` for ``mlp_epochs`` full-batch Adam epochs (timed once). Returns a JSON-ready
    dict: FLOP counts per prompt (rules and exact), seconds per batch and per prompt, and the paper's numbers.
    """
    task = cfg.task
    k = points - 1
    batch = sample_batch(task, prompts, seed=seed, step=0, points=points)
    device = next(model.parameters()).device
    xs, ys = batch.xs.to(device), batch.ys.to(device)
    n_params = model.num_params
    exact = icl_forward_flops(cfg.model, task.dim, task.out_dim, points)
    counted = count_flops(model, xs[:1], ys[:1])

    def icl() -> None:
        with torch.no_grad():
            model(xs, ys)

    icl()  # warm-up
    icl_s = _time(icl, repeats)
    mlp = MLPBaseline(depth=task.depth, width=mlp_width, lr=mlp_lr, epochs=mlp_epochs, seed=seed, ks=[k])
    mlp_s = _time(lambda: mlp.trace(xs, ys), 1)
    p_mlp = mlp_num_params(task.depth, mlp_width, task.dim, task.out_dim)
    return {
        "points": points,
        "examples": k,
        "prompts": prompts,
        "threads": torch.get_num_threads(),
        "device": str(device),
        "icl": {
            "num_params": n_params,
            "flops_rule_points": transformer_forward_flops(n_params, points),
            "flops_rule_tokens": transformer_forward_flops(n_params, 2 * points),
            "flops_exact": exact,
            "flops_counted": counted,
            "seconds_batch": icl_s,
            "seconds_per_prompt": icl_s / prompts,
            "note": "one forward pass predicts at every prefix k = 0..points-1",
        },
        "mlp": {
            "depth": task.depth,
            "width": mlp_width,
            "epochs": mlp_epochs,
            "num_params": p_mlp,
            "flops_rule": training_flops(p_mlp, k * mlp_epochs),
            "seconds_batch": mlp_s,
            "seconds_per_prompt": mlp_s / prompts,
            "note": f"one network per prompt, trained on k = {k} examples only (each other k costs as much)",
        },
        "flops_ratio_rule": training_flops(p_mlp, k * mlp_epochs)
        / transformer_forward_flops(n_params, points),
        "seconds_ratio": mlp_s / icl_s if icl_s > 0 else None,
        "paper": dict(PAPER_FLOPS),
    }

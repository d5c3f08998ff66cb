"""Training throughput of the ICL transformer vs a HuggingFace GPT-2 backbone of the same size.

For each size (``cpu-small``: 4 x 64, MLP 256, 31 points; ``paper``: 12 x 256, MLP 1024, 51 points) and
each model, time full training steps on a fixed batch — forward, MSE loss, backward, gradient clipping,
AdamW — after a few warm-up steps, and report seconds per step, examples per second and achieved
FLOP/s. Models:

* ``icdl-relu`` / ``icdl-softmax``: :class:`icdl.icl.models.ICLTransformer`;
* ``hf-gpt2-sdpa`` / ``hf-gpt2-eager``: Garg et al.'s layout (read-in Linear, ``transformers.GPT2Model``
  fed ``inputs_embeds``, read-out Linear on x-tokens) — the backbone the paper's code used, with HF's
  SDPA and eager attention; skipped when ``transformers`` is not installed.

FLOPs per training step are counted analytically for the architecture (identical for all models of a
size): ``3 x forward``, forward = ``2 x (matmul weights) x tokens + 4 x layers x T^2 x d_model`` per
prompt (QK^T and AV with the full T x T score matrix, as the usual 6ND + 12LTd convention).

Usage::

    OMP_NUM_THREADS=2 python benchmarks/bench_train.py --threads 2 [--sizes cpu-small paper] [--steps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from icdl.config import load_config
from icdl.icl.models import ICLTransformer, build_model
from icdl.icl.tasks import sample_batch


@dataclass(frozen=True)
class Size:
    name: str
    preset: str
    points: int


SIZES = {
    "cpu-small": Size("cpu-small", "cpu-small", 31),
    "paper": Size("paper", "paper-relu", 51),
}


class GargGPT2(nn.Module):
    """Garg et al.'s TransformerModel layout around ``transformers.GPT2Model`` (from its description)."""

    def __init__(
        self, d_x: int, d_model: int, layers: int, heads: int, d_mlp: int, positions: int, attn: str
    ):
        super().__init__()
        from transformers import GPT2Config, GPT2Model

        conf = GPT2Config(
            n_positions=positions,
            n_embd=d_model,
            n_layer=layers,
            n_head=heads,
            n_inner=d_mlp,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            use_cache=False,
        )
        conf._attn_implementation = attn
        self.d_x = d_x
        self.read_in = nn.Linear(d_x, d_model)
        self.backbone = GPT2Model(conf)
        self.read_out = nn.Linear(d_model, 1)

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        B, n, d = xs.shape
        y_tok = F.pad(ys, (0, d - ys.shape[-1]))
        tok = torch.stack((xs, y_tok), dim=2).reshape(B, 2 * n, d)
        h = self.backbone(inputs_embeds=self.read_in(tok)).last_hidden_state
        return self.read_out(h[:, 0::2])


def flops_per_step(model: ICLTransformer, batch: int, points: int) -> float:
    """Analytic training FLOPs of one step (3 x forward) for the ICL architecture."""
    T = 2 * points
    d_model = model.read_in.out_features
    layers = len(model.blocks)
    matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    # read_out runs on x-tokens only: count it for T/2 tokens.
    per_prompt = 2 * (matmul - model.read_out.weight.numel()) * T + 2 * model.read_out.weight.numel() * points
    per_prompt += 4 * layers * T * T * d_model
    return 3.0 * per_prompt * batch


def time_steps(model: nn.Module, xs: torch.Tensor, ys: torch.Tensor, warmup: int, steps: int) -> float:
    """Median seconds per training step (forward, MSE, backward, clip, AdamW)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        loss = F.mse_loss(model(xs, ys), ys)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument(
        "--rounds", type=int, default=2, help="alternate the models this many times; keep the best"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object per measurement")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    try:
        import transformers

        hf_version = transformers.__version__
    except ImportError:
        hf_version = None
    load_before = os.getloadavg()
    print(
        f"# torch {torch.__version__}, transformers {hf_version or 'not installed (HF rows skipped)'}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, threads {args.threads}, "
        f"load avg {load_before[0]:.2f}"
    )
    rows = []
    for size_name in args.sizes:
        size = SIZES[size_name]
        cfg = load_config(size.preset)
        b = sample_batch(cfg.task, args.batch, seed=0, step=0, points=size.points)
        t0 = time.perf_counter()
        for s in range(5):
            sample_batch(cfg.task, args.batch, seed=0, step=s, points=size.points)
        sample_s = (time.perf_counter() - t0) / 5
        ref = build_model(cfg.model, cfg.task.dim, 1)
        flops = flops_per_step(ref, args.batch, size.points)
        m = cfg.model
        makers: dict[str, Callable[[], nn.Module]] = {
            "icdl-relu": lambda m=m, cfg=cfg: build_model(
                m.model_copy(update={"attention": "relu"}), cfg.task.dim, 1
            ),
            "icdl-softmax": lambda m=m, cfg=cfg: build_model(
                m.model_copy(update={"attention": "softmax"}), cfg.task.dim, 1
            ),
        }
        if hf_version is not None:
            for attn in ("sdpa", "eager"):
                makers[f"hf-gpt2-{attn}"] = lambda m=m, cfg=cfg, attn=attn: GargGPT2(
                    cfg.task.dim, m.d_model, m.layers, m.heads, m.d_mlp, 2 * m.max_points, attn
                )
        models = {}
        for name, make in makers.items():
            torch.manual_seed(0)
            models[name] = make()
        # Alternate the models over rounds and keep each one's best median: fair under changing load.
        best = {name: float("inf") for name in models}
        for _ in range(args.rounds):
            for name, model in models.items():
                best[name] = min(best[name], time_steps(model, b.xs, b.ys, args.warmup, args.steps))
        for name, model in models.items():
            # HF's 50,257-row token table is never used (inputs_embeds): count only the used weights.
            params = sum(p.numel() for n, p in model.named_parameters() if "wte" not in n)
            sec = best[name]
            row = {
                "size": size_name,
                "model": name,
                "params": params,
                "batch": args.batch,
                "points": size.points,
                "threads": args.threads,
                "s_per_step": sec,
                "examples_per_s": args.batch / sec,
                "gflop_per_step": flops / 1e9,
                "gflop_per_s": flops / sec / 1e9,
                "sample_s_per_batch": sample_s,
            }
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
    load_after = os.getloadavg()
    print(f"# load avg after: {load_after[0]:.2f}")
    print("| size | model | params | s/step | examples/s | GFLOP/step | GFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['size']} | {r['model']} | {r['params']:,} | {r['s_per_step']:.4f} | "
            f"{r['examples_per_s']:.0f} | "
            f"{r['gflop_per_step']:.2f} | {r['gflop_per_s']:.1f} |"
        )
    for size_name in args.sizes:
        srow = [r for r in rows if r["size"] == size_name]
        print(
            f"# {size_name}: sampling one batch of prompts takes {srow[0]['sample_s_per_batch'] * 1e3:.1f} ms"
        )


if __name__ == "__main__":
    main()

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

On ``--device cuda`` every model trains under bf16 autocast (``precision: auto``), times are taken
between ``torch.cuda.synchronize`` calls, and three more rows time the paths of ``docs/training.md``:
``icdl-softmax+compile`` (``torch.compile`` of the module), ``icdl-softmax+graph`` (the step of
``train.cuda_graph``, :class:`icdl.icl.training.fast.StaticStep`: one CUDA graph replay that also SAMPLES the
prompts on the device, so it does more work than the other rows, which reuse one fixed batch) and
``hf-gpt2-sdpa+compile``. ``% peak`` divides the achieved rate by ``--peak-tflops`` (default 989, the
dense bf16 rate of an H100/H200 SXM).

Usage::

    OMP_NUM_THREADS=2 python benchmarks/bench_train.py --threads 2 [--sizes cpu-small paper] [--steps 5]
    OMP_NUM_THREADS=1 python benchmarks/bench_train.py --threads 1 --sizes cpu-small --out results.json
    python benchmarks/bench_train.py --device cuda --sizes paper --batches 64 1024   # < 5 min on an H200
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
from icdl.icl.training.fast import StaticStep


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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(model: nn.Module, xs: torch.Tensor, ys: torch.Tensor, warmup: int, steps: int) -> float:
    """Median seconds per training step (forward, MSE, backward, clip, AdamW); bf16 autocast and
    fused AdamW on CUDA. On CUDA the median is taken over blocks of 10 steps (launches are async)."""
    cuda = xs.device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=cuda)

    def one() -> None:
        with torch.autocast(xs.device.type, dtype=torch.bfloat16, enabled=cuda):
            pred = model(xs, ys)
        loss = F.mse_loss(pred.float(), ys)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return _median_time(one, xs.device, warmup, steps)


def _median_time(one: Callable[[], None], device: torch.device, warmup: int, steps: int) -> float:
    block = 10 if device.type == "cuda" else 1
    for _ in range(warmup):
        one()
    _sync(device)
    times = []
    for _ in range(max(1, steps // block)):
        t0 = time.perf_counter()
        for _ in range(block):
            one()
        _sync(device)
        times.append((time.perf_counter() - t0) / block)
    times.sort()
    return times[len(times) // 2]


def time_graph_steps(
    preset: str, batch: int, points: int, device: torch.device, warmup: int, steps: int
) -> float:
    """Median seconds per step of the captured ``train.cuda_graph`` step (sampling included)."""
    cfg = load_config(
        preset,
        [
            "model.attention=softmax",
            f"train.batch_size={batch}",
            f"task.examples={points - 1}",
            "train.grad_clip=1.0",
        ],
    )
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.task.dim, 1).to(device)
    step = StaticStep(model, cfg, device)
    return _median_time(lambda: step.run(1e-4, None, None), device, max(warmup, 5), steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, nargs="+", help="several batch sizes (default: --batch)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 peak for the %% column (CUDA)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up steps [2 on CPU, 10 on CUDA]")
    ap.add_argument("--steps", type=int, default=None, help="timed steps [5 on CPU, 50 on CUDA]")
    ap.add_argument(
        "--rounds", type=int, default=2, help="alternate the models this many times; keep the best"
    )
    ap.add_argument("--json", action="store_true", help="print one JSON object per measurement")
    ap.add_argument("--out", help="also write the command, the load and every row to this JSON file")
    args = ap.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        ap.error("--device cuda but no CUDA device is available")
    warmup = args.warmup if args.warmup is not None else (10 if cuda else 2)
    steps = args.steps if args.steps is not None else (50 if cuda else 5)
    torch.set_num_threads(args.threads)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
    try:
        import transformers

        hf_version = transformers.__version__
    except ImportError:
        hf_version = None
    load_before = os.getloadavg()
    where = torch.cuda.get_device_name(device) if cuda else platform.processor() or platform.machine()
    print(
        f"# torch {torch.__version__}, transformers {hf_version or 'not installed (HF rows skipped)'}, "
        f"{where}, {os.cpu_count()} CPUs, threads {args.threads}, load avg {load_before[0]:.2f}"
    )
    rows = []
    for size_name, batch in [(s, b) for s in args.sizes for b in (args.batches or [args.batch])]:
        size = SIZES[size_name]
        cfg = load_config(size.preset)
        b = sample_batch(cfg.task, batch, seed=0, step=0, points=size.points, device=device)
        _sync(device)
        t0 = time.perf_counter()
        for s in range(5):
            sample_batch(cfg.task, batch, seed=0, step=s, points=size.points, device=device)
        _sync(device)
        sample_s = (time.perf_counter() - t0) / 5
        ref = build_model(cfg.model, cfg.task.dim, 1)
        flops = flops_per_step(ref, batch, size.points)
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
        if cuda:
            makers["icdl-softmax+compile"] = lambda make=makers["icdl-softmax"]: torch.compile(make())
            if hf_version is not None:
                makers["hf-gpt2-sdpa+compile"] = lambda make=makers["hf-gpt2-sdpa"]: torch.compile(make())
        models = {}
        for name, make in makers.items():
            torch.manual_seed(0)
            models[name] = make().to(device)
        # Alternate the models over rounds and keep each one's best median: fair under changing load.
        best = {name: float("inf") for name in models}
        for _ in range(args.rounds):
            for name, model in models.items():
                best[name] = min(best[name], time_steps(model, b.xs, b.ys, warmup, steps))
        if cuda:
            graph_s = time_graph_steps(size.preset, batch, size.points, device, warmup, steps)
            best["icdl-softmax+graph"] = graph_s
            models["icdl-softmax+graph"] = models["icdl-softmax"]
        for name, model in models.items():
            # HF's 50,257-row token table is never used (inputs_embeds): count only the used weights.
            params = sum(p.numel() for n, p in model.named_parameters() if "wte" not in n)
            sec = best[name]
            row = {
                "size": size_name,
                "model": name,
                "params": params,
                "batch": batch,
                "points": size.points,
                "threads": args.threads,
                "s_per_step": sec,
                "examples_per_s": batch / sec,
                "gflop_per_step": flops / 1e9,
                "gflop_per_s": flops / sec / 1e9,
                "device": args.device,
                "pct_peak": 100 * flops / sec / 1e12 / args.peak_tflops if cuda else None,
                "sample_s_per_batch": sample_s,
            }
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
    load_after = os.getloadavg()
    print(f"# load avg after: {load_after[0]:.2f}")
    if args.out:
        import sys

        from icdl.io import atomic_write_json, portable_command

        command = "python benchmarks/bench_train.py " + portable_command(sys.argv[1:])
        report = {"command": command, "torch": torch.__version__, "transformers": hf_version,
                  "load": [load_before[0], load_after[0]], "rows": rows}  # fmt: skip
        atomic_write_json(args.out, report)
    print("| size | batch | model | params | ms/step | examples/s | GFLOP/step | GFLOP/s | % peak |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        pct = f"{r['pct_peak']:.1f}" if r["pct_peak"] is not None else "–"
        print(
            f"| {r['size']} | {r['batch']} | {r['model']} | {r['params']:,} | {r['s_per_step'] * 1e3:.2f} | "
            f"{r['examples_per_s']:.0f} | {r['gflop_per_step']:.2f} | {r['gflop_per_s']:.1f} | {pct} |"
        )
    for size_name in args.sizes:
        srow = [r for r in rows if r["size"] == size_name]
        print(
            f"# {size_name}: sampling one batch of prompts takes {srow[0]['sample_s_per_batch'] * 1e3:.1f} ms"
        )


if __name__ == "__main__":
    main()

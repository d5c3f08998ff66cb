"""Resumable pretraining of the ICL transformer on freshly sampled prompts (docs/protocol.md, configurations).

One loop, readable in one sitting (nanoGPT-style): every step draws the GLOBAL batch of ``step`` from
``(train.seed, step)`` ([`icdl.icl.tasks.sample_batch`][icdl.icl.tasks.sample_batch]), takes this rank's
slice, and minimises the mean squared error over every point of every prompt (Garg's loss) with AdamW, linear
warm-up, a constant or cosine schedule and gradient clipping.

Run directory (``icdl train CONFIG --out DIR``):

```text
DIR/config.yaml                        the resolved config (written first)
DIR/metrics.jsonl                      one JSON object per logged step
DIR/checkpoints/step_0000500/model.safetensors   weights of the UNcompiled module (+ metadata)
DIR/checkpoints/step_0000500/state.pt            optimizer, step, RNG states (torch CPU / CUDA)
DIR/checkpoints/step_0000500/manifest.json       SHA-256 of each file, checked on every read
DIR/checkpoints/latest                 name of the newest complete checkpoint
DIR/.lock                              flock held by the running `icdl train` (docs/reliability.md)
```

A checkpoint is written into a temporary directory and renamed into place, then ``latest`` is
replaced atomically, so a run killed at any instant leaves either the old or the new checkpoint,
never half of one. The learning-rate schedule is a pure function of the step and the data of a step a
pure function of ``(seed, step)``, so optimizer state + step + RNG states are the whole training state:
a resumed run reproduces the uninterrupted one bit for bit (same device and thread count).

Data parallel: under ``torchrun`` (env ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) the model is wrapped in
DistributedDataParallel (gloo on CPU, nccl on CUDA); rank r trains on prompts
``[r B/W, (r+1) B/W)`` of the global batch B; only rank 0 writes files and shows progress.

Usage:

```python
cfg = load_config("tiny")
result = train(cfg, Path("runs/tiny"))
model, cfg = load_run("runs/tiny")
```
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icdl.budget import CPU_FLOPS, GPU_FLOPS, Estimate
from icdl.config import Config, TrainConfig, dump_config
from icdl.errors import InputError
from icdl.icl.models import build_model
from icdl.icl.tasks import sample_batch, stream_generator
from icdl.icl.training.checkpoint import (
    CHECKPOINT_FORMAT,
    clean_stale_temporaries,
    find_checkpoint,
    load_run,
    make_optimizer,
    prepare_run_dir,
    read_run_config,
    refuse_score_run,
    restore_checkpoint,
    save_checkpoint,
    truncate_metrics,
    verify_checkpoint,
    write_run_config,
)
from icdl.icl.training.fast import StaticStep, graph_seed
from icdl.icl.training.interval import Interval, Log
from icdl.nets import NetSpec
from icdl.runlock import RunLock

__all__ = [
    "CHECKPOINT_FORMAT",
    "DistInfo",
    "TrainResult",
    "TrainingDiverged",
    "clean_stale_temporaries",
    "find_checkpoint",
    "load_run",
    "lr_at",
    "read_run_config",
    "refuse_score_run",
    "save_checkpoint",
    "step_shape",
    "train",
    "train_estimate",
    "verify_checkpoint",
]


class TrainingDiverged(RuntimeError):
    """The loss became non-finite; the run stopped and its last good checkpoint is kept."""


@dataclass
class TrainResult:
    """Summary of a [`train`][icdl.icl.training.train.train] call."""

    run_dir: Path
    step: int  # completed steps (== cfg.train.steps on success)
    start_step: int  # step the call resumed from (0 for a fresh run)
    loss: float | None  # mean loss over the last logging interval (None if no step ran)
    seconds: float
    examples_per_s: float | None
    num_params: int
    # Variance of the labels over the same interval: the loss of the best constant predictor, so
    # loss / label_var is the fraction of the label variance the model leaves unexplained.
    label_var: float | None = None


@dataclass(frozen=True)
class DistInfo:
    """Process-group coordinates (``world_size == 1`` when not under torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def dist_from_env() -> DistInfo:
    """Read torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` (defaults: a single process)."""
    try:
        return DistInfo(
            rank=int(os.environ.get("RANK", "0")),
            world_size=int(os.environ.get("WORLD_SIZE", "1")),
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        )
    except ValueError:
        raise InputError("RANK / WORLD_SIZE / LOCAL_RANK must be integers") from None


# --------------------------------------------------------------------------------------------------
# Schedule
# --------------------------------------------------------------------------------------------------


class _HasTrain(Protocol):
    train: TrainConfig


def lr_at(cfg: _HasTrain, step: int) -> float:
    """Learning rate for 0-based ``step``: linear warm-up to ``lr`` over ``warmup`` steps, then constant
    or cosine decay to ``lr * min_lr_ratio`` at the last step."""
    t = cfg.train
    if step < t.warmup:
        return t.lr * (step + 1) / t.warmup
    if t.schedule == "constant":
        return t.lr
    progress = min(1.0, (step - t.warmup) / max(1, t.steps - t.warmup))
    low = t.lr * t.min_lr_ratio
    return low + (t.lr - low) * 0.5 * (1.0 + math.cos(math.pi * progress))


def loops_at(cfg: Config, step: int) -> int | None:
    """A looped model's passes at 0-based ``step`` (``train.curriculum.loops``, else ``model.loops``);
    None for an ordinary model."""
    ramp = cfg.train.curriculum.loops
    return ramp.value(step) if ramp is not None else cfg.model.loops


def training_predictions(cfg: Config, fwd: Any, xs: Tensor, ys: Tensor, step: int) -> Tensor:
    """The predictions the loss is taken over: ``(B, n, d_y)``, or for a looped model those of the last
    ``model.loop_window`` passes (all of them by default, at most the step's loop count), stacked
    ``(window, B, n, d_y)`` (Yang et al.'s loss averaged over the window)."""
    loops = loops_at(cfg, step)
    if loops is None:
        return fwd(xs, ys)  # type: ignore[no-any-return]
    return fwd(xs, ys, loops=loops, window=cfg.model.window(loops))  # type: ignore[no-any-return]


def step_shape(cfg: Config, step: int) -> tuple[int | None, int | None]:
    """``(points, active_dims)`` of the prompts of 0-based ``step`` (None: the task's own value).

    The curriculum ramps give the length and active dimensions; with ``train.points_max`` the length is
    drawn uniformly from ``[length, points_max]`` by the ``(seed, step, "length")`` stream, so it is a
    pure function of the step like the prompts themselves.
    """
    cur = cfg.train.curriculum
    points = cur.points.value(step) if cur.points else None
    dims = cur.dims.value(step) if cur.dims else None
    top = cfg.train.points_max
    if top is not None:
        low = points if points is not None else cfg.task.points
        g = stream_generator(cfg.train.seed, step, "length")
        points = int(torch.randint(low, top + 1, (1,), generator=g).item())
    return points, dims


# --------------------------------------------------------------------------------------------------
# Work estimate (icdl.budget)
# --------------------------------------------------------------------------------------------------


def train_estimate(cfg: Config, *, start_step: int = 0, device: str | None = None) -> Estimate:
    """Memory and time of training ``cfg`` from ``start_step`` to ``train.steps``, before building anything.

    Parameters of the ICL model (``layers (4 d^2 + 2 d d_mlp)`` plus biases, norms and embeddings), held
    six times (weights, gradients, two AdamW moments, the optimizer's per-step temporaries and the
    checkpoint's serialised weights: measured 24 bytes per parameter); activations kept for the backward
    pass ``B T layers (8 d + 2 d_mlp)`` floats for ``T = 2 * points`` tokens, and for ReLU attention the
    ``B heads T x T`` weights: two saved per block (``relu(q k^T)`` and its masked, normalised product) and
    two more alive in the backward pass (softmax attention runs a fused kernel that keeps none on CPU:
    ``F.scaled_dot_product_attention``); per step ``6 P B T``
    FLOPs (the usual forward + backward rule) plus attention and the sampled target networks, at
    `icdl.budget.CPU_FLOPS` (or `icdl.budget.GPU_FLOPS` on CUDA).
    On CUDA only host memory counts against the limit.
    """
    t, m, task = cfg.train, cfg.model, cfg.task
    cur = t.curriculum
    points = max(task.points, cur.points.end if cur.points else 0)
    T = 2 * points
    d_tok = max(task.dim, task.out_dim)
    # Exactly the parameters of build_model: per block qkv + proj + MLP weights and biases and two
    # LayerNorms; read-in (d_tok + 1) x d, positions, the final LayerNorm 2 d and the read-out d + 1.
    d = m.d_model
    per_block = 4 * d**2 + 2 * d * m.d_mlp + 9 * d + m.d_mlp
    params = m.layers * per_block + (d_tok + 2 * m.max_points + 1) * d + 3 * d + 1
    B = t.batch_size
    # A looped model runs its blocks `loops` times and keeps the graph of the last `loop_window` passes.
    passes = m.loops or 1
    kept = min(m.loop_window or passes, passes)
    scores = (2 * m.layers + 2) * B * m.heads * T * T if m.attention == "relu" else 0
    acts = (B * T * m.layers * (8 * m.d_model + 2 * m.d_mlp) + scores) * kept
    net = NetSpec(task.depth, task.width, task.dim, task.out_dim)
    task_floats = B * (net.num_params + (points + task.standardize_points) * (task.dim + 2 * task.width))
    steps = max(0, t.steps - start_step)
    flops_step = (2 * passes + 4 * kept) * params * B * T + 4 * B * T * T * m.d_model * m.layers * 3 * passes
    flops_step += 2 * B * (points + task.standardize_points) * net.num_params
    want = device or t.device
    cuda = want == "cuda" or (want == "auto" and torch.cuda.is_available())
    host = 24 * params + 4 * task_floats + 400 * 2**20
    return Estimate(
        f"icdl train ({cfg.name})",
        float(host if cuda else host + 4 * acts),
        float(steps) * flops_step / (GPU_FLOPS if cuda else CPU_FLOPS) + 5.0,
        f"{steps} steps x batch {B} x {T} tokens, {params:,} parameters",
    )


# --------------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------------


def _resolve_device(cfg: Config, dist: DistInfo) -> torch.device:
    want = cfg.train.device
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want == "cuda":
        if not torch.cuda.is_available():
            raise InputError("train.device is cuda but no CUDA device is available")
        return torch.device("cuda", dist.local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def train(cfg: Config, run_dir: str | Path, *, quiet: bool = False) -> TrainResult:
    """Train (or resume) the ICL model of ``cfg`` in ``run_dir``.

    Resumes from the newest checkpoint when ``run_dir`` holds one (its saved config must match, except
    bookkeeping keys and ``train.steps`` under a constant schedule). Raises
    [`InputError`][icdl.errors.InputError] for bad input before touching the disk, and
    [`TrainingDiverged`][icdl.icl.training.train.TrainingDiverged] when the loss becomes non-finite (the last
    good checkpoint is kept). Seeds torch's global RNG with ``train.seed`` (model init) and, when
    ``train.threads`` is set, calls ``torch.set_num_threads``.
    """
    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    dist = dist_from_env()
    t = cfg.train
    if t.batch_size % dist.world_size:
        raise InputError(
            f"train.batch_size ({t.batch_size}) must be divisible by the {dist.world_size} processes"
        )
    device = _resolve_device(cfg, dist)
    ckpt, start_step = prepare_run_dir(run_dir, cfg)
    # One writer per run directory: a second `icdl train` on it stops here (exit 2), see icdl.runlock.
    lock = RunLock(run_dir).acquire() if dist.is_main else None
    try:
        if lock is not None:  # validated again under the lock: another run may have written meanwhile
            ckpt, start_step = prepare_run_dir(run_dir, cfg)
        return _train_distributed(cfg, run_dir, device, dist, ckpt, start_step, quiet, t0)
    finally:
        if lock is not None:
            lock.release()


def _train_distributed(
    cfg: Config,
    run_dir: Path,
    device: torch.device,
    dist: DistInfo,
    ckpt: Path | None,
    start_step: int,
    quiet: bool,
    t0: float,
) -> TrainResult:
    """Set up threads and the process group around `_train_loop`."""
    t = cfg.train
    if t.threads is not None:
        torch.set_num_threads(t.threads)

    if dist.enabled:
        import torch.distributed as tdist

        if not tdist.is_initialized():
            tdist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        # Every rank has validated the run directory; only now may rank 0 write into it.
        tdist.barrier()

    try:
        result = _train_loop(cfg, run_dir, device, dist, ckpt, start_step, quiet, t0)
        if dist.enabled:
            import torch.distributed as tdist

            # No rank tears down its sockets while another is still in a collective or writing: a rank
            # that leaves early can make its peer's gloo transport abort.
            tdist.barrier()
        return result
    finally:
        if dist.enabled:
            import torch.distributed as tdist

            if tdist.is_initialized():
                tdist.destroy_process_group()


def _forward(cfg: Config, model: nn.Module, device: torch.device, dist: DistInfo) -> tuple[Any, Any]:
    """``(forward module, autocast context)``: DDP and ``torch.compile`` wrappers, TF32 and bf16 on CUDA."""
    t = cfg.train
    fwd: Any = model
    if dist.enabled:
        from torch.nn.parallel import DistributedDataParallel

        fwd = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if t.compile:
        fwd = torch.compile(fwd)  # checkpoints still save `model`, the uncompiled module
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    precision = t.precision if t.precision != "auto" else ("bf16" if device.type == "cuda" else "fp32")
    return fwd, torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def _eager_step(
    cfg: Config, model: nn.Module, fwd: Any, optimizer: torch.optim.Optimizer, autocast: Any,
    iv: Interval, step: int, shape: tuple[int | None, int | None], dist: DistInfo, device: torch.device,
) -> None:  # fmt: skip
    """One ordinary optimisation step on this rank's slice of the global batch of ``step``."""
    t = cfg.train
    for group in optimizer.param_groups:
        group["lr"] = lr_at(cfg, step)
    local = t.batch_size // dist.world_size
    batch = sample_batch(
        cfg.task, t.batch_size, seed=t.seed, step=step, points=shape[0], active_dims=shape[1],
        start=dist.rank * local, count=local, device=device,
    )  # fmt: skip
    with autocast:
        pred = training_predictions(cfg, fwd, batch.xs, batch.ys, step)
    # a looped model's window of predictions: the mean of the passes' squared errors
    loss = F.mse_loss(pred.float(), batch.ys.expand_as(pred))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if t.grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
    optimizer.step()
    iv.add(loss, batch.ys, step)


def _train_loop(
    cfg: Config,
    run_dir: Path,
    device: torch.device,
    dist: DistInfo,
    ckpt: Path | None,
    start_step: int,
    quiet: bool,
    t0: float,
) -> TrainResult:
    t = cfg.train
    torch.manual_seed(t.seed)  # model init: identical on every rank
    model = build_model(cfg.model, cfg.task.dim, cfg.task.out_dim).to(device)
    optimizer = make_optimizer(model, cfg)
    if ckpt is not None:
        restore_checkpoint(model, optimizer, ckpt, device)
    if start_step >= t.steps:  # nothing to do, and nothing is rewritten
        return TrainResult(
            run_dir, start_step, start_step, None, time.perf_counter() - t0, None, _nparams(model)
        )
    if dist.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        clean_stale_temporaries(run_dir)
        write_run_config(run_dir, dump_config(cfg))
        truncate_metrics(run_dir / "metrics.jsonl", start_step)
    fwd, autocast = _forward(cfg, model, device, dist)
    log = Log.open(cfg, run_dir, dist.is_main, quiet, start_step)
    iv = Interval.zeros(t.steps, device)
    fast = _static_step(cfg, model, fwd, optimizer, device, dist, ckpt, start_step)
    if fast is not None:
        optimizer = fast.optimizer  # fused, capturable; what the checkpoints save
        iv.sums, iv.first_bad = fast.sums, fast.first_bad  # the captured step keeps its own statistics
    iv.started = time.perf_counter()
    last_saved = start_step if ckpt is not None else -1
    model.train()
    try:
        for step in range(start_step, t.steps):
            shape = step_shape(cfg, step)
            if fast is not None:
                fast.run(lr_at(cfg, step), *shape)
            else:
                _eager_step(cfg, model, fwd, optimizer, autocast, iv, step, shape, dist, device)
            iv.steps += 1
            done = step + 1
            is_log = done % t.log_every == 0 or done == t.steps
            is_ckpt = done % t.checkpoint_every == 0 or done == t.steps
            # On CPU the check is free, so do it every step; on CUDA only at log/checkpoint steps.
            if not (is_log or is_ckpt or device.type == "cpu"):
                continue
            stats, bad_at = iv.reduced(dist.enabled)
            if stats[4] > 0:
                good = f"step {last_saved}" if last_saved >= 0 else "none"
                raise TrainingDiverged(
                    f"non-finite loss at step {bad_at}; stopped (last good checkpoint: {good} in {run_dir})"
                )
            if is_log:
                record: dict[str, float] = {
                    "step": done,
                    "lr": lr_at(cfg, step),
                    "elapsed_s": time.perf_counter() - t0,
                    "points": shape[0] if shape[0] is not None else cfg.task.points,
                    "dims": shape[1] if shape[1] is not None else cfg.task.dim,
                }
                loops = loops_at(cfg, step)
                if loops is not None:
                    record["loops"] = loops
                log.write(stats, iv, record, dist.world_size, t.batch_size)
                iv.reset()
            if is_ckpt and dist.is_main:
                save_checkpoint(run_dir, model, optimizer, done, cfg)
            if is_ckpt:
                last_saved = done
    finally:
        log.close()
    seconds = time.perf_counter() - t0
    return TrainResult(run_dir, t.steps, start_step, log.loss, seconds, log.rate, _nparams(model), log.var)


def _static_step(
    cfg: Config,
    model: nn.Module,
    fwd: nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    dist: DistInfo,
    ckpt: Path | None,
    start_step: int,
) -> StaticStep | None:
    """The CUDA-graph step of ``train.cuda_graph`` ([`icdl.icl.training.fast`][icdl.icl.training.fast]), or
    None for the ordinary
    loop: when the key is off, or, with a one-line note on stderr, when there is no single CUDA device."""
    if not cfg.train.cuda_graph:
        return None
    if device.type != "cuda" or dist.enabled:
        if dist.is_main:  # a key that is ignored is worth a line even with --quiet
            why = "data parallel" if dist.enabled else "CPU"
            print(
                f"icdl: note: train.cuda_graph needs a single CUDA device; training without it ({why})",
                file=sys.stderr,
            )
        return None
    torch.cuda.manual_seed(graph_seed(cfg.train.seed, start_step))
    state = optimizer.state_dict() if ckpt is not None else None
    return StaticStep(model, cfg, device, forward_module=fwd, optimizer_state=state, start_step=start_step)


def _nparams(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())

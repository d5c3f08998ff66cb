"""Resumable pretraining of the ICL transformer on freshly sampled prompts (experiments.md §7).

One loop, readable in one sitting (nanoGPT-style): every step draws the GLOBAL batch of ``step`` from
``(train.seed, step)`` (:func:`icdl.icl.tasks.sample_batch`), takes this rank's slice, and minimises
the mean squared error over every point of every prompt (Garg's loss) with AdamW, linear warm-up, a
constant or cosine schedule and gradient clipping.

Run directory (``icdl train CONFIG --out DIR``)::

    DIR/config.yaml                        the resolved config (written first)
    DIR/metrics.jsonl                      one JSON object per logged step
    DIR/checkpoints/step_0000500/model.safetensors   weights of the UNcompiled module (+ metadata)
    DIR/checkpoints/step_0000500/state.pt            optimizer, step, RNG states (torch CPU / CUDA)
    DIR/checkpoints/latest                 name of the newest complete checkpoint

A checkpoint is written into a temporary directory and renamed into place, then ``latest`` is
replaced atomically, so a run killed at any instant leaves either the old or the new checkpoint,
never half of one. The learning-rate schedule is a pure function of the step and the data of a step a
pure function of ``(seed, step)``, so optimizer state + step + RNG states are the whole training state:
a resumed run reproduces the uninterrupted one bit for bit (same device and thread count).

Data parallel: under ``torchrun`` (env ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) the model is wrapped in
DistributedDataParallel (gloo on CPU, nccl on CUDA); rank r trains on prompts
``[r B/W, (r+1) B/W)`` of the global batch B; only rank 0 writes files and shows progress.

Usage::

    cfg = load_config("tiny")
    result = train(cfg, Path("runs/tiny"))
    model, cfg = load_run("runs/tiny")
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import yaml
from safetensors.torch import load_file, save_file
from torch import nn

from icdl.config import RESUMABLE_KEYS, Config, config_diff, dump_config, validate
from icdl.errors import InputError
from icdl.icl.fast import StaticStep, graph_seed
from icdl.icl.models import ICLTransformer, build_model
from icdl.icl.tasks import sample_batch, stream_generator

__all__ = [
    "DistInfo",
    "TrainResult",
    "TrainingDiverged",
    "find_checkpoint",
    "load_run",
    "lr_at",
    "step_shape",
    "train",
]

CHECKPOINT_FORMAT = "icdl-icl-v1"


class TrainingDiverged(RuntimeError):
    """The loss became non-finite; the run stopped and its last good checkpoint is kept."""


@dataclass
class TrainResult:
    """Summary of a :func:`train` call."""

    run_dir: Path
    step: int  # completed steps (== cfg.train.steps on success)
    start_step: int  # step the call resumed from (0 for a fresh run)
    loss: float | None  # mean loss over the last logging interval (None if no step ran)
    seconds: float
    examples_per_s: float | None
    num_params: int


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


def lr_at(cfg: Config, step: int) -> float:
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
# Checkpoints
# --------------------------------------------------------------------------------------------------


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def find_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint directory of a run (via ``checkpoints/latest``), or None."""
    ck = Path(run_dir) / "checkpoints"
    latest = ck / "latest"
    if not latest.is_file():
        return None
    path = ck / latest.read_text().strip()
    if not (path / "model.safetensors").is_file() or not (path / "state.pt").is_file():
        return None
    return path


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    run_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer, step: int, cfg: Config
) -> Path:
    """Write the checkpoint of ``step`` atomically (temp dir, rename, then the ``latest`` pointer) and
    delete checkpoints beyond ``train.keep_checkpoints``. Returns its directory."""
    ck = run_dir / "checkpoints"
    ck.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:07d}"
    final = ck / name
    if not final.exists():
        tmp = ck / f".tmp-{name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        weights = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        meta = {"format": CHECKPOINT_FORMAT, "step": str(step), "config": dump_config(cfg)}
        save_file(weights, str(tmp / "model.safetensors"), metadata=meta)
        state = {
            "format": CHECKPOINT_FORMAT,
            "step": step,
            "optimizer": optimizer.state_dict(),
            "rng": _rng_state(),
        }
        torch.save(state, tmp / "state.pt")
        for f in tmp.iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, final)
        _fsync_dir(ck)
    _atomic_write_text(ck / "latest", name + "\n")
    old = sorted(p for p in ck.glob("step_*") if p.is_dir() and p.name != name)
    for p in old[: max(0, len(old) - (cfg.train.keep_checkpoints - 1))]:
        shutil.rmtree(p, ignore_errors=True)
    return final


def _load_weights(
    path: Path, device: torch.device | str = "cpu"
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), framework="pt") as fh:
        meta = fh.metadata() or {}
    return load_file(str(path / "model.safetensors"), device=str(device)), meta


def _read_saved_config(run_dir: Path) -> Config:
    try:
        data = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"cannot read {run_dir / 'config.yaml'}: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise InputError(f"{run_dir / 'config.yaml'} is not a config mapping")
    return validate(data)


def load_run(
    run_dir: str | Path, *, device: torch.device | str = "cpu", checkpoint: str | Path | None = None
) -> tuple[ICLTransformer, Config]:
    """Load a trained ICL model and its config from a run directory (newest checkpoint by default).

    Returns ``(model, config)`` with the model in eval mode on ``device``. ``checkpoint`` may name a
    checkpoint directory (``step_0000500``) instead of the newest one.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise InputError(f"{str(run_dir)!r} is not a run directory (no config.yaml)")
    cfg = _read_saved_config(run_dir)
    path = run_dir / "checkpoints" / str(checkpoint) if checkpoint is not None else find_checkpoint(run_dir)
    if path is None or not (path / "model.safetensors").is_file():
        raise InputError(f"run {str(run_dir)!r} has no checkpoint yet")
    weights, _ = _load_weights(path, device)
    model = build_model(cfg.model, cfg.task.dim, cfg.task.out_dim).to(device)
    model.load_state_dict(weights)
    model.eval()
    return model, cfg


# --------------------------------------------------------------------------------------------------
# Run directory preparation (validation first, files second)
# --------------------------------------------------------------------------------------------------


def _check_resume(saved: Config, cfg: Config) -> None:
    """Reject a resume whose config changes the trajectory (one line, InputError)."""
    diff = {k: v for k, v in config_diff(saved, cfg).items() if k not in RESUMABLE_KEYS and k != "name"}
    if "train.steps" in diff and cfg.train.schedule == "constant":
        diff.pop("train.steps")
    if diff:
        shown = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in list(diff.items())[:4])
        more = f" (+{len(diff) - 4} more)" if len(diff) > 4 else ""
        raise InputError(
            f"config does not match the run being resumed ({shown}{more}); "
            "use another --out or the saved config"
        )


def _prepare_run_dir(run_dir: Path, cfg: Config) -> tuple[Path | None, int]:
    """Validate ``run_dir`` for this config without writing anything.

    Returns ``(checkpoint_dir or None, start_step)``.
    """
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError(f"--out {str(run_dir)!r} exists and is not a directory")
    if run_dir.is_dir() and (run_dir / "config.yaml").is_file():
        _check_resume(_read_saved_config(run_dir), cfg)
        ckpt = find_checkpoint(run_dir)
        if ckpt is None:
            return None, 0
        state_step = int(torch.load(ckpt / "state.pt", map_location="cpu", weights_only=True)["step"])
        return ckpt, state_step
    if run_dir.is_dir() and any(p for p in run_dir.iterdir()):
        raise InputError(f"--out {str(run_dir)!r} is a non-empty directory without a run in it")
    return None, 0


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines logged after ``step`` (a killed run may have logged past its last checkpoint)."""
    if not path.is_file():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line).get("step", 0) <= step:
                keep.append(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill
    _atomic_write_text(path, "".join(s + "\n" for s in keep))


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


def _make_optimizer(model: nn.Module, cfg: Config) -> torch.optim.Optimizer:
    t = cfg.train
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2))


def _open_tensorboard(run_dir: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        print(
            "icdl: warning: train.tensorboard is set but tensorboard is not installed; skipping",
            file=sys.stderr,
        )
        return None
    return SummaryWriter(str(run_dir / "tensorboard"))


def train(cfg: Config, run_dir: str | Path, *, quiet: bool = False) -> TrainResult:
    """Train (or resume) the ICL model of ``cfg`` in ``run_dir``.

    Resumes from the newest checkpoint when ``run_dir`` holds one (its saved config must match, except
    bookkeeping keys and ``train.steps`` under a constant schedule). Raises :class:`InputError` for bad
    input before touching the disk, and :class:`TrainingDiverged` when the loss becomes non-finite
    (the last good checkpoint is kept). Seeds torch's global RNG with ``train.seed`` (model init) and,
    when ``train.threads`` is set, calls ``torch.set_num_threads``.
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
    ckpt, start_step = _prepare_run_dir(run_dir, cfg)
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
        return _train_loop(cfg, run_dir, device, dist, ckpt, start_step, quiet, t0)
    finally:
        if dist.enabled:
            import torch.distributed as tdist

            if tdist.is_initialized():
                tdist.destroy_process_group()


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
    optimizer = _make_optimizer(model, cfg)
    if ckpt is not None:
        weights, _ = _load_weights(ckpt, device)
        model.load_state_dict(weights)
        state = torch.load(ckpt / "state.pt", map_location=device, weights_only=True)
        optimizer.load_state_dict(state["optimizer"])
        _set_rng_state(
            {
                k: (v.cpu() if isinstance(v, torch.Tensor) else [x.cpu() for x in v])
                for k, v in state["rng"].items()
            }
        )

    if start_step >= t.steps:  # nothing to do, and nothing is rewritten
        if dist.is_main and not quiet:
            print(f"icdl: run {run_dir} is already complete ({start_step} steps)", file=sys.stderr)
        return TrainResult(
            run_dir, start_step, start_step, None, time.perf_counter() - t0, None, _nparams(model)
        )
    if dist.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write_text(run_dir / "config.yaml", dump_config(cfg))
        _truncate_metrics(run_dir / "metrics.jsonl", start_step)

    fwd: nn.Module = model
    if dist.enabled:
        from torch.nn.parallel import DistributedDataParallel

        fwd = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if t.compile:
        fwd = torch.compile(fwd)  # checkpoints still save `model`, the uncompiled module
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    precision = t.precision if t.precision != "auto" else ("bf16" if device.type == "cuda" else "fp32")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")

    local = t.batch_size // dist.world_size
    start = dist.rank * local
    tb = _open_tensorboard(run_dir) if (t.tensorboard and dist.is_main) else None
    metrics = open(run_dir / "metrics.jsonl", "a") if dist.is_main else None  # noqa: SIM115

    from tqdm.auto import tqdm

    bar = tqdm(
        total=t.steps,
        initial=start_step,
        unit="step",
        dynamic_ncols=True,
        disable=quiet or not dist.is_main or not sys.stderr.isatty(),
    )
    # Running sums since the last log: loss, sum y, sum y^2, label count, non-finite count.
    sums = torch.zeros(5, device=device, dtype=torch.float64)
    first_bad = torch.full((), t.steps + 1, device=device, dtype=torch.float64)
    fast = _static_step(cfg, model, fwd, optimizer, device, dist, ckpt, start_step)
    if fast is not None:
        optimizer = fast.optimizer  # fused, capturable; what the checkpoints save
        sums, first_bad = fast.sums, fast.first_bad
    interval_steps, interval_t = 0, time.perf_counter()
    last_loss: float | None = None
    last_rate: float | None = None
    last_saved = start_step if ckpt is not None else -1
    model.train()
    try:
        for step in range(start_step, t.steps):
            n_points, dims = step_shape(cfg, step)
            lr = lr_at(cfg, step)
            if fast is not None:  # the captured step keeps its own statistics (aliased by sums)
                fast.run(lr, n_points, dims)
            else:
                for group in optimizer.param_groups:
                    group["lr"] = lr
                batch = sample_batch(
                    cfg.task, t.batch_size, seed=t.seed, step=step, points=n_points, active_dims=dims,
                    start=start, count=local, device=device,
                )  # fmt: skip
                with autocast:
                    pred = fwd(batch.xs, batch.ys)
                loss = F.mse_loss(pred.float(), batch.ys)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if t.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
                optimizer.step()

                ld = loss.detach().double()
                finite = torch.isfinite(ld)
                yd = batch.ys.detach().double()
                sums += torch.stack(
                    (
                        torch.where(finite, ld, 0.0),
                        yd.sum(),
                        (yd * yd).sum(),
                        torch.tensor(float(yd.numel()), device=device),
                        (~finite).double(),
                    )
                )
                first_bad = torch.where(
                    finite,
                    first_bad,
                    torch.minimum(first_bad, torch.tensor(step + 1.0, device=device, dtype=torch.float64)),
                )
            interval_steps += 1
            done = step + 1
            is_log = done % t.log_every == 0 or done == t.steps
            is_ckpt = done % t.checkpoint_every == 0 or done == t.steps
            # On CPU the check is free, so do it every step; on CUDA only at log/checkpoint steps.
            if not (is_log or is_ckpt or device.type == "cpu"):
                continue
            stats, bad_at = sums.clone(), first_bad.clone()
            if dist.enabled:
                import torch.distributed as tdist

                tdist.all_reduce(stats)
                tdist.all_reduce(bad_at, op=tdist.ReduceOp.MIN)
            if stats[4].item() > 0:
                good = f"step {last_saved}" if last_saved >= 0 else "none"
                raise TrainingDiverged(
                    f"non-finite loss at step {int(bad_at.item())}; stopped "
                    f"(last good checkpoint: {good} in {run_dir})"
                )
            if is_log:
                now = time.perf_counter()
                n_ex = interval_steps * t.batch_size
                last_loss = stats[0].item() / (interval_steps * dist.world_size)
                # Variance of every label of the interval: the MSE of the best constant predictor.
                y_var = stats[2].item() / stats[3].item() - (stats[1].item() / stats[3].item()) ** 2
                last_rate = n_ex / max(now - interval_t, 1e-9)
                record = {
                    "step": done,
                    "loss": last_loss,
                    "y_var": y_var,
                    "lr": lr,
                    "examples_per_s": last_rate,
                    "elapsed_s": now - t0,
                    "points": n_points if n_points is not None else cfg.task.points,
                    "dims": dims if dims is not None else cfg.task.dim,
                }
                if metrics is not None:
                    metrics.write(json.dumps(record) + "\n")
                    metrics.flush()
                if tb is not None:
                    for key in ("loss", "y_var", "lr", "examples_per_s"):
                        tb.add_scalar(f"train/{key}", record[key], done)
                bar.set_postfix(loss=f"{last_loss:.4g}", ex_s=f"{last_rate:.0f}", refresh=False)
                bar.update(interval_steps if is_log else 0)
                sums.zero_()
                interval_steps, interval_t = 0, time.perf_counter()
            if is_ckpt and dist.is_main:
                save_checkpoint(run_dir, model, optimizer, done, cfg)
            if is_ckpt:
                last_saved = done
    finally:
        bar.close()
        if metrics is not None:
            metrics.close()
        if tb is not None:
            tb.close()
    return TrainResult(
        run_dir, t.steps, start_step, last_loss, time.perf_counter() - t0, last_rate, _nparams(model)
    )


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
    """The CUDA-graph step of ``train.cuda_graph`` (:mod:`icdl.icl.fast`), or None for the ordinary
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

"""Resumable pretraining of the ICL transformer on freshly sampled prompts (docs/protocol.md, configurations).

One loop, readable in one sitting (nanoGPT-style): every step draws the GLOBAL batch of ``step`` from
``(train.seed, step)`` (:func:`icdl.icl.tasks.sample_batch`), takes this rank's slice, and minimises
the mean squared error over every point of every prompt (Garg's loss) with AdamW, linear warm-up, a
constant or cosine schedule and gradient clipping.

Run directory (``icdl train CONFIG --out DIR``)::

    DIR/config.yaml                        the resolved config (written first)
    DIR/metrics.jsonl                      one JSON object per logged step
    DIR/checkpoints/step_0000500/model.safetensors   weights of the UNcompiled module (+ metadata)
    DIR/checkpoints/step_0000500/state.pt            optimizer, step, RNG states (torch CPU / CUDA)
    DIR/checkpoints/step_0000500/manifest.json       SHA-256 of each file, checked on every read
    DIR/checkpoints/latest                 name of the newest complete checkpoint
    DIR/.lock                              flock held by the running `icdl train` (docs/reliability.md)

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
from typing import Any, Protocol

import torch
import torch.nn.functional as F
import yaml
from safetensors.torch import load_file, save_file
from torch import nn

from icdl.budget import CPU_FLOPS, GPU_FLOPS, Estimate
from icdl.config import RESUMABLE_KEYS, Config, TrainConfig, config_diff, dump_config, validate
from icdl.errors import InputError
from icdl.icl.fast import StaticStep, graph_seed
from icdl.icl.models import ICLTransformer, build_model
from icdl.icl.tasks import sample_batch, stream_generator
from icdl.io import atomic_dir, atomic_write_text, one_line, read_text
from icdl.manifest import verify_manifest, write_manifest
from icdl.nets import NetSpec
from icdl.runlock import LOCK_NAME, RunLock

__all__ = [
    "DistInfo",
    "TrainResult",
    "TrainingDiverged",
    "clean_stale_temporaries",
    "find_checkpoint",
    "load_run",
    "lr_at",
    "read_run_config",
    "step_shape",
    "train",
    "train_estimate",
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


def find_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint directory of a run (via ``checkpoints/latest``), or None when the
    run has none yet. A ``latest`` that names no complete checkpoint is an InputError (one line naming
    it): the run directory was damaged, and starting over would overwrite the evidence."""
    ck = Path(run_dir) / "checkpoints"
    latest = ck / "latest"
    if not latest.is_file():
        return None
    try:
        name = latest.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"checkpoint pointer {str(latest)!r} is unreadable ({one_line(exc)})") from None
    path = ck / name
    complete = (path / "model.safetensors").is_file() and (path / "state.pt").is_file()
    if not name or "/" in name or not complete:
        raise InputError(
            f"checkpoint pointer {str(latest)!r} names {name[:80]!r}, which is not a complete checkpoint; "
            "the run directory is damaged (restore it, or train into a new --out)"
        )
    return path


def clean_stale_temporaries(run_dir: str | Path) -> list[Path]:
    """Remove the temporary checkpoint folders (``checkpoints/.tmp-*``) a killed run left behind.

    They are never read (a checkpoint becomes visible only by its rename), so removing them at the next
    start loses nothing. Returns the removed paths."""
    ck = Path(run_dir) / "checkpoints"
    removed = []
    if ck.is_dir():
        for p in ck.glob(".tmp-*"):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
        for p in ck.glob(".latest.*.tmp"):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


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
        weights = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        meta = {"format": CHECKPOINT_FORMAT, "step": str(step), "config": dump_config(cfg)}
        state = {
            "format": CHECKPOINT_FORMAT,
            "step": step,
            "optimizer": optimizer.state_dict(),
            "rng": _rng_state(),
        }
        # The manifest (SHA-256 of each file) is written inside the temporary directory, so a published
        # checkpoint always carries the one that matches it.
        with atomic_dir(final, prefix=f".tmp-{name}-", finish=write_manifest) as tmp:
            save_file(weights, str(tmp / "model.safetensors"), metadata=meta)
            torch.save(state, tmp / "state.pt")
    atomic_write_text(ck / "latest", name + "\n")
    old = sorted(p for p in ck.glob("step_*") if p.is_dir() and p.name != name)
    for p in old[: max(0, len(old) - (cfg.train.keep_checkpoints - 1))]:
        shutil.rmtree(p, ignore_errors=True)
    return final


def verify_checkpoint(path: Path) -> str | None:
    """Check a checkpoint's files against its ``manifest.json`` (:func:`icdl.manifest.verify_manifest`).

    Returns the manifest's SHA-256, or None for a checkpoint written before manifests (legacy: accepted
    unverified, with a one-line warning on stderr). A mismatch is an InputError naming the file."""
    digest = verify_manifest(path, what="checkpoint")
    if digest is None and str(path) not in _WARNED_LEGACY:
        _WARNED_LEGACY.add(str(path))
        warn = f"icdl: warning: checkpoint {str(path)!r} has no manifest (legacy); not verified"
        print(warn, file=sys.stderr)
    return digest


_WARNED_LEGACY: set[str] = set()


def _load_weights(
    path: Path, device: torch.device | str = "cpu"
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    from safetensors import safe_open

    file = path / "model.safetensors"
    try:
        with safe_open(str(file), framework="pt") as fh:
            meta = fh.metadata() or {}
        return load_file(str(file), device=str(device)), meta
    except Exception as exc:  # SafetensorError, OSError: a truncated or corrupt file
        raise InputError(f"checkpoint file {str(file)!r} is corrupt or truncated ({one_line(exc)})") from None


def _load_state(path: Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """``state.pt`` of a checkpoint (optimizer, step, RNG); a corrupt file is one InputError line."""
    file = path / "state.pt"
    try:
        state = torch.load(file, map_location=device, weights_only=True)
        if not isinstance(state, dict) or not isinstance(state.get("step"), int):
            raise ValueError("no step")
        return state
    except Exception as exc:  # UnpicklingError, RuntimeError (zip), EOFError, ValueError
        raise InputError(
            f"checkpoint file {str(file)!r} is corrupt or truncated ({one_line(exc)[:200]})"
        ) from None


def _restore(module: Any, state: dict[str, Any], file: Path) -> None:
    """``module.load_state_dict(state)``; a mismatch (tampered file, other config) is one InputError."""
    try:
        module.load_state_dict(state)
    except Exception as exc:  # RuntimeError / KeyError / ValueError from torch
        raise InputError(
            f"checkpoint file {str(file)!r} does not fit this run's model ({one_line(exc)[:200]})"
        ) from None


def read_run_config(run_dir: Path) -> Config:
    """The validated ``config.yaml`` of a run directory (one InputError line when missing or damaged)."""
    try:
        data = yaml.safe_load(read_text(run_dir / "config.yaml", what="run config"))
    except yaml.YAMLError as exc:
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
    cfg = read_run_config(run_dir)
    path = run_dir / "checkpoints" / str(checkpoint) if checkpoint is not None else find_checkpoint(run_dir)
    if path is None or not (path / "model.safetensors").is_file():
        raise InputError(f"run {str(run_dir)!r} has no checkpoint yet")
    verify_checkpoint(path)
    weights, _ = _load_weights(path, device)
    model = build_model(cfg.model, cfg.task.dim, cfg.task.out_dim).to(device)
    _restore(model, weights, path / "model.safetensors")
    model.eval()
    return model, cfg


# --------------------------------------------------------------------------------------------------
# Work estimate (icdl.budget)
# --------------------------------------------------------------------------------------------------


def train_estimate(cfg: Config, *, start_step: int = 0, device: str | None = None) -> Estimate:
    """Memory and time of training ``cfg`` from ``start_step`` to ``train.steps``, before building anything.

    Parameters of the ICL model ``layers (4 d^2 + 2 d d_mlp)`` plus embeddings, stored four times (weights,
    gradients, two AdamW moments); activations kept for the backward pass ``B T layers (8 d + 2 d_mlp +
    heads T)`` floats for ``T = 2 * points`` tokens; per step ``6 P B T`` FLOPs (the usual forward +
    backward rule) plus attention and the sampled target networks, at :data:`icdl.budget.CPU_FLOPS` (or
    :data:`icdl.budget.GPU_FLOPS` on CUDA). On CUDA only host memory counts against the limit.
    """
    t, m, task = cfg.train, cfg.model, cfg.task
    cur = t.curriculum
    points = max(task.points, cur.points.end if cur.points else 0)
    T = 2 * points
    d_tok = max(task.dim, task.out_dim)
    params = (
        m.layers * (4 * m.d_model**2 + 2 * m.d_model * m.d_mlp) + (d_tok + 2 * m.max_points + 1) * m.d_model
    )
    B = t.batch_size
    acts = B * T * m.layers * (8 * m.d_model + 2 * m.d_mlp + m.heads * T)
    net = NetSpec(task.depth, task.width, task.dim, task.out_dim)
    task_floats = B * (net.num_params + (points + task.standardize_points) * (task.dim + 2 * task.width))
    steps = max(0, t.steps - start_step)
    flops_step = 6 * params * B * T + 4 * B * T * T * m.d_model * m.layers * 3
    flops_step += 2 * B * (points + task.standardize_points) * net.num_params
    want = device or t.device
    cuda = want == "cuda" or (want == "auto" and torch.cuda.is_available())
    host = 16 * params + 4 * task_floats + 400 * 2**20
    return Estimate(
        f"icdl train ({cfg.name})",
        float(host if cuda else host + 4 * acts),
        float(steps) * flops_step / (GPU_FLOPS if cuda else CPU_FLOPS) + 5.0,
        f"{steps} steps x batch {B} x {T} tokens, {params:,} parameters",
    )


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
        _check_resume(read_run_config(run_dir), cfg)
        ckpt = find_checkpoint(run_dir)
        if ckpt is None:
            return None, 0
        verify_checkpoint(ckpt)  # a damaged checkpoint stops here, before anything is written or rotated
        _load_weights(ckpt)
        return ckpt, int(_load_state(ckpt)["step"])
    if run_dir.is_dir() and any(p for p in run_dir.iterdir() if p.name != LOCK_NAME):
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
    atomic_write_text(path, "".join(s + "\n" for s in keep))


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
    # One writer per run directory: a second `icdl train` on it stops here (exit 2), see icdl.runlock.
    lock = RunLock(run_dir).acquire() if dist.is_main else None
    try:
        if lock is not None:  # validated again under the lock: another run may have written meanwhile
            ckpt, start_step = _prepare_run_dir(run_dir, cfg)
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
    """Set up threads and the process group around :func:`_train_loop`."""
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
        _restore(model, weights, ckpt / "model.safetensors")
        state = _load_state(ckpt, device)
        _restore(optimizer, state.get("optimizer") or {}, ckpt / "state.pt")
        _set_rng_state(
            {
                k: (v.cpu() if isinstance(v, torch.Tensor) else [x.cpu() for x in v])
                for k, v in state["rng"].items()
            }
        )

    if start_step >= t.steps:  # nothing to do, and nothing is rewritten
        return TrainResult(
            run_dir, start_step, start_step, None, time.perf_counter() - t0, None, _nparams(model)
        )
    if dist.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        clean_stale_temporaries(run_dir)
        atomic_write_text(run_dir / "config.yaml", dump_config(cfg))
        _truncate_metrics(run_dir / "metrics.jsonl", start_step)

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
    last_var: float | None = None
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
                last_var = y_var
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
                bar.set_postfix(
                    loss=f"{last_loss:.4g}", y_var=f"{y_var:.4g}", ex_s=f"{last_rate:.0f}", refresh=False
                )
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
        run_dir,
        t.steps,
        start_step,
        last_loss,
        time.perf_counter() - t0,
        last_rate,
        _nparams(model),
        label_var=last_var,
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

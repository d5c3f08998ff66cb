"""Pretrain the ICL transformer on in-context score estimation (a small loop, nanoGPT-style), resumably.

Every step draws a fresh batch of prompts from ``(train.seed, step)``
([`icdl.diffusion.task.sample_score_batch`][icdl.diffusion.task.sample_score_batch]) and minimises the
h-weighted DSM loss over every point of every prompt, ``mean h_t ||ŝ(x_t, t) - y||^2`` — the weighting ``λ(t)
= h_t`` of Song et al. 2021 makes every time contribute O(1) (the DSM target's variance is ``d / h_t``).
AdamW, linear warm-up, constant or cosine schedule and clipping follow ``train``
([`icdl.config.TrainConfig`][icdl.config.TrainConfig]); the model is
[`icdl.icl.models.ICLTransformer`][icdl.icl.models.ICLTransformer] with ``d_x = d + 1``, ``d_y = d``.

One run format with ``icdl train`` ([`icdl.icl.training.train`][icdl.icl.training.train]), built from the same
pieces ([`icdl.icl.training.checkpoint`][icdl.icl.training.checkpoint],
[`icdl.icl.training.interval`][icdl.icl.training.interval], [`icdl.runlock`][icdl.runlock]):

```text
RUN/config.yaml                                  the resolved ScoreConfig
RUN/metrics.jsonl                                one JSON object per log_every steps
RUN/checkpoints/step_0000250/model.safetensors   weights (metadata: step, config)
RUN/checkpoints/step_0000250/state.pt            optimizer, step, RNG states
RUN/checkpoints/step_0000250/manifest.json       SHA-256 of each file, checked on every read
RUN/checkpoints/latest                           name of the newest complete checkpoint
RUN/.lock                                        flock held while training
```

Training into a directory that holds a run resumes it from its newest checkpoint (the saved config must
match, as for ``icdl train``); since the data of a step is a pure function of ``(seed, step)`` and the
checkpoint holds the optimizer and RNG states, a run killed at any instant and resumed ends with the same
weights, bit for bit, as one never interrupted (same thread count). A run whose newest checkpoint has not
seen ``train.steps`` steps is *unfinished*: [`check_finished`][icdl.diffusion.train.check_finished] refuses
it for evaluation and sampling. A run of the previous format (``RUN/model.safetensors``, no checkpoints) still
loads, unverified, with a one-line note (legacy); it cannot be resumed.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file

from icdl.diffusion.config import ScoreConfig, dump_score_config, validate_score_config
from icdl.diffusion.task import ou_h, sample_score_batch
from icdl.errors import InputError
from icdl.icl.models import ICLTransformer, build_model
from icdl.icl.training.checkpoint import (
    clean_stale_temporaries,
    find_checkpoint,
    make_optimizer,
    prepare_run_dir,
    read_config_text,
    restore_checkpoint,
    save_checkpoint,
    truncate_metrics,
    verify_checkpoint,
    write_run_config,
)
from icdl.icl.training.interval import Interval, Log
from icdl.icl.training.train import lr_at  # the same warm-up + cosine schedule as icdl train
from icdl.io import one_line
from icdl.runlock import RunLock

__all__ = [
    "ScoreTrainResult",
    "ScoreTrainingDiverged",
    "check_finished",
    "load_score_run",
    "lr_at",
    "read_score_config",
    "score_checkpoint",
    "score_run_step",
    "train_score",
]

LEGACY_WEIGHTS = "model.safetensors"  # the previous format: the weights at the top of the run directory


class ScoreTrainingDiverged(RuntimeError):
    """The loss became non-finite; training stopped (the last checkpoint written is kept)."""


@dataclass
class ScoreTrainResult:
    """Summary of [`train_score`][icdl.diffusion.train.train_score]."""

    run_dir: Path
    steps: int
    loss: float | None  # mean weighted loss over the last logging interval (None if no step ran)
    seconds: float
    num_params: int
    start_step: int = 0  # step the call resumed from (0 for a fresh run)


def read_score_config(run_dir: Path) -> ScoreConfig:
    """The validated ``config.yaml`` of a score run (one InputError line when missing, damaged or not a
    score run's)."""
    try:
        data = yaml.safe_load(read_config_text(run_dir))
    except yaml.YAMLError as exc:
        raise InputError(f"cannot read {run_dir / 'config.yaml'}: {one_line(exc)}") from None
    if not isinstance(data, dict) or not isinstance(data.get("task"), dict):
        raise InputError(f"{run_dir / 'config.yaml'} is not a config mapping")
    if data["task"].get("kind") != "score":
        raise InputError(f"{str(run_dir)!r} is not a score run (task.kind is not 'score'): use icdl evaluate")
    return validate_score_config(data)


def _prepare(run_dir: Path, cfg: ScoreConfig) -> tuple[Path | None, int]:
    """Validate ``run_dir`` without writing: ``(checkpoint to resume or None, start step)``."""
    if (run_dir / LEGACY_WEIGHTS).is_file():
        raise InputError(
            f"{str(run_dir)!r} holds a score run of the previous format (no checkpoints), which cannot be "
            "resumed; train into a new --out"
        )
    return prepare_run_dir(run_dir, cfg, read_score_config)


def train_score(cfg: ScoreConfig, run_dir: str | Path, *, quiet: bool = True) -> ScoreTrainResult:
    """Train (or resume) the ICL score model of ``cfg`` in ``run_dir`` (CPU, float32).

    Resumes from the newest checkpoint when ``run_dir`` holds one (the saved config must match, except
    bookkeeping keys). Raises [`InputError`][icdl.errors.InputError] for bad input before touching the disk
    (a changed config, a damaged checkpoint, a directory in use by another process), and
    [`ScoreTrainingDiverged`][icdl.diffusion.train.ScoreTrainingDiverged] on a non-finite loss.
    """
    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    _prepare(run_dir, cfg)
    with RunLock(run_dir):  # one writer per run directory (icdl.runlock)
        ckpt, start_step = _prepare(run_dir, cfg)  # again under the lock: another run may have written
        return _train_loop(cfg, run_dir, ckpt, start_step, quiet, t0)


def _train_loop(
    cfg: ScoreConfig, run_dir: Path, ckpt: Path | None, start_step: int, quiet: bool, t0: float
) -> ScoreTrainResult:
    t = cfg.train
    if t.threads is not None:
        torch.set_num_threads(t.threads)
    torch.manual_seed(t.seed)  # model init
    model = build_model(cfg.model, cfg.task.d_x, cfg.task.d_y)
    opt = make_optimizer(model, cfg)
    if ckpt is not None:
        restore_checkpoint(model, opt, ckpt)
    n_params = sum(p.numel() for p in model.parameters())
    if start_step >= t.steps:  # nothing to do, and nothing is rewritten
        return ScoreTrainResult(run_dir, start_step, None, time.perf_counter() - t0, n_params, start_step)
    run_dir.mkdir(parents=True, exist_ok=True)
    clean_stale_temporaries(run_dir)
    write_run_config(run_dir, dump_score_config(cfg))
    truncate_metrics(run_dir / "metrics.jsonl", start_step)
    log = Log.open(cfg, run_dir, True, quiet, start_step)
    iv = Interval.zeros(t.steps, torch.device("cpu"))
    model.train()
    try:
        for step in range(start_step, t.steps):
            b = sample_score_batch(cfg.task, t.batch_size, seed=t.seed, step=step)
            for group in opt.param_groups:
                group["lr"] = lr_at(cfg, step)
            pred = model(b.xs, b.ys)
            loss = (ou_h(b.t)[..., None] * (pred - b.ys) ** 2).mean()
            if not torch.isfinite(loss):  # before the update: the last checkpoint stays the last good one
                raise ScoreTrainingDiverged(
                    f"non-finite loss at step {step + 1}; stopped (run dir {run_dir})"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if t.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
            opt.step()
            iv.add(loss, b.ys, step)
            iv.steps += 1
            done = step + 1
            if done % t.log_every == 0 or done == t.steps:
                record = {"step": done, "lr": lr_at(cfg, step), "elapsed_s": time.perf_counter() - t0}
                log.write(iv.reduced(False)[0], iv, record, 1, t.batch_size)
                iv.reset()
            if done % t.checkpoint_every == 0 or done == t.steps:
                save_checkpoint(run_dir, model, opt, done, cfg)
    finally:
        log.close()
    return ScoreTrainResult(run_dir, t.steps, log.loss, time.perf_counter() - t0, n_params, start_step)


def score_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest checkpoint directory of a score run, verified against its manifest (a mismatch is an
    InputError naming the file); None for a run of the previous format (weights at the top, legacy, with a
    one-line note on stderr). A run with neither is an InputError."""
    run_dir = Path(run_dir)
    ckpt = find_checkpoint(run_dir)
    if ckpt is not None:
        verify_checkpoint(ckpt)
        return ckpt
    if (run_dir / LEGACY_WEIGHTS).is_file():
        note = (
            f"icdl: note: score run {str(run_dir)!r} is of the previous format (no checkpoints); not verified"
        )
        print(note, file=sys.stderr)
        return None
    raise InputError(f"score run {str(run_dir)!r} has no checkpoint yet")


def _weights_file(run_dir: Path, ckpt: Path | None) -> Path:
    return (ckpt if ckpt is not None else run_dir) / "model.safetensors"


def load_score_run(run_dir: str | Path) -> tuple[ICLTransformer, ScoreConfig]:
    """Load a trained score run from its newest checkpoint (verified): ``(model in eval mode, config)``; a
    non-run directory is an InputError."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise InputError(f"{str(run_dir)!r} is not a score run directory (no config.yaml)")
    cfg = read_score_config(run_dir)
    file = _weights_file(run_dir, score_checkpoint(run_dir))
    model = build_model(cfg.model, cfg.task.d_x, cfg.task.d_y)
    try:
        model.load_state_dict(load_file(str(file)))
    except Exception as exc:  # a corrupt or foreign file is a user problem, not a bug
        raise InputError(f"cannot load {file}: {one_line(exc)[:200]}") from None
    model.eval()
    return model, cfg


def score_run_step(run_dir: str | Path) -> int | None:
    """The training step of the run's newest weights (the ``step`` metadata
    [`train_score`][icdl.diffusion.train.train_score] writes into every checkpoint), or None when the file
    records none."""
    run_dir = Path(run_dir)
    file = _weights_file(run_dir, find_checkpoint(run_dir))
    if not file.is_file():
        raise InputError(f"score run {str(run_dir)!r} has no checkpoint yet")
    try:
        with safe_open(str(file), framework="pt") as f:
            meta = f.metadata() or {}
    except Exception as exc:  # a corrupt or foreign file is a user problem, not a bug
        raise InputError(f"cannot read {file}: {one_line(exc)[:200]}") from None
    try:
        return int(meta["step"])
    except (KeyError, ValueError):
        return None


def check_finished(
    run_dir: str | Path, cfg: ScoreConfig, *, allow: bool, option: str = "--allow-unfinished"
) -> None:
    """Refuse ([`InputError`][icdl.errors.InputError]) a run whose weights have not seen all
    ``cfg.train.steps`` steps — a training run that was killed, interrupted or stopped on a non-finite loss
    keeps its last checkpoint, which would otherwise be evaluated as if finished — unless ``allow``."""
    step = score_run_step(run_dir)
    if allow or step == cfg.train.steps:
        return
    reached = "records no training step" if step is None else f"reached step {step} of {cfg.train.steps}"
    raise InputError(f"run {str(run_dir)!r} {reached}: unfinished; pass {option} to use it")

"""Pretrain the ICL transformer on in-context score estimation (a small loop, nanoGPT-style).

Every step draws a fresh batch of prompts from ``(train.seed, step)``
([`icdl.diffusion.task.sample_score_batch`][icdl.diffusion.task.sample_score_batch]) and minimises the
h-weighted DSM loss over every point of every prompt, ``mean h_t ||ŝ(x_t, t) - y||^2`` — the weighting ``λ(t)
= h_t`` of Song et al. 2021 makes every time contribute O(1) (the DSM target's variance is ``d / h_t``).
AdamW, linear warm-up, constant or cosine schedule and clipping follow ``train``
([`icdl.config.TrainConfig`][icdl.config.TrainConfig]); the model is
[`icdl.icl.models.ICLTransformer`][icdl.icl.models.ICLTransformer] with ``d_x = d + 1``, ``d_y = d``.

Run directory: ``config.yaml`` (the resolved [`ScoreConfig`][icdl.diffusion.config.ScoreConfig]),
``metrics.jsonl`` (one line per ``log_every`` steps), ``model.safetensors`` (written atomically at every
``checkpoint_every`` and at the end; its metadata ``step`` is the number of steps the weights have seen, so a
run killed or stopped early is told from a finished one by
[`check_finished`][icdl.diffusion.train.check_finished]). Unlike ``icdl train`` there is no resume: an
existing run directory is refused.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file, save

from icdl.diffusion.config import ScoreConfig, dump_score_config, validate_score_config
from icdl.diffusion.task import ou_h, sample_score_batch
from icdl.errors import InputError
from icdl.icl.models import ICLTransformer, build_model
from icdl.icl.train import lr_at  # the same warm-up + cosine schedule as icdl train
from icdl.io import atomic_write

__all__ = [
    "ScoreTrainResult",
    "ScoreTrainingDiverged",
    "check_finished",
    "load_score_run",
    "lr_at",
    "score_run_step",
    "train_score",
]


class ScoreTrainingDiverged(RuntimeError):
    """The loss became non-finite; training stopped (the last checkpoint written is kept)."""


@dataclass
class ScoreTrainResult:
    """Summary of [`train_score`][icdl.diffusion.train.train_score]."""

    run_dir: Path
    steps: int
    loss: float | None  # mean weighted loss over the last logging interval
    seconds: float
    num_params: int


def _save(model: torch.nn.Module, run_dir: Path, step: int) -> None:
    # Through the shared atomic writer: fsynced, renamed, and with the artefact's one file mode.
    data = save({k: v.contiguous() for k, v in model.state_dict().items()}, {"step": str(step)})

    def write(fh: IO[Any]) -> None:
        fh.write(data)

    atomic_write(run_dir / "model.safetensors", write, binary=True)


def train_score(cfg: ScoreConfig, run_dir: str | Path, *, quiet: bool = True) -> ScoreTrainResult:
    """Train the ICL score model of ``cfg`` into the new directory ``run_dir`` (CPU, float32).

    Raises [`InputError`][icdl.errors.InputError] (before writing anything) when ``run_dir`` exists and is not
    empty.
    """
    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise InputError(f"--out {str(run_dir)!r} exists and is not an empty directory")
    t = cfg.train
    if t.threads is not None:
        torch.set_num_threads(t.threads)
    torch.manual_seed(t.seed)
    model = build_model(cfg.model, cfg.task.d_x, cfg.task.d_y)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": t.weight_decay}, {"params": rest, "weight_decay": 0.0}],
        lr=t.lr,
        betas=(t.beta1, t.beta2),
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(dump_score_config(cfg))
    loss_sum, count, last = 0.0, 0, None
    model.train()
    with open(run_dir / "metrics.jsonl", "w") as log:
        for step in range(t.steps):
            b = sample_score_batch(cfg.task, t.batch_size, seed=t.seed, step=step)
            for group in opt.param_groups:
                group["lr"] = lr_at(cfg, step)
            pred = model(b.xs, b.ys)
            loss = (ou_h(b.t)[..., None] * (pred - b.ys) ** 2).mean()
            if not torch.isfinite(loss):
                raise ScoreTrainingDiverged(
                    f"non-finite loss at step {step + 1}; stopped (run dir {run_dir})"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if t.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
            opt.step()
            loss_sum, count = loss_sum + loss.item(), count + 1
            done = step + 1
            if done % t.log_every == 0 or done == t.steps:
                last = loss_sum / count
                rec = {
                    "step": done,
                    "loss": last,
                    "lr": lr_at(cfg, step),
                    "elapsed_s": time.perf_counter() - t0,
                }
                log.write(json.dumps(rec) + "\n")
                log.flush()
                if not quiet:
                    print(f"step {done}/{t.steps} loss {last:.4f} ({rec['elapsed_s']:.0f} s)", flush=True)
                loss_sum, count = 0.0, 0
            if done % t.checkpoint_every == 0 or done == t.steps:
                _save(model, run_dir, done)
    n_params = sum(p.numel() for p in model.parameters())
    return ScoreTrainResult(run_dir, t.steps, last, time.perf_counter() - t0, n_params)


def load_score_run(run_dir: str | Path) -> tuple[ICLTransformer, ScoreConfig]:
    """Load a trained score run: ``(model in eval mode, config)``; a non-run directory is an InputError."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file() or not (run_dir / "model.safetensors").is_file():
        raise InputError(f"{str(run_dir)!r} is not a score run directory (config.yaml + model.safetensors)")
    try:
        data = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"cannot read {run_dir / 'config.yaml'}: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict) or data.get("task", {}).get("kind") != "score":
        raise InputError(f"{str(run_dir)!r} is not a score run (task.kind is not 'score')")
    cfg = validate_score_config(data)
    model = build_model(cfg.model, cfg.task.d_x, cfg.task.d_y)
    try:
        model.load_state_dict(load_file(str(run_dir / "model.safetensors")))
    except Exception as exc:  # a corrupt or foreign file is a user problem, not a bug
        raise InputError(
            f"cannot load {run_dir / 'model.safetensors'}: {' '.join(str(exc).split())[:200]}"
        ) from None
    model.eval()
    return model, cfg


def score_run_step(run_dir: str | Path) -> int | None:
    """The training step the run's ``model.safetensors`` was written at (its ``step`` metadata, written by
    [`train_score`][icdl.diffusion.train.train_score] at every checkpoint and at the end), or None when the
    file records none."""
    try:
        with safe_open(str(Path(run_dir) / "model.safetensors"), framework="pt") as f:
            meta = f.metadata() or {}
    except Exception as exc:  # a corrupt or foreign file is a user problem, not a bug
        raise InputError(
            f"cannot read {Path(run_dir) / 'model.safetensors'}: {' '.join(str(exc).split())[:200]}"
        ) from None
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

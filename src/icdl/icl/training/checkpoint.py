"""Checkpoints of an ICL training run: atomic writing with an integrity manifest, verified reading.

``RUN/checkpoints/step_NNNNNNN/`` holds ``model.safetensors`` (weights of the uncompiled module),
``state.pt`` (optimizer, step, RNG states) and ``manifest.json`` (SHA-256 of each,
[`icdl.manifest`][icdl.manifest]); ``RUN/checkpoints/latest`` names the newest. A checkpoint is written by
[`icdl.io.atomic_dir`][icdl.io.atomic_dir], so a run killed at any instant leaves the old or the new one,
never half of one; every read checks the manifest first (docs/reliability.md). ``latest`` is checked, never
trusted alone: a missing or damaged pointer falls back to the newest checkpoint whose manifest verifies
(with a note on stderr), or stops with one line. The run's ``config.yaml`` carries a SHA-256 seal
([`icdl.manifest.seal_text`][icdl.manifest.seal_text]) checked on every read. Used by
[`icdl.icl.training.train`][icdl.icl.training.train], which re-exports these names, and by the score trainer
[`icdl.diffusion.train`][icdl.diffusion.train]: both run formats share this layout, the resume checks
([`prepare_run_dir`][icdl.icl.training.checkpoint.prepare_run_dir]) and the restore of a checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import nn

from icdl.config import RESUMABLE_KEYS, Config, RunConfig, config_diff, validate
from icdl.errors import InputError
from icdl.icl.models import ICLTransformer, build_model
from icdl.io import atomic_dir, atomic_write_text, one_line, read_text
from icdl.manifest import MANIFEST, SEAL_PREFIX, seal_text, unseal_text, verify_manifest, write_manifest
from icdl.runlock import LOCK_NAME

__all__ = [
    "CHECKPOINT_FILES",
    "CHECKPOINT_FORMAT",
    "check_resume",
    "checkpoint_dirs",
    "clean_stale_temporaries",
    "find_checkpoint",
    "is_legacy_checkpoint",
    "is_score_run",
    "load_run",
    "make_optimizer",
    "pointer_problem",
    "prepare_run_dir",
    "read_config_text",
    "read_run_config",
    "refuse_score_run",
    "restore_checkpoint",
    "save_checkpoint",
    "truncate_metrics",
    "verify_checkpoint",
    "write_run_config",
]

#: Checkpoints written since the manifest became mandatory; "icdl-icl-v1" (older) may lack a manifest.
CHECKPOINT_FORMAT = "icdl-icl-v2"
#: The files every checkpoint's manifest must list.
CHECKPOINT_FILES = ("model.safetensors", "state.pt")
_STEP = re.compile(r"step_(\d{1,12})")


def _complete(path: Path) -> bool:
    return all((path / f).is_file() for f in CHECKPOINT_FILES)


def checkpoint_dirs(run_dir: str | Path) -> list[Path]:
    """The complete checkpoint directories (``checkpoints/step_N`` with both files) of a run, oldest first."""
    ck = Path(run_dir) / "checkpoints"
    if not ck.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in ck.iterdir() if (m := _STEP.fullmatch(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found) if _complete(p)]


def pointer_problem(run_dir: str | Path) -> str | None:
    """What is wrong with ``checkpoints/latest`` (e.g. "is missing"), or None when it names a complete
    checkpoint (or the run has neither pointer nor checkpoint yet)."""
    ck = Path(run_dir) / "checkpoints"
    latest = ck / "latest"
    if latest.is_file():
        try:
            name = latest.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            return f"is unreadable ({one_line(exc)[:120]})"
        if _STEP.fullmatch(name) and (ck / name).is_dir() and _complete(ck / name):
            return None
        return f"names {name[:80]!r}, which is not a complete checkpoint"
    if latest.is_symlink() or latest.exists():
        return "is not a file"
    return "is missing" if checkpoint_dirs(run_dir) else None


_NOTED: set[str] = set()


def find_checkpoint(run_dir: str | Path, *, note: bool = True) -> Path | None:
    """The newest checkpoint directory of a run, or None when the run has none yet.

    ``checkpoints/latest`` is checked, not trusted alone: when it names a complete checkpoint that one is
    used, unless a newer complete checkpoint exists (a run killed between publishing a checkpoint and moving
    the pointer), which is then used. When the pointer is missing, not a file or names no complete
    checkpoint while checkpoints exist, the newest checkpoint whose manifest verifies is used and a note on
    stderr says so (unless not ``note``); when none verifies, or there is none, it is an InputError (one
    line): starting over would rotate the run's history away."""
    run_dir = Path(run_dir)
    ck = run_dir / "checkpoints"
    latest = ck / "latest"
    found = checkpoint_dirs(run_dir)
    problem = pointer_problem(run_dir)
    if problem is None:
        if not latest.is_file():
            return None
        path = ck / latest.read_text(encoding="utf-8").strip()
        newer = [p for p in found if _step_of(p) > _step_of(path)]
        if not newer:
            return path
        # Published but not yet named (a run writing now, or killed between the rename and the pointer):
        # the newest that verifies, silently (nothing is damaged); the pointer's own when none does.
        for p in reversed(newer):
            try:
                verify_checkpoint(p)
                return p
            except InputError:
                continue
        return path
    failures = []
    for p in reversed(found):
        try:
            verify_checkpoint(p)
        except InputError as exc:
            failures.append(str(exc))
            continue
        if note:
            _note_fallback(latest, problem, p)
        return p
    why = f"the newest fails: {failures[0][:300]}" if failures else "there is no complete checkpoint"
    raise InputError(
        f"checkpoint pointer {str(latest)!r} {problem} and no checkpoint of the run verifies ({why}); "
        "the run directory is damaged (restore it, or train into a new --out)"
    )


def _note_fallback(latest: Path, problem: str, used: Path) -> None:
    """Say once on stderr that ``used`` replaces what the damaged pointer ``latest`` names."""
    if str(used) not in _NOTED:
        _NOTED.add(str(used))
        line = f"icdl: note: checkpoint pointer {str(latest)!r} {problem}; using {used.name}, the newest "
        print(line + "checkpoint that verifies", file=sys.stderr)


def _step_of(path: Path) -> int:
    m = _STEP.fullmatch(path.name)
    return int(m.group(1)) if m else -1


def _header_format(path: Path) -> str | None:
    """The ``format`` recorded in a checkpoint's ``model.safetensors`` header (None when unreadable)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path / "model.safetensors"), framework="pt") as fh:
            return (fh.metadata() or {}).get("format")
    except Exception:  # a damaged file: its verification reports it
        return None


def _current_layout(run_dir: Path, *, config: bool) -> bool:
    """Whether a run directory is of the current format, in which every checkpoint has a manifest and
    ``config.yaml`` a seal: its config is sealed (unless ``config``: that is what is being judged), a
    checkpoint has a manifest, or a checkpoint's header records ``CHECKPOINT_FORMAT``."""
    if not config and (run_dir / "config.yaml").is_file():
        try:
            if (run_dir / "config.yaml").read_text(encoding="utf-8").startswith(SEAL_PREFIX):
                return True
        except (OSError, UnicodeDecodeError):
            pass
    ck = run_dir / "checkpoints"
    dirs = [p for p in ck.glob("step_*") if p.is_dir()] if ck.is_dir() else []
    if not config and any((p / MANIFEST).exists() for p in dirs):
        return True
    return any(_header_format(p) == CHECKPOINT_FORMAT for p in dirs)


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
        for p in ck.glob(".rotated-*"):  # a rotation killed between its rename and its delete
            shutil.rmtree(p, ignore_errors=True)
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
    run_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer, step: int, cfg: RunConfig
) -> Path:
    """Write the checkpoint of ``step`` atomically (temp dir, rename, then the ``latest`` pointer) and
    delete checkpoints beyond ``train.keep_checkpoints`` (each renamed away to ``.rotated-*`` first, then
    deleted, so a kill during rotation never leaves a half-deleted ``step_*``). Returns its directory."""
    ck = run_dir / "checkpoints"
    ck.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:07d}"
    final = ck / name
    if not final.exists():
        weights = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        config = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)  # as dump_config writes it
        meta = {"format": CHECKPOINT_FORMAT, "step": str(step), "config": config}
        state = {
            "format": CHECKPOINT_FORMAT,
            "step": step,
            "optimizer": optimizer.state_dict(),
            "rng": _rng_state(),
        }
        # The manifest (SHA-256 of each file) is written inside the temporary directory, so a published
        # checkpoint always carries the one that matches it.
        with atomic_dir(final, prefix=f".tmp-{name}-", finish=write_manifest) as tmp:
            # Written through Python file objects, so that a full disk or a file-size limit is an OSError
            # (which atomic_dir reports as one line naming the checkpoint), not a library-specific error.
            with open(tmp / "model.safetensors", "wb") as fh:
                fh.write(safetensors_bytes(weights, metadata=meta))
            with open(tmp / "state.pt", "wb") as fh:
                torch.save(state, fh)
    atomic_write_text(ck / "latest", name + "\n")
    old = sorted((p for p in ck.glob("step_*") if p.is_dir() and p.name != name), key=_step_of)
    for p in old[: max(0, len(old) - (cfg.train.keep_checkpoints - 1))]:
        gone = ck / f".rotated-{p.name}-{os.getpid()}"
        os.replace(p, gone)  # atomic: the checkpoint is whole or not there
        shutil.rmtree(gone, ignore_errors=True)
    return final


def verify_checkpoint(path: Path) -> str | None:
    """Check a checkpoint's files against its ``manifest.json``
    ([`icdl.manifest.verify_manifest`][icdl.manifest.verify_manifest]).

    The manifest must list ``model.safetensors`` and ``state.pt``. Returns the manifest's SHA-256, or None
    for a checkpoint of the older layout written before manifests (legacy: accepted unverified, with a
    one-line warning on stderr); in a run of the current layout a missing manifest is an error. A mismatch
    is an InputError naming the file."""
    digest = verify_manifest(
        path, what="checkpoint", required=CHECKPOINT_FILES, legacy_ok=is_legacy_checkpoint(path)
    )
    if digest is None and str(path) not in _WARNED_LEGACY:
        _WARNED_LEGACY.add(str(path))
        warn = f"icdl: warning: checkpoint {str(path)!r} has no manifest (legacy); not verified"
        print(warn, file=sys.stderr)
    return digest


_WARNED_LEGACY: set[str] = set()


def is_legacy_checkpoint(path: Path) -> bool:
    """Whether checkpoint ``path`` may lack a manifest: it has none and its run is of the older layout
    (unsealed config, no checkpoint with a manifest, none whose header records ``CHECKPOINT_FORMAT``)."""
    return not (path / MANIFEST).exists() and not _current_layout(path.parent.parent, config=False)


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


def write_run_config(run_dir: Path, text: str) -> Path:
    """Write a run's ``config.yaml`` (atomically) with its SHA-256 seal as the first line."""
    return atomic_write_text(run_dir / "config.yaml", seal_text(text))


def read_config_text(run_dir: Path) -> str:
    """The text of a run's ``config.yaml``, its seal verified (an edit or truncation is one InputError
    line); an unsealed config is accepted only in a run of the older layout (with a warning)."""
    path = run_dir / "config.yaml"
    text = read_text(path, what="run config")
    body = unseal_text(text, name=f"run config {str(path)!r}")
    if body is not None:
        return body
    if _current_layout(run_dir, config=True):
        raise InputError(
            f"run config {str(path)!r} has no sha256 seal, which its run's format requires (replaced or "
            "damaged after it was written); restore it or train into a new --out"
        )
    if str(path) not in _WARNED_LEGACY:
        _WARNED_LEGACY.add(str(path))
        print(f"icdl: warning: run config {str(path)!r} has no seal (legacy); not verified", file=sys.stderr)
    return text


def read_run_config(run_dir: Path) -> Config:
    """The validated ``config.yaml`` of a run directory (one InputError line when missing or damaged)."""
    try:
        data = yaml.safe_load(read_config_text(run_dir))
    except yaml.YAMLError as exc:
        raise InputError(f"cannot read {run_dir / 'config.yaml'}: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise InputError(f"{run_dir / 'config.yaml'} is not a config mapping")
    _refuse_score_config(run_dir, data)
    return validate(data)


def _refuse_score_config(run_dir: Path, data: Any) -> None:
    # A score run's config fails ICL validation with misleading "did you mean" hints: name it instead.
    task = data.get("task") if isinstance(data, dict) else None
    if isinstance(task, dict) and task.get("kind") == "score":
        raise InputError(
            f"{str(run_dir)!r} is a score run (icdl score train): use icdl score evaluate {run_dir}"
        )


def is_score_run(run_dir: Path) -> bool:
    """Whether ``run_dir/config.yaml`` is a score run's (``task.kind: score``); False when unreadable (the
    caller's own checks report that)."""
    try:
        data = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    task = data.get("task") if isinstance(data, dict) else None
    return isinstance(task, dict) and task.get("kind") == "score"


def refuse_score_run(run_dir: Path) -> None:
    """InputError if ``run_dir`` holds a score run (``task.kind: score``); silent otherwise."""
    if is_score_run(run_dir):
        _refuse_score_config(run_dir, {"task": {"kind": "score"}})


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
# Resume: shared by icdl train and icdl score train
# --------------------------------------------------------------------------------------------------


def check_resume(saved: RunConfig, cfg: RunConfig) -> None:
    """Reject a resume whose config changes the trajectory (one line, InputError); bookkeeping keys
    (``RESUMABLE_KEYS``), ``name`` and, under a constant schedule, ``train.steps`` may change."""
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


def prepare_run_dir(
    run_dir: Path, cfg: RunConfig, read_config: Callable[[Path], RunConfig] = read_run_config
) -> tuple[Path | None, int]:
    """Validate ``run_dir`` for this config without writing anything: the saved config (read by
    ``read_config``) must match, ``metrics.jsonl`` must be readable, the newest checkpoint must match its
    manifest and load. Returns ``(checkpoint_dir or None, start_step)``."""
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError(f"--out {str(run_dir)!r} exists and is not a directory")
    if run_dir.is_dir() and (run_dir / "config.yaml").is_file():
        check_resume(read_config(run_dir), cfg)
        if (run_dir / "metrics.jsonl").is_file():  # unreadable: stop before config.yaml is rewritten
            read_text(run_dir / "metrics.jsonl", what="metrics log")
        ckpt = find_checkpoint(run_dir, note=False)  # the note only once the resume is accepted
        if ckpt is None:
            return None, 0
        latest = run_dir / "checkpoints" / "latest"
        if latest.is_symlink() or (latest.exists() and not latest.is_file()):
            raise InputError(
                f"checkpoint pointer {str(latest)!r} is not a file; remove it to resume from {ckpt.name}, "
                "the newest checkpoint that verifies"
            )
        newer = [p for p in checkpoint_dirs(run_dir) if _step_of(p) > _step_of(ckpt)]
        if newer:  # damaged (find_checkpoint skipped it): resuming would rotate the evidence away
            raise InputError(
                f"checkpoint {str(newer[-1])!r} is newer than {ckpt.name}, the newest that verifies, and is "
                f"damaged; move it out of {str(run_dir / 'checkpoints')!r} to resume from {ckpt.name}"
            )
        verify_checkpoint(ckpt)  # a damaged checkpoint stops here, before anything is written or rotated
        _load_weights(ckpt)
        problem = pointer_problem(run_dir)
        if problem is not None:
            _note_fallback(latest, problem, ckpt)
        return ckpt, int(_load_state(ckpt)["step"])
    if run_dir.is_dir() and any(p for p in run_dir.iterdir() if p.name != LOCK_NAME):
        raise InputError(f"--out {str(run_dir)!r} is a non-empty directory without a run in it")
    return None, 0


def truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines logged after ``step`` (a killed run may have logged past its last checkpoint)."""
    if not path.is_file():
        return
    keep = []
    for line in read_text(path, what="metrics log").splitlines():
        try:
            if json.loads(line).get("step", 0) <= step:
                keep.append(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill
    atomic_write_text(path, "".join(s + "\n" for s in keep))


def make_optimizer(model: nn.Module, cfg: RunConfig) -> torch.optim.Optimizer:
    """AdamW of ``cfg.train``: weight decay on the matrices only (not on biases and norms)."""
    t = cfg.train
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=t.lr, betas=(t.beta1, t.beta2))


def restore_checkpoint(
    model: nn.Module, optimizer: torch.optim.Optimizer, ckpt: Path, device: torch.device | str = "cpu"
) -> None:
    """Load weights, optimizer state and RNG states of checkpoint ``ckpt`` (verified by the caller)."""
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

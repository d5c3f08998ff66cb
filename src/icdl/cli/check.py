"""``icdl check PATH`` — verify an artefact's integrity on demand (docs/reliability.md).

PATH is a run directory (``icdl train --out`` or ``icdl score train --out``, one format) or a saved
construction (``icdl construct --save``). For a run: its config, its ``checkpoints/latest`` pointer, every
checkpoint against its ``manifest.json`` (SHA-256 per file) and every evaluation cache ``eval/*.json``
against its own content hash (a score run of the previous format, weights at the top, is ``legacy``). For a
saved construction: ``model.json`` and ``weights.safetensors`` against ``content_sha256``. One line per item
(``ok``, ``legacy`` = written before manifests, not verifiable; ``stale`` = a sound cache of an older
checkpoint, recomputed on next use; ``FAIL`` = damaged, a missing or damaged ``latest`` included). Safe
beside a run that is training (a checkpoint rotated away under it is left out). Exit codes: 0 when
nothing failed, 2 otherwise (also for a PATH that is neither kind of artefact).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click

from icdl.cli._common import examples
from icdl.errors import InputError
from icdl.io import one_line, read_json

Item = tuple[str, str, str]  # (status, path, detail)
_T = TypeVar("_T")

# `icdl check` on a run that is training: a damaged-looking pointer is looked at again this many times.
_RETRIES = 10
_RETRY_S = 0.1


def _guarded(path: Path, check: Callable[[], _T]) -> _T | Item:
    """``check()`` (an item, or None where a check has nothing to report), with an InputError or an
    unreadable file turned into a FAIL item."""
    try:
        return check()
    except InputError as exc:
        return "FAIL", str(path), one_line(exc)
    except OSError as exc:  # unreadable (permissions, I/O error): damage to report, not a crash
        return "FAIL", str(path), f"unreadable ({one_line(exc.strerror or exc)})"


def _check_checkpoint(ck: Path) -> Item | None:
    """The item of one checkpoint; None when it vanished while being read (rotated away by a run that is
    training: that is not damage)."""
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.icl.training.checkpoint import CHECKPOINT_FILES, is_legacy_checkpoint
    from icdl.manifest import verify_manifest

    try:
        legacy = is_legacy_checkpoint(ck)
        digest = verify_manifest(ck, what="checkpoint", required=CHECKPOINT_FILES, legacy_ok=legacy)
    except (InputError, OSError):
        if not ck.exists():  # rotated away (renamed, then deleted) while it was being hashed
            return None
        raise
    if digest is None:
        return "legacy", str(ck), "no manifest.json (written before manifests); not verified"
    return "ok", str(ck), f"every file matches manifest.json (sha256 {digest[:12]})"


def _check_cache(path: Path, run: Path) -> Item:
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.icl.evaluation.cache import checkpoint_digest, result_content_sha256

    data = read_json(path, what="evaluation cache")
    seal = data.get("integrity") if isinstance(data, dict) else None
    if not isinstance(data, dict):
        return "FAIL", str(path), "not a JSON object"
    if not isinstance(seal, dict):
        return "legacy", str(path), "no integrity record (written before it); recomputed on next use"
    if seal.get("content_sha256") != result_content_sha256(data):
        return "FAIL", str(path), "content does not match its content_sha256 (edited after it was written)"
    if seal.get("checkpoint_manifest_sha256") != checkpoint_digest(run):
        return "stale", str(path), "computed from another checkpoint; recomputed on next use"
    return "ok", str(path), "content and checkpoint match"


def check_run(run: Path) -> list[Item]:
    """One item per config, checkpoint pointer, checkpoint and evaluation cache of a run directory (of
    ``icdl train`` or ``icdl score train``)."""
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.icl.training.checkpoint import find_checkpoint, is_score_run, pointer_problem, read_run_config

    score = is_score_run(run)

    def config() -> Item:
        if score:
            # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
            from icdl.diffusion.train import read_score_config

            read_score_config(run)
            return "ok", str(run / "config.yaml"), "valid score config"
        read_run_config(run)
        return "ok", str(run / "config.yaml"), "valid config"

    latest = run / "checkpoints" / "latest"

    def pointer() -> Item:
        # A run training meanwhile moves the pointer, then rotates the checkpoint it named away: the pointer
        # and the checkpoint it resolves to are read together, and looked at again while either is moving.
        for attempt in range(_RETRIES + 1):
            if attempt:
                time.sleep(_RETRY_S)
            problem, error = pointer_problem(run), None
            try:
                ck = find_checkpoint(run, note=False)
            except (InputError, OSError) as exc:
                ck, error = None, exc
            if problem is None and error is None:
                return "ok", str(latest), f"names {ck.name if ck else 'no checkpoint yet'}"
        if problem is None and error is not None:
            raise error
        # A damaged pointer is a FAIL even when a resume can recover (it says what it would use).
        return "FAIL", str(latest), f"{problem}; a resume or evaluation uses {ck.name if ck else 'none'}"

    items = [_guarded(run / "config.yaml", config), _guarded(latest, pointer)]
    if score and (run / "model.safetensors").is_file():
        legacy = "score weights of the previous format (no checkpoints, no manifest); not verified"
        items.append(("legacy", str(run / "model.safetensors"), legacy))
    for ck in sorted((run / "checkpoints").glob("step_*")):
        item = _guarded(ck, lambda ck=ck: _check_checkpoint(ck))  # type: ignore[misc]
        if item is not None:
            items.append(item)
    for cache in sorted((run / "eval").glob("*.json")):
        items.append(_guarded(cache, lambda cache=cache: _check_cache(cache, run)))  # type: ignore[misc]
    return items


def check_construction(d: Path) -> list[Item]:
    """One item: a saved construction's files against its ``content_sha256``, then the model against a
    fresh compile of its own saved configuration ([`load`][icdl.construct.store.load])."""
    # imported on first use, for start-up time: `icdl --help` and the other commands load no torch
    from icdl.construct.store import META, WEIGHTS, content_hash, load

    def one() -> Item:
        meta = read_json(d / META, what="saved model description")
        if not isinstance(meta, dict):
            return "FAIL", str(d), f"{META} is not a JSON object"
        try:
            weights = (d / WEIGHTS).read_bytes()
        except OSError as exc:
            return "FAIL", str(d / WEIGHTS), f"unreadable ({exc.strerror})"
        if meta.get("content_sha256") != content_hash(meta, weights):
            return "FAIL", str(d), f"{META} and {WEIGHTS} do not match content_sha256 (changed after saving)"
        load(d)  # consistent, not only unmodified: an InputError here becomes a FAIL item
        return "ok", str(d), "files match content_sha256 and a fresh compile of the saved config"

    return [_guarded(d, one)]


@click.command(name="check", epilog=examples("icdl check runs/tiny", "icdl check saved-model"))
@click.argument("path", type=click.Path(path_type=Path))
def check(path: Path) -> None:
    """Verify a run directory or a saved construction (hashes of every file); exit 2 if anything fails.

    PATH is a run directory (checkpoints, evaluation caches) or a directory written by
    icdl construct --save (content hash).
    """
    if (path / "config.yaml").is_file():
        items = check_run(path)
    elif (path / "model.json").is_file():
        items = check_construction(path)
    else:
        raise InputError(f"{str(path)!r} is neither a run directory nor a saved construction")
    for status, where, detail in items:
        click.echo(f"{status:6s} {where}: {detail}")
    if any(status == "FAIL" for status, _, _ in items):
        sys.exit(2)

"""One atomic directory writer (icdl.io.atomic_dir): all or nothing, one mode for every file."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import torch

from icdl.config import load_config
from icdl.construct import compile_gd_transformer, store
from icdl.errors import InputError
from icdl.icl.models import build_model
from icdl.icl.training.train import save_checkpoint
from icdl.io import atomic_dir, file_mode
from icdl.nets import NetSpec


def _modes(d: Path) -> dict[str, int]:
    return {f.name: stat.S_IMODE(f.stat().st_mode) for f in d.iterdir() if f.is_file()}


def test_atomic_dir_publishes_on_success(tmp_path: Path) -> None:
    target = tmp_path / "out"
    with atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("a")
        os.chmod(tmp / "a.txt", 0o600)  # as safetensors does
        assert not target.exists()
    assert (target / "a.txt").read_text() == "a"
    assert _modes(target) == {"a.txt": file_mode()}
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_atomic_dir_leaves_nothing_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "old").write_text("old")
    with pytest.raises(RuntimeError), atomic_dir(target, replace=True) as tmp:
        (tmp / "new").write_text("half")
        raise RuntimeError("killed")
    assert [p.name for p in target.iterdir()] == ["old"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no temporary left


def test_atomic_dir_refuses_existing_without_replace(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    with pytest.raises(InputError, match="already exists"), atomic_dir(tmp_path / "out"):
        pass
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_atomic_dir_published_meanwhile_is_one_line(tmp_path: Path) -> None:
    """Two writers of one target (parallel `icdl construct --save DIR`): the second is refused, the first
    one's directory is kept whole, no temporary is left."""
    target = tmp_path / "out"
    with pytest.raises(InputError, match="another process"), atomic_dir(target) as tmp:
        (tmp / "mine").write_text("2")
        with atomic_dir(target) as other:  # the other process publishes first
            (other / "theirs").write_text("1")
    assert [p.name for p in target.iterdir()] == ["theirs"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_atomic_dir_replace_keeps_old_when_publishing_fails(tmp_path: Path, monkeypatch: Any) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "old").write_text("0")
    real = os.replace

    def failing(src: Any, dst: Any) -> None:
        if str(src).endswith(".tmp"):
            raise OSError(errno.EIO, "I/O error")
        real(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(InputError, match="I/O error"), atomic_dir(target, replace=True) as tmp:
        (tmp / "new").write_text("1")
    assert [p.name for p in target.iterdir()] == ["old"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_checkpoint_files_share_one_mode(tmp_path: Path) -> None:
    cfg = load_config("tiny", ["train.threads=1"])
    model = build_model(cfg.model, cfg.task.dim, cfg.task.out_dim)
    opt = torch.optim.AdamW(model.parameters())
    ck = save_checkpoint(tmp_path, model, opt, 3, cfg)
    modes = _modes(ck)
    assert {"model.safetensors", "state.pt"} <= set(modes)
    assert set(modes.values()) == {file_mode()}, modes
    assert stat.S_IMODE(ck.stat().st_mode) == file_mode() | ((file_mode() & 0o444) >> 2)
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]


def test_saved_construction_files_share_one_mode(tmp_path: Path) -> None:
    model = compile_gd_transformer(NetSpec(2, 2, 2, 1), steps=1, n=3)
    out = store.save(model, tmp_path / "m")
    assert set(_modes(out).values()) == {file_mode()}
    assert [p.name for p in tmp_path.iterdir()] == ["m"]
    store.save(model, out, overwrite=True)  # replacing keeps the all-or-nothing rename
    assert [p.name for p in tmp_path.iterdir()] == ["m"]

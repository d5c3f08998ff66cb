"""A saved construction must be consistent, not just unmodified: with ``content_sha256`` recomputed after
an edit (so the hash check passes), :func:`icdl.construct.load` still refuses a model whose config, block
list or weights disagree with a fresh compilation of its saved config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from icdl.construct import compile_gd_transformer, load, sample_task, save
from icdl.construct.store import content_hash
from icdl.errors import InputError
from icdl.nets import NetSpec

SPEC = NetSpec(2, 3, 2, 1)


def _saved(tmp_path: Path) -> Path:
    return save(compile_gd_transformer(SPEC, lr=0.1, steps=2, n=3), tmp_path / "m")


def _rehash(path: Path) -> None:
    """Recompute ``content_sha256`` over the (edited) files, as a careless or malicious editor would."""
    meta = json.loads((path / "model.json").read_text())
    meta["content_sha256"] = content_hash(meta, (path / "weights.safetensors").read_bytes())
    (path / "model.json").write_text(json.dumps(meta, indent=2))


def _edit_meta(path: Path, edit) -> None:
    meta = json.loads((path / "model.json").read_text())
    edit(meta)
    (path / "model.json").write_text(json.dumps(meta, indent=2))


def _flip_last_weight_byte(path: Path) -> None:
    w = path / "weights.safetensors"
    data = bytearray(w.read_bytes())
    data[-1] ^= 0x01  # the last byte is tensor data (the header comes first), so the file stays readable
    w.write_bytes(bytes(data))


TAMPERS = {
    "lr": lambda p: _edit_meta(p, lambda m: m["config"].__setitem__("lr", 0.2)),
    "steps": lambda p: _edit_meta(p, lambda m: m["config"].__setitem__("steps", 7)),
    "drop-block-entry": lambda p: _edit_meta(p, lambda m: m["block"].pop()),
    "weight-byte": _flip_last_weight_byte,
}


def test_untampered_save_loads_and_computes_the_same(tmp_path: Path) -> None:
    model = compile_gd_transformer(SPEC, lr=0.1, steps=2, n=3)
    path = save(model, tmp_path / "m")
    x, y, xq, w0, _ = sample_task(SPEC, 3, seed=1)
    H = model.build_prompt(x, y, xq, w0)
    loaded = load(path)
    assert loaded.config == model.config
    assert torch.equal(loaded(H), model(H))


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_rehashed_tamper_is_refused(tmp_path: Path, tamper: str) -> None:
    path = _saved(tmp_path)
    TAMPERS[tamper](path)
    _rehash(path)
    with pytest.raises(InputError) as info:
        load(path)
    msg = str(info.value)
    assert str(path) in msg and "\n" not in msg
    assert "content hash" not in msg  # refused by the consistency check, not by the hash


def test_hash_covers_the_weights_file(tmp_path: Path) -> None:
    """Weights changed, model.json untouched: the content hash (not only the consistency check) refuses it."""
    path = _saved(tmp_path)
    _flip_last_weight_byte(path)
    with pytest.raises(InputError, match="content hash"):
        load(path)


@pytest.mark.parametrize("tamper", ["lr", "weight-byte"])
def test_icdl_check_refuses_a_rehashed_tamper(tmp_path: Path, tamper: str) -> None:
    from click.testing import CliRunner

    from icdl.cli.check import check

    path = _saved(tmp_path)
    assert CliRunner().invoke(check, [str(path)]).exit_code == 0
    TAMPERS[tamper](path)
    _rehash(path)
    result = CliRunner().invoke(check, [str(path)])
    assert result.exit_code == 2, result.output
    assert "FAIL" in result.output and "inconsistent" in result.output

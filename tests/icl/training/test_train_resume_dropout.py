"""Resume restores the global RNG state: with dropout > 0 (the only consumer of that state) an interrupted
and resumed run must be bit-identical to the uninterrupted one."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from icdl.config import load_config
from icdl.icl.training.train import find_checkpoint, train


def _weights(run: Path) -> dict[str, torch.Tensor]:
    ck = find_checkpoint(run)
    assert ck is not None
    return load_file(str(ck / "model.safetensors"))


def test_resume_with_dropout_is_bit_identical(tmp_path: Path) -> None:
    base = ["train.threads=1", "train.checkpoint_every=4", "train.log_every=4", "model.dropout=0.2"]
    train(load_config("tiny", [*base, "train.steps=16"]), tmp_path / "long", quiet=True)
    train(load_config("tiny", [*base, "train.steps=8"]), tmp_path / "short", quiet=True)
    res = train(load_config("tiny", [*base, "train.steps=16"]), tmp_path / "short", quiet=True)
    assert res.start_step == 8
    a, b = _weights(tmp_path / "long"), _weights(tmp_path / "short")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # dropout is active (the premise): the same run without it ends elsewhere
    train(
        load_config("tiny", [*base, "train.steps=16", "model.dropout=0.0"]), tmp_path / "nodrop", quiet=True
    )
    c = _weights(tmp_path / "nodrop")
    assert any(not torch.equal(a[k], c[k]) for k in a)

"""icdl.construct.store: save/load round trip is bit for bit; bad directories are user errors."""

from __future__ import annotations

import json

import pytest
import torch

from icdl.construct import compile_gd_transformer, load, sample_task, save
from icdl.errors import InputError
from icdl.nets import NetSpec


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_round_trip_is_bit_for_bit(tmp_path, activation: str) -> None:
    spec = NetSpec(3, 4, 3, 2, activation=activation)
    model = compile_gd_transformer(spec, steps=2, n=6, eps=1e-2, projection="box", box=0.9)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=2)
    H = model.build_prompt(x, y, xq, w0)
    out = model(H)
    path = save(model, tmp_path / "m")
    assert sorted(p.name for p in path.iterdir()) == ["model.json", "weights.safetensors"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dir left behind
    loaded = load(path)
    assert torch.equal(loaded(H), out)
    assert loaded.config == model.config
    assert loaded.summary() == model.summary()
    assert [m.info for m in loaded.block] == [m.info for m in model.block]
    assert loaded.explain() == model.explain()
    meta = json.loads((path / "model.json").read_text())
    assert meta["format"].startswith("icdl-compiled-model/")
    assert meta["layout"]["dim"] == model.embedding_dim


def test_bad_directories(tmp_path) -> None:
    spec = NetSpec(2, 2, 2, 1)
    model = compile_gd_transformer(spec, steps=1, n=3)
    save(model, tmp_path / "a")
    with pytest.raises(InputError, match="exists"):
        save(model, tmp_path / "a")
    save(model, tmp_path / "a", overwrite=True)
    with pytest.raises(InputError, match="not a saved"):
        load(tmp_path / "missing")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "model.json").write_text(json.dumps({"format": "other"}))
    (tmp_path / "b" / "weights.safetensors").write_bytes(b"")
    with pytest.raises(InputError, match="format"):
        load(tmp_path / "b")


@pytest.mark.parametrize("variant", ["paper", "compact", "no-ewml", "softmax"])
def test_every_variant_round_trips(tmp_path, variant: str) -> None:
    spec = NetSpec(2, 2, 2, 1)
    model = compile_gd_transformer(spec, steps=1, n=3, eps=1e-2, radius=4.0, variant=variant)
    x, y, xq, w0, _ = sample_task(spec, 3, seed=1)
    H = model.build_prompt(x, y, xq, w0)
    loaded = load(save(model, tmp_path / variant))
    assert torch.equal(loaded(H), model(H))
    assert loaded.infos() == model.infos() and loaded.config.variant == variant

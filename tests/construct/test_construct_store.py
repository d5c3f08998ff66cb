"""icdl.construct.store: save/load round trip is bit for bit; bad directories are user errors."""

from __future__ import annotations

import json
import math

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


def _saved(tmp_path):
    spec = NetSpec(2, 2, 2, 1)
    return save(compile_gd_transformer(spec, steps=1, n=3), tmp_path / "m")


def test_file_modes_match(tmp_path) -> None:
    path = _saved(tmp_path)
    modes = {(p.stat().st_mode & 0o777) for p in path.iterdir()}
    assert len(modes) == 1
    (mode,) = modes
    assert path.stat().st_mode & 0o777 == mode | ((mode & 0o444) >> 2)  # the directory: same + x bits


@pytest.mark.parametrize(
    "damage",
    ["truncate-weights", "garbage-weights", "truncate-json", "not-json", "drop-entry", "edit-entry", "list"],
)
def test_corrupt_or_tampered_save_is_one_line_error(tmp_path, damage: str) -> None:
    path = _saved(tmp_path)
    w, m = path / "weights.safetensors", path / "model.json"
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    if damage == "truncate-weights":
        w.write_bytes(w.read_bytes()[: len(w.read_bytes()) // 2])
    elif damage == "garbage-weights":
        w.write_bytes(b"\x00" * 64)
    elif damage == "truncate-json":
        m.write_text(m.read_text()[:100])
    elif damage == "not-json":
        m.write_bytes(b"\xff\xfe garbage")
    elif damage == "list":
        m.write_text("[]")
    else:
        meta = json.loads(m.read_text())
        if damage == "drop-entry":
            meta["block"].pop()
        else:
            meta["config"]["lr"] = 0.5
        m.write_text(json.dumps(meta))
    damaged = {p.name: p.read_bytes() for p in path.iterdir()}
    with pytest.raises(InputError) as exc:
        load(path)
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg
    assert {p.name: p.read_bytes() for p in path.iterdir()} == damaged != before  # evidence kept


@pytest.mark.parametrize("variant", ["paper", "compact", "no-ewml", "softmax"])
def test_every_variant_round_trips(tmp_path, variant: str) -> None:
    spec = NetSpec(2, 2, 2, 1)
    model = compile_gd_transformer(spec, steps=1, n=3, eps=1e-2, radius=4.0, variant=variant)
    x, y, xq, w0, _ = sample_task(spec, 3, seed=1)
    H = model.build_prompt(x, y, xq, w0)
    loaded = load(save(model, tmp_path / variant))
    assert torch.equal(loaded(H), model(H))
    assert loaded.infos() == model.infos() and loaded.config.variant == variant


@pytest.mark.parametrize("value", [-0.0, math.nan], ids=["neg-zero", "nan"])
def test_a_re_hashed_table_differing_only_in_its_bits_is_refused(tmp_path, value: float) -> None:
    """Stored tables are compared with a fresh compile by bytes: a 0.0 coefficient rewritten as -0.0
    (equal as a value) or as NaN, with the content hash recomputed so only that comparison can see it, is
    refused; the untouched save loads."""
    from safetensors.torch import load as load_bytes
    from safetensors.torch import save as save_bytes

    from icdl.construct.store import content_hash

    path = _saved(tmp_path)
    load(path)  # the untouched save loads
    w, m = path / "weights.safetensors", path / "model.json"
    tensors = dict(load_bytes(w.read_bytes()))
    key = next(k for k, t in tensors.items() if t.is_floating_point() and bool((t == 0).any()))
    t = tensors[key].clone()
    t.view(-1)[int(torch.nonzero(t.view(-1) == 0)[0])] = value
    tensors[key] = t
    weights = save_bytes(tensors)
    w.write_bytes(weights)
    meta = json.loads(m.read_text())
    meta["content_sha256"] = content_hash(meta, weights)
    m.write_text(json.dumps(meta))
    with pytest.raises(InputError, match=f"tensor {key} differs"):
        load(path)

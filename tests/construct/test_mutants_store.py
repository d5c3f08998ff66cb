"""The saved-model store's refusals, each on its own (issue 35: mutmut's survivors in ``construct/store``):
every check of [`load`][icdl.construct.store.load] is reached by a save tampered in exactly one way, with the
content hash recomputed so that only that check can see it, and the refusal is its exact one-line message;
the saved description's structure and the hash are checked against an independent computation."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load as load_bytes
from safetensors.torch import save as save_bytes

import icdl
from icdl.construct import compile_gd_transformer, load, save
from icdl.construct.store import FORMAT, content_hash
from icdl.construct.variants import VARIANTS
from icdl.errors import InputError
from icdl.nets import NetSpec

SPEC = NetSpec(2, 2, 2, 1)


def _saved(tmp_path: Path, **kw: Any) -> Path:
    return save(compile_gd_transformer(SPEC, steps=1, n=3, **kw), tmp_path / "m")


def _tamper(
    path: Path,
    meta_edit: Callable[[dict[str, Any]], None] | None = None,
    tensors_edit: Callable[[dict[str, torch.Tensor]], None] | None = None,
) -> None:
    """Edit the saved description and/or tables and recompute the content hash (a consistent forgery)."""
    w, m = path / "weights.safetensors", path / "model.json"
    meta = json.loads(m.read_text())
    tensors = dict(load_bytes(w.read_bytes()))
    if meta_edit is not None:
        meta_edit(meta)
    if tensors_edit is not None:
        tensors_edit(tensors)
    weights = save_bytes(tensors, metadata={"format": FORMAT})
    meta["content_sha256"] = content_hash(meta, weights)
    w.write_bytes(weights)
    m.write_text(json.dumps(meta))


def _refusal(path: Path) -> str:
    with pytest.raises(InputError) as exc:
        load(path)
    return str(exc.value)


def _inconsistent(path: Path, problem: str) -> str:
    return (
        f"{path}: the saved model is inconsistent with its own config ({problem}); recompile instead of "
        f"loading it"
    )


def test_the_content_hash_is_sha256_of_the_canonical_description_then_the_weights() -> None:
    meta = {"b": [1, 2.5], "a": {"y": "z"}, "content_sha256": "ignored"}
    want = hashlib.sha256(b'{"a":{"y":"z"},"b":[1,2.5]}' + b"\x00\x01").hexdigest()
    assert content_hash(meta, b"\x00\x01") == want
    assert content_hash({k: v for k, v in meta.items() if k != "content_sha256"}, b"\x00\x01") == want


def test_the_saved_description_names_every_sublayer_and_its_options(tmp_path: Path) -> None:
    model = compile_gd_transformer(SPEC, steps=1, n=3)
    path = save(model, tmp_path / "m")
    text = (path / "model.json").read_text()
    meta = json.loads(text)
    assert text == json.dumps(meta, indent=2)  # readable: indented by 2
    assert meta["format"] == FORMAT == "icdl-compiled-model/2" and meta["icdl_version"] == icdl.__version__
    with safe_open(str(path / "weights.safetensors"), "pt") as f:  # the tables' file names its format too
        assert f.metadata() == {"format": FORMAT}
    assert meta["config"] == model.config.to_dict() and meta["layout"] == model.layout.to_dict()
    assert meta["terms"] == model.terms.to_dict() and meta["summary"] == model.summary()
    weights = (path / "weights.safetensors").read_bytes()
    assert meta["content_sha256"] == content_hash(meta, weights)
    for part, layers in (("block", model.block_layers), ("readout", model.readout_layers)):
        assert len(meta[part]) == len(layers)
        for d, m in zip(meta[part], layers, strict=True):
            assert d["class"] == type(m).__name__ and d["info"] == m.info.to_dict()
            acc = getattr(m, "accumulate", None)
            assert d.get("accumulate") == acc and (("accumulate" in d) == (acc is not None))
            assert "kwargs" not in d  # no built-in sublayer class has constructor options
    tensors = load_bytes(weights)
    for part, layers in (("block", model.block_layers), ("readout", model.readout_layers)):
        for i, m in enumerate(layers):
            for name, buf in m.state_dict().items():
                assert torch.equal(tensors[f"{part}.{i}.{name}"], buf)
    n_tables = sum(len(m.state_dict()) for m in (*model.block_layers, *model.readout_layers))
    assert len(tensors) == n_tables


def test_save_refuses_an_existing_path_unless_told_to_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "m"
    target.mkdir()
    model = compile_gd_transformer(SPEC, steps=1, n=3)
    with pytest.raises(InputError) as exc:
        save(model, target)
    assert str(exc.value) == f"{target} already exists; choose a new directory"
    other = compile_gd_transformer(SPEC, steps=2, n=3)
    assert save(model, target, overwrite=True) == target
    save(other, target, overwrite=True)
    assert load(target).steps == 2


@pytest.mark.parametrize("missing", ["model.json", "weights.safetensors"])
def test_a_directory_without_either_file_is_not_a_saved_model(tmp_path: Path, missing: str) -> None:
    path = _saved(tmp_path)
    (path / missing).unlink()
    want = f"{path} is not a saved compiled model (needs model.json and weights.safetensors)"
    assert _refusal(path) == want


def test_format_hash_and_corrupt_weights_messages(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    m, w = path / "model.json", path / "weights.safetensors"
    good_meta, good_weights = m.read_text(), w.read_bytes()
    meta = json.loads(good_meta)
    meta["format"] = "icdl-compiled-model/1"
    m.write_text(json.dumps(meta))
    assert _refusal(path) == f"{path}: unsupported format 'icdl-compiled-model/1' (expected {FORMAT})"
    m.write_text(good_meta)
    w.write_bytes(good_weights[:-1] + bytes([good_weights[-1] ^ 1]))
    assert _refusal(path) == (
        f"{path}: model.json and weights.safetensors do not match their content hash (content_sha256); the "
        f"files "
        "were changed or truncated after saving — recompile instead of loading them"
    )
    # garbage weights with a matching hash: the hash passes, the tables cannot be read
    meta = json.loads(good_meta)
    meta["content_sha256"] = content_hash(meta, b"\x00" * 16)
    m.write_text(json.dumps(meta))
    w.write_bytes(b"\x00" * 16)
    from safetensors import SafetensorError

    with pytest.raises(SafetensorError) as why:
        load_bytes(b"\x00" * 16)
    assert _refusal(path) == f"{w} is corrupt ({why.value})"


def test_a_description_that_is_not_an_object_is_corrupt(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    (path / "model.json").write_text("[1, 2]")
    assert _refusal(path) == f"{path / 'model.json'} is corrupt (not a JSON object)"


def test_changed_sums_are_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path, eps=1e-2)

    def edit(meta: dict[str, Any]) -> None:
        meta["terms"]["r_prime"][0]["eps"] = 0.5

    _tamper(path, edit)
    assert _refusal(path) == _inconsistent(path, "ReLU sums (terms) differ")


def test_a_changed_summary_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path)

    def edit(meta: dict[str, Any]) -> None:
        meta["summary"]["nonzero_parameters"] += 1

    _tamper(path, edit)
    assert _refusal(path) == _inconsistent(path, "summary differs")


@pytest.mark.parametrize("part", ["block", "readout"])
def test_a_dropped_sublayer_is_refused(tmp_path: Path, part: str) -> None:
    path = _saved(tmp_path)
    meta = json.loads((path / "model.json").read_text())
    last = len(meta[part]) - 1

    def edit(meta: dict[str, Any]) -> None:
        meta[part].pop()

    def drop(tensors: dict[str, torch.Tensor]) -> None:
        for k in [k for k in tensors if k.startswith(f"{part}.{last}.")]:
            del tensors[k]

    _tamper(path, edit, drop)
    want = f"{part} has {last} sublayers, config compiles to {last + 1}"
    assert _refusal(path) == _inconsistent(path, want)


def test_a_sublayer_whose_options_differ_is_refused(tmp_path: Path) -> None:
    """An attention sublayer stored with another way of summing: its tables still build a sublayer, but it is
    not the one the config compiles to."""
    path = _saved(tmp_path)
    meta = json.loads((path / "model.json").read_text())
    i = next(i for i, d in enumerate(meta["block"]) if d.get("accumulate") == "tokens")
    name = meta["block"][i]["info"]["name"]

    def edit(meta: dict[str, Any]) -> None:
        meta["block"][i]["accumulate"] = "heads"

    _tamper(path, edit)
    want = f"block sublayer {i + 1} ({name}) differs in its description"
    assert _refusal(path) == _inconsistent(path, want)


def test_a_sublayer_that_does_not_match_its_stored_description_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path)

    def edit(meta: dict[str, Any]) -> None:
        meta["readout"][1]["info"]["heads"] += 1

    _tamper(path, edit)
    assert _refusal(path) == f"{path}: readout sublayer 2 does not match its stored description"


def test_a_stored_layout_of_another_variant_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path)

    def edit(meta: dict[str, Any]) -> None:
        meta["layout"]["dim"] += 1

    _tamper(path, edit)
    assert _refusal(path) == f"{path}: the stored layout does not match variant 'paper'"


@pytest.mark.parametrize(
    ("how", "key"),
    [("extra", "readout.0.extra"), ("dtype", "block.0.v_coef"), ("shape", "block.7.w1_coef")],
)
def test_a_table_that_is_not_the_compiled_one_is_refused(tmp_path: Path, how: str, key: str) -> None:
    """A table added, of another dtype, or of another shape with the same bytes ((20, 1) stored flat: the MLP
    still builds from it)."""
    path = _saved(tmp_path)

    def edit(tensors: dict[str, torch.Tensor]) -> None:
        if how == "extra":
            tensors[key] = torch.zeros(1)
        elif how == "dtype":
            tensors[key] = tensors[key].to(torch.float32)
        else:
            assert tensors[key].shape == (20, 1)
            tensors[key] = tensors[key].reshape(-1)

    _tamper(path, tensors_edit=edit)
    problem = f"tensor {key} is unexpected" if how == "extra" else f"tensor {key} differs"
    assert _refusal(path) == _inconsistent(path, problem)


def test_a_missing_table_is_not_a_loadable_model(tmp_path: Path) -> None:
    path = _saved(tmp_path)

    def edit(t: dict[str, torch.Tensor]) -> None:
        del t["readout.2.w2_dst"]

    _tamper(path, tensors_edit=edit)
    assert _refusal(path) == (
        f'{path / "model.json"} does not describe a loadable model (ValueError("ReLUMLP: missing tables '
        "['w2_dst']\"))"
    )


def test_an_unknown_sublayer_class_is_not_a_loadable_model(tmp_path: Path) -> None:
    path = _saved(tmp_path)

    def edit(meta: dict[str, Any]) -> None:
        meta["block"][0]["class"] = "Nope"

    _tamper(path, edit)
    assert _refusal(path) == f"{path / 'model.json'} does not describe a loadable model (KeyError('Nope'))"


def test_a_sublayer_stored_without_a_name_is_named_as_rebuilt(tmp_path: Path) -> None:
    """Files written before sublayers had names carry none: the rebuilt sublayer names itself."""
    path = _saved(tmp_path)

    def edit(meta: dict[str, Any]) -> None:
        del meta["block"][0]["info"]["name"]
        meta["block"][0]["accumulate"] = "heads"

    _tamper(path, edit)
    want = "block sublayer 1 (forward_1) differs in its description"
    assert _refusal(path) == _inconsistent(path, want)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_registered_variant_round_trips(tmp_path: Path, variant: str) -> None:
    """Each variant's sublayer classes (row attention and MLPs included) are rebuilt with their options."""
    kw: dict[str, Any] = {"eps": 1e-2, "radius": 4.0} if variant in ("softmax", "rows") else {}
    model = compile_gd_transformer(SPEC, steps=1, n=3, variant=variant, **kw)
    path = save(model, tmp_path / variant)
    meta = json.loads((path / "model.json").read_text())
    for d, m in zip(
        [*meta["block"], *meta["readout"]], [*model.block_layers, *model.readout_layers], strict=True
    ):
        own = getattr(m, "store_kwargs", None)  # a variant's own sublayer class stores its options
        assert d.get("kwargs") == (None if own is None else json.loads(json.dumps(own())))
    loaded = load(path)
    assert loaded.infos() == model.infos()
    assert [type(m) for m in loaded.block_layers] == [type(m) for m in model.block_layers]
    for a, b in zip(
        (*loaded.block_layers, *loaded.readout_layers),
        (*model.block_layers, *model.readout_layers),
        strict=True,
    ):
        assert getattr(a, "accumulate", None) == getattr(b, "accumulate", None)
        for (ka, ta), (kb, tb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
            assert ka == kb and torch.equal(ta, tb)


def test_a_cut_off_description_is_named_as_the_saved_model_description(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    (path / "model.json").write_text('{"format": ')
    assert _refusal(path) == (
        f"saved model description '{path / 'model.json'}' is truncated (invalid JSON at line 1 column 12)"
    )


def test_unreadable_weights_are_one_line_naming_the_file(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    path = _saved(tmp_path)
    weights = path / "weights.safetensors"
    read = Path.read_bytes

    def refuse(self: Path) -> bytes:
        if self == weights:
            raise PermissionError(13, "Permission denied", str(self))
        return read(self)

    monkeypatch.setattr(Path, "read_bytes", refuse)
    assert _refusal(path) == f"cannot read {weights}: Permission denied"

    def fail(self: Path) -> bytes:  # an OSError without an errno: its text
        if self == weights:
            raise OSError("the disk went away")
        return read(self)

    monkeypatch.setattr(Path, "read_bytes", fail)
    assert _refusal(path) == f"cannot read {weights}: the disk went away"

"""Save and load compiled models: ``weights.safetensors`` (the compact tables) + ``model.json`` (config,
layout, per-sublayer metadata, ReLU sums). Writing is atomic: everything goes to a temporary directory next
to the target, which is then renamed. [`load`][icdl.construct.store.load] rebuilds the modules from the stored
tables, so the loaded model reproduces the saved one bit for bit.

``model.json`` records ``content_sha256``, the SHA-256 of the rest of ``model.json`` (canonical JSON) followed
by the bytes of ``weights.safetensors``. [`load`][icdl.construct.store.load] recomputes it, so a description
that no longer matches its weights (an entry removed from ``model.json``, a table edited) is refused instead
of silently computing something else.

The hash only proves the files are unmodified since someone computed it, not that they are consistent: a
hand-edited ``lr`` with the hash recomputed would report one step size and compute with another. So
[`load`][icdl.construct.store.load] also compiles the model afresh from the saved
[`GDConfig`][icdl.construct.config.GDConfig] (what ``icdl construct`` does) and requires the loaded one to
agree with it exactly: layout, ReLU sums, summary, the block and readout lists (class, name, kind, sizes) and
every weight/index tensor (dtype, shape, bytes). Every failure to load (missing, truncated, corrupt, tampered,
inconsistent) is one [`InputError`][icdl.errors.InputError] line that names the file.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_bytes
from safetensors.torch import save as save_bytes

from icdl import __version__
from icdl.construct.compile import CompiledModel, GDConfig, SumTerms, compile_gd_transformer
from icdl.construct.engine.layers import EWML, ReLUAttention, ReLUMLP, Role, SoftmaxAttention, Sublayer
from icdl.construct.engine.row_layers import RowAttention, RowMLP
from icdl.construct.variants.registry import get_variant
from icdl.errors import InputError
from icdl.io import atomic_dir, one_line, read_json
from icdl.sublayer import SublayerInfo

__all__ = ["FORMAT", "load", "save"]

FORMAT = "icdl-compiled-model/2"  # /2: model.json carries content_sha256
WEIGHTS = "weights.safetensors"
META = "model.json"
_CLASSES: dict[str, type[Sublayer]] = {
    c.__name__: c for c in (ReLUAttention, SoftmaxAttention, EWML, ReLUMLP, RowAttention, RowMLP)
}


def _module_meta(m: Sublayer) -> dict[str, Any]:
    d: dict[str, Any] = {"class": type(m).__name__, "info": m.info.to_dict()}
    accumulate = getattr(m, "accumulate", None)  # how an attention sublayer sums (RowAttention: fixed)
    if accumulate is not None:
        d["accumulate"] = accumulate
    extra = getattr(m, "store_kwargs", None)  # constructor options of a variant's own sublayer class
    if extra is not None:
        d["kwargs"] = extra()
    return d


def content_hash(meta: dict[str, Any], weights: bytes) -> str:
    """SHA-256 of ``meta`` (canonical JSON, without its ``content_sha256`` entry) followed by ``weights``."""
    body = {k: v for k, v in meta.items() if k != "content_sha256"}
    h = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    h.update(weights)
    return h.hexdigest()


def save(model: CompiledModel, directory: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Write ``model`` to ``directory`` (atomically); an existing path is refused unless ``overwrite``."""
    target = Path(directory)
    if target.exists() and not overwrite:
        raise InputError(f"{target} already exists; choose a new directory")
    tensors: dict[str, torch.Tensor] = {}
    for part, layers in (("block", model.block_layers), ("readout", model.readout_layers)):
        for i, m in enumerate(layers):
            for name, buf in m.state_dict().items():
                tensors[f"{part}.{i}.{name}"] = buf.contiguous()
    meta = {
        "format": FORMAT,
        "icdl_version": __version__,
        "config": model.config.to_dict(),
        "layout": model.layout.to_dict(),
        "block": [_module_meta(m) for m in model.block_layers],
        "readout": [_module_meta(m) for m in model.readout_layers],
        "terms": model.terms.to_dict(),
        "summary": model.summary(),
    }
    weights = save_bytes(tensors, metadata={"format": FORMAT})
    meta["content_sha256"] = content_hash(meta, weights)
    with atomic_dir(target, replace=overwrite) as tmp:
        (tmp / WEIGHTS).write_bytes(weights)
        (tmp / META).write_text(json.dumps(meta, indent=2))
    return target


def load(directory: str | os.PathLike[str]) -> CompiledModel:
    """Rebuild a model saved by [`save`][icdl.construct.store.save], checked against a fresh compilation of
    its saved config.

    Cost: one [`compile_gd_transformer`][icdl.construct.compile.compile_gd_transformer] call (the time and
    memory of ``icdl construct`` for the same config) on top of reading the files, plus an exact comparison of
    all tables. A model whose description and weights disagree raises [`InputError`][icdl.errors.InputError]
    naming the file and the first disagreeing item.
    """
    src = Path(directory)
    if not (src / META).is_file() or not (src / WEIGHTS).is_file():
        raise InputError(f"{src} is not a saved compiled model (needs {META} and {WEIGHTS})")
    meta = read_json(src / META, what="saved model description")
    if not isinstance(meta, dict):
        raise InputError(f"{src / META} is corrupt (not a JSON object)")
    if meta.get("format") != FORMAT:
        raise InputError(f"{src}: unsupported format {meta.get('format')!r} (expected {FORMAT})")
    try:
        weights = (src / WEIGHTS).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {src / WEIGHTS}: {exc.strerror or one_line(exc)}") from None
    if meta.get("content_sha256") != content_hash(meta, weights):
        raise InputError(
            f"{src}: {META} and {WEIGHTS} do not match their content hash (content_sha256); the files were "
            "changed or truncated after saving — recompile instead of loading them"
        )
    try:
        tensors = load_bytes(weights)
    except Exception as exc:  # safetensors raises its own SafetensorError for corrupt headers
        raise InputError(f"{src / WEIGHTS} is corrupt ({one_line(exc)})") from None
    try:
        model = _rebuild(src, meta, tensors)
        fresh = compile_gd_transformer(model.config)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{src / META} does not describe a loadable model ({one_line(repr(exc))})") from None
    problem = _first_difference(model, fresh, meta, tensors)
    if problem is not None:
        raise InputError(
            f"{src}: the saved model is inconsistent with its own config ({problem}); recompile instead of "
            "loading it"
        )
    return model


def _first_difference(
    model: CompiledModel, fresh: CompiledModel, meta: dict[str, Any], tensors: dict[str, torch.Tensor]
) -> str | None:
    """The first item where the loaded ``model`` (and its stored ``meta``/``tensors``) differs from
    ``fresh``, compiled from the same config; ``None`` when they agree exactly."""
    if meta["terms"] != fresh.terms.to_dict():
        return "ReLU sums (terms) differ"
    if meta["summary"] != fresh.summary():
        return "summary differs"
    expected: dict[str, torch.Tensor] = {}
    for part, got, want in (
        ("block", model.block_layers, fresh.block_layers),
        ("readout", model.readout_layers, fresh.readout_layers),
    ):
        if len(got) != len(want):
            return f"{part} has {len(got)} sublayers, config compiles to {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if _module_meta(g) != _module_meta(w):
                return (
                    f"{part} sublayer {i + 1} ({g.info.name or type(g).__name__}) differs in its description"
                )
            for name, buf in w.state_dict().items():
                expected[f"{part}.{i}.{name}"] = buf
    for key in sorted(set(tensors) | set(expected)):
        a, b = tensors.get(key), expected.get(key)
        if a is None or b is None:
            return f"tensor {key} is {'missing' if a is None else 'unexpected'}"
        if a.dtype != b.dtype or a.shape != b.shape or not _same_bytes(a, b):
            return f"tensor {key} differs"
    return None


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    # Bytes, not values: torch.equal would reject a table holding NaN and accept -0.0 for 0.0.
    return torch.equal(
        a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)
    )


def _rebuild(src: Path, meta: dict[str, Any], tensors: dict[str, torch.Tensor]) -> CompiledModel:
    cfg = GDConfig.from_dict(meta["config"])
    layout = get_variant(cfg.variant).layout(cfg.spec)  # a variant's layout may be a Layout subclass
    if layout.to_dict() != meta["layout"]:
        raise InputError(f"{src}: the stored layout does not match variant {cfg.variant!r}")

    labels = layout.slot_labels()

    def build(part: str) -> list[Sublayer]:
        out = []
        for i, d in enumerate(meta[part]):
            cls = _CLASSES[d["class"]]
            prefix = f"{part}.{i}."
            tables = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            stored = d["info"]
            role = Role(stored["role"], stored["lemma"], stored["layer"], stored.get("name", ""))
            # only ReLUAttention takes it; RowAttention's is fixed ("tokens", also stored)
            take = "accumulate" in d and issubclass(cls, ReLUAttention)
            kwargs: dict[str, Any] = {"accumulate": d["accumulate"]} if take else {}
            kwargs.update(d.get("kwargs", {}))
            m = cls(tables, layout.dim, role=role, labels=labels, **kwargs)
            # The tables must describe the sublayer the file says they do (files written before sublayers
            # described themselves carry no name and no score/value sizes: nothing to compare).
            if "name" in stored and m.info != SublayerInfo.from_dict(stored):
                raise InputError(f"{src}: {part} sublayer {i + 1} does not match its stored description")
            out.append(m)
        return out

    terms = SumTerms.from_dict(meta["terms"])
    return CompiledModel(cfg, layout, build("block"), build("readout"), terms)

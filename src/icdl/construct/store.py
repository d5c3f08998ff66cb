"""Save and load compiled models: ``weights.safetensors`` (the compact tables) + ``model.json`` (config,
layout, per-sublayer metadata, ReLU sums). Writing is atomic: everything goes to a temporary directory next
to the target, which is then renamed. :func:`load` rebuilds the modules from the stored tables (no
recompilation), so the loaded model reproduces the saved one bit for bit.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from icdl import __version__
from icdl.construct.compile import CompiledModel, GDConfig, SumTerms
from icdl.construct.layers import EWML, ReLUAttention, ReLUMLP, Role, SoftmaxAttention, Sublayer
from icdl.construct.layout import Layout
from icdl.errors import InputError
from icdl.sublayer import SublayerInfo

__all__ = ["FORMAT", "load", "save"]

FORMAT = "icdl-compiled-model/1"
WEIGHTS = "weights.safetensors"
META = "model.json"
_CLASSES: dict[str, type[Sublayer]] = {
    c.__name__: c for c in (ReLUAttention, SoftmaxAttention, EWML, ReLUMLP)
}


def _module_meta(m: Sublayer) -> dict[str, Any]:
    d: dict[str, Any] = {"class": type(m).__name__, "info": m.info.to_dict()}
    if isinstance(m, ReLUAttention):
        d["accumulate"] = m.accumulate
    return d


def save(model: CompiledModel, directory: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Write ``model`` to ``directory`` (atomically); an existing path is refused unless ``overwrite``."""
    target = Path(directory)
    if target.exists() and not overwrite:
        raise InputError(f"{target} already exists; choose a new directory")
    target.parent.mkdir(parents=True, exist_ok=True)
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
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        save_file(tensors, str(tmp / WEIGHTS), metadata={"format": FORMAT})
        (tmp / META).write_text(json.dumps(meta, indent=2))
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def load(directory: str | os.PathLike[str]) -> CompiledModel:
    """Rebuild a model saved by :func:`save`."""
    src = Path(directory)
    if not (src / META).is_file() or not (src / WEIGHTS).is_file():
        raise InputError(f"{src} is not a saved compiled model (needs {META} and {WEIGHTS})")
    meta = json.loads((src / META).read_text())
    if meta.get("format") != FORMAT:
        raise InputError(f"{src}: unsupported format {meta.get('format')!r} (expected {FORMAT})")
    tensors = load_file(str(src / WEIGHTS))
    cfg = GDConfig.from_dict(meta["config"])
    layout = Layout.from_dict(cfg.spec, meta["layout"])

    labels = layout.coordinate_labels()

    def build(part: str) -> list[Sublayer]:
        out = []
        for i, d in enumerate(meta[part]):
            cls = _CLASSES[d["class"]]
            prefix = f"{part}.{i}."
            tables = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
            stored = d["info"]
            role = Role(stored["role"], stored["lemma"], stored["layer"], stored.get("name", ""))
            kwargs: dict[str, Any] = {"accumulate": d["accumulate"]} if "accumulate" in d else {}
            m = cls(tables, layout.dim, role=role, labels=labels, **kwargs)
            # The tables must describe the sublayer the file says they do (files written before sublayers
            # described themselves carry no name and no score/value sizes: nothing to compare).
            if "name" in stored and m.info != SublayerInfo.from_dict(stored):
                raise InputError(f"{src}: {part} sublayer {i + 1} does not match its stored description")
            out.append(m)
        return out

    terms = SumTerms.from_dict(meta["terms"])
    return CompiledModel(cfg, layout, build("block"), build("readout"), terms)

"""Look inside compiled and trained models: named activations, attention patterns, plots.

One hook API for both model kinds, TransformerLens' conventions ([`icdl.hooks`][icdl.hooks]):
``model.hook_names()``, ``model.run_with_cache(prompt, names_filter=...)``, ``model.run_with_hooks(prompt,
fwd_hooks=[...])``;

* trained ICL transformer: names ``blocks.{i}.hook_resid_post``, ``blocks.{i}.attn.hook_pattern``, ...;
* compiled GD transformer: ``hook_prompt``, ``steps.{l}.{sublayer}.hook_write`` / ``.hook_out`` (and
  per-head ``.hook_result`` with ``model.use_attn_result``), ``readout.{sublayer}.hook_out``
  ([`run_with_cache`][icdl.inspect.compiled.run_with_cache] is an alias of its method).

Ground truth: [`icdl.inspect.ledger`][icdl.inspect.ledger] (what every hook point, slot and head of a compiled
model holds; the graph and the circuits), [`icdl.inspect.groundtruth`][icdl.inspect.groundtruth] (sets of
labelled models drawn from a prior) and [`icdl.inspect.patching`][icdl.inspect.patching] (activation patching
scored against the ledger).

Plot helpers (matplotlib, return the ``Figure``): [`plot_residual`][icdl.inspect.plots.plot_residual] (token x
slot heatmap with slot labels), [`plot_head_pattern`][icdl.inspect.plots.plot_head_pattern] (one head's score
pattern), [`plot_slot_trajectory`][icdl.inspect.plots.plot_slot_trajectory] (a slot over the GD steps next to
reference GD). [`dense_sublayer`][icdl.inspect.compiled.dense_sublayer] exports a compiled sublayer as
ordinary ``Q, K, V`` (attention) or ``W1, W2`` (MLP) matrices, the way the paper writes them.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ActivationCache",
    "dense_sublayer",
    "head_pattern",
    "plot_block_map",
    "plot_head_pattern",
    "plot_residual",
    "plot_slot_trajectory",
    "run_with_cache",
    "slot_trajectory",
    "slot_usage",
]

_WHERE = {
    "ActivationCache": "icdl.inspect.cache",
    "run_with_cache": "icdl.inspect.compiled",
    "head_pattern": "icdl.inspect.compiled",
    "dense_sublayer": "icdl.inspect.compiled",
    "slot_trajectory": "icdl.inspect.compiled",
    "slot_usage": "icdl.inspect.compiled",
    "plot_block_map": "icdl.inspect.plots",
    "plot_residual": "icdl.inspect.plots",
    "plot_head_pattern": "icdl.inspect.plots",
    "plot_slot_trajectory": "icdl.inspect.plots",
}


def __getattr__(name: str) -> Any:
    # Lazy: matplotlib and the compiler load only when a helper is used.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'icdl.inspect' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The lazy names are not globals until first used; list them so dir() and tab completion show them.
    return sorted(set(globals()) | set(_WHERE))

"""Activation patching on compiled GD transformers, scored against the ground-truth ledger.

Clean and corrupted prompts differ in one thing (e.g. the labels, ``y -> -y``); the metric is how far a patch
moves the weights after one GD step's update toward the corrupted run's:

``effect = |w(patched) - w(clean)| / |w(corrupted) - w(clean)|``, read after ``steps.{step}.update``.

Three methods, from coarse to fine:

* [`resid_patching`][icdl.inspect.patching.resid_patching]: replace the whole residual stream after one
  sublayer (``hook_out``) with the corrupted one. The stream carries the corrupted labels onward, so every
  sublayer after the labels' entry looks important: the coarse baseline.
* [`node_patching`][icdl.inspect.patching.node_patching]: replace only what one sublayer writes
  (``hook_write``, [`icdl.hooks`][icdl.hooks]) with what it writes on the corrupted prompt.
* [`edge_patching`][icdl.inspect.patching.edge_patching]: for one edge ``A -> B`` of the computational graph
  ([`icdl.inspect.ledger.graph_edges`][icdl.inspect.ledger.graph_edges]) feed B, and only B, A's corrupted
  write on the coordinates the edge carries; every other reader of A sees the clean value (path patching of
  a single edge, the criterion ACDC prunes with).

[`score`][icdl.inspect.patching.score] turns effects into found sets and precision/recall against the
ledger's label circuit ([`icdl.inspect.ledger.label_circuit`][icdl.inspect.ledger.label_circuit]).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from icdl.errors import InputError
from icdl.hooks import PROMPT, HookPoint
from icdl.inspect.ledger import graph_edges, node_names

if TYPE_CHECKING:
    from icdl.construct.compile import CompiledModel

__all__ = ["THRESHOLD", "Score", "edge_patching", "node_patching", "resid_patching", "score"]

THRESHOLD = 1e-6
"""Effects above this count as found (the effect of a component the labels do not reach is exactly 0 or
at rounding level, ~1e-12, in float64)."""

Hooks = list[tuple[str, Callable[[Tensor, HookPoint], Tensor | None]]]


class _Runs:
    """The clean and corrupted runs of one model, and patched runs measured on step ``step``'s weights."""

    def __init__(self, model: CompiledModel, clean: Tensor, corrupt: Tensor, step: int) -> None:
        if clean.shape != corrupt.shape:
            raise InputError(f"clean and corrupted prompts differ in shape: {clean.shape} vs {corrupt.shape}")
        if not 0 <= step < model.steps:
            raise InputError(f"step {step} out of range for a model of {model.steps} GD steps")
        self.model, self.clean, self.corrupt, self.step = model, clean, corrupt, step
        self.after = f"steps.{step}.update.hook_out"
        _, self.cc = model.run_with_cache(clean, readout=False)
        _, self.xc = model.run_with_cache(corrupt, readout=False)
        self.w_clean = model.read_weights(self.cc[self.after])
        full = float((model.read_weights(self.xc[self.after]) - self.w_clean).norm())
        if full == 0.0:
            raise InputError("the corrupted prompt does not change this step's update: nothing to patch")
        self.full = full

    def effect(self, hooks: Hooks) -> float:
        seen: dict[str, Tensor] = {}

        def read(act: Tensor, hook: HookPoint) -> None:
            seen["w"] = self.model.read_weights(act)

        self.model.run_with_hooks(self.clean, [*hooks, (self.after, read)], readout=False)
        return float((seen["w"] - self.w_clean).norm()) / self.full

    def nodes(self) -> list[str]:
        return [n for n in node_names(self.model, readout=False) if n.startswith(f"steps.{self.step}.")]


def _swap(cache: Any) -> Callable[[Tensor, HookPoint], Tensor]:
    return lambda act, hook: cache[hook.name]


def _adder(d: Tensor) -> Callable[[Tensor, HookPoint], Tensor]:
    return lambda act, hook: act + d


def resid_patching(
    model: CompiledModel, clean: Tensor, corrupt: Tensor, *, step: int = 0
) -> dict[str, float]:
    """Per sublayer of GD step ``step``: the effect of replacing the stream after it (``hook_out``) with the
    corrupted run's."""
    r = _Runs(model, clean, corrupt, step)
    return {n: r.effect([(f"{n}.hook_out", _swap(r.xc))]) for n in r.nodes()}


def node_patching(model: CompiledModel, clean: Tensor, corrupt: Tensor, *, step: int = 0) -> dict[str, float]:
    """Per sublayer of GD step ``step``: the effect of replacing what it writes (``hook_write``) with what it
    writes on the corrupted prompt."""
    r = _Runs(model, clean, corrupt, step)
    return {n: r.effect([(f"{n}.hook_write", _swap(r.xc))]) for n in r.nodes()}


def edge_patching(
    model: CompiledModel, clean: Tensor, corrupt: Tensor, *, step: int = 0
) -> dict[tuple[str, str], float]:
    """Per edge ``A -> B`` of the computational graph with B in GD step ``step``: the effect of B alone
    reading A's corrupted write on the edge's coordinates (the stream entering B gets A's corrupted minus
    clean write there; after B that difference is taken out again, except where B rewrote the
    coordinate), everything else clean."""
    r = _Runs(model, clean, corrupt, step)
    order = node_names(model, readout=False)
    layers = {f"steps.{step}.{m.info.name}": m for m in model.block_layers}
    out: dict[tuple[str, str], float] = {}
    for e in graph_edges(model):
        a, b = e["source"], e["target"]
        if b not in layers:
            continue
        if a == PROMPT:
            diff = r.xc[PROMPT] - r.cc[PROMPT]
        else:
            diff = r.xc[f"{a}.hook_write"] - r.cc[f"{a}.hook_write"]
        delta = torch.zeros_like(diff)
        delta[..., e["coords"]] = diff[..., e["coords"]]
        keep = torch.ones(delta.shape[-1], dtype=delta.dtype)
        keep[layers[b].rewritten_coords()] = 0
        before = order[order.index(b) - 1]
        entry = PROMPT if before == PROMPT else f"{before}.hook_out"
        hooks: Hooks = [(entry, _adder(delta)), (f"{b}.hook_out", _adder(-delta * keep))]
        out[(a, b)] = r.effect(hooks)
    return out


@dataclass(frozen=True)
class Score:
    """Found set vs. truth: ``tp``, ``fp``, ``fn`` counts, ``precision`` and ``recall`` (1.0 on empty
    denominators)."""

    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    def __add__(self, other: Score) -> Score:
        return Score(self.tp + other.tp, self.fp + other.fp, self.fn + other.fn)


def score(effects: dict[Any, float], truth: Iterable[Any], threshold: float = THRESHOLD) -> Score:
    """What ``effects`` finds (effect > ``threshold``) against ``truth``; truth the method did not test
    (a key not in ``effects``) is left out."""
    found = {k for k, v in effects.items() if v > threshold}
    want = {k for k in truth if k in effects}
    return Score(len(found & want), len(found - want), len(want - found))

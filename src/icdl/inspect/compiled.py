"""Inspect a compiled GD transformer: named activations, head score patterns, slot trajectories, dense export.

Names follow the construction (paper Theorem 1: one block of ``2N+4`` sublayers per GD step, Lemmas 2-5):
every sublayer names itself (``m.info.name``: ``forward_1 .. forward_N`` (Lemma 2), ``derivative``
(Lemma 3), ``loss`` (Lemma 4), ``backward_N .. backward_1`` (Lemma 5), ``update`` and ``project`` (the
proof of Theorem 1) for the paper's variant; other variants name theirs). An activation is the residual
stream after a sublayer, named ``steps.{step}.{name}.hook_out`` with a 0-based step (``steps.-1.`` the
last), or ``readout.{name}.hook_out`` for the readout after the last step; ``hook_prompt`` is the input
([`icdl.hooks`][icdl.hooks]). A slot name from ``model.layout`` as a second key element slices its
coordinates: ``cache["steps.2.update.hook_out", "W"]``; the old keys ``cache[2, "update", "W"]`` still work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from icdl.construct.engine.sublayers import HeadSublayer
from icdl.errors import InputError
from icdl.hooks import ActivationCache, NamesFilter, names_matcher

if TYPE_CHECKING:
    from icdl.construct.compile import CompiledModel

__all__ = [
    "DENSE_LIMIT",
    "READOUT",
    "dense_sublayer",
    "head_pattern",
    "run_with_cache",
    "slot_labels",
    "slot_trajectory",
    "slot_usage",
    "sublayer_names",
    "sublayer_table",
]

DENSE_LIMIT = 50_000_000
"""Largest number of entries [`dense_sublayer`][icdl.inspect.compiled.dense_sublayer] materialises (400 MB in
float64) unless told more."""


# --------------------------------------------------------------------------------------------------
# Naming: every sublayer describes itself (``m.info``, `icdl.sublayer.SublayerInfo`); its
# ``info.name`` is unique within the block and within the readout.
# --------------------------------------------------------------------------------------------------

READOUT = "readout"
"""The step key of the readout sublayers: ``cache["readout", "readout"]`` is the final stream."""


def sublayer_table(model: CompiledModel) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """``(block, readout)``: the named sublayers of one GD step and of the readout, in execution order."""
    return (
        [(m.info.name, m) for m in model.block_layers],
        [(m.info.name, m) for m in model.readout_layers],
    )


def sublayer_names(model: CompiledModel) -> list[str]:
    """The names of one block's sublayers, in execution order (``2N+4`` for the paper's variant)."""
    return [n for n, _ in sublayer_table(model)[0]]


def slot_labels(model: CompiledModel) -> list[str]:
    """One label per residual coordinate: ``W[3]``, ``P_2[0]``, ``ONE`` ... (from ``model.layout``)."""
    return list(model.layout.entry_labels())


def slot_usage(model: CompiledModel, readout: bool = False) -> tuple[list[str], list[str], Tensor]:
    """Which slots each sublayer of one block reads and writes: ``(sublayer names, slot labels, U)``.

    ``U[i, c]`` is 1 if sublayer i reads slot c, 2 if it writes it, 3 if both (from the sublayers'
    metadata; ``W[V_2]`` counts as ``W``). With ``readout`` the readout sublayers follow the block, named
    ``"readout: <name>"``.
    """
    block, ro = sublayer_table(model)
    rows = block + ([(f"{READOUT}: {n}", m) for n, m in ro] if readout else [])
    labels = [sl.label for sl in model.layout.slots]
    U = torch.zeros(len(rows), len(labels), dtype=torch.int64)
    for i, (_, m) in enumerate(rows):
        for code, names in ((1, m.info.reads), (2, m.info.writes)):
            for lab in names:
                base = lab.split("[", 1)[0]
                if base in labels:
                    U[i, labels.index(base)] |= code
    return [n for n, _ in rows], labels, U


def _slots(model: CompiledModel) -> dict[str, list[int]]:
    return {s.label: list(s.indices) for s in model.layout.slots}


def _get_sublayer(model: CompiledModel, name: str, readout: bool = False) -> Any:
    block, ro = sublayer_table(model)
    table = dict(ro if readout else block)
    if name not in table:
        raise InputError(f"unknown sublayer {name!r}; sublayers: {', '.join(table)}")
    return table[name]


# --------------------------------------------------------------------------------------------------
# Activations
# --------------------------------------------------------------------------------------------------


def run_with_cache(
    model: CompiledModel,
    H: Tensor,
    names_filter: NamesFilter = None,
    *,
    readout: bool = True,
    steps: list[int] | None = None,
) -> tuple[Tensor, ActivationCache]:
    """Run the compiled model on prompt ``H (B, n+1, D)`` and record the residual stream after every
    sublayer: an alias of ``model.run_with_cache`` ([`icdl.hooks`][icdl.hooks]).

    Args:
        model: a [`icdl.construct.CompiledModel`][icdl.construct.compile.CompiledModel].
        H: its prompt (``model.build_prompt(...)``).
        names_filter: which hook points (None for all, a name, a list of names or a predicate).
        readout: run (and record) the readout sublayers too.
        steps: record only these GD steps (``hook_prompt`` and the readout are always kept).

    Returns:
        ``(out, cache)``: ``out`` equals ``model.run(H, readout=readout)``;
        ``cache["steps.{l}.{sublayer}.hook_out"]`` is ``(B, n+1, D)`` and ``cache[name, slot]`` its slot's
        coordinates; ``hook_prompt`` is the input, ``readout.{sublayer}.hook_out`` the readout. The old
        keys ``cache[step, sublayer(, slot)]``, ``cache[0, "prompt"]`` and ``cache["readout", sublayer]``
        still work.
    """
    if steps is not None:
        match = names_matcher(names_filter, model.hook_names(readout), {"steps": model.steps})
        keep = tuple(f"steps.{s}." for s in steps)
        names_filter = [
            n
            for n in model.hook_names(readout)
            if match(n) and (not n.startswith("steps.") or n.startswith(keep))
        ]
    return model.run_with_cache(H, names_filter, readout=readout)


def slot_trajectory(cache: ActivationCache, model: CompiledModel, slot: str, token: int = -1) -> Tensor:
    """A slot's value at block start and after every GD step: ``(L+1, B, width)`` (row 0 from the prompt).

    Read at the end of each block (after ``project``), where the construction guarantees the GD-token
    format ``[x; y; w^(l); 0; 1; t]`` (Theorem 1).
    """
    last = sublayer_names(model)[-1]
    rows = [cache[0, "prompt", slot][:, token]]
    rows += [cache[step, last, slot][:, token] for step in range(model.steps)]
    return torch.stack(rows)


# --------------------------------------------------------------------------------------------------
# Heads and dense matrices
# --------------------------------------------------------------------------------------------------


def head_pattern(
    model: CompiledModel, H_in: Tensor, name: str, head: int, *, readout: bool = False
) -> Tensor:
    """One head's attention weights on the residual stream ``H_in (B, T, D)`` *entering* sublayer ``name``.

    Returns ``(B, T_query, T_key)`` as the sublayer applies them (its ``pattern``; the head adds
    ``pattern @ (H V_m^T)``): ``relu(<Q h_i, K h_s>) / T`` for ReLU attention (Definition 7),
    ``softmax_s <Q h_i, K h_s>`` for softmax attention, ``relu(<Q h_i, K h_s>)`` (no 1/T) on the head's
    token ranges for the rows variant's attention, and for an EWML layer (Definition 6: each token with
    itself only) the diagonal matrix of scores ``<Q h_i, K h_i>``. Computed from the dense ``Q_m, K_m``
    of the head, independently of the compiled forward pass.
    """
    m = _get_sublayer(model, name, readout)
    if not isinstance(m, HeadSublayer):
        raise InputError(f"sublayer {name!r} is an MLP: it has no attention heads")
    if not 0 <= head < m.num_heads:
        raise InputError(f"sublayer {name!r} has {m.num_heads} heads; head {head} does not exist")
    return m.pattern(H_in, head)


def dense_sublayer(
    model: CompiledModel, name: str, *, readout: bool = False, limit: int = DENSE_LIMIT
) -> dict[str, Tensor]:
    """A compiled sublayer as ordinary matrices, the way the paper writes it (Definitions 6-8).

    Returns ``{"Q", "K", "V"}`` of shapes ``(M, d_h, D), (M, d_h, D), (M, D, D)`` for an attention or EWML
    sublayer with ``M`` heads (``Q_m h`` is the head's query; the paper pads ``Q_m`` to ``D x D`` with zero
    rows), or ``{"W1", "W2"}`` of shapes ``(U, D), (D, U)`` for an MLP with ``U`` hidden units.

    Raises [`InputError`][icdl.errors.InputError] when the dense form would hold more than ``limit`` entries
    (the compact tables stay small while ``M * D^2`` grows fast: a 66-head sublayer at ``D = 511`` is 17M
    entries).
    """
    m = _get_sublayer(model, name, readout)
    size = m.dense_entries()
    if size > limit:
        raise InputError(
            f"dense form of {name!r} has {size:,} entries (limit {limit:,}); pass limit= to allow it"
        )
    return dict(zip(m.DENSE, m.dense(), strict=True))

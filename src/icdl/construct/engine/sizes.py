"""A construction's closed-form sizes and costs: what a [`Variant`][icdl.construct.build.contract.Variant]
states about itself for ``icdl construct``'s budget estimate
([`icdl.construct.estimate`][icdl.construct.estimate]), before anything is built.

``variant.sizes(spec, examples)`` is a [`Sizes`][icdl.construct.engine.sizes.Sizes] (token width D, tokens T,
sublayers per GD step) from closed forms only: no O(N) table is built for a depth that will be refused.
``variant.costs`` holds the two cost hooks ([`Costs`][icdl.construct.engine.sizes.Costs]); the defaults here
are the paper's dense layout and attention (Theorem 1), which a variant keeps unless its own tables differ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from icdl.nets import NetSpec
from icdl.theory import embedding_dim, sublayers_per_step

__all__ = [
    "CONSTRUCT_FLOPS",
    "DENSE_COSTS",
    "CostInputs",
    "Costs",
    "Sizes",
    "dense_mlp",
    "dense_work",
    "paper_sizes",
]

# The compiled model's small gathers and per-head matmuls run far below dense-matmul peak: measured
# about 2e9 FLOP/s (icdl construct --depth 6 --width 32 --steps 20, sigmoid: 27 s).
CONSTRUCT_FLOPS = 2e9


class Sizes(NamedTuple):
    """A variant's prompt shape and depth: token width D, tokens T, sublayers per GD step."""

    D: int
    T: int
    per_step: int


@dataclass(frozen=True)
class CostInputs:
    """What the cost hooks see: sizes shared by every variant."""

    spec: NetSpec
    sizes: Sizes
    steps: int
    examples: int
    eps: float
    radius: float
    heads: int
    states: int


def paper_sizes(spec: NetSpec, examples: int) -> Sizes:
    """Theorem 1's layout: ``D`` of [`icdl.theory.embedding_dim`][icdl.theory.embedding_dim], ``n + 1``
    tokens, ``2N + 4``."""
    return Sizes(embedding_dim(spec), examples + 1, sublayers_per_step(spec.depth))


def dense_mlp(w: CostInputs, hidden: int) -> tuple[int, int]:
    """(hidden units, MLP FLOPs): dense ``D x hidden`` MLPs on every token and step."""
    return hidden, 2 * w.sizes.D * hidden * w.sizes.T * w.steps


def dense_work(w: CostInputs, mlp_work: int) -> int:
    """FLOPs: every head against every token, forward and backward passes, plus the MLPs."""
    K, T = w.spec.width, w.sizes.T
    return w.heads * (max(K, w.spec.in_dim) + 3) * T * T * 2 * (2 * w.steps + 1) + mlp_work


@dataclass(frozen=True)
class Costs:
    """A variant's cost formulas: its MLP cost ``(hidden units, FLOPs)`` from the shared hidden count, its
    total FLOPs from the MLP FLOPs, and ``states``: how many ``T x D`` states ``icdl construct`` holds at its
    peak (the prompts, the states before and after the sublayer being checked, and the sublayers' own
    temporaries counted in states; None: the estimate's default, for the paper's dense sublayers)."""

    mlp: Callable[[CostInputs, int], tuple[int, int]] = dense_mlp
    work: Callable[[CostInputs, int], int] = dense_work
    states: float | None = None
    # stored coefficients of one block and the readout (None: the estimate's dense count, per head its
    # query/key/value entries and per MLP unit a few)
    coefficients: Callable[[CostInputs], int] | None = None


# The paper's costs (Theorem 1's dense MLPs and attention): the default of ``Variant.costs``.
DENSE_COSTS = Costs()

"""The inputs every sublayer builder gets (:class:`BuildContext`): network, layout, conditioned ReLU sums,
step size, prompt length, gate constant, projection, and the factories that turn coefficient tables into
sublayers of :mod:`icdl.construct.layers`.

It sits below the contract (:mod:`icdl.construct.contract`) and the builders (:mod:`icdl.construct.blocks`
and the variant modules), which all take it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from icdl.construct.layers import EWML, HeadTable, ReLUAttention, ReLUMLP, Role, UnitTable
from icdl.construct.layout import Layout
from icdl.construct.terms import Terms
from icdl.nets import NetSpec

__all__ = ["BuildContext"]


@dataclass(frozen=True)
class BuildContext:
    """Everything the builders need.

    Attributes:
        spec: the network.
        layout: the token layout.
        r: conditioned sums of each layer's activation (index j-1 for layer j).
        r_prime: conditioned sums of each layer's activation derivative.
        u: conditioned two-argument sum of one coordinate of the loss derivative.
        lr: the GD step size eta.
        n: number of in-context examples (the prompt has n + 1 tokens).
        gate: the constant C of the query gate ``-C (1 - T)`` (Lemma 4) and of the readout.
        box: box projection bound B (None: unprojected GD).
        dtype: dtype of the coefficient tables.
        eps: target sup error of fitted ReLU sums (for builders that fit their own, e.g. products).
        radius: range ``[-R, R]`` of fitted sums.
    """

    spec: NetSpec
    layout: Layout
    r: tuple[Terms, ...]
    r_prime: tuple[Terms, ...]
    u: Terms
    lr: float
    n: int
    gate: float
    box: float | None
    dtype: torch.dtype = torch.float64
    eps: float = 1e-3
    radius: float = 10.0

    @cached_property
    def labels(self) -> tuple[str, ...]:
        """Slot label of every coordinate (what sublayers derive their reads/writes from)."""
        return self.layout.coordinate_labels()

    def attention(self, heads: HeadTable, role: Role, *, exact_sums: bool = False) -> ReLUAttention:
        """A ReLU attention sublayer from ``heads``; ``exact_sums`` sums the heads per (query, key) pair
        first (``accumulate="heads"``), which the exact relu' step needs."""
        return ReLUAttention(
            heads.tensors(self.dtype),
            self.layout.dim,
            accumulate="heads" if exact_sums else "tokens",
            role=role,
            labels=self.labels,
        )

    def mlp(self, units: UnitTable, role: Role) -> ReLUMLP:
        return ReLUMLP(units.tensors(self.dtype), self.layout.dim, role=role, labels=self.labels)

    def ewml(self, heads: HeadTable, role: Role) -> EWML:
        return EWML(heads.tensors(self.dtype), self.layout.dim, role=role, labels=self.labels)

    @property
    def exact_step(self) -> bool:
        """Whether some layer's r' is the exact relu' delta-step (its heads must be summed exactly)."""
        return any(t.delta is not None for t in self.r_prime)

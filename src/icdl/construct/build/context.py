"""The inputs every sublayer builder gets ([`BuildContext`][icdl.construct.build.context.BuildContext]):
network,
layout, conditioned ReLU sums, step size, prompt length, gate constant, projection, and the factories that
turn coefficient tables into sublayers of [`icdl.construct.engine.layers`][icdl.construct.engine.layers].

It sits below the contract ([`icdl.construct.build.contract`][icdl.construct.build.contract]) and the builders
([`icdl.construct.build.blocks`][icdl.construct.build.blocks] and the variant modules), which all take it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import torch

from icdl.construct.engine.layers import EWML, HeadTable, ReLUAttention, ReLUMLP, Role, UnitTable
from icdl.construct.engine.layout import Layout
from icdl.construct.engine.terms import Terms
from icdl.nets import NetSpec

if TYPE_CHECKING:
    # Type-only: a configuration as read by the builders (GDConfig is above them).
    from icdl.construct.engine.terms import SumTerms
    from icdl.construct.protocols import StepConfig

__all__ = ["BuildContext"]


@dataclass(frozen=True)
class BuildContext:
    """Everything the builders need: the configuration, the token layout and the conditioned ReLU sums;
    the rest is read from them (properties below).

    Attributes:
        config: the [`GDConfig`][icdl.construct.config.GDConfig] being compiled.
        layout: the token layout (``variant.layout(config.spec)``).
        terms: the conditioned ReLU sums ([`SumTerms`][icdl.construct.engine.terms.SumTerms]).
    """

    config: StepConfig
    layout: Layout
    terms: SumTerms

    @property
    def spec(self) -> NetSpec:
        """The network."""
        return self.config.spec

    @property
    def r(self) -> tuple[Terms, ...]:
        """Conditioned sums of each layer's activation (index j-1 for layer j)."""
        return self.terms.r

    @property
    def r_prime(self) -> tuple[Terms, ...]:
        """Conditioned sums of each layer's activation derivative."""
        return self.terms.r_prime

    @property
    def u(self) -> Terms:
        """Conditioned two-argument sum of one coordinate of the loss derivative."""
        return self.terms.u

    @property
    def lr(self) -> float:
        """The GD step size eta."""
        return float(self.config.lr)

    @property
    def n(self) -> int:
        """Number of in-context examples (the prompt has n + 1 data tokens)."""
        return self.config.n

    @property
    def gate(self) -> float:
        """The constant C of the query gate ``-C (1 - T)`` (Lemma 4) and of the readout."""
        return float(self.config.gate)

    @property
    def box(self) -> float | None:
        """Box projection bound B (None: unprojected GD)."""
        return self.config.box

    @property
    def dtype(self) -> torch.dtype:
        """Dtype of the coefficient tables."""
        return self.config.torch_dtype

    @property
    def eps(self) -> float:
        """Target sup error of fitted ReLU sums (for builders that fit their own, e.g. products)."""
        return float(self.config.eps)

    @property
    def radius(self) -> float:
        """Range ``[-R, R]`` of fitted sums."""
        return float(self.config.radius)

    @property
    def weight_range(self) -> float | None:
        """Range of the products' weight factors (None: the box B, or R without a box)."""
        return self.config.weight_range

    @cached_property
    def slot_labels(self) -> tuple[str, ...]:
        """Slot label of every coordinate (what sublayers derive their reads/writes from;
        [`slot_labels`][icdl.construct.engine.layout.Layout.slot_labels])."""
        return self.layout.slot_labels()

    def attention(self, heads: HeadTable, role: Role, *, exact_sums: bool = False) -> ReLUAttention:
        """A ReLU attention sublayer from ``heads``; ``exact_sums`` sums the heads per (query, key) pair
        first (``accumulate="heads"``), which the exact relu' step needs."""
        return ReLUAttention(
            heads.tensors(self.dtype),
            self.layout.dim,
            accumulate="heads" if exact_sums else "tokens",
            role=role,
            labels=self.slot_labels,
        )

    def mlp(self, units: UnitTable, role: Role) -> ReLUMLP:
        return ReLUMLP(units.tensors(self.dtype), self.layout.dim, role=role, labels=self.slot_labels)

    def ewml(self, heads: HeadTable, role: Role) -> EWML:
        return EWML(heads.tensors(self.dtype), self.layout.dim, role=role, labels=self.slot_labels)

    @property
    def exact_step(self) -> bool:
        """Whether some layer's r' is the exact relu' delta-step (its heads must be summed exactly)."""
        return any(t.delta is not None for t in self.r_prime)

"""One description of a residual sublayer, shared by the compiler ([`icdl.construct`][icdl.construct]) and the
size formulas ([`icdl.theory.block_table`][icdl.theory.block_table]).

A compiled sublayer derives every size and slot field of its [`SublayerInfo`][icdl.sublayer.SublayerInfo] from
its own weight tables (tracr-style: a head knows which residual coordinates it reads and writes); the theory
module fills the same fields from closed-form counts, so the two can be compared field by field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["SublayerInfo", "SublayerKind"]

SublayerKind = Literal["relu_attention", "softmax_attention", "mlp", "ewml"]


@dataclass(frozen=True)
class SublayerInfo:
    """What one sublayer is and how big it is.

    Attributes:
        name: unique inside its block (or the readout), e.g. ``"forward_2"``; trace points are named
            ``(step, name)``.
        role: what it computes, e.g. ``forward | derivative | loss | backward | update | project | readout``.
        kind: ``relu_attention | softmax_attention | mlp | ewml``.
        lemma: where the paper (or docs/construction.md) builds it.
        layer: the network layer j it serves, else None.
        heads: attention/EWML heads (0 for an MLP).
        hidden: MLP hidden width (0 for attention and EWML).
        score_dim: sum over heads of the query/key width ``d_q`` of each head.
        value_dim: sum over heads of the number of coordinates each head's value writes.
        reads: slot labels read (empty where unknown, e.g. in the theory table).
        writes: slot labels written.
    """

    name: str
    role: str
    kind: SublayerKind
    lemma: str
    layer: int | None
    heads: int
    hidden: int
    score_dim: int
    value_dim: int
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()

    def sizes(self) -> tuple[Any, ...]:
        """The fields both the compiler and the theory table fill (everything but reads/writes)."""
        return (
            self.name,
            self.role,
            self.kind,
            self.lemma,
            self.layer,
            self.heads,
            self.hidden,
            self.score_dim,
            self.value_dim,
        )

    def flops(self, tokens: int, embedding_dim: int) -> int:
        """Multiply-add FLOPs (2 per MAC) of this sublayer on ``tokens`` tokens of width ``embedding_dim``.

        * ReLU/softmax attention: per head, scores ``T*T*2*d_q`` plus values ``T*T*2*d_v`` (every token
          attends to all T tokens; the Q/K/V maps only select slots and scale them, counted as free).
        * EWML (Definition 6): per head per token, ``2*d_q`` for the diagonal score and ``2*d_v`` for
          the scaled value.
        * MLP (Definition 8): two dense matmuls, ``2 * D * hidden * 2`` per token.

        Residual additions, the ReLU/softmax of the scores and the 1/T normalisation are not counted.
        """
        T = tokens
        if self.kind in ("relu_attention", "softmax_attention"):
            return 2 * T * T * (self.score_dim + self.value_dim)
        if self.kind == "ewml":
            return 2 * T * (self.score_dim + self.value_dim)
        return 2 * embedding_dim * self.hidden * 2 * T

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["reads"], d["writes"] = list(self.reads), list(self.writes)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SublayerInfo:
        return cls(**{**d, "reads": tuple(d.get("reads", ())), "writes": tuple(d.get("writes", ()))})

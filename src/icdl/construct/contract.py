"""The contract between a construction variant and the verifier: what must be in which slot after a sublayer.

A variant builds sublayers (each describes itself with a :class:`~icdl.sublayer.SublayerInfo` derived from
its own tables) and states, next to its builders, the **expected effect** of every role as a list of
:class:`Expect`: "after this sublayer, slot S holds reference quantity Q". Every slot not named keeps its
value. The verifier (:mod:`icdl.construct.verify`) evaluates the named quantities on the prompt and compares
the whole token state; it has no code for any particular role or variant.

Reference quantities (all evaluated at the transformer's own weights w at the start of the current GD step,
with the construction's conditioned ReLU sums, on all ``T = n + 1`` tokens, the query last; see
:class:`icdl.construct.verify.Reference`):

==============  =============================  ===============================================================
quantity        shape per token                meaning (paper)
==============  =============================  ===============================================================
``p``           n_j (layer j = 0..N)           p(j) = r(V_j p(j-1)), p(0) = x (eq. 3.3, Lemma 2)
``r_prime``     n_j (j = 1..N)                 r'(V_j p(j-1)), the paper's r'(j-1) (Definition 2, Lemma 3)
``u``           d_y                            u(p(N), y) on examples, 0 on the query (Definition 3, Lemma 4)
``s``           n_j (j = 1..N)                 the deltas s(j) (eq. 3.6, Lemma 5); 0 on the query
``A``           n_j n_{j-1} (j = 1..N)         the gradient block of V_j, (1/(2n)) sum_i s_i(j) p_i(j-1)^T
                                               row-major (eq. 3.5, 3.7), the same in every token
``grad``        P                              ∇L_n(w), row-major A_1..A_N
``w_step``      P                              w - eta ∇L_n(w) (eq. 2.3 before the projection)
``w``           P                              Proj_W(w - eta ∇L_n(w)) (eq. 2.3)
``prediction``  d_y                            f(w, x) = p(N) (the readout reads the query's)
``zero``        slot size                      0 (scratch cleared for the next block)
==============  =============================  ===============================================================

An :class:`Expect` may instead carry a function of the :class:`~icdl.construct.verify.Reference` (for a
quantity only one variant needs, e.g. an intermediate product), and its own relative tolerance (for
approximate constructions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from torch import Tensor

if TYPE_CHECKING:
    from icdl.construct.layout import Layout
    from icdl.construct.verify import Reference
    from icdl.sublayer import SublayerInfo

__all__ = ["QUANTITIES", "EffectsFn", "Expect"]

QUANTITIES = ("p", "r_prime", "u", "s", "A", "grad", "w_step", "w", "prediction", "zero")


@dataclass(frozen=True)
class Expect:
    """After the sublayer, slot ``slot`` holds ``quantity`` (on ``tokens``; other tokens keep their value).

    Attributes:
        slot: a slot label of the layout (``"P_2"``, ``"W"``, ``"G"`` ...).
        quantity: a name from :data:`QUANTITIES`, or a function ``Reference -> Tensor (T, slot size)``.
        layer: the network layer j for ``p``, ``r_prime``, ``s``, ``A``.
        tokens: ``"all"`` or ``"query"`` (only the last token changes).
        rtol: relative tolerance for this slot (None: the verifier's ``tol``).
    """

    slot: str
    quantity: str | Callable[[Reference], Tensor]
    layer: int | None = None
    tokens: Literal["all", "query"] = "all"
    rtol: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.quantity, str) and self.quantity not in QUANTITIES:
            raise ValueError(f"unknown reference quantity {self.quantity!r}; choose one of {QUANTITIES}")
        if self.tokens not in ("all", "query"):
            raise ValueError(f"tokens must be 'all' or 'query', got {self.tokens!r}")

    @property
    def label(self) -> str:
        """``"p(2)"``, ``"w"``, ... (``"custom"`` for a function)."""
        if not isinstance(self.quantity, str):
            return getattr(self.quantity, "__name__", "custom")
        return self.quantity if self.layer is None else f"{self.quantity}({self.layer})"


# A variant's expected effects: (the sublayer's info, the layout) -> what must hold after it.
EffectsFn = Callable[["SublayerInfo", "Layout"], list[Expect]]

"""The contract between a construction variant and the verifier: what must be in which slot after a sublayer.

A variant builds sublayers (each describes itself with a [`SublayerInfo`][icdl.sublayer.SublayerInfo] derived
from its own tables) and states, next to its builders, the **expected effect** of every role as a list of
[`Expect`][icdl.construct.build.contract.Expect]: "after this sublayer, slot S holds reference quantity Q".
Every
slot not named keeps its value. The verifier ([`icdl.construct.check.verify`][icdl.construct.check.verify])
evaluates the
named quantities on the prompt and compares the whole token state; it has no code for any particular role or
variant.

Reference quantities (all evaluated at the transformer's own weights w at the start of the current GD step,
with the construction's conditioned ReLU sums, on all ``T = n + 1`` tokens, the query last; see
[`Reference`][icdl.construct.build.contract.Reference]):

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

An [`Expect`][icdl.construct.build.contract.Expect] may instead carry a function of the
[`Reference`][icdl.construct.build.contract.Reference] (for a quantity only one variant needs, e.g. an
intermediate
product), and its own relative tolerance (for approximate constructions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from torch import Tensor

from icdl.construct.bounds.budget import Declared, sums_only
from icdl.construct.bounds.ranges import DEFAULT_NEEDS, RangeNeeds
from icdl.construct.build.context import BuildContext
from icdl.construct.engine.layers import Sublayer
from icdl.construct.engine.layout import Layout
from icdl.construct.engine.sizes import DENSE_COSTS, Costs, Sizes, paper_sizes
from icdl.nets import GradTerms, NetSpec, projected_step
from icdl.sublayer import SublayerInfo

if TYPE_CHECKING:
    # Type-only: a compiled model and its configuration as the contract reads them (both sit above it).
    from icdl.construct.protocols import Compiled, StepConfig

__all__ = ["QUANTITIES", "EffectsFn", "Expect", "Reference", "Variant"]

QUANTITIES = ("p", "r_prime", "u", "s", "A", "grad", "w_step", "w", "prediction", "zero")


@dataclass(frozen=True)
class Expect:
    """After the sublayer, slot ``slot`` holds ``quantity`` (on ``tokens``; other tokens keep their value).

    Attributes:
        slot: a slot label of the layout (``"P_2"``, ``"W"``, ``"G"`` ...).
        quantity: a name from `QUANTITIES`, or a function ``Reference -> Tensor (T, slot size)``.
        layer: the network layer j for ``p``, ``r_prime``, ``s``, ``A``.
        tokens: ``"all"``, ``"query"`` (only the last token changes), ``"data"`` (the n + 1 data tokens)
            or ``"prefix"`` (the tokens a layout puts before them, e.g. weight rows); the quantity has
            one row per token of that selection, or one per data token (built-in quantities), or one per
            token of the prompt.
        rtol: relative tolerance for this slot (None: the verifier's ``tol``).
        applied_step: the slot holds ``w - eta g`` for the gradient ``g`` the transformer applies (implied by
            ``w_step``); the verifier measures the gradient error there (before any projection).
    """

    slot: str
    quantity: str | Callable[[Reference], Tensor]
    layer: int | None = None
    tokens: Literal["all", "query", "data", "prefix"] = "all"
    rtol: float | None = None
    applied_step: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.quantity, str) and self.quantity not in QUANTITIES:
            raise ValueError(f"unknown reference quantity {self.quantity!r}; choose one of {QUANTITIES}")
        if self.tokens not in ("all", "query", "data", "prefix"):
            raise ValueError(f"tokens must be 'all', 'query', 'data' or 'prefix', got {self.tokens!r}")

    @property
    def label(self) -> str:
        """``"p(2)"``, ``"w"``, ... (``"custom"`` for a function)."""
        if not isinstance(self.quantity, str):
            return getattr(self.quantity, "__name__", "custom")
        return self.quantity if self.layer is None else f"{self.quantity}({self.layer})"


# A variant's expected effects: (the sublayer's info, the layout) -> what must hold after it.
EffectsFn = Callable[[SublayerInfo, Layout], list[Expect]]


@dataclass
class Reference:
    """The reference quantities of one GD step (`icdl.construct.build.contract.QUANTITIES`) at the
    transformer's own step-start weights ``w``, on all T tokens: ``sur`` with the construction's ReLU sums
    (what every slot must hold), ``exact`` with the true r, r', u (for the per-step error table).

    A variant's callable [`Expect`][icdl.construct.build.contract.Expect] gets this object; ``model``,
    ``x_all``,
    ``y_all`` (zero on the query) and ``t`` (1 on examples, 0 on the query) let it evaluate its own
    recursion. ``cache`` is free for such callables (one Reference per GD step).
    """

    w: Tensor
    sur: GradTerms
    exact: GradTerms
    lr: float
    box: float | None
    model: Compiled
    x_all: Tensor
    y_all: Tensor
    t: Tensor
    cache: dict[str, Any] = field(default_factory=dict)

    def value(self, e: Expect, terms: GradTerms | None = None) -> Tensor:
        """The quantity ``e`` names, shape ``(T, slot size)`` (``zero`` is handled by the caller)."""
        g = self.sur if terms is None else terms
        T = g.p[0].shape[0]
        q, j = e.quantity, e.layer
        if callable(q):
            return q(self)
        if q in ("p", "prediction"):
            return g.p[len(g.p) - 1 if q == "prediction" else _layer(e, 0)]
        if q == "r_prime":
            return g.r_prime[_layer(e) - 1]
        if q == "u":
            return g.u
        if q == "s":
            return g.s[_layer(e) - 1]
        flat = {
            "A": lambda: g.A[_layer(e) - 1].reshape(-1),
            "grad": lambda: g.grad,
            "w_step": lambda: self.w - self.lr * g.grad,
            "w": lambda: projected_step(self.w, g.grad, self.lr, self.box),
        }
        if q in flat:
            return flat[q]()[None].expand(T, -1)
        raise ValueError(f"no reference value for {q!r} (layer {j})")


def _layer(e: Expect, low: int = 1) -> int:
    if e.layer is None or e.layer < low:
        raise ValueError(f"quantity {e.quantity!r} needs a layer >= {low}, got {e.layer!r}")
    return e.layer


@dataclass(frozen=True)
class Variant:
    """A construction.

    Attributes:
        name: the ``--variant`` value.
        summary: one line for ``--help`` and docs.
        layout: ``spec -> Layout``.
        block: ``BuildContext -> sublayers of one GD step`` (built once, applied L times).
        readout: ``BuildContext -> sublayers after the last step`` (write the prediction into Y).
        effects: ``(info, layout) -> list[Expect]``: what must hold after each of its sublayers.
        paper: whether this is the paper's construction as published (up to the documented fixes).
        range_needs: what it fits on ranges ([`RangeNeeds`][icdl.construct.bounds.ranges.RangeNeeds]): the
            quantities ``radius="auto"`` must bound by R, whether its products take a weight range, and
            its approximate products ([`icdl.construct.bounds.ranges`][icdl.construct.bounds.ranges]).
        check: optional ``GDConfig -> None`` raising [`InputError`][icdl.errors.InputError] for configurations
            the variant cannot build (e.g. a non-ReLU activation).
        ranges: optional ``Reference -> int``: how many arguments (or groups of them) of the variant's own
            approximations (products as sums of ReLUs) leave the ranges they were fitted on at this step. The
            verifier adds them to ``out_of_range_count``: a sublayer check against the construction's own
            surrogate cannot see an approximation used outside its range.
        sizes: ``(spec, examples) -> Sizes``: token width D, tokens T and sublayers per GD step from
            closed forms, for the budget estimate before anything is built
            ([`icdl.construct.engine.sizes`][icdl.construct.engine.sizes]; default the paper's layout). D and
            T must equal
            the built model's; ``per_step`` may bound it from above.
        costs: the variant's cost formulas ([`Costs`][icdl.construct.engine.sizes.Costs]; default the paper's
            dense MLPs and attention).
        budget: ``CompiledModel -> Declared``: the sup errors of the variant's approximations (its ReLU sums
            and any products of ReLU sums), from which
            [`icdl.construct.bounds.budget`][icdl.construct.bounds.budget]
            derives the a-priori budget of every step's applied gradient (PASS condition (c); default
            [`sums_only`][icdl.construct.bounds.budget.sums_only]: products exact).
        product_errors: optional ``(Reference, tol) -> [(kind, layer, measured, declared)]``: each kind of
            the variant's approximate products, measured at this step on the factors it actually multiplies
            (inside their ranges) against the exact product, beside the sup error ``budget`` declares for it
            (the verifier's ``(b) declared`` check; None: no approximate products, or not measured).
    """

    name: str
    summary: str
    layout: Callable[[NetSpec], Layout]
    block: Callable[[BuildContext], list[Sublayer]]
    readout: Callable[[BuildContext], list[Sublayer]]
    effects: EffectsFn
    paper: bool = False
    range_needs: RangeNeeds = DEFAULT_NEEDS
    check: Callable[[StepConfig], Any] | None = None
    ranges: Callable[[Reference], int] | None = None
    sizes: Callable[[NetSpec, int], Sizes] = paper_sizes
    costs: Costs = DENSE_COSTS
    budget: Callable[[Compiled], Declared] = sums_only
    product_errors: Callable[[Reference, float], list[tuple[str, int, float, float]]] | None = None

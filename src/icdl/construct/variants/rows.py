"""Weights in their own tokens (``--variant rows``): an embedding dimension linear in K instead of NK^2.

The paper copies the whole parameter vector w into every token (slot W, ``P ~ (N-2)K^2`` wide). Here, as in
TinT (Panigrahi et al., ICML 2024), every weight row ``v_jk`` (row k of ``V_j``) lives in its own **row
token**, placed before the n + 1 data tokens. The prompt is

* ``(N-1)K + d_y`` row tokens: slot ``V_j`` holds ``v_jk`` (width ``n_{j-1}``), ``ID_j`` is the one-hot
  identity ``e_k`` (width ``n_j``), the flag ``ROW_j`` = 1 says "a row of layer j" (the token type);
  everything else is 0, in particular ``ONE`` and ``T``;
* n example tokens and the query (last), as in the paper's layout but without W: X, Y, the scratch slots
  P_j, R_j (p(j) and r'(V_j p(j-1))), G (u), Z_j (``z_j = V_{j+1}^T s(j+1)``, j < N), ONE = 1 and T.

so ``D = 2 d_x + 5 d_y + 5 (N-1) K + N + 2`` for every activation
([`rows_embedding_dim`][icdl.construct.variants.rows.rows_embedding_dim]).

One GD step, re-routed through cross-token attention
([`RowAttention`][icdl.construct.engine.row_layers.RowAttention], unnormalised: Definition 7 with the 1/T
factor folded into the value weights):

1. ``F_j`` (Lemmas 2-3): one head per term m of r (and of r'): data token i queries with
   ``[a_m p_i(j-1); b_m ONE]``, the row token (j, k) answers with ``[v_jk; ROW_j]``, so the score is
   ``a_m v_jk . p_i(j-1) + b_m``; the value ``c_m ID_j`` lands in ``P_j[k]`` (``R_j[k]``): the slot the
   row's identity names. Other tokens score exactly 0.
2. the loss MLP (Lemma 4) with the query gate, as in the paper: G = u.
3. ``B_j`` (Lemma 5 re-routed), j = N-1..1: ``z_j = V_{j+1}^T s(j+1)`` as attention from the data tokens
   to the row tokens of layer j+1. The product ``s(j+1) = r'(j+1) ⊙ z_{j+1}`` (``z_N = u``) is never
   stored: it is taken *inside the scores* (key: the one-hot ``ID_{j+1}``, so the score of row (j+1, k)
   reads coordinate k of the query's slots):

   * ReLU layers, r' the exact 0/1 step: two heads ``σ = ±1``, score ``C r'[k] - C + σ z[k]`` (the gate
     terms are summed first, so they cancel exactly when r' = 1 and switch the head off when r' = 0),
     value ``σ v_{j+1,k}``;
   * smooth layers (sigmoid, tanh, softplus: r' a fitted sum): one head per unit m of the two-argument
     ReLU sum ``r' z ~ sum_m w_m relu(a_m r' + b_m + c_m z)``
     ([`derivative_product`][icdl.construct.variants.rows.derivative_product]: polarisation ``ab = ((a+b)^2 -
     (a-b)^2)/4``, each square a 1-D ReLU sum, as Lemma 2 puts a ReLU sum into the scores), score ``a_m r'[k]
     + b_m + c_m z[k]``, value ``w_m v_{j+1,k}``. The units come in pairs that differ only in the sign of
     ``c_m`` and ``w_m``, so where z is exactly 0 (the query: its u is gated off) both heads of a pair get the
     same score and the product is an exact 0;
   * linear layers (r' = 1): two heads ``σ = ±1``, score ``σ z[k]``.
4. the update ``U``: every row token (j, k) gathers ``-η (1/(2n)) sum_i s_i(j)[k] p_i(j-1)`` from the data
   tokens into its ``V_j`` — once per row, not once per token — with the same heads in the reverse
   direction (the row token queries with ``ID_j``, the data tokens answer with their r', z and ONE, value
   ``p_i(j-1)``).
5. the projection / clean-up MLP (box clip of every V_j coordinate, scratch zeroed).

``F_1..F_N``, loss, ``B_{N-1}..B_1``, U, project: **2N + 2** sublayers per step for every activation. For
ReLU (and linear) layers the step is exact; for smooth layers each product has sup error ``<= eps`` while
``|z| <= radius`` (the configuration's range of the fitted sums; outside it the error grows like the squared
excess). The readout is the paper's: ``F_1..F_N`` (r only) and the readout MLP.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from icdl._arith import check_int
from icdl.construct.bounds.budget import Declared, declared_sums
from icdl.construct.bounds.ranges import RangeNeeds
from icdl.construct.build import blocks
from icdl.construct.build.context import BuildContext
from icdl.construct.build.contract import Expect, Reference, Variant
from icdl.construct.engine.layers import (
    ReLUMLP,
    Role,
    Sublayer,
)
from icdl.construct.engine.layout import ROWS_SCRATCH, Layout, RowsLayout
from icdl.construct.engine.products import ProductTerms, product_terms
from icdl.construct.engine.row_layers import RowAttention, RowMLP, pack_heads
from icdl.construct.engine.sizes import CostInputs, Costs, Sizes
from icdl.construct.engine.terms import Terms
from icdl.nets import NetSpec, backward_deltas, projected_step, unflatten
from icdl.sublayer import SublayerInfo

if TYPE_CHECKING:
    from icdl.construct.protocols import Compiled

__all__ = [
    "VARIANT",
    "RowAttention",
    "RowMLP",
    "RowsLayout",
    "build_block",
    "build_readout",
    "declared",
    "effects",
    "rows_embedding_dim",
    "rows_layout",
    "rows_sizes",
    "rows_sublayers_per_step",
    "rows_tokens",
]


def gated(spec: NetSpec, j: int) -> bool:
    """Whether layer j's r' is the exact 0/1 relu' step, so that ``r' ⊙ z`` can be taken inside a score."""
    return spec.layer_act(j).name == "relu"


def unit_derivative(spec: NetSpec, j: int) -> bool:
    """Whether layer j's r' is exactly 1 (a linear layer): ``s(j) = z_j``, no product needed."""
    return spec.layer_act(j).name == "identity"


def smooth(spec: NetSpec, j: int) -> bool:
    """Whether layer j's r' is a fitted sum (sigmoid, tanh, softplus ...): ``r' ⊙ z`` is taken inside the
    scores as a two-argument sum of ReLUs
    ([`derivative_product`][icdl.construct.variants.rows.derivative_product])."""
    return not (gated(spec, j) or unit_derivative(spec, j))


def derivative_product(spec: NetSpec, j: int, r_prime: Terms, *, eps: float, radius: float) -> ProductTerms:
    """The ReLU sum of ``r'[k] z[k]`` for a smooth layer j (polarisation, each square a 1-D ReLU sum:
    [`ProductTerms`][icdl.construct.engine.products.ProductTerms], sup error ``h^2/16 <= eps``) on ``|r'| <=
    L_r + e'`` (``L_r = max |r'|``, e' the sup error of the fitted r' sum) and ``|z| <= radius``; the backward
    and update heads of layer j put it in their scores, one head per unit."""
    return product_terms(spec.layer_act(j).lipschitz + r_prime.sup_error, radius, eps)


def product_units(prod: ProductTerms) -> list[tuple[float, float, float, float]]:
    """The units ``(coef of r', coef of z, bias, weight)`` of ``prod`` in stored order: (u, v) pairs with
    equal r' coefficient and bias, opposite z coefficient and weight."""
    return prod.units()


def eval_product(prod: ProductTerms, r: Tensor, z: Tensor) -> Tensor:
    """``sum_m w_m relu((a_m r' + b_m) + c_m z)`` elementwise, unit by unit in stored order and each
    pre-activation rounded as the heads' scores are (``a r' + b`` is one part, ``c z`` the next): the
    surrogate the smooth rows sublayers compute. Exactly 0 where z is exactly 0 (the pairs cancel)."""
    out = torch.zeros(torch.broadcast_shapes(r.shape, z.shape), dtype=z.dtype)
    for ar, az, b, w in product_units(prod):
        out = out + w * torch.relu((ar * r + b) + az * z)
    return out


def rows_layout(spec: NetSpec) -> RowsLayout:
    """Slots X, Y, P_1..P_N, R_1..R_N, G, Z_1..Z_{N-1}, ONE, T (data tokens) and
    V_1..V_N, ID_1..ID_N, ROW_1..ROW_N (row tokens)."""
    n, N = spec.widths, spec.depth
    groups: list[tuple[str, int | None, int]] = [("X", None, spec.in_dim), ("Y", None, spec.out_dim)]
    groups += [("P", j, n[j]) for j in range(1, N + 1)]
    groups += [("R", j, n[j]) for j in range(1, N + 1)]
    groups.append(("G", None, spec.out_dim))
    groups += [("Z", j, n[j]) for j in range(1, N)]
    groups += [("ONE", None, 1), ("T", None, 1)]
    groups += [("V", j, n[j - 1]) for j in range(1, N + 1)]
    groups += [("ID", j, n[j]) for j in range(1, N + 1)]
    groups += [("ROW", j, 1) for j in range(1, N + 1)]
    return RowsLayout(spec, groups, token_type="data+rows", scratch=ROWS_SCRATCH)


def _on(ctx: BuildContext, m: ReLUMLP, tokens: tuple[int, int]) -> RowMLP:
    """The same MLP (tables, role) evaluated on one token range."""
    tables = {n: getattr(m, n) for n in m.TABLES}
    return RowMLP(tables, m.dim, [(0, m.hidden, *tokens)], role=m.role, labels=ctx.slot_labels)


def _rows_layout(layout: Layout) -> RowsLayout:
    """The builders of this module run on a [`RowsLayout`][icdl.construct.engine.layout.RowsLayout] only."""
    if not isinstance(layout, RowsLayout):
        raise TypeError(f"the rows builders need a RowsLayout, got {type(layout).__name__}")
    return layout


def _idx(L: Layout, name: str, layer: int | None = None) -> Tensor:
    return torch.arange(L.slot(name, layer).offset, L.slot(name, layer).offset + L.slot(name, layer).size)


def _full(size: int, c: float) -> Tensor:
    """A float64 vector of ``size`` copies of ``c`` (coefficients are exact doubles before the cast to the
    model's dtype)."""
    return torch.full((size,), float(c), dtype=torch.float64)


def _const(i: int, c: float, size: int = 1) -> tuple[Tensor, Tensor]:
    return torch.full((size,), i, dtype=torch.long), _full(size, c)


def _p_idx(L: Layout, j: int) -> Tensor:
    """Coordinates of p(j): X for j = 0, else P_j."""
    return _idx(L, "X") if j == 0 else _idx(L, "P", j)


def _attention(
    ctx: BuildContext,
    heads: list[Any],
    role: Role,
    queries: tuple[int, int],
    keys: tuple[int, int],
    groups: list[tuple[int, int, int, int, int, int]] | None = None,
) -> RowAttention:
    """A [`RowAttention`][icdl.construct.engine.row_layers.RowAttention] from per-head parts; one group
    (queries x keys) unless ``groups``."""
    tables, parts = pack_heads(heads, ctx.dtype)
    groups = groups or [(0, len(heads), *queries, *keys)]
    return RowAttention(tables, ctx.layout.dim, parts, groups, role=role, labels=ctx.slot_labels)


def _data(ctx: BuildContext) -> tuple[int, int]:
    """Token range of the n + 1 data tokens (-1: to the end)."""
    return (ctx.layout.prefix_tokens, -1)


def _rows_of(ctx: BuildContext, j: int) -> tuple[int, int]:
    """Token range of the row tokens of layer j."""
    L = ctx.layout
    assert isinstance(L, RowsLayout)
    return (L.row_offset(j), L.row_offset(j) + ctx.spec.widths[j])


# --------------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------------


def _unit_heads(ctx: BuildContext, j: int, terms: Terms, slot: str) -> list[Any]:
    """One head per term m: score ``a_m v_jk . p_i(j-1) + b_m ROW_j``, value ``c_m ID_j -> slot_j``."""
    L = ctx.layout
    src, row, one, flag = _p_idx(L, j - 1), _idx(L, "V", j), L.index("ONE"), L.index("ROW", j)
    ident, dst = _idx(L, "ID", j), _idx(L, slot, j)
    heads = []
    for a, b, c in zip(terms.a, terms.b, terms.c, strict=True):
        lead = (src, _full(src.numel(), a[0]), row, _full(row.numel(), 1.0))
        bias = (*_const(one, b), *_const(flag, 1.0))
        heads.append(([lead, bias], (ident, dst, _full(dst.numel(), c))))
    return heads


def forward_layer(ctx: BuildContext, j: int, *, derivative: bool) -> RowAttention:
    """F_j (Lemma 2, with the r' heads of Lemma 3 when ``derivative``): data tokens against the row tokens
    of layer j, written into the slots their identities name."""
    heads = _unit_heads(ctx, j, ctx.r[j - 1], "P")
    if derivative:
        heads += _unit_heads(ctx, j, ctx.r_prime[j - 1], "R")
        role = Role("forward_derivative", "Lemmas 2-3 (row tokens)", j)
    else:
        role = Role("forward", "Lemma 2 (row tokens)", j)
    return _attention(ctx, heads, role, _data(ctx), _rows_of(ctx, j))


def _delta_score(
    ctx: BuildContext, j: int, head: tuple[float, float, float], *, data_queries: bool
) -> list[Any]:
    """Score parts between data token i and row token (j, k) for one head ``(g, b, σ)``: a first part
    ``g R_j[k] + b`` (``[g r'_i, b ONE_i]`` against ``[ID_j, ROW_j]``; two non-zero summands, so it is
    exact in any order), then ``σ z_i[k]`` (z = G for j = N, else Z_j, against ``ID_j``).

    * gated (0/1 r'): ``(C, -C, ±1)``: the gate part is 0 (r' = 1) or -C (r' = 0, head off), so the pair
      ``σ = ±1`` gives ``s_i(j)[k] = r'[k] z[k]`` exactly;
    * smooth r': one head per unit of [`derivative_product`][icdl.construct.variants.rows.derivative_product],
      ``(a_m, b_m, c_m)``: ``relu(a_m r'[k] + b_m + c_m z[k])``;
    * r' = 1 (linear layer): ``(0, 0, ±1)``, no first part.

    ``data_queries`` puts the data side in Q (backward layers), else in K (the update).
    """
    g, bias, sigma = head
    L = ctx.layout
    ident = _idx(L, "ID", j)
    ones = _full(ident.numel(), 1.0)
    z = _idx(L, *_rows_layout(L).z_source(j))
    if g == 0.0 and bias == 0.0:
        # An empty first part (padding only, an exact 0) keeps the two-part shape of the other heads,
        # which may share the update sublayer with these.
        first_d = first_r = (torch.zeros(0, dtype=torch.long), _full(0, 0.0))
    else:
        first_d = (
            torch.cat([_idx(L, "R", j), torch.tensor([L.index("ONE")])]),
            torch.cat([_full(ident.numel(), g), _full(1, bias)]),
        )
        first_r = (torch.cat([ident, torch.tensor([L.index("ROW", j)])]), _full(ident.numel() + 1, 1.0))
    data = [first_d, (z, _full(ident.numel(), sigma))]
    rows = [first_r, (ident, ones)]
    if data_queries:
        return [(*d, *r) for d, r in zip(data, rows, strict=True)]
    # Row tokens query: move the coefficients to the row side (the score is the same product).
    return [(r[0], d[1], d[0], r[1]) for d, r in zip(data, rows, strict=True)]


def _delta_heads(ctx: BuildContext, j: int) -> list[tuple[tuple[float, float, float], float]]:
    """Per head of a score ``~ s_i(j)[k]``: its score coefficients ``(g, b, σ)`` (see `_delta_score`)
    and the weight its value is multiplied with, so that ``sum_heads weight relu(score) = s_i(j)[k]``
    (exactly for gated and linear layers, up to the product's sup error for smooth ones)."""
    if gated(ctx.spec, j):
        return [((ctx.gate, -ctx.gate, sigma), sigma) for sigma in (1.0, -1.0)]
    if unit_derivative(ctx.spec, j):
        return [((0.0, 0.0, sigma), sigma) for sigma in (1.0, -1.0)]
    prod = derivative_product(ctx.spec, j, ctx.r_prime[j - 1], eps=ctx.eps, radius=ctx.radius)
    return [((ar, b, az), w) for ar, az, b, w in product_units(prod)]


def backward_layer(ctx: BuildContext, j: int) -> RowAttention:
    """B_j (Lemma 5, (C.15) re-routed), j < N: ``z_j = V_{j+1}^T s(j+1)`` as attention from the data
    tokens to the row tokens of layer j+1: per head of `_delta_heads` (``σ = ±1`` for ReLU layers,
    one per product unit for smooth ones) the score ``~ s_i(j+1)[k]`` and the value
    ``weight v_{j+1,k} -> Z_j``."""
    L = ctx.layout
    src, dst = _idx(L, "V", j + 1), _idx(L, "Z", j)
    heads = [
        (_delta_score(ctx, j + 1, head, data_queries=True), (src, dst, _full(dst.numel(), w)))
        for head, w in _delta_heads(ctx, j + 1)
    ]
    return _attention(
        ctx, heads, Role("backward", "Lemma 5 (row tokens)", j), _data(ctx), _rows_of(ctx, j + 1)
    )


def update_layer(ctx: BuildContext) -> RowAttention:
    """U ((C.16) re-routed): per layer j and head of `_delta_heads`, row token (j, k) queries the data
    tokens with the score ``~ s_i(j)[k]`` and value ``-weight η/(2n) p_i(j-1) -> V_j``:
    ``v_jk -= η (1/(2n)) sum_i s_i(j)[k] p_i(j-1)``. The query's s is 0 (its u is gated off, and every
    product of an exact 0 is an exact 0), so it adds nothing."""
    L = ctx.layout
    scale = ctx.lr / (2 * ctx.n)
    heads: list[Any] = []
    groups = []
    for j in range(1, ctx.spec.depth + 1):
        src, dst = _p_idx(L, j - 1), _idx(L, "V", j)
        first = len(heads)
        for head, w in _delta_heads(ctx, j):
            score = _delta_score(ctx, j, head, data_queries=False)
            heads.append((score, (src, dst, _full(dst.numel(), -w * scale))))
        groups.append((first, len(heads), *_rows_of(ctx, j), *_data(ctx)))  # layer j's rows query
    role = Role("update", "eq. (C.16) (row tokens)")
    return _attention(ctx, heads, role, (0, L.prefix_tokens), _data(ctx), groups)


def project_layer(ctx: BuildContext) -> RowMLP:
    """Box clip ``z - relu(z - B) + relu(-z - B)`` of every V_j coordinate on the row tokens (whose ONE is
    0: the threshold comes from their ROW_j flag), and ``relu(h)``/``relu(-h)`` with weights -1/+1 for
    every scratch coordinate on the data tokens (exactly 0 afterwards)."""
    L = ctx.layout
    width = 1 if ctx.box is None else 2
    reads: list[tuple[Tensor, Tensor]] = []
    writes: list[tuple[Tensor, Tensor]] = []

    def units(src: Tensor, coef: Tensor, dst: Tensor, out: float) -> None:
        pad = width - src.shape[1]  # trailing (index 0, coefficient 0) reads add an exact 0
        reads.append(
            (
                torch.cat([src, torch.zeros(src.shape[0], pad, dtype=torch.long)], 1),
                torch.cat([coef, torch.zeros(src.shape[0], pad, dtype=torch.float64)], 1),
            )
        )
        writes.append((dst[:, None], torch.full((dst.numel(), 1), out, dtype=torch.float64)))

    scratch = torch.tensor(L.scratch_indices(), dtype=torch.long)
    for sgn in (1.0, -1.0):
        units(scratch[:, None], torch.full((scratch.numel(), 1), sgn, dtype=torch.float64), scratch, -sgn)
    groups = [(0, 2 * scratch.numel(), *_data(ctx))]
    if ctx.box is not None:
        for j in range(1, ctx.spec.depth + 1):
            v = _idx(L, "V", j)
            first = sum(r[0].shape[0] for r in reads)
            for sgn in (1.0, -1.0):
                src = torch.stack([v, torch.full_like(v, L.index("ROW", j))], 1)
                coef = torch.tensor([sgn, -ctx.box], dtype=torch.float64).expand(v.numel(), 2)
                units(src, coef, v, -sgn)
            groups.append((first, first + 2 * v.numel(), *_rows_of(ctx, j)))
    tables = {
        "w1_idx": torch.cat([r[0] for r in reads]),
        "w1_coef": torch.cat([r[1] for r in reads]).to(ctx.dtype),
        "w2_dst": torch.cat([w[0] for w in writes]),
        "w2_coef": torch.cat([w[1] for w in writes]).to(ctx.dtype),
    }
    role = Role("project", "Theorem 1 (Proj_W)")
    return RowMLP(tables, L.dim, groups, role=role, labels=ctx.slot_labels)


def build_block(ctx: BuildContext) -> list[Sublayer]:
    """F_1..F_N (with r'), loss, B_{N-1}, ..., B_1, U, project: 2N+2 sublayers for every activation (the
    products ``r' ⊙ z`` are taken inside the scores of B_j and U)."""
    N = ctx.spec.depth
    out: list[Sublayer] = [forward_layer(ctx, j, derivative=True) for j in range(1, N + 1)]
    out.append(_on(ctx, blocks.loss_layer(ctx), _data(ctx)))
    out += [backward_layer(ctx, j) for j in range(N - 1, 0, -1)]
    out.append(update_layer(ctx))
    out.append(project_layer(ctx))
    return out


def build_readout(ctx: BuildContext) -> list[Sublayer]:
    """F_1..F_N (r only), then the paper's readout MLP (query's p(N) -> Y)."""
    out: list[Sublayer] = [forward_layer(ctx, j, derivative=False) for j in range(1, ctx.spec.depth + 1)]
    out.append(_on(ctx, blocks.readout_layer(ctx), _data(ctx)))
    return out


# --------------------------------------------------------------------------------------------------
# Expected effects
# --------------------------------------------------------------------------------------------------


def _deltas(ref: Reference) -> list[Tensor]:
    """The deltas ``s(1..N)`` (T, n_j) the construction forms at the reference's weights and prompt: the
    exact ``r' ⊙ z`` for ReLU and linear layers (what ``ref.sur.s`` holds), the surrogate products of
    [`derivative_product`][icdl.construct.variants.rows.derivative_product]
    ([`eval_product`][icdl.construct.variants.rows.eval_product]) for smooth layers; computed once per GD
    step."""
    out = ref.cache.get("rows_deltas")
    if out is not None:
        return out
    spec, cfg, sur = ref.model.spec, ref.model.config, ref.sur
    if not any(smooth(spec, j) for j in range(1, spec.depth + 1)):
        out = list(sur.s)
    else:

        def derivative(j: int, rp: Tensor, z: Tensor) -> Tensor:
            if not smooth(spec, j):
                return rp * z
            prod = derivative_product(spec, j, ref.model.terms.r_prime[j - 1], eps=cfg.eps, radius=cfg.radius)
            return eval_product(prod, rp, z)

        out, _ = backward_deltas(sur.r_prime, sur.u, unflatten(spec, ref.w), derivative=derivative)
    ref.cache["rows_deltas"] = out
    return out


def _stepped(ref: Reference, box: float | None) -> Tensor:
    """``Proj(w - η ∇̄)`` with ``∇̄ = (1/(2n)) sum_examples s_i(j) p_i(j-1)^T`` built from `_deltas`
    (``ref.sur.grad`` itself where every delta is the exact one)."""
    spec = ref.model.spec
    if not any(smooth(spec, j) for j in range(1, spec.depth + 1)):
        grad = ref.sur.grad
    else:
        t, s, p = ref.t, _deltas(ref), ref.sur.p
        n = float(t.sum())
        grad = torch.cat([((s[j] * t[:, None]).T @ p[j]).reshape(-1) for j in range(spec.depth)]) / (2 * n)
    return projected_step(ref.w, grad, ref.lr, box)


def _z(j: int) -> Callable[[Reference], Tensor]:
    def z(ref: Reference) -> Tensor:
        V = unflatten(ref.model.spec, ref.w)[j]  # V_{j+1}, (n_{j+1}, n_j)
        return _deltas(ref)[j] @ V

    z.__name__ = f"z({j}) = V_{j + 1}^T s({j + 1})"
    return z


def _rows(layout: RowsLayout, j: int, projected: bool) -> Callable[[Reference], Tensor]:
    def rows(ref: Reference) -> Tensor:
        w = _stepped(ref, ref.box if projected else None)
        return layout.row_values(w, j, w.dtype)

    rows.__name__ = f"{'Proj(w - eta grad)' if projected else 'w - eta grad'} rows of V_{j}"
    return rows


def effects(info: SublayerInfo, layout: Layout) -> list[Expect]:
    """What must hold after each sublayer (``tokens="data"``: the n + 1 data tokens; ``"prefix"``: the row
    tokens). Z_j and the updated rows are checked against the construction's own deltas (`_deltas`:
    exact for ReLU and linear layers, the surrogate products for smooth ones)."""
    assert isinstance(layout, RowsLayout)
    N = layout.spec.depth
    j = info.layer
    if info.role == "forward_derivative":
        return [Expect(f"P_{j}", "p", j, tokens="data"), Expect(f"R_{j}", "r_prime", j, tokens="data")]
    if info.role == "forward":
        return [Expect(f"P_{j}", "p", j, tokens="data")]
    if info.role == "loss":
        return [Expect("G", "u", tokens="data")]
    if info.role == "backward":
        assert j is not None
        return [Expect(f"Z_{j}", _z(j), tokens="data")]
    if info.role == "update":
        return [
            Expect(f"V_{i}", _rows(layout, i, False), tokens="prefix", applied_step=True)
            for i in range(1, N + 1)
        ]
    if info.role == "project":
        return [Expect(f"V_{i}", _rows(layout, i, True), tokens="prefix") for i in range(1, N + 1)] + [
            Expect(s.label, "zero") for s in layout.scratch_slots()
        ]
    if info.role == "readout":
        return [Expect("Y", "prediction", tokens="query")]
    raise ValueError(f"no expected effect for role {info.role!r}")


def ranges(ref: Reference) -> int:
    """How many ``z_j`` entries of a smooth layer leave ``[-radius, radius]`` at this step: the products
    ``r' ⊙ z`` in the backward and update scores are fitted on that range
    ([`derivative_product`][icdl.construct.variants.rows.derivative_product])."""
    spec, cfg = ref.model.spec, ref.model.config
    count = 0
    for j in range(1, spec.depth + 1):
        if smooth(spec, j):
            z = ref.sur.u if j == spec.depth else _z(j)(ref)
            count += int((z.abs() > cfg.radius).sum())
    return count


def declared(model: Compiled) -> Declared:
    """The budget declaration ([`icdl.construct.bounds.budget`][icdl.construct.bounds.budget]): the ReLU sums'
    errors, and for each smooth layer the sup error ``h^2/16`` of its ``r' z`` product
    ([`derivative_product`][icdl.construct.variants.rows.derivative_product]); ReLU gates and linear layers
    exact."""
    spec, cfg, t = model.spec, model.config, model.terms
    der = tuple(
        derivative_product(spec, j, t.r_prime[j - 1], eps=cfg.eps, radius=cfg.radius).sup_error
        if smooth(spec, j)
        else 0.0
        for j in range(1, spec.depth + 1)
    )
    return declared_sums(t.r, t.r_prime, t.u, derivative=der)


# -- closed-form sizes and cost (the budget estimate, before anything is built) ------------------------
def rows_embedding_dim(spec: NetSpec) -> int:
    """Token width of the row-token construction (docs/construction.md, "Weights in their own tokens"),
    linear in K and the same for every activation:

    ``D = d_x + d_y + 2 U + d_y + (U - d_y) + 2 + (d_x + U - d_y) + U + N``
    with ``U = sum_j n_j = (N-1)K + d_y``: data slots X, Y, P_j, R_j, G, Z_j (j < N), ONE, T; row slots
    V_j (``n_{j-1}``), ID_j (``n_j``), ROW_j (1); i.e. ``D = 2 d_x + 5 d_y + 5 (N-1) K + N + 2``. The
    deltas s(j) get no slot: ``r' ⊙ z`` is formed inside the backward and update scores.
    """
    U, N, dx, dy = spec.num_units, spec.depth, spec.in_dim, spec.out_dim
    return dx + dy + 2 * U + dy + (U - dy) + 2 + (dx + U - dy) + U + N


def rows_tokens(spec: NetSpec, examples: int) -> int:
    """Tokens of the row-token construction: ``(N-1)K + d_y`` row tokens plus ``n + 1`` data tokens."""
    return spec.num_units + check_int("examples", examples, 1) + 1


def rows_sublayers_per_step(spec: NetSpec) -> int:
    """Sublayers per GD step of the row-token construction: ``2N + 2`` (F_1..F_N, loss, B_{N-1}..B_1,
    update, projection) for every activation: ``r' ⊙ z`` is taken inside the backward and update scores
    (a 0/1 gate for ReLU, a two-argument ReLU sum of the product for smooth activations)."""
    return 2 * spec.depth + 2


def rows_sizes(spec: NetSpec, examples: int) -> Sizes:
    """The row-token construction's [`Sizes`][icdl.construct.engine.sizes.Sizes] (weights in their own
    tokens)."""
    return Sizes(rows_embedding_dim(spec), rows_tokens(spec, examples), rows_sublayers_per_step(spec))


def _rows_work(w: CostInputs, mlp_work: int) -> int:
    """Row attention pairs each data token with the rows of one layer only: about 16 multiply-adds per
    weight per data token and step (forward, backward, update; traced and untraced passes), plus
    token-local work (measured forward: 7.4e9 FLOPs for N=6, K=64, n=256, L=50)."""
    return 32 * w.steps * (w.examples + 1) * w.spec.num_params + 4 * w.states * w.sizes.T * w.sizes.D


def _rows_coefficients(w: CostInputs) -> int:
    """Stored coefficients and index entries of the rows block and readout: a few per slot coordinate the
    heads read or write, and a fixed part per layer (measured 27 per unit of ``U + d_x`` at K = 3,200 and
    10,000: 172,868 and 540,068 for N = 2; 27k-55k for N = 2..6, K = 64..512), not the paper's dense
    per-head tables."""
    return 27 * (w.spec.num_units + w.spec.in_dim) + 4000 * w.spec.depth + 8000


# T x D states at the peak of ``icdl construct --variant rows``: the command's prompt and the verifier's,
# the state before and after the sublayer being checked, and the largest sublayer temporaries (the update's
# scores and the projection's token chunks, under half a state). Measured 1.5 GB at N=8, K=256, n=1024,
# L=1 (T x D = 2818 x 9007), 345 MiB for the default N=6, K=64, n=256, L=50 (docs/results/verify_scale.json).
ROWS_STATES = 5


VARIANT = Variant(
    name="rows",
    summary="weights in their own row tokens: D linear in K; 2N+2 sublayers per step",
    layout=rows_layout,
    block=build_block,
    readout=build_readout,
    effects=effects,
    ranges=ranges,
    # r' ⊙ z of a smooth layer is a product fitted on |z| <= R (z: u or V^T s, the "back" vectors).
    range_needs=RangeNeeds(("z", "back"), products=("derivative",)),
    sizes=rows_sizes,
    costs=Costs(work=_rows_work, states=ROWS_STATES, coefficients=_rows_coefficients),
    budget=declared,
)

"""An explicit softmax-attention construction (``--variant softmax``): GD steps with softmax attention and
ReLU MLPs only.

Theorem 2 of the paper (App. E) shows that a softmax transformer of 4 layers per step can run GD, but only
as an existence result (Lemma 16: a grid approximation and a contextual mapping, no weights). This variant
gives weights. The one cross-token operation of a GD step is the sum of per-example gradients
(eq. (3.5), (3.7)); a softmax head whose scores are all 0 (``K = 0``) attends uniformly, so its output is
the exact average ``(1/T) sum_t V h_t`` — the same ``1/T`` the paper's ReLU update layer (C.16) carries. The
query token adds nothing because its loss derivative is gated to exactly 0 (Lemma 4) and every product
below is exactly 0 when its second factor is. Everything else is token-local (each token holds w), so it is
done by bias-free ReLU MLPs (Definition 8), with products from
[`icdl.construct.engine.products`][icdl.construct.engine.products]:

========================  =======  =============================================================
sublayer (name)           kind     computes (in the token's own slots)
========================  =======  =============================================================
``forward_products_j``    MLP      P_j += V_j p(j-1) (``n_j n_{j-1}`` products ``v * p``)
``activation_j``          MLP      P_j <- r(P_j), R_j += r'(P_j) (the sums of Lemmas 2-3)
``loss``                  MLP      G = u(p(N), y), exactly 0 on the query (Lemma 4)
``backward_N``            MLP      S_N += r'(N-1) ⊙ G (Lemma 5, j = N; ReLU: done by the loss MLP)
``backward_transpose_j``  MLP      S_j += V_{j+1}^T s(j+1) (products ``v * s``), j = N-1..1
``backward_mask_j``       MLP      S_j <- r'(j-1) ⊙ S_j (Lemma 5, eq. (3.6))
``backward_j`` (ReLU)     MLP      both at once: the ``v * s`` products gated by the 0/1 mask r'(j-1)
``gradient``              MLP      A += s(j) p(j-1)^T for all j (products ``p * s``; 0 on the query)
``update``                softmax  W += -eta (n+1)/(2n) mean_t A_t = -eta ∇L_n(w) (one head per layer)
``project``               MLP      Proj_W (box) and clean-up of the scratch slots (incl. A)
========================  =======  =============================================================

so ``4N + 3`` sublayers per step (the paper's existence proof: 4), one of them attention. For ReLU networks
the ``r'`` products are exact mask products (r' is a 0/1 step), the loss MLP also writes s(N) and each
other backward layer is one MLP (``3N + 3`` per step), and only the ``v * p``, ``v * s`` and ``p * s``
products are approximate; for smooth activations ``r``, ``r'`` are the fitted sums of the paper's variant
and the ``r' ⊙ z`` products are approximate too. Each product has sup error ``<= eps`` while its factors stay
in their assumed ranges: weights ``|w| <= B`` (the box; so ``w^(0)`` must lie in it) or ``R`` (the config's
``radius``) without a box, derivatives ``|r'| <= 1`` (``1 + e'`` where a fitted ``r̄'`` with sup error e'
can exceed 1: [`derivative_range`][icdl.construct.variants.softmax.derivative_range]), every other factor ``<=
R``; [`range_ratios`][icdl.construct.variants.softmax.range_ratios] checks them.

[`surrogate`][icdl.construct.variants.softmax.surrogate] evaluates the same approximate recursion directly, so
the verifier can check every sublayer to round-off; the distance to exact GD is the approximation error, which
shrinks with eps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from icdl.construct.bounds.budget import Declared, declared_sums, sum_error
from icdl.construct.bounds.ranges import PRODUCTS, RangeNeeds
from icdl.construct.build import blocks
from icdl.construct.build.context import BuildContext
from icdl.construct.build.contract import Expect, Reference, Variant
from icdl.construct.engine.layers import HeadTable, ReLUMLP, Role, SoftmaxAttention, Sublayer, UnitTable
from icdl.construct.engine.layout import SCRATCH, Layout, paper_layout
from icdl.construct.engine.products import ProductTerms, add_product, product_terms
from icdl.construct.engine.sizes import CONSTRUCT_FLOPS, CostInputs, Costs, Sizes, dense_work
from icdl.construct.engine.terms import Terms
from icdl.construct.variants.no_ewml import MASK_ACTIVATIONS, loss_delta_layer
from icdl.nets import NetSpec, backward_deltas, projected_step, unflatten
from icdl.sublayer import SublayerInfo
from icdl.theory import embedding_dim

if TYPE_CHECKING:
    from icdl.construct.protocols import Compiled, StepConfig

__all__ = [
    "VARIANT",
    "Products",
    "build_block",
    "build_readout",
    "declared",
    "derivative_range",
    "effects",
    "layout",
    "model_products",
    "product_errors",
    "products",
    "range_ratios",
    "softmax_sizes",
    "sublayers_per_step",
    "surrogate",
]

DERIVATIVE_RANGE = 1.0  # |r'| <= 1 for relu, sigmoid (1/4), tanh, softplus, identity


def layout(spec: NetSpec) -> Layout:
    """The paper's slots plus ``A`` (P wide, ordered like W): each token's gradient terms s(j) p(j-1)^T."""
    base = paper_layout(spec)
    groups: list[tuple[str, int | None, int]] = [(s.name, s.layer, s.size) for s in base.slots]
    at = next(i for i, g in enumerate(groups) if g[0] == "ONE")
    groups.insert(at, ("A", None, spec.num_params))
    return Layout(spec, groups, token_type="token", scratch=(*SCRATCH, "A"))


def sublayers_per_step(depth: int, mask: bool = False) -> int:
    """``2N`` forward + loss + backward + gradient + update + project: ``4N + 3``, or ``3N + 3`` when every r'
    is a 0/1 mask (ReLU networks: s(N) comes with the loss MLP and each other backward layer is one
    gated-product MLP)."""
    backward = depth - 1 if mask else 2 * depth - 1
    return 2 * depth + 1 + backward + 3


@dataclass(frozen=True)
class Products:
    """The approximate products of one construction and their range assumptions.

    Attributes:
        forward: ``v * p`` (``|v| <= B_w``, ``|p| <= R``).
        transpose: ``v * s`` (``|v| <= B_w``, ``|s| <= R``).
        gradient: ``p * s`` (``|p| <= R``, ``|s| <= R``).
        derivative: ``r' * z`` (``|r'| <=``
            [`derivative_range`][icdl.construct.variants.softmax.derivative_range], ``|z| <= R``); None where
        every r' is a 0/1 mask (exact). gate: C of the exact mask products (``|z| <= C``).
    """

    forward: ProductTerms
    transpose: ProductTerms
    gradient: ProductTerms
    derivative: ProductTerms | None
    gate: float


def derivative_range(spec: NetSpec, r_prime: tuple[Terms, ...]) -> float:
    """The range of the ``r'`` factor of the ``r' z`` products: ``DERIVATIVE_RANGE`` = 1, or ``max |r'| +
    e'`` where the fitted ``r̄'`` can exceed 1 (tanh, softplus: ``max |r'| = 1`` and the sum's declared sup
    error e', [`sum_error`][icdl.construct.bounds.budget.sum_error])."""
    peak = max(spec.layer_act(j).lipschitz + sum_error(t) for j, t in enumerate(r_prime, start=1))
    return max(DERIVATIVE_RANGE, peak)


def products(
    spec: NetSpec,
    *,
    eps: float,
    radius: float,
    box: float | None,
    gate: float,
    weight_range: float | None = None,
    r_prime_range: float = DERIVATIVE_RANGE,
) -> Products:
    """The products for a configuration (ranges as in the module docstring): the weight factors on
    ``weight_range`` when given (``--range auto`` sets it from the trajectory), else on the box B, else R;
    the r' factors on ``r_prime_range``
    ([`derivative_range`][icdl.construct.variants.softmax.derivative_range] of the model's r' sums)."""
    bw = weight_range if weight_range is not None else box if box is not None else radius
    mask = all(spec.layer_act(j).name in MASK_ACTIVATIONS for j in range(1, spec.depth + 1))
    return Products(
        forward=product_terms(bw, radius, eps),
        transpose=product_terms(bw, radius, eps),
        gradient=product_terms(radius, radius, eps),
        derivative=None if mask else product_terms(r_prime_range, radius, eps),
        gate=gate,
    )


def _products(ctx: BuildContext) -> Products:
    return config_products(ctx.spec, ctx.config, tuple(ctx.r_prime))


def config_products(spec: NetSpec, cfg: StepConfig, r_prime: tuple[Terms, ...]) -> Products:
    """The [`products`][icdl.construct.variants.softmax.products] of a configuration with its fitted r'
    sums."""
    return products(
        spec,
        eps=cfg.eps,
        radius=cfg.radius,
        box=cfg.box,
        gate=cfg.gate,
        weight_range=cfg.weight_range,
        r_prime_range=derivative_range(spec, r_prime),
    )


def model_products(model: Compiled) -> Products:
    """[`products`][icdl.construct.variants.softmax.products] of a compiled model (its config and r' sums)."""
    return config_products(model.spec, model.config, model.terms.r_prime)


def _a_index(L: Layout, j: int, k: int, l: int) -> int:
    """Coordinate of the gradient term of ``V_j[k, l]`` in the A slot (A is ordered like W)."""
    return L.index("A", None, L.w_entry(j, k, l) - L.index("W"))


# -- sublayers ------------------------------------------------------------------------------------------


def forward_products(ctx: BuildContext, j: int) -> ReLUMLP:
    """``P_j[k] += sum_l v_jk[l] p(j-1)[l]``: the pre-activation ``V_j p(j-1)`` of Lemma 2 (eq. (C.8)), with
    the token's own copy of w, as ``n_j n_{j-1}`` MLP products."""
    L = ctx.layout
    prod = _products(ctx).forward
    one = L.index("ONE")
    src = L.p(j - 1)
    units = UnitTable()
    for k in range(ctx.spec.widths[j]):
        dst = L.index("P", j, k)
        for v, p in zip(L.w_row(j, k), src, strict=True):
            add_product(units, prod, v, p, one, dst)
    return ctx.mlp(units, Role("forward_products", "Lemma 2 (C.8) products", j))


def forward_activation(ctx: BuildContext, j: int) -> ReLUMLP:
    """``P_j <- r̄(P_j)`` and ``R_j += r̄'(P_j)`` (the sums of Lemmas 2 and 3, one hidden unit per term), in
    place: ``P_j += r̄(z) - relu(z) + relu(-z)``."""
    L = ctx.layout
    one = L.index("ONE")
    units = UnitTable()
    r, rp = ctx.r[j - 1], ctx.r_prime[j - 1]
    for k in range(ctx.spec.widths[j]):
        z, rr = L.index("P", j, k), L.index("R", j, k)
        units.add([(z, 1.0)], [(z, -1.0)])
        units.add([(z, -1.0)], [(z, 1.0)])
        for terms, dst in ((r, z), (rp, rr)):
            for a, b, c in zip(terms.a, terms.b, terms.c, strict=True):
                reads = [(z, a[0])] + ([(one, b)] if b != 0.0 else [])
                units.add(reads, [(dst, c)])
    return ctx.mlp(units, Role("activation", "Lemmas 2-3 ReLU sums", j))


def backward_output(ctx: BuildContext) -> ReLUMLP:
    """``S_N += r'(N-1) ⊙ G`` (Lemma 5, j = N) by approximate products (smooth activations; for 0/1 masks
    the loss MLP writes s(N) itself,
    [`icdl.construct.variants.no_ewml.loss_delta_layer`][icdl.construct.variants.no_ewml.loss_delta_layer])."""
    L = ctx.layout
    N = ctx.spec.depth
    prod = _products(ctx).derivative
    assert prod is not None
    one = L.index("ONE")
    units = UnitTable()
    for k in range(ctx.spec.out_dim):
        m, g, dst = L.index("R", N, k), L.index("G", None, k), L.index("S", N, k)
        add_product(units, prod, m, g, one, dst)
    return ctx.mlp(units, Role("backward", "Lemma 5 product", N))


def backward_transpose(ctx: BuildContext, j: int) -> ReLUMLP:
    """``S_j[k] += sum_l V_{j+1}[l, k] s(j+1)[l]`` (the score of the paper's EWML head (C.15)) as products."""
    L = ctx.layout
    prod = _products(ctx).transpose
    one = L.index("ONE")
    s_next = L.indices("S", j + 1)
    units = UnitTable()
    for k in range(ctx.spec.widths[j]):
        dst = L.index("S", j, k)
        for v, s in zip(L.w_col(j + 1, k), s_next, strict=True):
            add_product(units, prod, v, s, one, dst)
    return ctx.mlp(units, Role("backward_transpose", "Lemma 5 (C.15) products", j))


def backward_gated(ctx: BuildContext, j: int) -> ReLUMLP:
    """ReLU networks (j < N): ``S_j[k] += r'(j-1)[k] sum_l V_{j+1}[l, k] s(j+1)[l]`` in ONE MLP (eq. (3.6)):
    every unit of the ``v * s`` products gets the gate ``-C ONE + C R_j[k]`` first, which is exactly 0 where
    the mask is 1 (the product is unchanged) and switches all its units off where it is 0."""
    L = ctx.layout
    prods = _products(ctx)
    one = L.index("ONE")
    s_next = L.indices("S", j + 1)
    units = UnitTable()
    for k in range(ctx.spec.widths[j]):
        dst = L.index("S", j, k)
        gate = [(one, -prods.gate), (L.index("R", j, k), prods.gate)]
        for v, s in zip(L.w_col(j + 1, k), s_next, strict=True):
            add_product(units, prods.transpose, v, s, one, dst, gate=gate)
    return ctx.mlp(units, Role("backward", "Lemma 5 gated products", j))


def backward_derivative(ctx: BuildContext, j: int) -> ReLUMLP:
    """``S_j <- r'(j-1) ⊙ S_j`` in place (eq. (3.6)) for smooth activations:
    ``S_j += prod(R_j, S_j) - relu(S_j) + relu(-S_j)`` (ReLU networks use
    [`backward_gated`][icdl.construct.variants.softmax.backward_gated])."""
    L = ctx.layout
    prod = _products(ctx).derivative
    assert prod is not None
    one = L.index("ONE")
    units = UnitTable()
    for k in range(ctx.spec.widths[j]):
        m, z = L.index("R", j, k), L.index("S", j, k)
        units.add([(z, 1.0)], [(z, -1.0)])
        units.add([(z, -1.0)], [(z, 1.0)])
        add_product(units, prod, m, z, one, z)
    return ctx.mlp(units, Role("backward_mask", "Lemma 5 eq. (3.6)", j))


def gradient_terms(ctx: BuildContext) -> ReLUMLP:
    """``A[V_j[k, l]] += s(j)[k] p(j-1)[l]`` for every weight: the per-token terms of eq. (3.5), (3.7).
    ``s`` is the second factor, so the query (s = 0) gets exactly 0."""
    L = ctx.layout
    prod = _products(ctx).gradient
    one = L.index("ONE")
    units = UnitTable()
    for j in range(1, ctx.spec.depth + 1):
        src = L.p(j - 1)
        for k in range(ctx.spec.widths[j]):
            s = L.index("S", j, k)
            for l, p in enumerate(src):
                add_product(units, prod, p, s, one, _a_index(L, j, k, l))
    return ctx.mlp(units, Role("gradient", "eq. (3.7) products"))


def update_layer(ctx: BuildContext) -> SoftmaxAttention:
    """``w += -eta (n+1)/(2n) (1/T) sum_t A_t = w - eta ∇L_n(w)`` (eq. 2.3, (3.5)): one softmax head per layer
    j with ``Q h = ONE``, ``K h = 0`` (all scores 0: uniform weights 1/T, standard
    ``scaled_dot_product_attention`` semantics) and ``V h = -eta (n+1)/(2n) A[V_j] -> W[V_j]``."""
    L = ctx.layout
    one = L.index("ONE")
    scale = ctx.lr * (ctx.n + 1) / (2 * ctx.n)
    heads = HeadTable()
    for j in range(1, ctx.spec.depth + 1):
        rows, cols = ctx.spec.shapes[j - 1]
        v = [(_a_index(L, j, k, l), L.w_entry(j, k, l), -scale) for k in range(rows) for l in range(cols)]
        heads.add(q=[(one, 1.0)], k=[(one, 0.0)], v=v)
    role = Role("update", "eq. (2.3) uniform heads")
    return SoftmaxAttention(heads.tensors(ctx.dtype), L.dim, role=role, labels=ctx.slot_labels)


def build_block(ctx: BuildContext) -> list[Sublayer]:
    """One GD step, ``4N + 3`` sublayers (``3N + 3`` for ReLU networks; see the module docstring)."""
    N = ctx.spec.depth
    mask = _products(ctx).derivative is None
    out: list[Sublayer] = []
    for j in range(1, N + 1):
        out += [forward_products(ctx, j), forward_activation(ctx, j)]
    if mask:
        out.append(loss_delta_layer(ctx))
        out += [backward_gated(ctx, j) for j in range(N - 1, 0, -1)]
    else:
        out += [blocks.loss_layer(ctx), backward_output(ctx)]
        for j in range(N - 1, 0, -1):
            out += [backward_transpose(ctx, j), backward_derivative(ctx, j)]
    out.append(gradient_terms(ctx))
    out.append(update_layer(ctx))
    out.append(blocks.project_layer(ctx))
    return out


def build_readout(ctx: BuildContext) -> list[Sublayer]:
    """The forward pass once more (2N MLPs), then the paper variant's readout MLP (query's p(N) -> Y)."""
    out: list[Sublayer] = []
    for j in range(1, ctx.spec.depth + 1):
        out += [forward_products(ctx, j), forward_activation(ctx, j)]
    out.append(blocks.readout_layer(ctx))
    return out


# -- the same recursion, evaluated directly ---------------------------------------------------------


@dataclass
class Surrogate:
    """The approximate GD-step quantities this construction computes, on all T tokens (query last).

    ``z[j-1]``: forward pre-activations ``~V_j p(j-1)``; ``p[j]`` (``p[0] = x``); ``r_prime[j-1]``; ``u``;
    ``back[j-1]``: ``~V_{j+1}^T s(j+1)`` (j < N, else ``u``); ``s[j-1]``; ``A`` (T, P): per-token gradient
    terms; ``grad``: ``(1/(2n)) sum_t A_t``.
    """

    z: list[Tensor]
    p: list[Tensor]
    r_prime: list[Tensor]
    u: Tensor
    back: list[Tensor]
    s: list[Tensor]
    A: Tensor
    grad: Tensor


def range_ratios(prods: Products, sur: Surrogate, w: Tensor) -> dict[str, float]:
    """For each kind of product, ``max(|x| / R_x, |y| / R_y)`` over all its uses at weights ``w``: at most 1
    when the range assumption holds (then each product is within eps); above 1 its error grows like the
    squared excess. Mask products report ``|z| / C``."""

    def peak(ts: list[Tensor]) -> float:
        return max((float(t.abs().max()) for t in ts if t.numel()), default=0.0)

    wmax, p_in, s_all = float(w.abs().max()), peak(sur.p[:-1]), peak(sur.s)
    out = {
        "forward": max(wmax / prods.forward.x_range, p_in / prods.forward.y_range),
        "transpose": max(wmax / prods.transpose.x_range, peak(sur.s[1:]) / prods.transpose.y_range),
        "gradient": max(p_in / prods.gradient.x_range, s_all / prods.gradient.y_range),
    }
    if prods.derivative is None:
        out["mask"] = peak(sur.back) / prods.gate
    else:
        d = prods.derivative
        out["derivative"] = max(peak(sur.r_prime) / d.x_range, peak(sur.back) / d.y_range)
    return out


def _sum_products(prod: ProductTerms, X: Tensor, Y: Tensor) -> Tensor:
    """``sum_l prod(X[..., l], Y[..., l])`` for X, Y of shape (T, K, n_in) -> (T, K)."""
    out = torch.zeros(X.shape[:-1], dtype=X.dtype)
    for l in range(X.shape[-1]):
        out = out + prod(X[..., l], Y[..., l])
    return out


def surrogate(
    spec: NetSpec,
    prods: Products,
    r: tuple[Terms, ...],
    r_prime: tuple[Terms, ...],
    u_terms: Terms,
    w: Tensor,
    x_all: Tensor,
    y_all: Tensor,
    t: Tensor,
) -> Surrogate:
    """Evaluate the construction's approximate recursion for weights ``w`` (P,) on tokens ``x_all`` (T, d_x),
    ``y_all`` (T, d_y) with example mask ``t`` (T,)."""
    N = spec.depth
    n = int(t.sum().item())
    Vs = unflatten(spec, w)
    ps, zs, rps = [x_all], [], []
    for j, V in enumerate(Vs, start=1):
        z = _sum_products(prods.forward, V[None].expand(x_all.shape[0], -1, -1), ps[-1][:, None, :])
        zs.append(z)
        ps.append(r[j - 1](z))
        rps.append(r_prime[j - 1](z))
    u = u_terms(ps[-1], y_all) * t[:, None]

    def transpose(j: int, V: Tensor, s_next: Tensor) -> Tensor:
        Vt = V.t()  # (n_j, n_{j+1}): row k is column k of V_{j+1}
        return _sum_products(prods.transpose, Vt[None].expand(x_all.shape[0], -1, -1), s_next[:, None, :])

    deriv = prods.derivative
    s, back = backward_deltas(
        rps, u, Vs, transpose=transpose, derivative=None if deriv is None else lambda j, m, z: deriv(m, z)
    )
    A = torch.cat([prods.gradient(ps[j][:, None, :], s[j][:, :, None]).flatten(1) for j in range(N)], dim=1)
    grad = A.sum(0) / (2 * n)
    return Surrogate(zs, ps, rps, u, back, s, A, grad)


def surrogate_step(sur: Surrogate, w: Tensor, lr: float, box: float | None) -> Tensor:
    """``Proj_W(w - eta * grad)`` with the surrogate gradient."""
    return projected_step(w, sur.grad, lr, box)


# -- expected effects (the contract of icdl.construct.build.contract)
# ------------------------------------------


def _surrogate_of(ref: Reference, spec: NetSpec) -> Surrogate:
    """[`surrogate`][icdl.construct.variants.softmax.surrogate] at the reference's weights and prompt,
    computed once per GD step."""
    sur = ref.cache.get("softmax_surrogate")
    if sur is None:
        terms = ref.model.terms
        prods = model_products(ref.model)
        sur = surrogate(spec, prods, terms.r, terms.r_prime, terms.u, ref.w, ref.x_all, ref.y_all, ref.t)
        ref.cache["softmax_surrogate"] = sur
    return sur


def _quantity(spec: NetSpec, name: str, pick: Callable[[Surrogate], Tensor]) -> Callable[[Reference], Tensor]:
    def quantity(ref: Reference) -> Tensor:
        v = pick(_surrogate_of(ref, spec))
        return v if v.dim() == 2 else v[None].expand(ref.x_all.shape[0], -1)

    quantity.__name__ = name
    return quantity


def effects(info: SublayerInfo, layout: Layout) -> list[Expect]:
    """Every slot a sublayer writes must hold the value of
    [`surrogate`][icdl.construct.variants.softmax.surrogate] (the same approximate products and sums,
    evaluated directly), so each sublayer is checked to round-off; the project and readout MLPs as in
    [`icdl.construct.build.blocks.effects`][icdl.construct.build.blocks.effects] but at the surrogate's
    gradient and prediction."""
    spec = layout.spec
    j = info.layer if info.layer is not None else 0

    def q(name: str, pick: Callable[[Surrogate], Tensor]) -> Callable[[Reference], Tensor]:
        return _quantity(spec, name, pick)

    def stepped(ref: Reference, box: float | None) -> Tensor:
        sur = _surrogate_of(ref, spec)
        return projected_step(ref.w, sur.grad, ref.lr, box)[None].expand(ref.x_all.shape[0], -1)

    table: dict[str, list[Expect]] = {
        "forward_products": [Expect(f"P_{j}", q(f"~V_{j} p({j - 1})", lambda s: s.z[j - 1]))],
        "activation": [
            Expect(f"P_{j}", q(f"p({j})", lambda s: s.p[j])),
            Expect(f"R_{j}", q(f"r'({j - 1})", lambda s: s.r_prime[j - 1])),
        ],
        "loss": [Expect("G", q("u", lambda s: s.u))],
        "loss_delta": [
            Expect("G", q("u", lambda s: s.u)),
            Expect(f"S_{spec.depth}", q(f"s({spec.depth})", lambda s: s.s[-1])),
        ],
        "backward": [Expect(f"S_{j}", q(f"s({j})", lambda s: s.s[j - 1]))],
        "backward_transpose": [Expect(f"S_{j}", q(f"~V_{j + 1}^T s({j + 1})", lambda s: s.back[j - 1]))],
        "backward_mask": [Expect(f"S_{j}", q(f"s({j})", lambda s: s.s[j - 1]))],
        "gradient": [Expect("A", q("s p^T per token", lambda s: s.A))],
    }
    if info.role in table:
        return table[info.role]
    if info.role == "update":
        return [Expect("W", _named("w - eta grad", lambda ref: stepped(ref, None)), applied_step=True)]
    if info.role == "project":
        scratch = [Expect(s.label, "zero") for s in layout.scratch_slots()]
        return [Expect("W", _named("Proj(w - eta grad)", lambda ref: stepped(ref, ref.box))), *scratch]
    if info.role == "readout":
        return [Expect("Y", q("f(w, x)", lambda s: s.p[-1]), tokens="query")]
    raise ValueError(f"no expected effect for role {info.role!r}")


def _named(name: str, fn: Callable[[Reference], Tensor]) -> Callable[[Reference], Tensor]:
    fn.__name__ = name
    return fn


def ranges(ref: Reference) -> int:
    """How many kinds of product ([`range_ratios`][icdl.construct.variants.softmax.range_ratios]) leave the
    ranges their ReLU sums were fitted on at this step (ratio above 1): there the products, and so the step,
    are no longer within eps."""
    spec = ref.model.spec
    prods = model_products(ref.model)
    return sum(1 for r in range_ratios(prods, _surrogate_of(ref, spec), ref.w).values() if r > 1)


def _measured(prod: ProductTerms, X: Tensor, Y: Tensor, tol: float) -> float:
    """``max |prod(x, y) - x y| - tol max(1, |x y|)`` over the pairs of broadcast ``X``, ``Y`` inside the
    product's box (outside it (b) range counts them); -inf when none is."""
    X, Y = torch.broadcast_tensors(X, Y)
    inside = (X.abs() <= prod.x_range) & (Y.abs() <= prod.y_range)
    if not bool(inside.any()):
        return -math.inf
    x, y = X[inside], Y[inside]
    exact = x * y
    return float(((prod(x, y) - exact).abs() - tol * exact.abs().clamp_min(1.0)).max())


def product_errors(ref: Reference, tol: float) -> list[tuple[str, int, float, float]]:
    """Each kind of approximate product, per layer, on the factors it multiplied at this step (the
    surrogate's, which every sublayer matched to ``tol``: the token's w and p, s, r', back), against the exact
    ``x y``: ``(kind, layer, measured, declared)`` with the declared sup error ``h^2/16``
    ([`declared`][icdl.construct.variants.softmax.declared]). A product fitted worse than declared (a wrong
    knot, a scaled coefficient) shows here however loose the budget. Layers as the sublayers name them:
    ``forward_products_j``, ``backward_transpose_j`` (or the gated ``backward_j``), the ``r' z`` product of
    layer j, and the gradient products ``s(j) p(j-1)^T``."""
    spec = ref.model.spec
    prods = model_products(ref.model)
    sur = _surrogate_of(ref, spec)
    Vs = unflatten(spec, ref.w)
    N = spec.depth
    out: list[tuple[str, int, float, float]] = []
    for j, V in enumerate(Vs, start=1):
        fwd = prods.forward
        out.append(("forward v*p", j, _measured(fwd, V[None], sur.p[j - 1][:, None, :], tol), fwd.sup_error))
    for j in range(N - 1, 0, -1):  # V_{j+1}^T s(j+1): pairs (V_{j+1}[l, k], s(j+1)[l])
        tr = prods.transpose
        Vt = Vs[j].t()
        out.append(("transpose v*s", j, _measured(tr, Vt[None], sur.s[j][:, None, :], tol), tr.sup_error))
    d = prods.derivative
    if d is not None:
        for j in range(1, N + 1):
            out.append(
                ("derivative r'*z", j, _measured(d, sur.r_prime[j - 1], sur.back[j - 1], tol), d.sup_error)
            )
    g = prods.gradient
    for j in range(1, N + 1):
        err = _measured(g, sur.p[j - 1][:, None, :], sur.s[j - 1][:, :, None], tol)
        out.append(("gradient p*s", j, err, g.sup_error))
    return out


# -- closed-form sizes and cost (the budget estimate, before anything is built) ------------------------
def declared(model: Compiled) -> Declared:
    """The budget declaration ([`icdl.construct.bounds.budget`][icdl.construct.bounds.budget]): the ReLU sums'
    errors and the sup error ``h^2/16`` of each ``v p``, ``v s``, ``p s`` and (smooth layers) ``r' z`` product
    ([`products`][icdl.construct.variants.softmax.products]); 0/1-mask products are exact."""
    spec, t = model.spec, model.terms
    prods = model_products(model)
    d = prods.derivative
    return declared_sums(
        t.r,
        t.r_prime,
        t.u,
        forward=prods.forward.sup_error,
        transpose=prods.transpose.sup_error,
        gradient=prods.gradient.sup_error,
        derivative=() if d is None else (d.sup_error,) * spec.depth,
    )


def softmax_sizes(spec: NetSpec, examples: int) -> Sizes:
    """Softmax attention: the paper's token plus a P-wide gradient slot, ``4N + 3`` sublayers per step
    (counted for a smooth activation: an exact one builds fewer product MLPs, so this bounds it)."""
    return Sizes(embedding_dim(spec) + spec.num_params, examples + 1, 4 * spec.depth + 3)


# Measured costs of the softmax construction (benchmarks/bench_estimate_time.py, quiet machine, one thread,
# docs/results/construct_time_model.json): its sublayers run far below CONSTRUCT_FLOPS, so the estimate
# counts seconds fitted to the wall clock of five runs (N 3 / 6, n 64 / 256, L 10 / 30; each within 7%)
# rather than FLOPs: building the product units' tables per unit, running them per unit, token and step,
# and a fixed cost per checked sublayer (its many heads and the streaming check's comparison).
SOFTMAX_UNIT_BUILD_SECONDS = 3.3e-5
SOFTMAX_UNIT_RUN_SECONDS = 4.5e-8
SOFTMAX_SUBLAYER_SECONDS = 0.036
# construction_estimate charges work * 1.2 / CONSTRUCT_FLOPS seconds: seconds -> its FLOP count
_SECONDS_AS_FLOPS = CONSTRUCT_FLOPS / 1.2


def _softmax_mlp(w: CostInputs, hidden: int) -> tuple[int, int]:
    """Every token-local product is a ReLU-sum MLP of ``4 ceil(R / (2 sqrt(eps)))`` units; each unit reads
    a few slots (sparse tables). Its cost: `SOFTMAX_UNIT_BUILD_SECONDS` per unit to build, and
    `SOFTMAX_UNIT_RUN_SECONDS` per unit, token and step to run (as FLOPs at CONSTRUCT_FLOPS)."""
    units = 4 * math.ceil(min(w.radius / (2 * math.sqrt(w.eps)), 1e15))
    hidden += 2 * (w.spec.num_params + 2 * w.spec.num_units) * units
    seconds = SOFTMAX_UNIT_BUILD_SECONDS * hidden + SOFTMAX_UNIT_RUN_SECONDS * hidden * w.sizes.T * w.steps
    return hidden, int(_SECONDS_AS_FLOPS * seconds)


def _softmax_work(w: CostInputs, mlp_work: int) -> int:
    """The dense attention FLOPs, the MLPs' (`_softmax_mlp`) and `SOFTMAX_SUBLAYER_SECONDS` per checked
    sublayer."""
    return int(dense_work(w, mlp_work) + _SECONDS_AS_FLOPS * SOFTMAX_SUBLAYER_SECONDS * w.states)


VARIANT = Variant(
    name="softmax",
    summary="softmax attention and ReLU MLPs only: 4N+3 sublayers per step (products with sup error eps)",
    layout=layout,
    block=build_block,
    readout=build_readout,
    effects=effects,
    ranges=ranges,
    # Forward products read p(0..N-1), transpose and gradient products s, derivative products (or the
    # exact mask products, |.| <= C) the back vectors; the weights get their own range.
    range_needs=RangeNeeds(("z", "p", "s", "back"), weights=True, products=PRODUCTS),
    sizes=softmax_sizes,
    costs=Costs(mlp=_softmax_mlp, work=_softmax_work),
    budget=declared,
    product_errors=product_errors,
)

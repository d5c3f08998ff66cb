"""The EWML-free construction (``--variant no-ewml``): Theorem 1 with standard sublayers only.

The paper needs the element-wise multiplication layer (Definition 6) for the backward recursion of Lemma 5,
``s(N) = r'(N-1) ⊙ u`` and ``s(j) = r'(j-1) ⊙ (V_{j+1}^T s(j+1))`` (eq. (3.6), (3.20)), because attention
cannot multiply two quantities of the same token (Remark 3). For ReLU networks ``r'`` is a 0/1 mask (the
exact relu' step of Lemma 3), and a mask product is exact in a ReLU MLP
(:func:`icdl.construct.products.add_mask_product`), so every EWML E_j is replaced by at most two sublayers:

* E_N -> one MLP: ``S_N += relu(G - C(1 - R_N)) - relu(-G - C(1 - R_N))`` = ``r'(N-1) ⊙ u``;
* E_j, j < N -> a ReLU attention (Definition 7) and an MLP:

  1. heads ``(k, σ = ±1)`` with ``Q h_i = σ s_i(j+1)``, ``K h_t = column k of V_{j+1}`` (from the key's
     W slot, identical in every token), ``V h_t = σ ONE -> S_j[k]``: the score
     ``σ (V_{j+1}^T s_i(j+1))[k]`` does not depend on the key, so the 1/T cancels and
     ``relu(z) - relu(-z) = z`` puts ``z_i = V_{j+1}^T s_i(j+1)`` into S_j (the cross-token form of the
     EWML's diagonal score, in the pattern of the update layer (C.16));
  2. an MLP that multiplies S_j by the mask in place: ``S_j += -relu(z - C R_j) + relu(-z - C R_j)``, i.e.
     ``S_j = r'(j-1) ⊙ z``.

Everything else is the paper's block (Lemmas 2-4, (C.16), Proj_W) and layout, so a step has
``N + 4 + (2N - 1) = 3N + 3`` sublayers (the paper: ``2N + 4``), none of them an EWML. Exact to round-off
whenever every example's pre-activation is outside the relu' window ``(0, δ)`` and ``|u|, |V^T s| <= C``
(the gate constant).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torch import Tensor

from icdl.construct import blocks
from icdl.construct.blocks import BuildContext
from icdl.construct.contract import Expect
from icdl.construct.layers import HeadTable, ReLUAttention, ReLUMLP, Role, Sublayer, UnitTable
from icdl.construct.layout import Layout, paper_layout
from icdl.construct.products import add_mask_in_place, add_mask_product
from icdl.construct.variants import Variant, register
from icdl.errors import InputError
from icdl.nets import NetSpec, unflatten
from icdl.sublayer import SublayerInfo

if TYPE_CHECKING:
    from icdl.construct.compile import GDConfig
    from icdl.construct.verify import Reference

__all__ = [
    "VARIANT",
    "backward_mask",
    "backward_output",
    "backward_transpose",
    "build_block",
    "build_readout",
    "check",
    "effects",
    "layout",
    "sublayers_per_step",
]

# Activations whose r' is an exact 0/1 mask in the compiled ReLU sums (relu: the delta-step; identity: 1).
MASK_ACTIVATIONS = ("relu", "identity")


def layout(spec: NetSpec) -> Layout:
    """The paper's layout: the backward products reuse the S slots in place, so nothing is added."""
    return paper_layout(spec)


def check(cfg: GDConfig) -> None:
    """The mask products are exact only when every layer's r' is 0/1: ReLU networks (optionally with a
    linear output layer)."""
    spec = cfg.spec
    for j in range(1, spec.depth + 1):
        name = spec.layer_act(j).name
        if name not in MASK_ACTIVATIONS:
            raise InputError(f"variant no-ewml needs ReLU networks (r' a 0/1 mask); layer {j} uses {name!r}")


def sublayers_per_step(depth: int) -> int:
    """``N`` forward + derivative + loss + ``1 + 2(N-1)`` backward + update + project = ``3N + 3``."""
    return depth + 2 + (2 * depth - 1) + 2


def backward_output(ctx: BuildContext) -> ReLUMLP:
    """Replaces E_N (Lemma 5, j = N): ``s(N)[k] = r'(N-1)[k] u[k]`` by the exact mask product, 2 units per
    output coordinate. On the query G is exactly 0, so S_N is exactly 0 there."""
    L = ctx.layout
    N = ctx.spec.depth
    one = L.index("ONE")
    units = UnitTable()
    for k in range(ctx.spec.out_dim):
        add_mask_product(units, L.index("R", N, k), L.index("G", None, k), one, L.index("S", N, k), ctx.gate)
    return ctx.mlp(units, Role("backward", "Lemma 5 mask product", N))


def backward_transpose(ctx: BuildContext, j: int) -> ReLUAttention:
    """First half of E_j (j < N): ReLU attention writing ``V_{j+1}^T s(j+1)`` into S_j, two heads per unit k
    of layer j (``σ = ±1``; ``relu(z) - relu(-z) = z``)."""
    L = ctx.layout
    one = L.index("ONE")
    s_next = L.indices("S", j + 1)
    heads = HeadTable()
    for k in range(ctx.spec.widths[j]):
        col = L.w_col(j + 1, k)
        dst = L.index("S", j, k)
        for sigma in (1.0, -1.0):
            heads.add(q=[(i, sigma) for i in s_next], k=[(i, 1.0) for i in col], v=[(one, dst, sigma)])
    return ctx.attention(heads, Role("backward_transpose", "Lemma 5 (C.15) score", j))


def backward_mask(ctx: BuildContext, j: int) -> ReLUMLP:
    """Second half of E_j (j < N): ``S_j <- R_j ⊙ S_j`` in place, exact for the 0/1 mask ``R_j = r'(j-1)``."""
    L = ctx.layout
    units = UnitTable()
    for k in range(ctx.spec.widths[j]):
        add_mask_in_place(units, L.index("R", j, k), L.index("S", j, k), ctx.gate)
    return ctx.mlp(units, Role("backward_mask", "Lemma 5 mask product", j))


def build_block(ctx: BuildContext) -> list[Sublayer]:
    """One GD step: F_1..F_N, r', loss, the EWML-free backward E_N..E_1, update, project (``3N + 3``)."""
    N = ctx.spec.depth
    out: list[Sublayer] = [blocks.forward_layer(ctx, j) for j in range(1, N + 1)]
    out.append(blocks.derivative_layer(ctx))
    out.append(blocks.loss_layer(ctx))
    out.append(backward_output(ctx))
    for j in range(N - 1, 0, -1):
        out += [backward_transpose(ctx, j), backward_mask(ctx, j)]
    out.append(blocks.update_layer(ctx))
    out.append(blocks.project_layer(ctx))
    return out


def build_readout(ctx: BuildContext) -> list[Sublayer]:
    """The paper variant's readout (F_1..F_N, then the readout MLP): no EWML there."""
    out: list[Sublayer] = [blocks.forward_layer(ctx, j) for j in range(1, ctx.spec.depth + 1)]
    out.append(blocks.readout_layer(ctx))
    return out


def _transposed_delta(spec: NetSpec, j: int) -> Callable[[Reference], Tensor]:
    """``V_{j+1}^T s(j+1)`` per token (what the transpose attention writes into S_j), from the reference."""

    def transposed_delta(ref: Reference) -> Tensor:
        V_next = unflatten(spec, ref.w)[j]  # V_{j+1}, shape (n_{j+1}, n_j)
        return ref.sur.s[j] @ V_next  # sur.s[j] is s(j+1), shape (T, n_{j+1})

    transposed_delta.__name__ = f"V_{j + 1}^T s({j + 1})"
    return transposed_delta


def effects(info: SublayerInfo, layout: Layout) -> list[Expect]:
    """The transpose attention leaves ``V_{j+1}^T s(j+1)`` in S_j, the mask MLP turns it into s(j); every
    other role as in :func:`icdl.construct.blocks.effects` (E_N's replacement keeps the ``backward`` role)."""
    j = info.layer
    if info.role == "backward_transpose" and j is not None:
        return [Expect(f"S_{j}", _transposed_delta(layout.spec, j))]
    if info.role == "backward_mask" and j is not None:
        return [Expect(f"S_{j}", "s", j)]
    return blocks.effects(info, layout)


VARIANT = register(
    Variant(
        name="no-ewml",
        summary="EWML-free (ReLU nets): 3N+3 sublayers per step, ReLU attention + MLPs, exact mask products",
        layout=layout,
        block=build_block,
        readout=build_readout,
        effects=effects,
        check=check,
    )
)

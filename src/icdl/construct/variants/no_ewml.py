"""The EWML-free construction (``--variant no-ewml``): Theorem 1 with standard sublayers only.

The paper needs the element-wise multiplication layer (Definition 6) for the backward recursion of Lemma 5,
``s(N) = r'(N-1) ⊙ u`` and ``s(j) = r'(j-1) ⊙ (V_{j+1}^T s(j+1))`` (eq. (3.6), (3.20)), because attention
cannot multiply two quantities of the same token (Remark 3). For ReLU networks ``r'`` is a 0/1 mask (the
exact relu' step of Lemma 3), and multiplying by a mask is a *gate*: ``m z = relu(z - C(1-m)) -
relu(-z - C(1-m))`` for ``|z| <= C`` ([`icdl.construct.engine.products`][icdl.construct.engine.products]). A
gate can sit inside a ReLU unit or a ReLU attention score, so each EWML is replaced by at most one standard
sublayer:

* E_N -> no sublayer: the loss MLP (Lemma 4) also writes ``s(N) = r'(N-1) ⊙ u`` into S_N, with a copy of
  each loss unit whose gate ``-2C ONE + C T + C R_N[k]`` is exactly 0 on examples where the mask is 1 and
  ``<= -C`` (unit off) elsewhere ([`loss_delta_layer`][icdl.construct.variants.no_ewml.loss_delta_layer]);
* E_j, j < N -> one ReLU attention (Definition 7,
  [`backward_layer`][icdl.construct.variants.no_ewml.backward_layer]) with heads ``(k, σ = ±1)``: ``Q h_i =
  [-C ONE; C R_j[k]; σ s_i(j+1)]``, ``K h_t = [ONE; ONE; column k of V_{j+1}]`` (from the key's W slot,
  identical in every token), ``V h_t = σ ONE -> S_j[k]``. The score ``-C(1 - r'_i(j-1)[k]) + σ (V_{j+1}^T
  s_i(j+1))[k]`` does not depend on the key, so the 1/T cancels, and the two heads add ``relu(z - C(1-m)) -
  relu(-z - C(1-m)) = m z`` — the EWML head (C.15) with its diagonal score moved across tokens and its value
  factor r' turned into a gate.

The gate pairs come first in every score, so ``-C + C * 1`` is an exact 0 before the products are added in
the EWML's order: s(j) equals the paper's value bit for bit. Everything else is the paper's block
(Lemmas 2-4, (C.16), Proj_W) and layout, so a step has ``N + 1 + 1 + (N - 1) + 2 = 2N + 3`` sublayers (the
paper: ``2N + 4``), none of them an EWML. Exact to round-off whenever every example's pre-activation is
outside the relu' window ``(0, δ)`` and ``|u|, |V^T s| < C`` (the gate constant).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icdl.construct.build import blocks
from icdl.construct.build.context import BuildContext
from icdl.construct.build.contract import Expect, Variant
from icdl.construct.engine.layers import HeadTable, ReLUAttention, ReLUMLP, Role, Sublayer, UnitTable
from icdl.construct.engine.layout import Layout, paper_layout
from icdl.construct.variants import paper
from icdl.errors import InputError
from icdl.nets import NetSpec
from icdl.sublayer import SublayerInfo

if TYPE_CHECKING:
    from icdl.construct.protocols import StepConfig

__all__ = [
    "VARIANT",
    "backward_layer",
    "build_block",
    "build_readout",
    "check",
    "effects",
    "layout",
    "loss_delta_layer",
    "sublayers_per_step",
]

# Activations whose r' is an exact 0/1 mask in the compiled ReLU sums (relu: the delta-step; identity: 1).
MASK_ACTIVATIONS = ("relu", "identity")


def layout(spec: NetSpec) -> Layout:
    """The paper's layout (the gates read the R and S slots the paper already has)."""
    return paper_layout(spec)


def check(cfg: StepConfig) -> None:
    """The gates are exact only when every layer's r' is 0/1: ReLU networks (optionally with a linear
    output layer)."""
    spec = cfg.spec
    for j in range(1, spec.depth + 1):
        name = spec.layer_act(j).name
        if name not in MASK_ACTIVATIONS:
            raise InputError(f"variant no-ewml needs ReLU networks (r' a 0/1 mask); layer {j} uses {name!r}")


def sublayers_per_step(depth: int) -> int:
    """``N`` forward + derivative + loss (with s(N)) + ``N - 1`` backward + update + project = ``2N + 3``."""
    return depth + 2 + (depth - 1) + 2


def loss_delta_layer(ctx: BuildContext) -> ReLUMLP:
    """The loss MLP of Lemma 4 (G = u(p(N), y), 0 on the query) that also does E_N (Lemma 5, j = N) for a 0/1
    mask: ``s(N)[k] = r'(N-1)[k] u[k]``. Per term of u, a second unit reads the same ``a0 P_N[k] + a1 Y[k] +
    b`` after the gate ``-2C ONE + C T + C R_N[k]``, accumulated first: it is exactly 0 on an example whose
    mask is 1 (the unit then equals the G unit bit for bit) and ``<= -C`` on the query or where the mask is
    0 (off, as long as the argument stays below C)."""
    L = ctx.layout
    one, t = L.index("ONE"), L.index("T")
    C = ctx.gate
    N = ctx.spec.depth
    units = UnitTable()
    for k in range(ctx.spec.out_dim):
        p, y, g = L.index("P", N, k), L.index("Y", None, k), L.index("G", None, k)
        mask, s = L.index("R", N, k), L.index("S", N, k)
        for (a0, a1), b, c in zip(ctx.u.a, ctx.u.b, ctx.u.c, strict=True):
            arg = [(i, v) for i, v in ((p, a0), (y, a1), (one, b)) if v != 0.0]
            units.add([(one, -C), (t, C), *arg], [(g, c)])
            units.add([(one, -2.0 * C), (t, C), (mask, C), *arg], [(s, c)])
    return ctx.mlp(units, Role("loss_delta", "Lemmas 4-5 (gated)"))


def backward_layer(ctx: BuildContext, j: int) -> ReLUAttention:
    """E_j for j < N as one ReLU attention (see the module docstring): ``S_j += r'(j-1) ⊙ V_{j+1}^T s(j+1)``,
    two heads per unit k of layer j."""
    L = ctx.layout
    one = L.index("ONE")
    C = ctx.gate
    s_next = L.indices("S", j + 1)
    heads = HeadTable()
    for k in range(ctx.spec.widths[j]):
        col = L.w_col(j + 1, k)
        dst = L.index("S", j, k)
        gate_q, gate_k = [(one, -C), (L.index("R", j, k), C)], [(one, 1.0), (one, 1.0)]
        for sigma in (1.0, -1.0):
            heads.add(
                q=gate_q + [(i, sigma) for i in s_next],
                k=gate_k + [(i, 1.0) for i in col],
                v=[(one, dst, sigma)],
            )
    return ctx.attention(heads, Role("backward", "Lemma 5 (gated attention)", j))


def build_block(ctx: BuildContext) -> list[Sublayer]:
    """One GD step: F_1..F_N, r', loss with s(N), the EWML-free backward E_{N-1}..E_1, update, project
    (``2N + 3``)."""
    N = ctx.spec.depth
    out: list[Sublayer] = [blocks.forward_layer(ctx, j) for j in range(1, N + 1)]
    out.append(blocks.derivative_layer(ctx))
    out.append(loss_delta_layer(ctx))
    out += [backward_layer(ctx, j) for j in range(N - 1, 0, -1)]
    out.append(blocks.update_layer(ctx))
    out.append(blocks.project_layer(ctx))
    return out


# The readout is the paper's: F_1..F_N (no r' heads, no EWML), then the readout MLP.
build_readout = paper.build_readout


def effects(info: SublayerInfo, layout: Layout) -> list[Expect]:
    """The loss MLP also leaves s(N) in S_N; every other role (the gated backward attention included) as in
    [`icdl.construct.build.blocks.effects`][icdl.construct.build.blocks.effects]."""
    if info.role == "loss_delta":
        N = layout.spec.depth
        return [Expect("G", "u"), Expect(f"S_{N}", "s", N)]
    return blocks.effects(info, layout)


VARIANT = Variant(
    name="no-ewml",
    summary="EWML-free (ReLU nets): 2N+3 sublayers per step, ReLU attention + MLPs, r' as exact gates",
    layout=layout,
    block=build_block,
    readout=build_readout,
    effects=effects,
    check=check,
)

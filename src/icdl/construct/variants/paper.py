"""The paper's construction (Theorem 1): ``2N+4`` sublayers per GD step, in the paper's order.

``TF^{N+2} ∘ EWML^N ∘ TF^2`` in application order (Theorem 1's proof, Appendix C):
F_1..F_N (Lemma 2), the r' layer (Lemma 3), the loss MLP (Lemma 4), E_N..E_1 (Lemma 5), the update
attention ((C.16)) and the projection/clean-up MLP. The readout (not in the paper; docs/construction.md)
runs F_1..F_N once more and copies the query's p(N) into its Y slot.
"""

from __future__ import annotations

from icdl.construct.build import blocks
from icdl.construct.build.context import BuildContext
from icdl.construct.build.contract import Variant
from icdl.construct.engine.layers import Sublayer
from icdl.construct.engine.layout import Layout, paper_layout
from icdl.nets import NetSpec

__all__ = ["VARIANT", "build_block", "build_readout", "layout"]


def layout(spec: NetSpec) -> Layout:
    """The paper's token layout (docs/construction.md, "Layout")."""
    return paper_layout(spec)


def build_block(ctx: BuildContext) -> list[Sublayer]:
    """The 2N+4 sublayers of one GD step, built once and applied L times."""
    N = ctx.spec.depth
    out: list[Sublayer] = [blocks.forward_layer(ctx, j) for j in range(1, N + 1)]
    out.append(blocks.derivative_layer(ctx))
    out.append(blocks.loss_layer(ctx))
    out += [blocks.backward_layer(ctx, j) for j in range(N, 0, -1)]
    out.append(blocks.update_layer(ctx))
    out.append(blocks.project_layer(ctx))
    return out


def build_readout(ctx: BuildContext) -> list[Sublayer]:
    """F_1..F_N once more, then the readout MLP (N + 1 sublayers)."""
    out: list[Sublayer] = [blocks.forward_layer(ctx, j) for j in range(1, ctx.spec.depth + 1)]
    out.append(blocks.readout_layer(ctx))
    return out


VARIANT = Variant(
    name="paper",
    summary="Theorem 1 as published: 2N+4 sublayers per step (N+3 ReLU attention/MLP, N EWML)",
    layout=layout,
    block=build_block,
    readout=build_readout,
    effects=blocks.effects,
    paper=True,
)

"""The compact variant: ``2N+3`` sublayers per GD step (``--variant compact``).

The paper's r' layer (Lemma 3) reads exactly what the forward layer F_j reads: its heads score
``a'_m v_jk . p(j-1) + b'_m`` with the same ``p(j-1)`` and ``v_jk`` as F_j (Lemma 2). So F_j can write both
``p(j)`` into P_j and ``r'(V_j p(j-1))`` (the paper's r'(j-1)) into R_j in one ReLU attention sublayer, and
the separate derivative layer goes: F_1..F_N (each with its r' heads), the loss MLP, E_N..E_1, the update
and the projection — ``N + 1 + N + 1 + 1 = 2N + 3`` sublayers, the same heads in total, the same layout and
prompt format, and exact to round-off for ReLU networks like the paper's variant (the merged layers sum
their heads per (query, key) pair first, as the paper's r' layer does, so the relu' step stays exact).
"""

from __future__ import annotations

from icdl.construct.build import blocks
from icdl.construct.build.context import BuildContext
from icdl.construct.build.contract import Expect, Variant
from icdl.construct.engine.layers import HeadTable, ReLUAttention, Role, Sublayer
from icdl.construct.engine.layout import Layout, paper_layout
from icdl.construct.variants import paper
from icdl.sublayer import SublayerInfo

__all__ = ["VARIANT", "build_block", "effects", "forward_derivative_layer"]


def forward_derivative_layer(ctx: BuildContext, j: int) -> ReLUAttention:
    """F_j with the r' heads of layer j (Lemmas 2-3): per (unit k, term m of r) ``c_m ONE -> P_j[k]`` and
    per (unit k, term m of r') ``c'_m ONE -> R_j[k]``, all with ``Q h = [a p(j-1); b ONE]``,
    ``K h = [v_jk; ONE]``."""
    heads = HeadTable()
    blocks.add_unit_sum_heads(heads, ctx, j, ctx.r[j - 1], "P")
    blocks.add_unit_sum_heads(heads, ctx, j, ctx.r_prime[j - 1], "R")
    exact = ctx.r_prime[j - 1].delta is not None
    return ctx.attention(heads, Role("forward_derivative", "Lemmas 2-3", j), exact_sums=exact)


def build_block(ctx: BuildContext) -> list[Sublayer]:
    """The 2N+3 sublayers of one GD step."""
    N = ctx.spec.depth
    out: list[Sublayer] = [forward_derivative_layer(ctx, j) for j in range(1, N + 1)]
    out.append(blocks.loss_layer(ctx))
    out += [blocks.backward_layer(ctx, j) for j in range(N, 0, -1)]
    out.append(blocks.update_layer(ctx))
    out.append(blocks.project_layer(ctx))
    return out


# The readout is the paper's: F_1..F_N (no r' heads, no EWML), then the readout MLP.
build_readout = paper.build_readout


def effects(info: SublayerInfo, layout: Layout) -> list[Expect]:
    """The merged layer writes p(j) and r'(j); other roles as in
    [`icdl.construct.build.blocks.effects`][icdl.construct.build.blocks.effects]."""
    if info.role == "forward_derivative":
        return [Expect(f"P_{info.layer}", "p", info.layer), Expect(f"R_{info.layer}", "r_prime", info.layer)]
    return blocks.effects(info, layout)


VARIANT = Variant(
    name="compact",
    summary="2N+3 sublayers per step: the r' heads merged into the forward layers (same scores)",
    layout=paper_layout,
    block=build_block,
    readout=build_readout,
    effects=effects,
)

"""One builder per sublayer role of a GD block (Theorem 1's proof, Appendix C), plus the readout, and
the expected effect of every role ([`effects`][icdl.construct.build.blocks.effects], the contract of
[`icdl.construct.build.contract`][icdl.construct.build.contract]).

Every builder takes a [`BuildContext`][icdl.construct.build.context.BuildContext] (network, layout,
conditioned ReLU
sums, step size, prompt length, gate constant, projection) and returns a module from
[`icdl.construct.engine.layers`][icdl.construct.engine.layers] built with its
[`Role`][icdl.construct.engine.sublayers.Role]; the
module derives its [`SublayerInfo`][icdl.sublayer.SublayerInfo] (sizes, slots read and written) from its own
tables. Coordinates come only from the [`Layout`][icdl.construct.engine.layout.Layout] API.

Roles (paper order inside one block; N = depth):

=========  ==============  =========================  ==========================================
role       kind            paper                      heads / hidden units
=========  ==============  =========================  ==========================================
forward    ReLU attention  Lemma 2, (C.8)             ``n_j * H_r`` (layer j = 1..N)
derivative ReLU attention  Lemma 3                    ``sum_j n_j * H_r'``
loss       MLP             Lemma 4, (C.13)-(C.14)     ``d_y * H_u``
backward   EWML            Lemma 5, (C.15)            ``n_j`` (j = N..1)
update     ReLU attention  Theorem 1 proof, (C.16)    ``2 sum_j n_j``
project    MLP             Theorem 1 (Proj_W)         ``2P`` (box) ``+ 2 (3 sum_j n_j + d_y)``
readout    MLP             not in the paper           ``2 d_y``
=========  ==============  =========================  ==========================================
"""

from __future__ import annotations

from icdl.construct.build.context import BuildContext
from icdl.construct.build.contract import Expect
from icdl.construct.engine.layers import EWML, HeadTable, ReLUAttention, ReLUMLP, Role, UnitTable
from icdl.construct.engine.layout import Layout
from icdl.construct.engine.terms import Terms
from icdl.sublayer import SublayerInfo
from icdl.theory import READOUT_LEMMA  # the readout is not in the paper (docs/construction.md)

__all__ = [
    "READOUT_LEMMA",
    "BuildContext",
    "add_unit_sum_heads",
    "backward_layer",
    "derivative_layer",
    "effects",
    "forward_layer",
    "loss_layer",
    "project_layer",
    "readout_layer",
    "update_layer",
]


def add_unit_sum_heads(heads: HeadTable, ctx: BuildContext, j: int, terms: Terms, slot: str) -> None:
    """One head per (unit k of layer j, term m) scoring ``a_m v_jk . p(j-1) + b_m`` and writing
    ``c_m ONE`` into ``slot[j][k]``: the Q/K pattern shared by Lemma 2 (r terms -> P_j) and Lemma 3
    (r' terms -> R_j). ``v_jk`` is read from the key token's W slot, identical in every token."""
    L = ctx.layout
    one = L.index("ONE")
    src = L.p(j - 1)
    for k in range(ctx.spec.widths[j]):
        row = L.w_row(j, k)
        dst = L.index(slot, j, k)
        for a, b, c in zip(terms.a, terms.b, terms.c, strict=True):
            heads.add(
                q=[(i, a[0]) for i in src] + [(one, b)],
                k=[(i, 1.0) for i in row] + [(one, 1.0)],
                v=[(one, dst, c)],
            )


def forward_layer(ctx: BuildContext, j: int) -> ReLUAttention:
    """F_j (Lemma 2, (C.8)): one head per (unit k of layer j, term m of r):
    ``Q h = [a_m p(j-1); b_m ONE]``, ``K h = [v_jk; ONE]``, ``V h = c_m ONE -> P_j[k]``.

    Every token carries the same w, so the score ``a_m v_jk . p_i(j-1) + b_m`` does not depend on the
    key token and the 1/T normalisation cancels: the layer adds ``r̄(v_jk . p_i(j-1))`` to P_j[k].
    """
    heads = HeadTable()
    add_unit_sum_heads(heads, ctx, j, ctx.r[j - 1], "P")
    return ctx.attention(heads, Role("forward", "Lemma 2", j))


def derivative_layer(ctx: BuildContext) -> ReLUAttention:
    """The r' layer (Lemma 3): for all j, k and terms m of r'_j, the Q and K of F_j and
    ``V h = c'_m ONE -> R_j[k]``, so R_j holds ``r̄'(V_j p(j-1))`` = the paper's r̄'(j-1).

    For the exact relu' delta-step the heads are summed per (query, key) pair before the sum over keys
    (``accumulate="heads"``), which keeps ``relu(X) - relu(X - 1) = 1`` exact
    ([`icdl.construct.engine.terms`][icdl.construct.engine.terms]).
    """
    heads = HeadTable()
    for j in range(1, ctx.spec.depth + 1):
        add_unit_sum_heads(heads, ctx, j, ctx.r_prime[j - 1], "R")
    return ctx.attention(heads, Role("derivative", "Lemma 3"), exact_sums=ctx.exact_step)


def loss_layer(ctx: BuildContext) -> ReLUMLP:
    """The loss-derivative MLP (Lemma 4, (C.13)-(C.14)) with the query gate ``-C (1 - T)``.

    Per output coordinate k and term m: ``relu(-C ONE + C T + a0_m P_N[k] + a1_m Y[k] + b_m ONE)`` with
    output weight ``c_m`` into G[k]. The gate is accumulated first, so on examples it is an exact 0 and on
    the query the unit is off (as long as the term's argument stays below C): G = u(p(N), y) on examples
    and exactly 0 on the query, so the query adds nothing to the gradient (Lemma 4).
    """
    L = ctx.layout
    one, t = L.index("ONE"), L.index("T")
    units = UnitTable()
    C = ctx.gate
    u = ctx.u
    N = ctx.spec.depth
    for k in range(ctx.spec.out_dim):
        p, y, g = L.index("P", N, k), L.index("Y", None, k), L.index("G", None, k)
        for (a0, a1), b, c in zip(u.a, u.b, u.c, strict=True):
            reads = [(one, -C), (t, C)]
            reads += [(i, v) for i, v in ((p, a0), (y, a1), (one, b)) if v != 0.0]
            units.add(reads, [(g, c)])
    return ctx.mlp(units, Role("loss", "Lemma 4"))


def backward_layer(ctx: BuildContext, j: int) -> EWML:
    """E_j (Lemma 5, (C.15), Definition 6), one head per unit k of layer j:

    * j = N: ``Q h = G[k]``, ``K h = ONE``, ``V h = R_N[k] -> S_N[k]``: ``s(N) = r'(N-1) ⊙ u``;
    * j < N: ``Q h = column k of V_{j+1}`` (from the token's own W), ``K h = S_{j+1}``,
      ``V h = R_j[k] -> S_j[k]``: ``s(j) = r'(j-1) ⊙ (V_{j+1}^T s(j+1))`` (eq. 3.6).
    """
    L = ctx.layout
    N = ctx.spec.depth
    heads = HeadTable()
    for k in range(ctx.spec.widths[j]):
        dst = L.index("S", j, k)
        r = L.index("R", j, k)
        if j == N:
            heads.add(q=[(L.index("G", None, k), 1.0)], k=[(L.index("ONE"), 1.0)], v=[(r, dst, 1.0)])
        else:
            col = L.w_col(j + 1, k)
            heads.add(
                q=[(i, 1.0) for i in col], k=[(i, 1.0) for i in L.indices("S", j + 1)], v=[(r, dst, 1.0)]
            )
    return ctx.ewml(heads, Role("backward", "Lemma 5", j))


def update_layer(ctx: BuildContext) -> ReLUAttention:
    """The update attention (Theorem 1 proof, (C.16)): per (j, k, sign σ = ±1)
    ``Q h = σ ONE``, ``K h = S_j[k]``, ``V h = -σ η (n+1)/(2n) p(j-1) -> W-block of v_jk``.

    Since ``relu(s) - relu(-s) = s``, the two heads add ``-η (n+1)/(2n) s_t(j)[k] p_t(j-1)`` from each token
    t; after the 1/(n+1) normalisation every token gets ``w -= η (1/(2n)) sum_t s_t(j)[k] p_t(j-1)``, i.e.
    ``w - η ∇L_n(w)`` (eq. 3.5, 3.7; the query's s is 0). The factor ties the weights to n.
    """
    L = ctx.layout
    one = L.index("ONE")
    n = ctx.n
    scale = ctx.lr * (n + 1) / (2 * n)
    heads = HeadTable()
    for j in range(1, ctx.spec.depth + 1):
        src = L.p(j - 1)
        for k in range(ctx.spec.widths[j]):
            s = L.index("S", j, k)
            row = L.w_row(j, k)
            for sigma in (1.0, -1.0):
                heads.add(
                    q=[(one, sigma)],
                    k=[(s, 1.0)],
                    v=[(p, w, -sigma * scale) for p, w in zip(src, row, strict=True)],
                )
    return ctx.attention(heads, Role("update", "eq. (C.16)"))


def project_layer(ctx: BuildContext) -> ReLUMLP:
    """The last MLP of a block (Theorem 1, "Proj_W = MLP"; the box projection of docs/construction.md):

    * box projection ``clip(z) = z - relu(z - B) + relu(-z - B)`` per W coordinate (skipped when no box);
    * clean-up of every scratch coordinate h of P, R, G, S: ``relu(h)`` and ``relu(-h)`` with output weights
      -1 and +1, which zero it exactly (the next block *adds* into these slots).
    """
    L = ctx.layout
    one = L.index("ONE")
    units = UnitTable()
    if ctx.box is not None:
        B = ctx.box
        for i in L.indices("W"):
            units.add([(i, 1.0), (one, -B)], [(i, -1.0)])
            units.add([(i, -1.0), (one, -B)], [(i, 1.0)])
    for i in L.scratch_indices():
        units.add([(i, 1.0)], [(i, -1.0)])
        units.add([(i, -1.0)], [(i, 1.0)])
    return ctx.mlp(units, Role("project", "Theorem 1 (Proj_W)"))


def readout_layer(ctx: BuildContext) -> ReLUMLP:
    """Readout MLP (not in the paper; docs/construction.md): ``Y[k] += relu(P_N[k] - C T) -
    relu(-P_N[k] - C T)``, which copies ``p(N) = f(w, x_query)`` into the query's Y slot and is exactly 0
    on the examples."""
    L = ctx.layout
    t = L.index("T")
    N = ctx.spec.depth
    units = UnitTable()
    for k in range(ctx.spec.out_dim):
        p, y = L.index("P", N, k), L.index("Y", None, k)
        units.add([(t, -ctx.gate), (p, 1.0)], [(y, 1.0)])
        units.add([(t, -ctx.gate), (p, -1.0)], [(y, -1.0)])
    return ctx.mlp(units, Role("readout", READOUT_LEMMA))


# --------------------------------------------------------------------------------------------------
# Expected effects of the roles above (the contract, icdl.construct.build.contract)
# --------------------------------------------------------------------------------------------------


def effects(info: SublayerInfo, layout: Layout) -> list[Expect]:
    """What must hold after a sublayer built by this module (see
    [`icdl.construct.build.contract`][icdl.construct.build.contract])."""
    N = layout.spec.depth
    j = info.layer
    if info.role == "forward":
        return [Expect(f"P_{j}", "p", j)]
    if info.role == "derivative":
        return [Expect(f"R_{i}", "r_prime", i) for i in range(1, N + 1)]
    if info.role == "loss":
        return [Expect("G", "u")]
    if info.role == "backward":
        return [Expect(f"S_{j}", "s", j)]
    if info.role == "update":
        return [Expect("W", "w_step")]
    if info.role == "project":
        return [Expect("W", "w")] + [Expect(s.label, "zero") for s in layout.scratch_slots()]
    if info.role == "readout":
        return [Expect("Y", "prediction", tokens="query")]
    raise ValueError(f"no expected effect for role {info.role!r}")

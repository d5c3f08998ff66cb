"""The paper's formulas: sizes, head counts, error bounds and FLOP counts of the construction.

Everything here is closed-form arithmetic on a [`NetSpec`][icdl.nets.NetSpec]; nothing builds weights. The
counts describe the compiled transformer of ``icdl.construct`` exactly (docs/paper.md: token layout,
sublayers), so a test can assert equality between the two; the bounds are the paper's Lemmas 2-6,
Theorem 1 and Corollary 1.1, with the paper's typos named where they matter (docs/paper.md, errata).

Sizes (one GD step = one block of ``2N+4`` residual sublayers, Theorem 1):

====  ===========  ==============  ================  ==============================================
#     role         kind            paper             heads / MLP hidden width
====  ===========  ==============  ================  ==============================================
1..N  forward      ReLU attention  Lemma 2           ``n_j * H_r(j)``
N+1   derivative   ReLU attention  Lemma 3           ``sum_j n_j * H_r'(j)``
N+2   loss         MLP             Lemma 4           ``sum_k H_u(k)``
..    backward     EWML            Lemma 5 (j=N..1)  ``n_j``
2N+3  update       ReLU attention  eq. (C.16)        ``2 * sum_j n_j``
2N+4  project      MLP             Theorem 1         ``2P`` (box) ``+ 2 (3 sum_j n_j + d_y)``
====  ===========  ==============  ================  ==============================================

``H_r(j)``, ``H_r'(j)`` are the numbers of sum-of-ReLU terms of layer j's activation and its derivative
([`TermCounts`][icdl.theory.TermCounts]); ``H_u(k)`` those of the loss derivative's k-th coordinate. After the
L blocks a readout (not in the paper, docs/paper.md, readout) runs the N forward layers once more and one MLP
of hidden width ``2 d_y`` that copies the query prediction into its Y slot.

Notation: ``N`` depth, ``K`` width, ``d_x``/``d_y`` input/output dims (``d`` when equal), ``P = D_w``
the number of network parameters, ``n`` the number of in-context examples, ``T = n + 1`` tokens, ``L``
GD steps, ``eta`` the step size.

The error constants (Lemmas 2-6, Theorem 1, Corollary 1.1) live in [`icdl.theory_bounds`][icdl.theory_bounds]
and are re-exported here; the ``icdl theory`` report that puts everything together is
[`icdl.theory_report`][icdl.theory_report].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from icdl._arith import check_int, safe_div, safe_float, safe_pow
from icdl.errors import InputError
from icdl.nets import NetSpec, get_loss
from icdl.sublayer import SublayerInfo, SublayerKind
from icdl.theory_bounds import (
    ActivationBounds,
    Lemma6Constants,
    Theorem1Constants,
    activation_bounds,
    corollary11_as_printed,
    corollary11_bound,
    corollary11_loose,
    lemma2_E_r,
    lemma2_layer_factors,
    lemma3_error,
    lemma4_error,
    lemma6_constants,
    loss_derivative_bound,
    theorem1_constants,
)

__all__ = [
    "EXACT_LOSS_TERMS",
    "EXACT_TERMS",
    "ActivationBounds",
    "Lemma6Constants",
    "SublayerKind",
    "TermCounts",
    "Theorem1Constants",
    "activation_bounds",
    "block_table",
    "corollary11_as_printed",
    "corollary11_bound",
    "corollary11_loose",
    "direct_gd_flops",
    "embedding_dim",
    "embedding_dim_as_printed",
    "embedding_dim_closed_form",
    "embedding_dim_leading_terms",
    "embedding_dim_paper_bound",
    "lemma2_E_r",
    "lemma2_layer_factors",
    "lemma3_error",
    "lemma4_error",
    "lemma6_constants",
    "loss_derivative_bound",
    "max_heads",
    "model_flops",
    "paper_construction_flops",
    "paper_direct_flops",
    "readout_sublayers",
    "readout_table",
    "sublayers",
    "sublayers_per_step",
    "term_counts",
    "theorem1_constants",
    "training_flops",
    "transformer_forward_flops",
]

Projection = Literal["none", "box"]
# Where the readout is documented: it is not in the paper (docs/construction.md, "Readout").
READOUT_LEMMA = "readout (docs/construction.md)"

# --------------------------------------------------------------------------------------------------
# Depth
# --------------------------------------------------------------------------------------------------


def sublayers_per_step(depth: int) -> int:
    """``2N + 4``: sublayers of one GD block, ``TF^{N+2} ∘ EWML^N ∘ TF^2`` in application order
    (Theorem 1; the paper writes ∘ left-to-right, docs/paper.md, erratum E4)."""
    return 2 * check_int("depth", depth, 2) + 4


def sublayers(depth: int, steps: int) -> int:
    """``(2N + 4) L``: the paper's depth for L GD steps (Theorem 1), readout excluded."""
    return sublayers_per_step(depth) * check_int("steps", steps, 0)


def readout_sublayers(depth: int) -> int:
    """``N + 1``: the readout appended after the last block (N forward layers + 1 MLP; not in the
    paper, which never writes the query prediction — docs/paper.md, readout; docs/paper.md, erratum E11)."""
    return check_int("depth", depth, 2) + 1


# --------------------------------------------------------------------------------------------------
# Embedding dimension
# --------------------------------------------------------------------------------------------------


def embedding_dim(spec: NetSpec) -> int:
    """Exact token width of the compiled model (docs/paper.md, token layout):

    ``D = d_x + 2 d_y + P + 3 sum_j n_j + 2`` — slots X (d_x), Y (d_y), W (P), P_1..P_N, R_1..R_N,
    S_1..S_N (``sum_j n_j = (N-1)K + d_y`` each), G (d_y), ONE, T. With ``d_x = d_y = d`` this is
    [`embedding_dim_closed_form`][icdl.theory.embedding_dim_closed_form].
    """
    return spec.in_dim + 2 * spec.out_dim + spec.num_params + 3 * spec.num_units + 2


def embedding_dim_closed_form(depth: int, width: int, dim: int) -> int:
    """``6d + 2dK + (N-2)K^2 + 3(N-1)K + 2`` for ``d_x = d_y = d`` (own count from the
    component sizes listed in Theorem 1's proof, with r̄' of the correct size ``(N-1)K + d``)."""
    N, K, d = depth, width, dim
    return 6 * d + 2 * d * K + (N - 2) * K * K + 3 * (N - 1) * K + 2


def embedding_dim_as_printed(spec: NetSpec) -> int:
    """The sum of the slot sizes *as printed* in Theorem 1's proof and Lemma 3, where r̄'_i is given
    size ``(N-2)K + d`` — a typo for ``(N-1)K + d`` (docs/paper.md, erratum E5).
    Equals ``embedding_dim - K``."""
    return embedding_dim(spec) - spec.width


def embedding_dim_paper_bound(spec: NetSpec) -> int:
    """Theorem 1's ``max_l D^l <= O(NK^2) + D_w``, evaluated with the O-constant set to 1:
    ``N K^2 + D_w``. The exact [`embedding_dim`][icdl.theory.embedding_dim] is of the same order: for large K
    their ratio tends to ``(N-2)/(2N-2)``, since both are dominated by the ``(N-2)K^2`` entries of w."""
    return spec.depth * spec.width**2 + spec.num_params


def embedding_dim_leading_terms(spec: NetSpec) -> int:
    """``N K^2 + 3 N K``: the leading terms in N and K of the exact count
    ``NK^2 + 3NK + 2dK - 2K^2 - 3K + 6d + 2`` (docs/paper.md, token layout; a formula sometimes quoted as
    "O(NK^2 + 3NK + 3K)")."""
    return spec.depth * spec.width**2 + 3 * spec.depth * spec.width


# --------------------------------------------------------------------------------------------------
# Sum-of-ReLU term counts
# --------------------------------------------------------------------------------------------------

# Activations represented exactly by a sum of ReLUs: name -> (H_r, H_r') (relu_sums API):
# relu = relu(t); relu' = the delta-step relu(t)/delta - relu(t - delta)/delta (exact outside (0, delta));
# identity = relu(t) - relu(-t); identity' = the constant 1 = relu(0 t + 1).
EXACT_TERMS: dict[str, tuple[int, int]] = {"relu": (1, 2), "identity": (2, 1)}
# Losses whose derivative u(t, y)[k] is an exact two-argument ReLU sum: squared, u = 2(t - y) =
# 2 relu(t - y) - 2 relu(y - t); the query gate -C(1 - T) of Lemma 4 goes inside the same units.
EXACT_LOSS_TERMS: dict[str, int] = {"squared": 2}


@dataclass(frozen=True)
class TermCounts:
    """Numbers of sum-of-ReLU terms (= attention heads / MLP hidden units) per approximated function.

    Attributes:
        r: ``H_r(j)`` for layers ``j = 1..N`` (Lemma 2's ``M_1``, per layer).
        r_prime: ``H_r'(j)`` for ``j = 1..N`` (Lemma 3's ``M_2``).
        u: ``H_u(k)`` for output coordinates ``k = 1..d_y`` (Lemma 4's ``M_3^k``).
    """

    r: tuple[int, ...]
    r_prime: tuple[int, ...]
    u: tuple[int, ...]

    def check(self, spec: NetSpec) -> None:
        """Raise [`InputError`][icdl.errors.InputError] unless the lengths match ``spec`` and every count is
        >= 1."""
        for name, counts, length in (
            ("r", self.r, spec.depth),
            ("r_prime", self.r_prime, spec.depth),
            ("u", self.u, spec.out_dim),
        ):
            if len(counts) != length:
                raise InputError(f"term counts {name!r} need {length} entries, got {len(counts)}")
            for c in counts:
                check_int(f"term count in {name!r}", c, 1)


def term_counts(
    spec: NetSpec,
    loss: str = "squared",
    *,
    r_terms: int | None = None,
    r_prime_terms: int | None = None,
    u_terms: int | None = None,
) -> TermCounts:
    """Term counts for ``spec``: exact where the function is an exact ReLU sum, the given numbers otherwise.

    Args:
        spec: the network; with ``output="linear"`` layer N uses the identity (2 terms, derivative 1 term).
        loss: loss name (``icdl.nets.LOSSES``); squared loss costs 2 terms per output coordinate.
        r_terms, r_prime_terms: terms of the fitted sums for a smooth activation (e.g. from
            ``icdl.relu_sums.relu_sum_for(name).num_terms``); ignored for exact activations.
        u_terms: terms per coordinate of the fitted loss-derivative sum; ignored for squared loss.

    Raises:
        InputError: a count is needed but missing.
    """
    get_loss(loss)
    r: list[int] = []
    rp: list[int] = []
    for j in range(1, spec.depth + 1):
        name = spec.layer_act(j).name
        if name in EXACT_TERMS:
            a, b = EXACT_TERMS[name]
        else:
            if r_terms is None or r_prime_terms is None:
                raise InputError(
                    f"activation {name!r} is not an exact ReLU sum: pass r_terms and r_prime_terms "
                    "(e.g. from icdl.relu_sums.relu_sum_for)"
                )
            a, b = r_terms, r_prime_terms
        r.append(a)
        rp.append(b)
    if loss in EXACT_LOSS_TERMS:
        hu = EXACT_LOSS_TERMS[loss]
    elif u_terms is None:
        raise InputError(
            f"loss {loss!r}: pass u_terms (e.g. from icdl.relu_sums.loss_derivative_sum(...).num_terms)"
        )
    else:
        hu = u_terms
    out = TermCounts(tuple(r), tuple(rp), (hu,) * spec.out_dim)
    out.check(spec)
    return out


# --------------------------------------------------------------------------------------------------
# Per-sublayer size table
# --------------------------------------------------------------------------------------------------


# One row type with the compiler (icdl.sublayer.SublayerInfo): the table below and a compiled model's
# sublayers can be compared field by field.


def _forward_layer(spec: NetSpec, terms: TermCounts, j: int) -> SublayerInfo:
    w = spec.widths
    heads = w[j] * terms.r[j - 1]
    # Lemma 2 / (C.8): Q h_i = [a_m p(j-1); b_m ONE], K h_s = [v_jk; ONE], V h_s = c_m ONE -> P_j[k].
    return SublayerInfo(
        f"forward_{j}", "forward", "relu_attention", "Lemma 2", j, heads, 0, heads * (w[j - 1] + 1), heads
    )


def block_table(spec: NetSpec, terms: TermCounts, projection: Projection = "none") -> list[SublayerInfo]:
    """The ``2N+4`` sublayers of one GD block with their sizes (Lemmas 2-5; docs/paper.md, sublayers).

    Args:
        spec: the network.
        terms: sum-of-ReLU term counts ([`term_counts`][icdl.theory.term_counts]).
        projection: ``"box"`` adds the clip units of the box projection (2 per parameter) to the last
            MLP; ``"none"`` is unprojected GD. The clean-up units that zero the P, R, G, S slots
            (``2 (3 sum_j n_j + d_y)``) are always there: the next block *adds* into those slots.
    """
    terms.check(spec)
    if projection not in ("none", "box"):
        raise InputError(f"projection must be 'none' or 'box', got {projection!r}")
    N, w = spec.depth, spec.widths
    units, P, dy = spec.num_units, spec.num_params, spec.out_dim
    rows = [_forward_layer(spec, terms, j) for j in range(1, N + 1)]
    # Lemma 3: heads (j, m, k), same Q/K as Lemma 2, value c'_m ONE -> R_j[k]. The paper sizes r̄' as
    # (N-2)K + d, a typo for (N-1)K + d (docs/paper.md, erratum E5); the head count uses sum_j n_j.
    d_heads = [w[j] * terms.r_prime[j - 1] for j in range(1, N + 1)]
    rows.append(
        SublayerInfo(
            "derivative",
            "derivative",
            "relu_attention",
            "Lemma 3",
            None,
            sum(d_heads),
            0,
            sum(h * (w[j - 1] + 1) for j, h in zip(range(1, N + 1), d_heads, strict=True)),
            sum(d_heads),
        )
    )
    rows.append(SublayerInfo("loss", "loss", "mlp", "Lemma 4", None, 0, sum(terms.u), 0, 0))
    for j in range(N, 0, -1):
        # Lemma 5 / (C.15): head k reads Q = column k of V_{j+1} (n_{j+1} entries; for j = N, Q = G[k],
        # K = ONE) and writes R_j[k] * score into S_j[k].
        d_q = 1 if j == N else w[j + 1]
        rows.append(
            SublayerInfo(f"backward_{j}", "backward", "ewml", "Lemma 5", j, w[j], 0, w[j] * d_q, w[j])
        )
    # (C.16): heads (±, j, k), Q = ±ONE, K = S_j[k], value ∓eta(n+1)/(2n) p(j-1) into the W block of v_jk.
    rows.append(
        SublayerInfo("update", "update", "relu_attention", "eq. (C.16)", None, 2 * units, 0, 2 * units, 2 * P)
    )
    hidden = (2 * P if projection == "box" else 0) + 2 * (3 * units + dy)
    rows.append(SublayerInfo("project", "project", "mlp", "Theorem 1 (Proj_W)", None, 0, hidden, 0, 0))
    return rows


def readout_table(spec: NetSpec, terms: TermCounts) -> list[SublayerInfo]:
    """The readout after the last block (docs/paper.md, readout, not in the paper): the N forward layers once
    more, then one MLP with ``2 d_y`` hidden units writing ``P_N`` of the query into its Y slot."""
    terms.check(spec)
    rows = [_forward_layer(spec, terms, j) for j in range(1, spec.depth + 1)]
    rows.append(SublayerInfo("readout", "readout", "mlp", READOUT_LEMMA, None, 0, 2 * spec.out_dim, 0, 0))
    return rows


def max_heads(spec: NetSpec, terms: TermCounts) -> int:
    """Most heads in any sublayer (Theorem 1's ``max_l M^l``, ``Õ(eps^-2)`` for smooth r); the readout
    repeats the forward layers so it never raises the maximum."""
    return max(s.heads for s in block_table(spec, terms))


# --------------------------------------------------------------------------------------------------
# FLOPs
# --------------------------------------------------------------------------------------------------


def model_flops(
    spec: NetSpec,
    terms: TermCounts,
    *,
    examples: int,
    steps: int,
    projection: Projection = "none",
    readout: bool = True,
) -> dict[str, int]:
    """Exact FLOPs of one forward pass of the compiled model on a prompt of ``n = examples`` examples
    (``T = n + 1`` tokens), from the size table ([`SublayerInfo.flops`][icdl.sublayer.SublayerInfo.flops]
    gives the convention).

    Returns ``{"per_block": ..., "blocks": L * per_block, "readout": ..., "total": ...}``.
    """
    check_int("examples", examples, 1)
    check_int("steps", steps, 0)
    T, D = examples + 1, embedding_dim(spec)
    per_block = sum(s.flops(T, D) for s in block_table(spec, terms, projection))
    ro = sum(s.flops(T, D) for s in readout_table(spec, terms)) if readout else 0
    return {
        "per_block": per_block,
        "blocks": steps * per_block,
        "readout": ro,
        "total": steps * per_block + ro,
    }


def paper_construction_flops(*, examples: int, steps: int, depth: int, width: int, eps: float) -> float:
    """The paper's asymptotic cost of one forward pass of the construction, ``n L N^3 K^5 / eps^2``
    (App. A.3), with the O-constant set to 1."""
    if not (eps > 0):
        raise InputError(f"eps must be > 0, got {eps}")
    return safe_div(safe_float(examples * steps * depth**3 * width**5), safe_pow(eps, 2))


def paper_direct_flops(*, examples: int, steps: int, depth: int, width: int) -> float:
    """The paper's cost of L direct GD steps, ``n L N K^2`` (App. A.3), O-constant 1."""
    return safe_float(examples * steps * depth * width**2)


def direct_gd_flops(spec: NetSpec, *, examples: int, steps: int) -> int:
    """``6 P n L``: L full-batch GD steps on n examples (forward 2P, backward 4P FLOPs per example) — the
    ``6 P D`` rule with ``D = n L`` example passes."""
    return 6 * spec.num_params * examples * steps


def transformer_forward_flops(num_params: float, tokens: float) -> float:
    """``2 N_p N_t``: the usual forward-pass estimate (one MAC per parameter per token). The paper's
    "3.3 billion" ICL FLOPs are this rule with 22M parameters and 76 tokens (docs/protocol.md, FLOPs)."""
    return 2 * num_params * tokens


def training_flops(num_params: float, data: float) -> float:
    """``6 P D``: training on D example passes (forward + backward). The paper's "7.6 billion" for the
    6-layer width-200 network are this rule with P = 168,000 and D = 75 x 100 = 7,500
    (docs/protocol.md, FLOPs)."""
    return 6 * num_params * data

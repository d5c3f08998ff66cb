"""The paper's formulas: sizes, head counts, error bounds and FLOP counts of the construction.

Everything here is closed-form arithmetic on a :class:`~icdl.nets.NetSpec`; nothing builds weights. The
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
(:class:`TermCounts`); ``H_u(k)`` those of the loss derivative's k-th coordinate. After the L blocks a
readout (not in the paper, docs/paper.md, readout) runs the N forward layers once more and one MLP of hidden
width ``2 d_y`` that copies the query prediction into its Y slot.

Notation: ``N`` depth, ``K`` width, ``d_x``/``d_y`` input/output dims (``d`` when equal), ``P = D_w``
the number of network parameters, ``n`` the number of in-context examples, ``T = n + 1`` tokens, ``L``
GD steps, ``eta`` the step size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from icdl.budget import Estimate
from icdl.errors import InputError
from icdl.nets import ACTIVATIONS, NetSpec, get_loss
from icdl.sublayer import SublayerInfo, SublayerKind

__all__ = [
    "EXACT_LOSS_TERMS",
    "EXACT_TERMS",
    "ActivationBounds",
    "Lemma6Constants",
    "Sublayer",
    "SublayerKind",
    "TermCounts",
    "Theorem1Constants",
    "activation_bounds",
    "block_table",
    "compute",
    "compute_estimate",
    "construction_estimate",
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
    "rows_embedding_dim",
    "rows_sublayers_per_step",
    "rows_tokens",
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


def _check_int(name: str, value: int, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise InputError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


def _pow(base: float, exp: float) -> float:
    """``base ** exp`` in floats, ``inf`` instead of Python's OverflowError (the bounds grow like
    ``x^N`` and may exceed the float range for deep networks; ``inf`` is the honest answer)."""
    try:
        return float(base) ** exp
    except OverflowError:
        return math.inf


def _float(x: int | float) -> float:
    """``float(x)``, ``inf`` for an integer too large for a float."""
    try:
        return float(x)
    except OverflowError:
        return math.inf


def _div(a: float, b: float) -> float:
    """``a / b`` with ``inf`` for overflow or a zero denominator (``a > 0``)."""
    try:
        return a / b
    except ZeroDivisionError:
        return math.inf if a > 0 else math.nan
    except OverflowError:
        return math.inf


def _geo(q: float, m: int) -> float:
    """``sum_{l=0}^{m-1} q^l`` in closed form (no O(m) loop): ``(q^m - 1) / (q - 1)``, ``m`` when
    ``q = 1``; ``inf`` on overflow."""
    if m <= 0:
        return 0.0
    if q == 1:
        return float(m)
    if q < 1:
        return (1 - _pow(q, m)) / (1 - q)
    return _div(_pow(q, m) - 1, q - 1)


def sublayers_per_step(depth: int) -> int:
    """``2N + 4``: sublayers of one GD block, ``TF^{N+2} ∘ EWML^N ∘ TF^2`` in application order
    (Theorem 1; the paper writes ∘ left-to-right, docs/paper.md, erratum E4)."""
    return 2 * _check_int("depth", depth, 2) + 4


def sublayers(depth: int, steps: int) -> int:
    """``(2N + 4) L``: the paper's depth for L GD steps (Theorem 1), readout excluded."""
    return sublayers_per_step(depth) * _check_int("steps", steps, 0)


def readout_sublayers(depth: int) -> int:
    """``N + 1``: the readout appended after the last block (N forward layers + 1 MLP; not in the
    paper, which never writes the query prediction — docs/paper.md, readout; docs/paper.md, erratum E11)."""
    return _check_int("depth", depth, 2) + 1


# --------------------------------------------------------------------------------------------------
# Embedding dimension
# --------------------------------------------------------------------------------------------------


def embedding_dim(spec: NetSpec) -> int:
    """Exact token width of the compiled model (docs/paper.md, token layout):

    ``D = d_x + 2 d_y + P + 3 sum_j n_j + 2`` — slots X (d_x), Y (d_y), W (P), P_1..P_N, R_1..R_N,
    S_1..S_N (``sum_j n_j = (N-1)K + d_y`` each), G (d_y), ONE, T. With ``d_x = d_y = d`` this is
    :func:`embedding_dim_closed_form`.
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
    ``N K^2 + D_w``. The exact :func:`embedding_dim` is of the same order: for large K their ratio tends
    to ``(N-2)/(2N-2)``, since both are dominated by the ``(N-2)K^2`` entries of w."""
    return spec.depth * spec.width**2 + spec.num_params


def embedding_dim_leading_terms(spec: NetSpec) -> int:
    """``N K^2 + 3 N K``: the leading terms in N and K of the exact count
    ``NK^2 + 3NK + 2dK - 2K^2 - 3K + 6d + 2`` (docs/paper.md, token layout; a formula sometimes quoted as
    "O(NK^2 + 3NK + 3K)")."""
    return spec.depth * spec.width**2 + 3 * spec.depth * spec.width


def rows_embedding_dim(spec: NetSpec) -> int:
    """Token width of the row-token construction (``--variant rows``, docs/construction.md, "Weights in
    their own tokens"), linear in K and the same for every activation:

    ``D = d_x + d_y + 2 U + d_y + (U - d_y) + 2 + (d_x + U - d_y) + U + N``
    with ``U = sum_j n_j = (N-1)K + d_y``: data slots X, Y, P_j, R_j, G, Z_j (j < N), ONE, T; row slots
    V_j (``n_{j-1}``), ID_j (``n_j``), ROW_j (1); i.e. ``D = 2 d_x + 5 d_y + 5 (N-1) K + N + 2``. The
    deltas s(j) get no slot: ``r' ⊙ z`` is formed inside the backward and update scores.
    """
    U, N, dx, dy = spec.num_units, spec.depth, spec.in_dim, spec.out_dim
    return dx + dy + 2 * U + dy + (U - dy) + 2 + (dx + U - dy) + U + N


def rows_tokens(spec: NetSpec, examples: int) -> int:
    """Tokens of the row-token construction: ``(N-1)K + d_y`` row tokens plus ``n + 1`` data tokens."""
    return spec.num_units + _check_int("examples", examples, 1) + 1


def rows_sublayers_per_step(spec: NetSpec) -> int:
    """Sublayers per GD step of the row-token construction: ``2N + 2`` (F_1..F_N, loss, B_{N-1}..B_1,
    update, projection) for every activation: ``r' ⊙ z`` is taken inside the backward and update scores
    (a 0/1 gate for ReLU, a two-argument ReLU sum of the product for smooth activations)."""
    return 2 * spec.depth + 2


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
        """Raise :class:`InputError` unless the lengths match ``spec`` and every count is >= 1."""
        for name, counts, length in (
            ("r", self.r, spec.depth),
            ("r_prime", self.r_prime, spec.depth),
            ("u", self.u, spec.out_dim),
        ):
            if len(counts) != length:
                raise InputError(f"term counts {name!r} need {length} entries, got {len(counts)}")
            for c in counts:
                _check_int(f"term count in {name!r}", c, 1)


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


# One row type with the compiler (icdl.sublayer): the table below and a compiled model's sublayers can be
# compared field by field.
Sublayer = SublayerInfo


def _forward_layer(spec: NetSpec, terms: TermCounts, j: int) -> Sublayer:
    w = spec.widths
    heads = w[j] * terms.r[j - 1]
    # Lemma 2 / (C.8): Q h_i = [a_m p(j-1); b_m ONE], K h_s = [v_jk; ONE], V h_s = c_m ONE -> P_j[k].
    return Sublayer(
        f"forward_{j}", "forward", "relu_attention", "Lemma 2", j, heads, 0, heads * (w[j - 1] + 1), heads
    )


def block_table(spec: NetSpec, terms: TermCounts, projection: Projection = "none") -> list[Sublayer]:
    """The ``2N+4`` sublayers of one GD block with their sizes (Lemmas 2-5; docs/paper.md, sublayers).

    Args:
        spec: the network.
        terms: sum-of-ReLU term counts (:func:`term_counts`).
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
        Sublayer(
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
    rows.append(Sublayer("loss", "loss", "mlp", "Lemma 4", None, 0, sum(terms.u), 0, 0))
    for j in range(N, 0, -1):
        # Lemma 5 / (C.15): head k reads Q = column k of V_{j+1} (n_{j+1} entries; for j = N, Q = G[k],
        # K = ONE) and writes R_j[k] * score into S_j[k].
        d_q = 1 if j == N else w[j + 1]
        rows.append(Sublayer(f"backward_{j}", "backward", "ewml", "Lemma 5", j, w[j], 0, w[j] * d_q, w[j]))
    # (C.16): heads (±, j, k), Q = ±ONE, K = S_j[k], value ∓eta(n+1)/(2n) p(j-1) into the W block of v_jk.
    rows.append(
        Sublayer("update", "update", "relu_attention", "eq. (C.16)", None, 2 * units, 0, 2 * units, 2 * P)
    )
    hidden = (2 * P if projection == "box" else 0) + 2 * (3 * units + dy)
    rows.append(Sublayer("project", "project", "mlp", "Theorem 1 (Proj_W)", None, 0, hidden, 0, 0))
    return rows


def readout_table(spec: NetSpec, terms: TermCounts) -> list[Sublayer]:
    """The readout after the last block (docs/paper.md, readout, not in the paper): the N forward layers once
    more, then one MLP with ``2 d_y`` hidden units writing ``P_N`` of the query into its Y slot."""
    terms.check(spec)
    rows = [_forward_layer(spec, terms, j) for j in range(1, spec.depth + 1)]
    rows.append(Sublayer("readout", "readout", "mlp", READOUT_LEMMA, None, 0, 2 * spec.out_dim, 0, 0))
    return rows


def max_heads(spec: NetSpec, terms: TermCounts) -> int:
    """Most heads in any sublayer (Theorem 1's ``max_l M^l``, ``Õ(eps^-2)`` for smooth r); the readout
    repeats the forward layers so it never raises the maximum."""
    return max(s.heads for s in block_table(spec, terms))


# --------------------------------------------------------------------------------------------------
# Lemma 2-4: value bounds and per-lemma errors
# --------------------------------------------------------------------------------------------------


def _sup_abs(fn: Callable[[Tensor], Tensor], radius: float, *, unimodal: bool = False) -> float:
    """``max_{|t| <= radius} |fn(t)|`` on a dense float64 grid (endpoints and 0 included).

    ``unimodal=True`` is for functions whose ``|fn|`` on ``[-radius, radius]`` peaks at an endpoint or
    at 0 (every activation of :data:`icdl.nets.ACTIVATIONS` and its derivative): then those three points
    give the same maximum in O(1), which keeps deep networks (N in the millions) fast."""
    if radius < 0 or math.isnan(radius):
        raise InputError(f"radius must be >= 0, got {radius}")
    if unimodal:
        t = torch.tensor([-radius, 0.0, radius], dtype=torch.float64)
        return float(fn(t).abs().nan_to_num(nan=math.inf).max())
    if not math.isfinite(radius):
        t = torch.tensor([-math.inf, math.inf], dtype=torch.float64)
        grid = torch.linspace(-1e6, 1e6, 20001, dtype=torch.float64)
        return float(torch.cat([fn(t).abs(), fn(grid).abs()]).nan_to_num(nan=math.inf).max())
    t = torch.cat(
        [torch.linspace(-radius, radius, 20001, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)]
    )
    return float(fn(t).abs().max())


def _prod(*factors: float) -> float:
    """Product where an exact zero wins over infinity (an error term with eps = 0 is 0, even when the
    Lipschitz constant in front of it is infinite, as for ReLU's r')."""
    if any(f == 0 for f in factors):
        return 0.0
    return math.prod(factors)


@dataclass(frozen=True)
class ActivationBounds:
    """Entrywise value bounds of Lemmas 2-3.

    Attributes:
        B_r: ``(B_r^0, ..., B_r^N)`` with ``B_r^0 = B_x``, ``B_r^j = max_{|t| <= range_j} |r(t)|``.
        B_r_prime: ``(B_r'^0, ..., B_r'^N)``, ``B_r'^0 = B_x``, ``B_r'^j = max_{|t| <= range'_j} |r'(t)|``.
        preact: ``(range_1, ..., range_N)``, the pre-activation range used for ``B_r^j``.
    """

    B_r: tuple[float, ...]
    B_r_prime: tuple[float, ...]
    preact: tuple[float, ...]

    @property
    def max_r(self) -> float:
        """``B_r := max_j B_r^j`` over ``j = 0..N`` (it bounds p̄(j-1), and p(0) = x)."""
        return max(self.B_r)

    @property
    def max_r_prime(self) -> float:
        """``B_r' := max_j B_r'^j`` over ``j = 1..N`` (values of r' only)."""
        return max(self.B_r_prime[1:])


def activation_bounds(
    spec: NetSpec, *, bound_x: float, bound_v: float, corrected: bool = False
) -> ActivationBounds:
    """``B_r^j`` (Lemma 2) and ``B_r'^j`` (Lemma 3) for layers ``j = 0..N``.

    As printed (``corrected=False``): ``B_r^j = max_{|t| <= B_v B_r^{j-1}} |r(t)|`` and
    ``B_r'^j = max_{|t| <= B_v B_r'^{j-1}} |r'(t)|``, with ``B_r^0 = B_r'^0 = B_x``.

    Two slips in the printed definitions (docs/paper.md, erratum E13): ``B_r^{j-1}`` bounds the *entries* of
    ``p(j-1)``, but ``|v^T p| <= B_v ||p||_2`` needs its l2 norm, so a factor ``sqrt(n_{j-1})`` is
    missing for ``j >= 2`` (``||x||_2 <= B_x`` is already a norm); and r' at layer j is evaluated at layer
    j's pre-activation, whose range comes from ``B_r^{j-1}``, not from ``B_r'^{j-1}`` (own remark).
    ``corrected=True`` fixes both, so the ranges are true bounds.

    Layer j uses ``spec.layer_act(j)`` (identity at the output when ``output="linear"``).
    """
    for name, v in (("bound_x", bound_x), ("bound_v", bound_v)):
        if not (v > 0):
            raise InputError(f"{name} must be > 0, got {v}")
    B_r, B_rp, pre = [float(bound_x)], [float(bound_x)], []
    for j in range(1, spec.depth + 1):
        act = spec.layer_act(j)
        known = ACTIVATIONS.get(act.name) is act
        fan_in = spec.in_dim if j == 1 else spec.width
        norm_fix = math.sqrt(fan_in) if (corrected and j >= 2) else 1.0
        rng = bound_v * norm_fix * B_r[-1]
        rng_prime = rng if corrected else bound_v * B_rp[-1]
        pre.append(rng)
        B_r.append(_sup_abs(act.fn, rng, unimodal=known))
        B_rp.append(_sup_abs(act.deriv, rng_prime, unimodal=known))
    return ActivationBounds(tuple(B_r), tuple(B_rp), tuple(pre))


def lemma2_layer_factors(spec: NetSpec, *, lipschitz_r: float, bound_v: float) -> tuple[float, ...]:
    """``||eps(i, j)||_2 / eps_r`` for ``j = 1..N`` (Lemma 2, eqs. 3.8-3.9):

    ``(sum_{l=0}^{j-1} (sqrt(K) L_r B_v)^l) sqrt(K)`` for ``j <= N-1`` and
    ``(sum_{l=0}^{N-1} (sqrt(K) L_r B_v)^l) sqrt(d_y)`` for ``j = N``.
    """
    K, N = spec.width, spec.depth
    q = math.sqrt(K) * lipschitz_r * bound_v
    rk = math.sqrt(K)
    return tuple([_geo(q, j) * rk for j in range(1, N)] + [_geo(q, N) * math.sqrt(spec.out_dim)])


def lemma2_E_r(spec: NetSpec, *, lipschitz_r: float, bound_v: float) -> float:
    """``E_r := max_j ||eps(i, j)||_2 / eps_r`` (eqs. 3.10-3.11), so ``||p̄(j) - p(j)||_2 <= E_r eps_r``
    (3.12). The geometric sums grow with j, so the maximum is at ``j = N - 1`` or ``j = N`` (O(1))."""
    K, N = spec.width, spec.depth
    q = math.sqrt(K) * lipschitz_r * bound_v
    return max(_geo(q, N - 1) * math.sqrt(K), _geo(q, N) * math.sqrt(spec.out_dim))


def lemma3_error(
    *, eps_r_prime: float, eps_r: float, lipschitz_r_prime: float, bound_v: float, E_r: float
) -> float:
    """Lemma 3, eq. (3.14): ``|r̄'_i(j-1)[k] - r'_i(j-1)[k]| <= eps_r' + L_r' B_v E_r eps_r``."""
    return eps_r_prime + _prod(lipschitz_r_prime, bound_v, E_r, eps_r)


def lemma4_error(*, eps_l: float, eps_r: float, lipschitz_l: float, E_r: float) -> float:
    """Lemma 4, eq. (3.16): ``|g_i[k] - u(p_i(N), y_i)[k]| <= eps_l + L_l E_r eps_r``."""
    return eps_l + _prod(lipschitz_l, E_r, eps_r)


def loss_derivative_bound(loss: str, *, bound_t: float, bound_y: float) -> float:
    """``B_l``: ``max |u(t, y)[k]|`` over ``|t| <= bound_t``, ``|y| <= bound_y`` (per coordinate; the
    loss must be separable). For squared loss this is ``2 (bound_t + bound_y)``."""
    lo = get_loss(loss)
    if not lo.separable:
        raise InputError(f"loss {loss!r} is not coordinate-separable")
    t = torch.linspace(-bound_t, bound_t, 401, dtype=torch.float64)
    y = torch.linspace(-bound_y, bound_y, 401, dtype=torch.float64)
    tt, yy = torch.meshgrid(t, y, indexing="ij")
    return float(lo.deriv(tt.reshape(-1, 1), yy.reshape(-1, 1)).abs().max())


# --------------------------------------------------------------------------------------------------
# Lemma 6 and Theorem 1
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lemma6Constants:
    """Lemma 6: ``|s̄_i(j)[k]| <= B_s`` and
    ``|s̄_i(j)[k] - s_i(j)[k]| <= E_s^r eps_r + E_s^{r'} eps_r' + E_s^l eps_l``."""

    P: float
    B_s: float
    E_s_r: float
    E_s_r_prime: float
    E_s_l: float

    def error(self, *, eps_r: float, eps_r_prime: float, eps_l: float) -> float:
        """The Lemma 6 bound on ``|s̄ - s|`` for given sum-of-ReLU errors."""
        return _prod(self.E_s_r, eps_r) + _prod(self.E_s_r_prime, eps_r_prime) + _prod(self.E_s_l, eps_l)


def _pmax(dims: Sequence[int]) -> float:
    return max(math.sqrt(d) for d in dims)


def lemma6_constants(
    spec: NetSpec,
    *,
    E_r: float,
    B_r_prime: float,
    B_l: float,
    bound_v: float,
    lipschitz_r_prime: float,
    lipschitz_l: float,
) -> Lemma6Constants:
    """Lemma 6's constants, with ``x := B_r' B_v P``:

    * ``P := max{sqrt(K), sqrt(d)}`` (here ``d = max(d_x, d_y)``; the paper has ``d_x = d_y``);
    * ``B_s := max_j x^{N-j} B_r' B_l``;
    * ``E_s^r := max_j { L_r' E_r P B_s B_v^2 sum_{l<N-j} x^l + x^{N-j} (B_l L_r' B_v E_r + B_r' L_l E_r) }``;
    * ``E_s^{r'} := max_j { P B_s B_v sum_{l<N-j} x^l + x^{N-j} B_l }``;
    * ``E_s^l := max_j x^{N-j} B_r'``.

    All grow like ``x^{N-1}``: exponentially in the depth N when ``x > 1``.
    """
    N = spec.depth
    P = _pmax((spec.width, spec.in_dim, spec.out_dim))
    x = B_r_prime * bound_v * P
    # Every maximum over j = 1..N below is of  A geo(m) + B x^m  with m = N - j and A, B >= 0, which is
    # monotone in m (A/(1-x) + x^m (B - A/(1-x)) for x != 1, linear for x = 1): the maximum is at
    # m = 0 or m = N - 1, so no O(N) loop is needed.
    ends = (0, N - 1)

    def xm(m: int) -> float:
        return _pow(x, m)

    B_s = max(_prod(xm(m), B_r_prime, B_l) for m in ends)
    inner_r = _prod(B_l, lipschitz_r_prime, bound_v, E_r) + _prod(B_r_prime, lipschitz_l, E_r)
    E_s_r = max(
        _prod(lipschitz_r_prime, E_r, P, B_s, _pow(bound_v, 2), _geo(x, m)) + _prod(xm(m), inner_r)
        for m in ends
    )
    E_s_rp = max(_prod(P, B_s, bound_v, _geo(x, m)) + _prod(xm(m), B_l) for m in ends)
    E_s_l = max(_prod(xm(m), B_r_prime) for m in ends)
    return Lemma6Constants(P, B_s, E_s_r, E_s_rp, E_s_l)


@dataclass(frozen=True)
class Theorem1Constants:
    """Theorem 1's error constants (the proof's bookkeeping after (C.7)):
    ``C_l = N P^{3/2} B_r E_s^l``, ``C_r = N P^{3/2} B_r E_s^r + N P B_s E_r``,
    ``C_r' = N P^{3/2} B_r E_s^{r'}``, so that
    ``||∇̄L_n(w) - ∇L_n(w)||_2 <= (C_r eps_r + C_r' eps_r' + C_l eps_l) / 2``."""

    C_l: float
    C_r: float
    C_r_prime: float

    def split(self, eps: float) -> dict[str, float]:
        """Theorem 1's choice ``eps_l = 2eps/(3C_l)``, ``eps_r = 2eps/(3C_r)``, ``eps_r' = 2eps/(3C_r')``,
        which makes the gradient error at most eps (each part contributes eps/3)."""
        if not (eps > 0):
            raise InputError(f"eps must be > 0, got {eps}")
        return {
            "eps_l": 2 * eps / (3 * self.C_l),
            "eps_r": 2 * eps / (3 * self.C_r),
            "eps_r_prime": 2 * eps / (3 * self.C_r_prime),
        }

    def grad_error(self, *, eps_r: float, eps_r_prime: float, eps_l: float) -> float:
        """``(N/2) P [(E_s^r eps_r + E_s^{r'} eps_r' + E_s^l eps_l) sqrt(P) B_r + B_s E_r eps_r]``, the bound
        on ``||∇̄L_n - ∇L_n||_2`` from (C.7), written with the C's."""
        return (_prod(self.C_r, eps_r) + _prod(self.C_r_prime, eps_r_prime) + _prod(self.C_l, eps_l)) / 2


def theorem1_constants(
    spec: NetSpec, lemma6: Lemma6Constants, *, B_r: float, E_r: float
) -> Theorem1Constants:
    """``C_l``, ``C_r``, ``C_r'`` of Theorem 1's proof from Lemma 6's constants, ``B_r`` and ``E_r``."""
    N, P = spec.depth, lemma6.P
    c = _prod(N, _pow(P, 1.5), B_r)
    return Theorem1Constants(
        C_l=_prod(c, lemma6.E_s_l),
        C_r=_prod(c, lemma6.E_s_r) + N * P * lemma6.B_s * E_r,
        C_r_prime=_prod(c, lemma6.E_s_r_prime),
    )


# --------------------------------------------------------------------------------------------------
# Corollary 1.1 (error accumulation over L steps)
# --------------------------------------------------------------------------------------------------


def _check_cor(eps: float, lipschitz_f: float, steps: int) -> None:
    if not (eps >= 0):
        raise InputError(f"eps must be >= 0, got {eps}")
    if not (lipschitz_f > 0):
        raise InputError(f"the gradient's Lipschitz constant L_f must be > 0, got {lipschitz_f}")
    _check_int("steps", steps, 0)


def corollary11_bound(*, eps: float, lr: float, lipschitz_f: float, steps: int) -> float:
    """Corrected Corollary 1.1: ``||w̄^l - w^l_GD||_2 <= L_f^{-1} ((1 + eta L_f)^l - 1) eps``.

    Derivation (Corollary 1.1, Lemma 14): projection is non-expansive and ``w -> w - eta ∇L_n(w)`` is
    ``(1 + eta L_f)``-Lipschitz when ``∇L_n`` is ``L_f``-Lipschitz (the paper calls ``L_f`` the Lipschitz
    constant "of L_n(w)"; it must be that of ``∇L_n``, §10.9), so ``e_l <= (1 + eta L_f) e_{l-1} + eta eps``.
    """
    _check_cor(eps, lipschitz_f, steps)
    return _prod(_pow(1 + lr * lipschitz_f, steps) - 1, eps) / lipschitz_f


def corollary11_loose(*, eps: float, lr: float, lipschitz_f: float, steps: int) -> float:
    """``L_f^{-1} (1 + eta L_f)^l eps``: the corrected bound without the ``- 1`` (always looser)."""
    _check_cor(eps, lipschitz_f, steps)
    return _prod(_pow(1 + lr * lipschitz_f, steps), eps) / lipschitz_f


def corollary11_as_printed(*, eps: float, examples: int, lipschitz_f: float, steps: int) -> float:
    """Corollary 1.1 / Lemma 14 *as printed*: ``L_f^{-1} (1 + n L_f)^l eps`` with n the number of
    examples — almost certainly a typo for ``(1 + eta L_f)^l`` (docs/paper.md, erratum E9): the argument
    gives no growth with n. Kept for comparison; it is the larger one whenever ``eta < n``."""
    _check_cor(eps, lipschitz_f, steps)
    _check_int("examples", examples, 1)
    return _prod(_pow(1 + examples * lipschitz_f, steps), eps) / lipschitz_f


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
    (``T = n + 1`` tokens), from the size table (:meth:`Sublayer.flops` gives the convention).

    Returns ``{"per_block": ..., "blocks": L * per_block, "readout": ..., "total": ...}``.
    """
    _check_int("examples", examples, 1)
    _check_int("steps", steps, 0)
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
    return _div(_float(examples * steps * depth**3 * width**5), _pow(eps, 2))


def paper_direct_flops(*, examples: int, steps: int, depth: int, width: int) -> float:
    """The paper's cost of L direct GD steps, ``n L N K^2`` (App. A.3), O-constant 1."""
    return _float(examples * steps * depth * width**2)


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


# --------------------------------------------------------------------------------------------------
# Everything at once (``icdl theory``)
# --------------------------------------------------------------------------------------------------


def _fitted_counts(
    spec: NetSpec, loss: str, eps: float, radius: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fit the non-exact sums with icdl.relu_sums; return (kwargs for term_counts, sums info for output)."""
    kwargs: dict[str, Any] = {}
    info: dict[str, Any] = {}
    needs_act = any(spec.layer_act(j).name not in EXACT_TERMS for j in range(1, spec.depth + 1))
    needs_loss = loss not in EXACT_LOSS_TERMS
    if not (needs_act or needs_loss):
        return kwargs, info
    from icdl import relu_sums

    if needs_act:
        r = relu_sums.relu_sum_for(spec.activation, eps=eps, radius=radius)
        rp = relu_sums.relu_sum_for(spec.activation + "'", eps=eps, radius=radius)
        kwargs.update(r_terms=r.num_terms, r_prime_terms=rp.num_terms)
        info["r"], info["r_prime"] = _sum_info(r.to_dict()), _sum_info(rp.to_dict())
    if needs_loss:
        u = relu_sums.loss_derivative_sum(loss, eps=eps, radius=radius)
        kwargs["u_terms"] = u.num_terms
        info["u"] = _sum_info(u.to_dict())
    return kwargs, info


def _sum_info(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != "terms"}


def compute(
    spec: NetSpec,
    *,
    loss: str,
    steps: int,
    examples: int,
    lr: float,
    eps: float,
    radius: float,
    projection: Projection,
    bound_x: float,
    bound_y: float,
    bound_v: float,
    grad_lipschitz: float,
    grad_eps: float,
    corrected_bounds: bool,
) -> dict[str, Any]:
    """Everything ``icdl theory`` reports, as one JSON-ready dict (keys documented in docs/theory.md).

    Fits the ReLU sums a smooth activation or a non-squared loss needs (``eps`` on ``[-radius, radius]``)
    and evaluates every size, bound and FLOP count of this module for ``spec``. Cost: O(N) in the depth
    (the per-sublayer table); :func:`compute_estimate` gives its memory and time beforehand.
    """

    kwargs, sums = _fitted_counts(spec, loss, eps, radius)
    terms = term_counts(spec, loss, **kwargs)
    block = block_table(spec, terms, projection)
    readout = readout_table(spec, terms)
    N, K = spec.depth, spec.width

    # Sum-of-ReLU errors: the measured sup error of each fitted sum; exact sums (relu, identity, squared
    # loss) contribute 0 (relu' is exact outside its delta-window, docs/paper.md, sublayers).
    eps_r = sums["r"]["sup_error"] if "r" in sums else 0.0
    eps_rp = sums["r_prime"]["sup_error"] if "r_prime" in sums else 0.0
    eps_l = sums["u"]["sup_error"] if "u" in sums else 0.0

    acts = [spec.layer_act(j) for j in range(1, N + 1)]
    L_r = max(a.lipschitz for a in acts)
    L_rp = max(a.deriv_lipschitz for a in acts)
    L_l = get_loss(loss).deriv_lipschitz
    ab = activation_bounds(spec, bound_x=bound_x, bound_v=bound_v, corrected=corrected_bounds)
    E_r = lemma2_E_r(spec, lipschitz_r=L_r, bound_v=bound_v)
    B_l = loss_derivative_bound(loss, bound_t=ab.B_r[-1], bound_y=bound_y)
    l6 = lemma6_constants(
        spec,
        E_r=E_r,
        B_r_prime=ab.max_r_prime,
        B_l=B_l,
        bound_v=bound_v,
        lipschitz_r_prime=L_rp,
        lipschitz_l=L_l,
    )
    t1 = theorem1_constants(spec, l6, B_r=ab.max_r, E_r=E_r)
    flops = model_flops(spec, terms, examples=examples, steps=steps, projection=projection)
    direct = direct_gd_flops(spec, examples=examples, steps=steps)
    ranges = {
        "R_1": max(bound_v * ab.max_r, 1.0),
        "R_2": max(bound_v * ab.max_r_prime, 1.0),
        "R_3": max(bound_v * ab.max_r, bound_y, 1.0),
    }
    return {
        "network": {
            "depth": N,
            "width": K,
            "in_dim": spec.in_dim,
            "out_dim": spec.out_dim,
            "activation": spec.activation,
            "output": spec.output,
            "loss": loss,
        },
        "steps": steps,
        "examples": examples,
        "tokens": examples + 1,
        "lr": lr,
        "eps": eps,
        "range": radius,
        "projection": projection,
        "num_params": spec.num_params,
        "num_units": spec.num_units,
        "sublayers": sublayers(N, steps),
        "sublayers_per_step": sublayers_per_step(N),
        "readout_sublayers": readout_sublayers(N),
        "total_sublayers": sublayers(N, steps) + readout_sublayers(N),
        "embedding_dim": embedding_dim(spec),
        "embedding_dim_closed_form": (
            embedding_dim_closed_form(N, K, spec.in_dim) if spec.in_dim == spec.out_dim else None
        ),
        "embedding_dim_as_printed": embedding_dim_as_printed(spec),
        "embedding_dim_paper_bound": embedding_dim_paper_bound(spec),
        "embedding_dim_leading_terms": embedding_dim_leading_terms(spec),
        "max_heads": max_heads(spec, terms),
        "max_mlp_hidden": max(s.hidden for s in block + readout),
        "terms": {"r": list(terms.r), "r_prime": list(terms.r_prime), "u": list(terms.u)},
        "relu_sums": sums,
        "per_sublayer": [{"index": i + 1, **s.to_dict()} for i, s in enumerate(block)],
        "readout": [{"index": i + 1, **s.to_dict()} for i, s in enumerate(readout)],
        "bounds": {
            "assumptions": {
                "B_x": bound_x,
                "B_y": bound_y,
                "B_v": bound_v,
                "L_r": L_r,
                "L_r_prime": L_rp,
                "L_l": L_l,
                "corrected": corrected_bounds,
            },
            "B_r_layers": list(ab.B_r),
            "B_r_prime_layers": list(ab.B_r_prime),
            "B_r": ab.max_r,
            "B_r_prime": ab.max_r_prime,
            "B_l": B_l,
            "required_ranges": ranges,
            "range_sufficient": all(radius >= v for v in ranges.values()),
            "sum_errors": {"eps_r": eps_r, "eps_r_prime": eps_rp, "eps_l": eps_l},
            "lemma2_layer_factors": list(lemma2_layer_factors(spec, lipschitz_r=L_r, bound_v=bound_v)),
            "E_r": E_r,
            "lemma2_error": E_r * eps_r,
            "lemma3_error": lemma3_error(
                eps_r_prime=eps_rp, eps_r=eps_r, lipschitz_r_prime=L_rp, bound_v=bound_v, E_r=E_r
            ),
            "lemma4_error": lemma4_error(eps_l=eps_l, eps_r=eps_r, lipschitz_l=L_l, E_r=E_r),
            "lemma6": {
                "P": l6.P,
                "B_s": l6.B_s,
                "E_s_r": l6.E_s_r,
                "E_s_r_prime": l6.E_s_r_prime,
                "E_s_l": l6.E_s_l,
                "error": l6.error(eps_r=eps_r, eps_r_prime=eps_rp, eps_l=eps_l),
            },
            "theorem1": {
                "C_l": t1.C_l,
                "C_r": t1.C_r,
                "C_r_prime": t1.C_r_prime,
                "grad_eps": grad_eps,
                "split": t1.split(grad_eps),
                "grad_error_bound": t1.grad_error(eps_r=eps_r, eps_r_prime=eps_rp, eps_l=eps_l),
            },
            "corollary11": {
                "L_f": grad_lipschitz,
                "eps": grad_eps,
                "corrected": corollary11_bound(eps=grad_eps, lr=lr, lipschitz_f=grad_lipschitz, steps=steps),
                "loose": corollary11_loose(eps=grad_eps, lr=lr, lipschitz_f=grad_lipschitz, steps=steps),
                "as_printed": corollary11_as_printed(
                    eps=grad_eps, examples=examples, lipschitz_f=grad_lipschitz, steps=steps
                ),
            },
        },
        "flops": {
            "compiled_forward": flops["total"],
            "compiled_per_block": flops["per_block"],
            "compiled_readout": flops["readout"],
            "direct_gd": direct,
            "ratio_compiled_to_direct": _div(_float(flops["total"]), _float(direct)) if direct else None,
            "paper_construction": paper_construction_flops(
                examples=examples, steps=steps, depth=N, width=K, eps=eps
            ),
            "paper_direct": paper_direct_flops(examples=examples, steps=steps, depth=N, width=K),
        },
    }


def compute_estimate(
    spec: NetSpec, *, loss: str = "squared", eps: float = 1e-3, radius: float = 10.0
) -> Estimate:
    """Memory and time of :func:`compute` (and of printing its result), before running it.

    Its cost is linear in the depth N: ``3N + 5`` rows of the per-sublayer tables and ``4N`` per-layer
    bounds (about 4 KB and 0.4 ms per layer, measured with ``icdl theory --depth 100000 --json``), and
    ``d_y`` loss-term counts (about 30 B and 6 us each, ``--out-dim 1000000``; counted as 100 B, 10 us),
    plus the ReLU-sum fits of a smooth activation or non-squared loss
    (:func:`icdl.relu_sums.fit_estimate`).
    """
    from icdl import relu_sums

    N, dy = spec.depth, spec.out_dim
    est = Estimate(
        "icdl theory",
        200 * 2**20 + 4e3 * N + 100 * dy,
        1.0 + 4e-4 * N + 1e-5 * dy,
        f"N={N}: {3 * N + 5} table rows; d_y={dy} loss-term counts",
    )
    act = spec.activation
    if any(spec.layer_act(j).name not in EXACT_TERMS for j in (1, N)):
        for target in (act, act + "'"):
            fit = relu_sums.fit_estimate(target, eps=eps, radius=radius)
            est = est + Estimate(est.what, fit.bytes, fit.seconds, fit.detail)
    if loss not in EXACT_LOSS_TERMS:
        est = est + Estimate(est.what, 600 * 2**20, 10.0, "a two-argument ReLU sum of the loss derivative")
    return est


# The compiled model's small gathers and per-head matmuls run far below dense-matmul peak: measured
# about 2e9 FLOP/s (icdl construct --depth 6 --width 32 --steps 20, sigmoid: 27 s).
_CONSTRUCT_FLOPS = 2e9


def construction_estimate(
    spec: NetSpec,
    *,
    loss: str = "squared",
    steps: int,
    examples: int,
    eps: float = 1e-3,
    radius: float = 10.0,
    projection: Projection = "none",
    itemsize: int = 8,
    variant: str = "paper",
) -> Estimate:
    """Memory and time of compiling the construction for ``spec`` and verifying it on one prompt
    (``icdl construct``), from this module's sizes, before anything is built.

    ``variant`` picks the sizes: ``rows`` has its own token count and width (:func:`rows_tokens`,
    :func:`rows_embedding_dim`); ``softmax`` adds the P-wide gradient slot and product MLPs of
    ``4 ceil(R / (2 sqrt(eps)))`` units per product; the others share the paper's layout.

    Memory is dominated by the verifier's trace: one ``T x D`` state per sublayer,
    ``(2N+4)L + N+1`` of them (:func:`sublayers`, :func:`readout_sublayers`, :func:`embedding_dim`),
    or by the compiler's dense ``D x D`` temporaries, plus the stored coefficients of the unique
    sublayers and the ReLU-sum fits. Time is the compiled
    forward pass's FLOPs (:func:`model_flops`) a few times over (forward, traced forward, per-sublayer
    checks) at about 2e9 FLOP/s, plus the fits. Term counts of smooth activations come from
    :func:`icdl.relu_sums.fit_estimate`; a non-squared loss is counted at its cap of 1201 terms.
    """
    from icdl import relu_sums

    _check_int("steps", steps, 0)
    _check_int("examples", examples, 1)
    N, T = spec.depth, examples + 1
    fits = Estimate("icdl construct", 0.0, 0.0)
    kwargs: dict[str, int] = {}
    if any(spec.layer_act(j).name not in EXACT_TERMS for j in range(1, min(N, 2) + 1)):
        counts = []
        for target in (spec.activation, spec.activation + "'"):
            fit = relu_sums.fit_estimate(target, eps=eps, radius=radius)
            fits = fits + Estimate(fits.what, fit.bytes, fit.seconds, fit.detail)
            counts.append(max(1, math.ceil(min(fit.count or 1.0, 1e15))))
        kwargs.update(r_terms=counts[0], r_prime_terms=counts[1])
    if loss not in EXACT_LOSS_TERMS:
        kwargs["u_terms"] = 1201
        fits = fits + Estimate(fits.what, 600 * 2**20, 10.0, "a two-argument ReLU sum of the loss derivative")
    # Sizes through the closed forms only: no O(N) table is built for a depth that will be refused.
    D = embedding_dim(spec)
    per_step = sublayers_per_step(N)
    if variant == "rows":
        D, T = rows_embedding_dim(spec), rows_tokens(spec, examples)
        per_step = rows_sublayers_per_step(spec)
    elif variant == "softmax":
        D += spec.num_params
        per_step = 4 * N + 3
    H = max(kwargs.get("r_terms", 1), kwargs.get("r_prime_terms", 2))
    K = spec.width
    heads = max(K, spec.out_dim, spec.in_dim) * H * N + 2 * spec.num_units
    hidden = (2 * spec.num_params if projection == "box" else 0) + 2 * (3 * spec.num_units + spec.out_dim)
    hidden += spec.out_dim * kwargs.get("u_terms", 2)
    mlp_work = 2 * D * hidden * T * steps
    if variant == "softmax":
        # Every token-local product is a ReLU-sum MLP; each unit reads a few slots (sparse tables).
        units = 4 * math.ceil(min(radius / (2 * math.sqrt(eps)), 1e15))
        hidden += 2 * (spec.num_params + 2 * spec.num_units) * units
        mlp_work = 2 * 8 * hidden * T * steps
        # Building the unit tables is Python work per unit: about 2e-5 s each (measured: 33 s for the
        # 1.6M units of icdl construct --variant softmax -N 3 -K 16 --activation sigmoid --eps 1e-4).
        mlp_work += int(_CONSTRUCT_FLOPS * 2e-5 * hidden)
    # Coefficients of one block + readout: per head its query/key/value entries (<= fan-in + 3), per MLP
    # unit a few entries; the update sublayer writes P weights.
    coeffs = heads * (max(K, spec.in_dim) + 3) * 2 + 4 * hidden + 2 * spec.num_params

    def states_of(per_step: int) -> int:
        return per_step * steps + readout_sublayers(N) + 4

    states = states_of(per_step)
    trace = states * T * D * itemsize
    work = heads * (max(K, spec.in_dim) + 3) * T * T * 2 * (2 * steps + 1) + mlp_work
    if variant == "rows":
        # Row attention pairs each data token with the rows of one layer only: about 16 multiply-adds per
        # weight per data token and step (forward, backward, update; traced and untraced passes), plus
        # token-local work (measured forward: 7.4e9 FLOPs for N=6, K=64, n=256, L=50).
        work = 32 * steps * (examples + 1) * spec.num_params + 4 * states_of(per_step) * T * D
    # Compiling holds a few dense D x D float64 temporaries (measured: peak ~ 2.7 D^2 x 8 bytes for
    # N=3, K=32..96); counted as 3 D^2 x 8.
    compile_bytes = 3 * D * D * 8
    est = Estimate(
        "icdl construct",
        _float(trace + compile_bytes + 3 * coeffs * itemsize + 8 * T * D * itemsize + 300 * 2**20),
        1.0 + _float(work) * 1.2 / _CONSTRUCT_FLOPS + _float(trace) / 1e9,
        f"{states} traced states of {T} tokens x D={D} ({'float64' if itemsize == 8 else 'float32'})",
    )
    return est + fits

"""The paper's error constants: value bounds and per-lemma errors (Lemmas 2-4), Lemma 6, Theorem 1 and
Corollary 1.1 (error accumulation over L GD steps), with the paper's typos named where they matter
(docs/paper.md, errata).

Closed-form arithmetic on a [`NetSpec`][icdl.nets.NetSpec], O(1) in the depth where a maximum over layers is
monotone; ``inf`` instead of an ``OverflowError`` (`icdl._arith`). [`icdl.theory`][icdl.theory] re-exports
every public name, so ``icdl.theory.corollary11_bound`` and the others keep working.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from icdl._arith import check_int, geo_sum, safe_pow, safe_prod
from icdl.errors import InputError
from icdl.nets import ACTIVATIONS, NetSpec, get_loss

__all__ = [
    "ActivationBounds",
    "Lemma6Constants",
    "Theorem1Constants",
    "activation_bounds",
    "corollary11_as_printed",
    "corollary11_bound",
    "corollary11_loose",
    "lemma2_E_r",
    "lemma2_layer_factors",
    "lemma3_error",
    "lemma4_error",
    "lemma6_constants",
    "loss_derivative_bound",
    "theorem1_constants",
]

# --------------------------------------------------------------------------------------------------
# Lemma 2-4: value bounds and per-lemma errors
# --------------------------------------------------------------------------------------------------


def _sup_abs(fn: Callable[[Tensor], Tensor], radius: float, *, unimodal: bool = False) -> float:
    """``max_{|t| <= radius} |fn(t)|`` on a dense float64 grid (endpoints and 0 included).

    ``unimodal=True`` is for functions whose ``|fn|`` on ``[-radius, radius]`` peaks at an endpoint or
    at 0 (every activation of `icdl.nets.ACTIVATIONS` and its derivative): then those three points
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
    return tuple([geo_sum(q, j) * rk for j in range(1, N)] + [geo_sum(q, N) * math.sqrt(spec.out_dim)])


def lemma2_E_r(spec: NetSpec, *, lipschitz_r: float, bound_v: float) -> float:
    """``E_r := max_j ||eps(i, j)||_2 / eps_r`` (eqs. 3.10-3.11), so ``||p̄(j) - p(j)||_2 <= E_r eps_r``
    (3.12). The geometric sums grow with j, so the maximum is at ``j = N - 1`` or ``j = N`` (O(1))."""
    K, N = spec.width, spec.depth
    q = math.sqrt(K) * lipschitz_r * bound_v
    return max(geo_sum(q, N - 1) * math.sqrt(K), geo_sum(q, N) * math.sqrt(spec.out_dim))


def lemma3_error(
    *, eps_r_prime: float, eps_r: float, lipschitz_r_prime: float, bound_v: float, E_r: float
) -> float:
    """Lemma 3, eq. (3.14): ``|r̄'_i(j-1)[k] - r'_i(j-1)[k]| <= eps_r' + L_r' B_v E_r eps_r``."""
    return eps_r_prime + safe_prod(lipschitz_r_prime, bound_v, E_r, eps_r)


def lemma4_error(*, eps_l: float, eps_r: float, lipschitz_l: float, E_r: float) -> float:
    """Lemma 4, eq. (3.16): ``|g_i[k] - u(p_i(N), y_i)[k]| <= eps_l + L_l E_r eps_r``."""
    return eps_l + safe_prod(lipschitz_l, E_r, eps_r)


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
        return (
            safe_prod(self.E_s_r, eps_r)
            + safe_prod(self.E_s_r_prime, eps_r_prime)
            + safe_prod(self.E_s_l, eps_l)
        )


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
        return safe_pow(x, m)

    B_s = max(safe_prod(xm(m), B_r_prime, B_l) for m in ends)
    inner_r = safe_prod(B_l, lipschitz_r_prime, bound_v, E_r) + safe_prod(B_r_prime, lipschitz_l, E_r)
    E_s_r = max(
        safe_prod(lipschitz_r_prime, E_r, P, B_s, safe_pow(bound_v, 2), geo_sum(x, m))
        + safe_prod(xm(m), inner_r)
        for m in ends
    )
    E_s_rp = max(safe_prod(P, B_s, bound_v, geo_sum(x, m)) + safe_prod(xm(m), B_l) for m in ends)
    E_s_l = max(safe_prod(xm(m), B_r_prime) for m in ends)
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
        return (
            safe_prod(self.C_r, eps_r) + safe_prod(self.C_r_prime, eps_r_prime) + safe_prod(self.C_l, eps_l)
        ) / 2


def theorem1_constants(
    spec: NetSpec, lemma6: Lemma6Constants, *, B_r: float, E_r: float
) -> Theorem1Constants:
    """``C_l``, ``C_r``, ``C_r'`` of Theorem 1's proof from Lemma 6's constants, ``B_r`` and ``E_r``."""
    N, P = spec.depth, lemma6.P
    c = safe_prod(N, safe_pow(P, 1.5), B_r)
    return Theorem1Constants(
        C_l=safe_prod(c, lemma6.E_s_l),
        C_r=safe_prod(c, lemma6.E_s_r) + N * P * lemma6.B_s * E_r,
        C_r_prime=safe_prod(c, lemma6.E_s_r_prime),
    )


# --------------------------------------------------------------------------------------------------
# Corollary 1.1 (error accumulation over L steps)
# --------------------------------------------------------------------------------------------------


def _check_cor(eps: float, lipschitz_f: float, steps: int) -> None:
    if not (eps >= 0):
        raise InputError(f"eps must be >= 0, got {eps}")
    if not (lipschitz_f > 0):
        raise InputError(f"the gradient's Lipschitz constant L_f must be > 0, got {lipschitz_f}")
    check_int("steps", steps, 0)


def corollary11_bound(*, eps: float, lr: float, lipschitz_f: float, steps: int) -> float:
    """Corrected Corollary 1.1: ``||w̄^l - w^l_GD||_2 <= L_f^{-1} ((1 + eta L_f)^l - 1) eps``.

    Derivation (Corollary 1.1, Lemma 14): projection is non-expansive and ``w -> w - eta ∇L_n(w)`` is
    ``(1 + eta L_f)``-Lipschitz when ``∇L_n`` is ``L_f``-Lipschitz (the paper calls ``L_f`` the Lipschitz
    constant "of L_n(w)"; it must be that of ``∇L_n``, §10.9), so ``e_l <= (1 + eta L_f) e_{l-1} + eta eps``.
    """
    _check_cor(eps, lipschitz_f, steps)
    return safe_prod(safe_pow(1 + lr * lipschitz_f, steps) - 1, eps) / lipschitz_f


def corollary11_loose(*, eps: float, lr: float, lipschitz_f: float, steps: int) -> float:
    """``L_f^{-1} (1 + eta L_f)^l eps``: the corrected bound without the ``- 1`` (always looser)."""
    _check_cor(eps, lipschitz_f, steps)
    return safe_prod(safe_pow(1 + lr * lipschitz_f, steps), eps) / lipschitz_f


def corollary11_as_printed(*, eps: float, examples: int, lipschitz_f: float, steps: int) -> float:
    """Corollary 1.1 / Lemma 14 *as printed*: ``L_f^{-1} (1 + n L_f)^l eps`` with n the number of
    examples — almost certainly a typo for ``(1 + eta L_f)^l`` (docs/paper.md, erratum E9): the argument
    gives no growth with n. Kept for comparison; it is the larger one whenever ``eta < n``."""
    _check_cor(eps, lipschitz_f, steps)
    check_int("examples", examples, 1)
    return safe_prod(safe_pow(1 + examples * lipschitz_f, steps), eps) / lipschitz_f

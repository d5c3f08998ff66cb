"""A-priori error budget of one GD step: how far the gradient a construction applies may be from ``∇L_n``.

Every variant declares the sup errors of its approximations
([`Declared`][icdl.construct.bounds.budget.Declared]): the conditioned ReLU sums of r, r' and u (Lemmas 2-4; 0
where a sum is exact), and for the variants that form products by ReLU sums
([`icdl.construct.engine.products`][icdl.construct.engine.products]) the sup error ``h^2/16`` of each product.
[`step_budget`][icdl.construct.bounds.budget.step_budget] propagates them through one step of Lemma 1 — the
forward pass (Lemma 2), r' (Lemma 3), u (Lemma 4), the backward recursion (Lemma 5, eq. 3.6) and the gradient
sum (eq. 3.5, 3.7) — **entrywise**, per example, at the step's start weights w:

* forward, ``e_z(j) = |V_j| e_p(j-1) + n_{j-1} ε_fwd`` and ``e_p(j) = ε_r + L_r e_z(j)`` (ReLU and linear
  layers: ``e_p(j) = e_z(j)``), ``e_p(0) = 0``;
* r', ``e_r'(j) = ε_r' + L_r' e_z(j)`` for smooth r; for ReLU ``e_r'(j) = 1`` where ``r'`` may switch
  (``z_j > 0`` and ``z_j - e_z < δ``, or ``z_j <= 0`` and ``z_j + e_z > 0``; with ``e_z = 0`` these are
  the relu' window hits ``0 < z < δ``), else 0;
* loss, ``e_u = ε_u + L_l e_p(N)``;
* backward, ``e_b(N) = e_u``, ``e_s(j) = e_r'(j) (|b(j)| + e_b(j)) + |r'(j)| e_b(j) + ε_der`` and
  ``e_b(j-1) = |V_j|^T e_s(j) + n_j ε_tr``, with ``b(j)`` the vector multiplied into ``r'(j)``
  (``b(N) = u``, ``b(j-1) = V_j^T s(j)``);
* gradient, ``|Ā_j - A_j| <= (e_s(j)^T (|p(j-1)| + e_p(j-1)) + |s(j)|^T e_p(j-1) + ε_grad n_s) / (2n)``
  with ``n_s`` the examples whose ``s̄_i(j)[k]`` is not exactly 0 (the query adds an exact 0);

where ``|·|`` of a reference quantity is that of exact GD at w (Lemma 1: no error in it) and every ε is
**declared**, never measured. A product of ReLU sums whose second factor is exactly 0 is exactly 0, so the
product terms ``n ε`` count only the factors not known to be 0: entries of a ReLU layer with
``z + e_z <= 0`` (then ``z̄ <= 0``: ``p̄``, ``r̄'`` and ``s̄`` are exactly 0, and so are their errors).

The approximation budget is ``||Ā - A||_F`` over all layers. Each line is the triangle inequality with a
Lipschitz constant (``|r̄(z̄) - r(z)| <= |r̄(z̄) - r(z̄)| + L_r |z̄ - z|``), valid while every argument of a
fitted sum or product stays in the range it was fitted on — which the verifier checks separately
(``out_of_range_count == 0``). It is the paper's Lemma 2-6 propagation (eqs. 3.8-3.16) with
entrywise ``|V|`` in place of the norm bounds ``sqrt(K) B_v``, so it is much tighter than
[`icdl.theory_bounds.theorem1_constants`][icdl.theory_bounds.theorem1_constants] and needs no ``B_v``.

Two terms are added: the sublayer tolerance (PASS condition (a) leaves the written ``w - η ḡ`` within
``tol max(1, |w - η ḡ|)`` of the surrogate's, entrywise: ``tol max(1, |w| + η(|∇L_n| + |Ā - A|)) / η``) and
round-off of the reference recursion itself (``γ_k = k u / (1 - k u)`` of a length-k sum, applied to
``|s|^T |p| / (2n)``, ``k = n + N max(n_j) + 8``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from icdl.nets import GradTerms, NetSpec, get_loss, lemma1_terms, unflatten

if TYPE_CHECKING:
    from icdl.construct.engine.terms import Terms
    from icdl.construct.protocols import Compiled

__all__ = ["Declared", "StepBudget", "declared_sums", "largest", "step_budget", "sum_error", "sums_only"]

# relu_sums verifies a fit on a grid and its midpoints, with a grid fine enough to miss at most 1e-2 eps
# between samples: the declared sup error of a fitted sum is its target eps plus that margin.
SAMPLING_MARGIN = 1e-2


def sum_error(t: Terms) -> float:
    """The declared sup error of a conditioned ReLU sum on its range: its measured ``sup_error`` when exact
    (0, or round-off for the two-argument squared-loss sum), else the target ``eps`` the fit verified
    (``sup_error <= eps``) plus the fitter's sampling margin."""
    if t.exact:
        return t.sup_error
    return max(t.sup_error, t.eps) * (1.0 + SAMPLING_MARGIN)


@dataclass(frozen=True)
class Declared:
    """The sup errors a variant declares for one configuration (0: exact), the inputs of
    [`step_budget`][icdl.construct.bounds.budget.step_budget].

    Attributes:
        r, r_prime: per layer j (index j-1), sup error of the r and r' sums on ``[-R, R]``.
        u: sup error of the loss-derivative sum on ``[-R, R]^2`` (0 for squared loss).
        u_range: the range ``R`` of the u sum's arguments (``p(N)`` and y); inf when exact.
        forward: sup error of each product ``v p`` in ``z = V p`` (softmax variant), 0 otherwise.
        transpose: sup error of each product ``v s`` in ``V^T s`` (softmax variant).
        derivative: per layer j, sup error of the product ``r'(j) b(j)`` (0 for the EWML's exact product
            and for 0/1-mask gates).
        gradient: sup error of each product ``p s`` of the gradient sum (softmax variant).
        window_hits: how many relu' window hits ``0 < z < δ`` (examples) the variant allows in a PASS.
    """

    r: tuple[float, ...]
    r_prime: tuple[float, ...]
    u: float
    u_range: float = math.inf
    forward: float = 0.0
    transpose: float = 0.0
    derivative: tuple[float, ...] = field(default_factory=tuple)
    gradient: float = 0.0
    window_hits: int = 0

    def derivative_at(self, j: int) -> float:
        """``ε_der`` of layer j (1-based)."""
        return self.derivative[j - 1] if self.derivative else 0.0


def declared_sums(
    r: tuple[Terms, ...],
    r_prime: tuple[Terms, ...],
    u: Terms,
    *,
    forward: float = 0.0,
    transpose: float = 0.0,
    gradient: float = 0.0,
    derivative: tuple[float, ...] = (),
) -> Declared:
    """A [`Declared`][icdl.construct.bounds.budget.Declared] from a model's conditioned sums
    ([`sum_error`][icdl.construct.bounds.budget.sum_error] of each) and the sup errors of its products."""
    return Declared(
        r=tuple(sum_error(t) for t in r),
        r_prime=tuple(sum_error(t) for t in r_prime),
        u=sum_error(u),
        u_range=math.inf if u.exact else u.radius,
        forward=forward,
        transpose=transpose,
        derivative=derivative,
        gradient=gradient,
    )


def sums_only(model: Compiled) -> Declared:
    """The declaration of a variant whose only approximations are its ReLU sums (products exact: the EWML,
    or 0/1-mask gates): ``paper``, ``compact``, ``no-ewml``."""
    t = model.terms
    return declared_sums(t.r, t.r_prime, t.u)


@dataclass(frozen=True)
class StepBudget:
    """The a-priori bound on ``||ḡ - ∇L_n(w)||_2`` for one step, and its parts.

    Attributes:
        total: ``approximation + tolerance + roundoff``.
        approximation: ``||Ā - A||_F`` from the declared sup errors (the module docstring).
        tolerance: what the sublayer tolerance lets through to the applied gradient.
        roundoff: round-off of the reference recursion.
        u_out_of_range: arguments of a fitted loss-derivative sum (``|p(N)| + e_p(N)`` or ``|y|``) outside
            its range (the budget assumes none).
    """

    total: float
    approximation: float
    tolerance: float
    roundoff: float
    u_out_of_range: int = 0


def largest(budgets: list[StepBudget]) -> dict[str, float]:
    """The parts of the largest of ``budgets`` (a non-finite one counts as largest); empty for none."""
    if not budgets:
        return {}
    b = max(budgets, key=lambda b: b.total if math.isfinite(b.total) else math.inf)
    return {"approximation": b.approximation, "tolerance": b.tolerance, "round-off": b.roundoff}


def _relu_switch(z: Tensor, e_z: Tensor, delta: float) -> Tensor:
    """1 where ``r'`` of a ReLU layer may differ between ``z̄`` (``|z̄ - z| <= e_z``, through the relu' step
    of width δ) and z, else 0."""
    return torch.where(z > 0, z - e_z < delta, z + e_z > 0).to(z.dtype)


def _zero(t: Tensor) -> bool:
    """Whether every entry of ``t`` is exactly 0 (a NaN is not)."""
    return float(t.amax()) == 0.0 and float(t.amin()) == 0.0


def _product(a: Tensor, b: Tensor, a_zero: bool = False, b_zero: bool = False) -> Tensor:
    """``a @ b`` (2-D), without the multiplication where a factor is exactly 0 (``a_zero``, ``b_zero``) and
    the other finite (its sum is): then the product is exactly 0. The error terms of an exact construction
    are 0 in most layers (ReLU, exact sums and products: only relu' window hits make any)."""
    if (a_zero and math.isfinite(float(b.sum()))) or (b_zero and math.isfinite(float(a.sum()))):
        return torch.zeros(a.shape[0], b.shape[1], dtype=torch.result_type(a, b))
    return a @ b


@dataclass
class _Forward:
    """The forward part of the budget, per example and entry: ``e_p(0..N)``, ``e_r'(1..N)`` and where a ReLU
    layer's ``p̄(j)`` and ``r̄'(j)`` are exactly 0 (``z_j + e_z <= 0``, so ``z̄_j <= 0``; None for other
    layers)."""

    e_p: list[Tensor]
    e_rp: list[Tensor]
    zero: list[Tensor | None]
    e_p_zero: list[bool]  # whether e_p(j) is exactly 0 (no forward error yet)


def _forward(spec: NetSpec, dec: Declared, Vabs: list[Tensor], pre: list[Tensor], delta: float) -> _Forward:
    """``e_z(j) = |V_j| e_p(j-1) + ε_fwd · #(entries of p̄(j-1) not exactly 0)``, then ``e_p(j)`` and
    ``e_r'(j)`` (the module docstring; ``Vabs``: the ``|V_j|``). A product whose second factor is exactly 0
    is exactly 0 ([`icdl.construct.engine.products`][icdl.construct.engine.products]), so known zeros of
    ``p̄`` add no product error."""
    n = pre[0].shape[0]
    fw = _Forward([torch.zeros(n, spec.in_dim, dtype=pre[0].dtype)], [], [], [True])
    live = torch.full((n, 1), float(spec.in_dim), dtype=pre[0].dtype)
    for j, Va in enumerate(Vabs, start=1):
        z = pre[j - 1]
        e_z = _product(fw.e_p[-1], Va.T, fw.e_p_zero[-1])
        if dec.forward != 0.0:  # else the count adds exact zeros
            e_z = e_z + dec.forward * live
        act = spec.layer_act(j)
        zero: Tensor | None = None
        if act.name == "relu" and _zero(e_z):  # the general case below with e_z = 0, in fewer passes
            zero = z <= 0
            fw.e_p.append(e_z)
            fw.e_rp.append(((z > 0) & (z < delta)).to(z.dtype))
        elif act.name == "relu":
            zero = z + e_z <= 0
            fw.e_p.append(torch.where(zero, 0.0, e_z))
            fw.e_rp.append(_relu_switch(z, e_z, delta))
        elif act.name == "identity":
            fw.e_p.append(e_z)
            fw.e_rp.append(torch.zeros_like(e_z))
        else:
            fw.e_p.append(dec.r[j - 1] + act.lipschitz * e_z)
            fw.e_rp.append(dec.r_prime[j - 1] + act.deriv_lipschitz * e_z)
        fw.zero.append(zero)
        fw.e_p_zero.append(_zero(fw.e_p[-1]))
        if dec.forward != 0.0:
            live = (
                (~zero).sum(1, keepdim=True).to(z.dtype)
                if zero is not None
                else torch.full_like(live, z.shape[1])
            )
    return fw


def step_budget(
    spec: NetSpec,
    loss: str,
    dec: Declared,
    w: Tensor,
    x: Tensor,
    y: Tensor,
    *,
    lr: float,
    tol: float,
    delta: float,
    terms: GradTerms | None = None,
) -> StepBudget:
    """The a-priori budget of the gradient applied at weights ``w`` (P,) on the examples ``x`` (n, d_x),
    ``y`` (n, d_y) (the query adds an exact 0 in every variant): see the module docstring. ``delta`` is the
    relu' step width, ``tol`` the sublayer check's relative tolerance. ``terms``: the exact Lemma 1 terms at
    ``w`` on these examples where they are already computed (e.g. the examples' rows of the verifier's
    masked recursion, [`GradTerms.first_rows`][icdl.nets.GradTerms.first_rows]); else computed here."""
    n = x.shape[0]
    ex = lemma1_terms(spec, loss, w, x, y) if terms is None else terms
    if ex.p[0].shape[-2] != n:
        raise ValueError(f"terms of {ex.p[0].shape[-2]} examples for a budget of {n}")
    w_abs = w.abs()
    Vs, Vabs = unflatten(spec, w), unflatten(spec, w_abs)
    fw = _forward(spec, dec, Vabs, ex.pre, delta)
    e_u = dec.u + get_loss(loss).deriv_lipschitz * fw.e_p[-1]
    u_out = 0
    if math.isfinite(dec.u_range):
        u_out = int(((ex.p[-1].abs() + fw.e_p[-1]) > dec.u_range).sum()) + int((y.abs() > dec.u_range).sum())
    E_all, mag = _backward(spec, dec, ex, Vs, Vabs, fw, e_u)
    approx = float(E_all.norm())
    written = w_abs + lr * (ex.grad.abs() + E_all)
    tol_term = float((tol * written.clamp_min(1.0) / lr).norm())
    unit = torch.finfo(w.dtype).eps / 2
    k = n + spec.depth * max(spec.widths) + 8
    roundoff = 2 * k * unit / (1 - k * unit) * float(mag.norm())  # the surrogate's and the true gradient's
    return StepBudget(approx + tol_term + roundoff, approx, tol_term, roundoff, u_out)


def _live(s: Tensor, zero: Tensor | None) -> Tensor:
    """1 where a layer's ``s̄`` is not known to be exactly 0 (``zero``: a ReLU layer's known zeros), else 0."""
    return torch.ones_like(s) if zero is None else (~zero).to(s.dtype)


def _backward(
    spec: NetSpec,
    dec: Declared,
    ex: GradTerms,
    Vs: list[Tensor],
    Vabs: list[Tensor],
    fw: _Forward,
    e_u: Tensor,
) -> tuple[Tensor, Tensor]:
    """``|Ā - A|`` entrywise (P,): the backward recursion ``e_s``, ``e_b`` and the gradient sum (the module
    docstring). Where a ReLU layer's ``r̄'`` is exactly 0, ``s̄`` is exactly 0 (its product too). Also
    ``|s|^T |p| / (2n)`` (P,), the magnitude of the gradient sum (its round-off)."""
    n = ex.u.shape[0]
    b, e_b = ex.u, e_u
    out: list[Tensor] = [torch.empty(0)] * spec.depth
    mag: list[Tensor] = [torch.empty(0)] * spec.depth
    for j in range(spec.depth, 0, -1):
        rp, s, zero = ex.r_prime[j - 1], ex.s[j - 1], fw.zero[j - 1]
        e_s = fw.e_rp[j - 1] * (b.abs() + e_b) + rp.abs() * e_b + dec.derivative_at(j)
        if zero is not None:
            e_s = torch.where(zero, 0.0, e_s)
        p_abs, s_abs, e_in, in_zero = ex.p[j - 1].abs(), s.abs(), fw.e_p[j - 1], fw.e_p_zero[j - 1]
        s_zero = _zero(e_s)
        E = _product(e_s.T, p_abs if in_zero else p_abs + e_in, s_zero) + _product(
            s_abs.T, e_in, b_zero=in_zero
        )
        # the products' counts (entries of s̄ not exactly 0) add exact zeros where they are declared exact
        if dec.gradient != 0.0:
            E = E + dec.gradient * _live(s, zero).sum(0)[:, None]
        out[j - 1] = (E / (2 * n)).reshape(-1)
        mag[j - 1] = (s_abs.T @ p_abs).reshape(-1)
        if j > 1:
            b = ex.back[j - 2] if ex.back else s @ Vs[j - 1]  # V_j^T s(j), kept by the recursion
            e_b = _product(e_s, Vabs[j - 1], s_zero)
            if dec.transpose != 0.0:
                e_b = e_b + dec.transpose * _live(s, zero).sum(1, keepdim=True)
    return torch.cat(out), torch.cat(mag) / (2 * n)

"""A bound on the prediction error ``|f(w̄, x_q) - f(w_GD, x_q)|`` from a bound ``ρ`` on ``||w̄ - w_GD||_2``.

For the network of eq. (3.3), ``p(0) = x``, ``z(j) = V_j p(j-1)``, ``p(j) = r_j(z(j))``, ``f = p(N)``,
the derivative in ``V_j`` is ``∂f/∂V_j = D_N V_N D_{N-1} ... V_{j+1} D_j ⊗ p(j-1)^T`` with
``D_k = diag r_k'(z(k))``, so every output coordinate i has

    ||∂f_i/∂V_j||_F <= (prod_{k=j..N} L_k) (prod_{k=j+1..N} ||V_k||_2) ||p(j-1)||_2,

``L_k`` the Lipschitz constant of ``r_k`` (``icdl.nets.ACTIVATIONS``; 1 for a linear output). Over the ball
``||w - w_GD||_2 <= ρ`` every ``||V_k||_2`` is at most ``||V_k^GD||_2 + ρ`` (the spectral norm of a change is
at most its Frobenius norm, at most ρ), and ``||p(j)||_2 <= ||p^GD(j)||_2 + d_j``, the activations of the
exact network at ``w_GD`` and a bound ``d_j`` on how far they move over the ball:
``d_0 = 0``, ``d_j = L_j ((||V_j^GD||_2 + ρ) d_{j-1} + ρ ||p^GD(j-1)||_2)`` (``|r(a) - r(b)| <= L |a - b|``
coordinatewise, and ``V p - V^GD p^GD = V (p - p^GD) + (V - V^GD) p^GD``). Since ``d_0 = 0``, ``||V_1||_2`` is
never needed (an SVD of a K x d_x matrix: the cost at TinT's scale), and the bound is never above the
recursion ``||p(j)||_2 <= |r_j(0)| sqrt(n_j) + L_j (||V_j^GD||_2 + ρ) ||p(j-1)||_2`` it replaces. With these
in the line above,

    G(ρ) = sqrt(sum_j ||∂f_i/∂V_j||_F^2)

bounds ``||∇_w f_i(w, x_q)||_2`` on the whole ball (almost everywhere for ReLU, which is enough: f is
Lipschitz), and the mean value theorem along the segment from ``w_GD`` to ``w̄`` gives

    |f_i(w̄, x_q) - f_i(w_GD, x_q)| <= G(ρ) ρ        for every output coordinate i.

With ``ρ`` = Corollary 1.1 at the a-priori budget (``bound_budget_l2``, which (c) checks the trajectory
against) this is an a-priori bound on the prediction of the weights the transformer computed.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from icdl.nets import NetSpec, unflatten

__all__ = ["activation_bounds", "prediction_bound", "prediction_lipschitz"]


def _spectral_norm(V: Tensor) -> float:
    """``||V||_2``: the largest singular value (a vector's norm when V has one row or one column)."""
    if min(V.shape) == 1:
        return float(V.norm())
    return float(torch.linalg.matrix_norm(V, ord=2))


def activation_bounds(
    spec: NetSpec, w: Tensor, x_query: Tensor, radius: float, norms: list[float] | None = None
) -> list[float]:
    """Bounds on ``||p(j)(v, x_query)||_2``, j = 0..N, for every ``v`` with ``||v - w||_2 <= radius``:
    ``||p^w(j)||_2 + d_j`` (the module docstring; ``d_0 = 0``, and ``||V_1||_2`` is never computed).
    ``norms[j - 1]``: ``||V_j||_2`` at w if already known (j >= 2)."""
    Vs = unflatten(spec, w.double())
    acts = [spec.layer_act(j) for j in range(1, spec.depth + 1)]
    p = x_query.double()
    out = [float(p.norm())]
    dev = 0.0  # d_j: how far p(j) moves over the ball
    for j, a in enumerate(acts):
        near = float(p.norm())
        p = a.fn(Vs[j] @ p)
        moved = 0.0
        if dev > 0:  # never for j = 1: no SVD of V_1
            moved = ((norms[j] if norms is not None else _spectral_norm(Vs[j])) + radius) * dev
        dev = a.lipschitz * (moved + radius * near)
        out.append(float(p.norm()) + dev)
    return out


def prediction_lipschitz(spec: NetSpec, w: Tensor, x_query: Tensor, radius: float) -> float:
    """``G(radius)``: a bound on ``||∇_w f_i(v, x_query)||_2`` for every output i and every ``v`` with
    ``||v - w||_2 <= radius`` (the module docstring). ``inf`` for a non-finite radius."""
    if not math.isfinite(radius):
        return math.inf
    Vs = unflatten(spec, w.double())
    # ||V_k||_2 for k = 2..N (layer 1's gradient has no V_1 in its product, and d_0 = 0)
    sigmas = [math.nan] + [_spectral_norm(V) for V in Vs[1:]]
    norms = [s + radius for s in sigmas]
    lips = [spec.layer_act(j).lipschitz for j in range(1, spec.depth + 1)]
    p_norm = activation_bounds(spec, w, x_query, radius, sigmas)
    total = 0.0
    for j in range(spec.depth):  # layer j+1 (1-based): the weights V_{j+1}
        g = math.prod(lips[j:]) * math.prod(norms[j + 1 :]) * p_norm[j]
        total += g * g
    return math.sqrt(total)


def prediction_bound(spec: NetSpec, w_gd: Tensor, x_query: Tensor, radius: float) -> float:
    """``G(radius) * radius``: a bound on ``max_i |f_i(w̄, x_query) - f_i(w_gd, x_query)|`` for every ``w̄``
    within ``radius`` of ``w_gd`` (0 at radius 0; ``inf`` or NaN propagate)."""
    if radius == 0.0:
        return 0.0
    if not math.isfinite(radius):
        return radius if math.isnan(radius) else math.inf
    return prediction_lipschitz(spec, w_gd, x_query, radius) * radius

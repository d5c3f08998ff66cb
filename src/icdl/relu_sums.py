"""Sums of ReLUs: ``g(t) ≈ sum_m c_m relu(a_m t + b_m)`` (paper Definition 4, Lemma 7; docs/relu_sums.md).

Each term becomes one attention head (or one MLP hidden unit) of the compiled transformer, so the fits
here aim for FEW terms at a given sup error, and every fit is *verified*: ``sup_error`` is the maximum of
``|g - sum|`` measured on a dense grid over ``[-R, R]``, never an estimate.

Usage:

```python
from icdl.relu_sums import relu_sum_for, loss_derivative_sum
s = relu_sum_for("sigmoid", eps=1e-3, radius=10.0)   # ~20 terms, s.sup_error <= 1e-3
s(torch.linspace(-10, 10, 5))                          # evaluates the sum
u = loss_derivative_sum("logistic", eps=1e-2, radius=1.0)   # two-argument sum u(t, y)
```

Scalar fits ([`fit_relu_sum`][icdl.relu_sums.fit_relu_sum]) are continuous piecewise-linear functions built
greedily inside the tube ``|g - f| <= eps``: each linear piece starts where the last one ended and is made as
long as the tube allows. On a convex (concave) stretch this puts the knots on the lower (upper) edge of the
tube, which is the minimax-shifted interpolant: pieces ``sqrt 2`` longer than plain interpolation with the
same error, so about ``∫ sqrt(|f''| / (16 eps)) dt`` terms instead of ``∫ sqrt(|f''| / (8 eps)) dt``.
The sum is **constant outside [-R, R]** (flat extension: all knots lie in ``[-R, R]`` and the slopes
cancel), and flat stretches of ``f`` at either end cost no terms.

Two-argument sums (a [`ReluSum`][icdl.relu_sum_type.ReluSum] with ``a`` of shape ``(H, 2)``, for the loss
derivative ``u(t, y)`` of Lemma 4 / (C.13)) are sums of ridge functions ``relu(a0 t + a1 y + b)`` along
several directions, with coefficients by (Lawson re-weighted) least squares on a 2-D grid, grown until the
measured sup error meets ``eps``.

The [`ReluSum`][icdl.relu_sum_type.ReluSum] type itself (evaluation, size and conditioning measures, JSON
form) is defined in [`icdl.relu_sum_type`][icdl.relu_sum_type] and re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from icdl.budget import Estimate
from icdl.errors import InputError
from icdl.nets import ACTIVATIONS, HUBER_DELTA, LOSSES
from icdl.relu_sum_type import EVAL_CHUNK_ELEMS, ReluSum, as_f64

__all__ = [
    "ReluSum",
    "fit_estimate",
    "fit_relu_sum",
    "fit_relu_sum2",
    "loss_derivative_sum",
    "relu_sum_for",
    "target_function",
]

_F64 = torch.float64
# Relative sampling error allowed on the grids: the sup of |f - g| between grid points can exceed the
# sampled maximum by at most h^2 max|f''| / 8 (Taylor at the maximum), and the grid spacing h is chosen
# so that this is <= _SAMPLING_REL * eps; the fit is built in a tube 1.1% narrower than eps, then
# measured on the grid AND its midpoints, which leaves at most (h/2)^2 max|f''| / 8 = eps / 400 unmeasured.
_SAMPLING_REL = 1e-2
_MIN_GRID = 20_001
_MAX_GRID = 4_000_001


# Ranges a fitted sum accepts: beyond them the grid spacing squared under- or overflows a float, and no
# construction needs them (a sum is flat outside [-R, R]).
_MIN_FIT_RADIUS, _MAX_FIT_RADIUS = 1e-6, 1e8


def _check_fit_radius(radius: float, target: str) -> None:
    if not _MIN_FIT_RADIUS <= radius <= _MAX_FIT_RADIUS:
        raise InputError(
            f"range {radius:g} is outside [{_MIN_FIT_RADIUS:g}, {_MAX_FIT_RADIUS:g}], where {target} "
            "can be fitted by a sum of ReLUs"
        )


def _check_positive(name: str, value: float) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(x) or x <= 0:
        raise InputError(f"{name} must be a finite number > 0, got {value!r}")
    return x


def _check_eps_below_range(eps: float, fmax: float, target: str, radius: float, force: bool = False) -> None:
    """Refuse an ``eps`` at or above ``max |f|`` on ``[-R, R]`` (``fmax``, measured on the grid).

    There the zero function is already within ``eps`` everywhere, so the greedy fit returns a sum with
    NO terms, and a network built from it would have no heads/units for the activation (the cause of the
    "cannot reshape tensor of 0 elements" failures of ``icdl construct`` and ``icdl theory``).
    """
    if force or eps >= fmax:
        raise InputError(
            f"--eps {eps:g} is at or above max|{target}| = {fmax:.6g} on [-{radius:g}, {radius:g}], where "
            f"the fitted ReLU sum has no terms; --eps must be in (0, {fmax:.6g})"
        )


# --------------------------------------------------------------------------------------------------
# Named targets
# --------------------------------------------------------------------------------------------------


def _parse_target(target: str) -> tuple[str, bool]:
    """``"sigmoid'"`` / ``"sigmoid-deriv"`` -> ``("sigmoid", True)``; unknown names are a user error."""
    if not isinstance(target, str):
        raise InputError(f"function name must be a string, got {target!r}")
    name, deriv = target.strip(), False
    if name.endswith("'"):
        name, deriv = name[:-1], True
    elif name.endswith("-deriv"):
        name, deriv = name[: -len("-deriv")], True
    if name not in ACTIVATIONS:
        choices = ", ".join([*ACTIVATIONS, *(f"{n}'" for n in ACTIVATIONS)])
        raise InputError(f"unknown function {target!r}; choose one of {choices}")
    return name, deriv


def target_function(target: str) -> Callable[[Tensor], Tensor]:
    """The exact function a name stands for (``"tanh"``, ``"tanh'"``, ``"tanh-deriv"`` ...)."""
    name, deriv = _parse_target(target)
    act = ACTIVATIONS[name]
    return act.deriv if deriv else act.fn


def _grid(radius: float, n: int = _MIN_GRID, extra: tuple[float, ...] = ()) -> Tensor:
    g = torch.linspace(-radius, radius, n, dtype=_F64)
    if extra:
        g = torch.cat([g, torch.tensor([e for e in extra if -radius <= e <= radius], dtype=_F64)])
    return g


def _exact_sum(
    terms: list[tuple[float, float, float]],
    fn: Callable[[Tensor], Tensor],
    target: str,
    radius: float,
    window: tuple[float, float] | None = None,
) -> ReluSum:
    a, b, c = (torch.tensor([t[i] for t in terms], dtype=_F64) for i in range(3))
    s = ReluSum(a, b, c, target=target, radius=radius, eps=0.0, sup_error=0.0, exact=True)
    extra = (0.0,) if window is None else (0.0, window[1], 2 * window[1], -window[1])
    t = _grid(radius, extra=extra)
    if window is not None:
        t = t[(t <= window[0]) | (t >= window[1])]
    err = float((fn(t) - s(t)).abs().max())
    object.__setattr__(s, "sup_error", err)
    return s


def relu_sum_for(target: str, *, eps: float = 1e-3, radius: float = 10.0, delta: float = 1e-9) -> ReluSum:
    """A ReLU sum for an activation from `icdl.nets.ACTIVATIONS` or its derivative.

    ``target`` is an activation name (``relu, sigmoid, tanh, softplus, identity``) or its derivative
    with a trailing prime (``"sigmoid'"``) or ``"-deriv"`` suffix. Exact representations where they
    exist (``eps`` is then reported as 0.0):

    * ``relu`` -> ``[(1, 0, 1)]``; ``identity`` -> ``t = relu(t) - relu(-t)``;
    * ``identity'`` -> the constant ``1 = relu(0 t + 1)``;
    * ``relu'`` -> the delta-step ``relu(t/delta) - relu(t/delta - 1)``, i.e. terms
      ``[(1/delta, 0, 1), (1/delta, -1, -1)]``: equal to ``1{t > 0}`` outside ``(0, delta)``, with
      ``r'(0) = 0`` (PyTorch's convention; docs/relu_sums.md). This is the same function as the textbook
      form ``[(1, 0, 1/delta), (1, -delta, -1/delta)]`` but exact in floating point: there the rounding of
      ``t - delta`` is multiplied by ``1/delta`` (an error of 2e-6 at ``|t| = 10`` for ``delta = 1e-9``);
      here ``t/delta - 1`` is exact once ``t/delta >= 1/2``, so the difference is exactly 1.

    Everything else is fitted by [`fit_relu_sum`][icdl.relu_sums.fit_relu_sum] to a measured sup error ``<=
    eps`` on ``[-radius, radius]``; an ``eps`` at or above ``max |f|`` there is an
    [`InputError`][icdl.errors.InputError] (the zero function would fit, leaving a sum with no terms).
    """
    eps = _check_positive("eps", eps)
    radius = _check_positive("radius", radius)
    delta = _check_positive("delta", delta)
    name, deriv = _parse_target(target)
    label = f"{name}'" if deriv else name
    fn = target_function(label)
    if name == "relu" and not deriv:
        return _exact_sum([(1.0, 0.0, 1.0)], fn, label, radius)
    if name == "identity" and not deriv:
        return _exact_sum([(1.0, 0.0, 1.0), (-1.0, 0.0, -1.0)], fn, label, radius)
    if name == "identity" and deriv:
        return _exact_sum([(0.0, 1.0, 1.0)], fn, label, radius)
    if name == "relu" and deriv:
        # The slopes are 1/delta: below the float64 spacing of t on [-R, R] the step is invisible to any
        # input, and below ~1e-308 its slope is not even a finite number (inf/nan terms).
        if delta < radius * 2.0**-52:
            raise InputError(
                f"delta={delta:g} is below the float64 resolution of t on [-{radius:g}, {radius:g}] "
                f"({radius * 2.0**-52:.3g}): its step slope 1/delta is meaningless; use a larger --delta"
            )
        return _exact_sum(
            [(1.0 / delta, 0.0, 1.0), (1.0 / delta, -1.0, -1.0)], fn, label, radius, (0.0, delta)
        )
    with torch.no_grad():
        fmax = float(fn(_grid(radius)).abs().max())
    _check_eps_below_range(eps, fmax, label, radius)
    return fit_relu_sum(fn, radius=radius, eps=eps, target=label)


def fit_estimate(target: str, *, eps: float = 1e-3, radius: float = 10.0) -> Estimate:
    """Memory and time [`relu_sum_for`][icdl.relu_sums.relu_sum_for] will need, from a 20001-point probe of
    ``target`` (O(1)).

    The fit runs on a grid of ``n = 2R / sqrt(8 * 1e-2 * eps / max|f''|)`` points (at most
    ``_MAX_GRID``) and needs about ``H = 0.27 * int sqrt|f''| dt / sqrt(eps)`` terms (the count of a
    piecewise-linear interpolant within eps; 0.25-0.27 measured for every smooth activation here);
    checking it evaluates the ``n x H`` term table twice (grid and midpoints). Exact sums cost nothing.
    The estimated ``H`` is returned as ``Estimate.count``.
    """
    eps = _check_positive("eps", eps)
    radius = _check_positive("radius", radius)
    name, deriv = _parse_target(target)
    label = f"{name}'" if deriv else name
    if name in ("relu", "identity"):
        return Estimate(f"the ReLU sum of {label}", 64 * _MIN_GRID, 0.1, "exact", 2.0)
    _check_fit_radius(radius, label)
    with torch.no_grad():
        probe = _grid(radius)
        f = torch.as_tensor(target_function(label)(probe), dtype=_F64).numpy()
    h = 2 * radius / (len(probe) - 1)
    d2 = np.abs(np.diff(f, 2)) / h**2
    curv = max(float(np.nan_to_num(d2, nan=np.inf).max()), 1e-300)
    spacing = math.sqrt(8 * _SAMPLING_REL * eps / curv)  # 0.0 when eps/curv underflows (eps=5e-324)
    want = 2 * radius / spacing + 1 if spacing > 0 else math.inf
    terms = 2 + 0.27 * float(np.sum(np.sqrt(d2)) * h) / math.sqrt(eps)
    if not want <= _MAX_GRID:  # the fit refuses at once ("eps too small"): nothing to estimate
        return Estimate(f"the ReLU sum of {label}", 64 * _MIN_GRID, 1.0, "refused by the grid cap", terms)
    n = max(_MIN_GRID, math.ceil(want))
    # The fit stops before evaluating more than max_terms (200 000) terms; a retry may double the grid.
    work = 2 * min(2 * n, _MAX_GRID) * min(terms, 200_000)
    return Estimate(
        f"the ReLU sum of {label} at eps={eps:g} on [-{radius:g}, {radius:g}]",
        40 * 8 * n + 8 * EVAL_CHUNK_ELEMS + 300 * 2**20,
        1.0 + work / 1.5e8,
        f"about {terms:.3g} terms on a grid of {n} points",
        terms,
    )


# --------------------------------------------------------------------------------------------------
# Scalar fit: greedy longest pieces inside the tube |g - f| <= eps
# --------------------------------------------------------------------------------------------------


def _greedy_chain(
    x: np.ndarray, lo: np.ndarray, hi: np.ndarray, suf_lo: np.ndarray, suf_hi: np.ndarray, i: int, y: float
) -> list[tuple[float, float]]:
    """Knots of a continuous piecewise-linear chain from ``(x[i], y)`` that stays in ``[lo, hi]`` at
    every grid point and ends in a flat piece to ``x[-1]``. Each piece is as long as the tube allows;
    the chain stops as soon as a piece can reach a point from which a constant fits the rest."""
    m = len(x)
    knots = [(float(x[i]), y)]
    width = 64
    while True:
        if suf_lo[i] <= y <= suf_hi[i]:
            return knots  # a constant from here on fits: the chain ends with this knot
        while True:
            j_end = min(i + width, m - 1)
            dx = x[i + 1 : j_end + 1] - x[i]
            cl = np.maximum.accumulate((lo[i + 1 : j_end + 1] - y) / dx)
            cu = np.minimum.accumulate((hi[i + 1 : j_end + 1] - y) / dx)
            bad = np.flatnonzero(cl > cu)
            if bad.size or j_end == m - 1:
                n_ok = int(bad[0]) if bad.size else len(dx)
                break
            width *= 2
        # n_ok >= 1: the first grid point is always reachable because lo < hi there.
        cl, cu, dx = cl[:n_ok], cu[:n_ok], dx[:n_ok]
        y_lo, y_hi = y + cl * dx, y + cu * dx
        j_abs = np.arange(i + 1, i + 1 + n_ok)
        ov_lo = np.maximum(y_lo, suf_lo[j_abs])
        ov_hi = np.minimum(y_hi, suf_hi[j_abs])
        gap = ov_hi - ov_lo
        k = int(np.argmax(gap))
        if gap[k] >= 0:  # this piece can end where a constant fits the rest: last knot
            knots.append((float(x[j_abs[k]]), float(0.5 * (ov_lo[k] + ov_hi[k]))))
            return knots
        s = 0.5 * (cl[-1] + cu[-1])
        i, y = int(j_abs[-1]), float(y + s * dx[-1])
        knots.append((float(x[i]), y))
        width = max(64, 2 * n_ok)


def _chain_terms(
    knots: list[tuple[float, float]], zero_start: bool
) -> tuple[list[float], list[float], list[float]]:
    """Terms of the flat-extended chain: ``y_1 + sum_i (s_i - s_{i-1}) relu(t - x_i)``."""
    xs = np.array([k[0] for k in knots])
    ys = np.array([k[1] for k in knots])
    slopes = np.concatenate([[0.0], np.diff(ys) / np.diff(xs), [0.0]]) if len(xs) > 1 else np.zeros(2)
    dslope = np.diff(slopes)
    a: list[float] = []
    b: list[float] = []
    c: list[float] = []
    if not zero_start and ys[0] != 0.0:
        a.append(0.0)
        b.append(1.0)
        c.append(float(ys[0]))
    for xi, ds in zip(xs, dslope, strict=True):
        if ds != 0.0:
            a.append(1.0)
            b.append(float(-xi))
            c.append(float(ds))
    return a, b, c


def _fit_on_grid(x: np.ndarray, f: np.ndarray, e: float) -> tuple[list[float], list[float], list[float]]:
    """Fewest-terms chain among a few start choices and both orientations (t and -t)."""
    best: tuple[list[float], list[float], list[float]] | None = None
    for mirror in (False, True):
        xx, ff = (-x[::-1], f[::-1]) if mirror else (x, f)
        lo, hi = ff - e, ff + e
        suf_lo = np.maximum.accumulate(lo[::-1])[::-1]
        suf_hi = np.minimum.accumulate(hi[::-1])[::-1]
        pre_lo, pre_hi = np.maximum.accumulate(lo), np.minimum.accumulate(hi)
        starts: list[tuple[int, float, bool]] = []
        # Free left value: the longest flat start piece, then a few heights in its window.
        k = int(np.flatnonzero(pre_lo <= pre_hi)[-1])
        for frac in (0.5, 0.02, 0.98):
            starts.append((k, float(pre_lo[k] + frac * (pre_hi[k] - pre_lo[k])), False))
        # Zero left value saves the constant term when |f| <= e at the start.
        ok = (pre_lo <= 0.0) & (pre_hi >= 0.0)
        if ok[0]:  # ok is a prefix property: True up to some index, then False
            starts.append((int(np.flatnonzero(ok)[-1]), 0.0, True))
        for i0, y0, zero in starts:
            knots = _greedy_chain(xx, lo, hi, suf_lo, suf_hi, i0, y0)
            a, b, c = _chain_terms(knots, zero)
            if mirror:  # relu(a (-t) + b): flip the sign of a
                a = [-v for v in a]
            if best is None or len(a) < len(best[0]):
                best = (a, b, c)
    assert best is not None
    return best


def fit_relu_sum(
    fn: Callable[[Tensor], Tensor],
    *,
    radius: float,
    eps: float,
    target: str = "f",
    max_terms: int = 200_000,
) -> ReluSum:
    """Fit ``sum_m c_m relu(a_m t + b_m)`` to a scalar function with VERIFIED sup error ``<= eps``.

    ``fn`` maps a float64 tensor ``(M,)`` to ``(M,)``. The result is a continuous piecewise-linear
    function with knots in ``[-radius, radius]``, constant outside that interval. Terms are
    ``(0, 1, y_1)`` (a constant, dropped when the sum can start at 0) and ``(1, -x_i, slope change)``
    at each knot x_i, so ``max_abs_a <= 1``.

    The grid spacing h is set from an estimate of ``max |f''|`` so that sampling misses at most
    ``1e-2 eps`` (h^2 max|f''| / 8); the fit is then evaluated with `ReluSum.__call__` on the grid
    and its midpoints, and refitted with a tighter tube if the measured error exceeds ``eps``.
    ``sup_error`` is that measured maximum. Raises [`InputError`][icdl.errors.InputError] for eps <= 0, radius
    <= 0, a function that is not finite on the interval, or when more than ``max_terms`` terms would be
    needed.
    """
    eps = _check_positive("eps", eps)
    radius = _check_positive("radius", radius)
    _check_fit_radius(radius, target)
    if not isinstance(max_terms, int) or max_terms < 1:
        raise InputError(f"max_terms must be an integer >= 1, got {max_terms!r}")

    def evaluate(t: Tensor) -> np.ndarray:
        with torch.no_grad():
            v = torch.as_tensor(fn(t), dtype=_F64).reshape(t.shape)
        if not torch.isfinite(v).all():
            raise InputError(f"{target} is not finite on [-{radius:g}, {radius:g}]")
        return v.numpy()

    probe = _grid(radius)
    fp = evaluate(probe)
    h0 = float(probe[1] - probe[0])
    curv = float(np.abs(np.diff(fp, 2)).max()) / h0**2 if len(fp) > 2 else 0.0
    curv = max(curv, 1e-300)
    n = _MIN_GRID
    spacing = math.sqrt(8 * _SAMPLING_REL * eps / curv)  # 0.0 when eps/curv underflows (eps=5e-324)
    if curv > 0:
        n = max(n, math.ceil(2 * radius / spacing) + 1) if spacing > 0 else _MAX_GRID + 1
    build_eps = eps * (1 - 0.011)
    for _ in range(8):
        if n > _MAX_GRID:
            raise InputError(
                f"eps={eps:g} is too small for {target} on [-{radius:g}, {radius:g}] "
                f"(needs a grid of more than {_MAX_GRID} points)"
            )
        x_t = _grid(radius, n)
        f = evaluate(x_t)
        a, b, c = _fit_on_grid(x_t.numpy(), f, build_eps)
        if len(a) > max_terms:
            raise InputError(f"{target} needs more than max_terms={max_terms} terms for eps={eps:g}")
        s = ReluSum(
            as_f64(a),
            as_f64(b),
            as_f64(c),
            target=target,
            radius=radius,
            eps=eps,
            sup_error=0.0,
            exact=False,
        )
        mid = 0.5 * (x_t[1:] + x_t[:-1])
        err = max(
            float(np.abs(f - s(x_t).numpy()).max()),
            float(np.abs(evaluate(mid) - s(mid).numpy()).max()),
        )
        if err <= eps:
            if not a:  # zero is within eps of f everywhere: eps reaches max|f|
                _check_eps_below_range(eps, float(np.abs(f).max()), target, radius, force=True)
            object.__setattr__(s, "sup_error", err)
            return s
        # Missed between grid points (curvature underestimated) or rounding: finer grid, tighter tube.
        build_eps *= 0.9 * eps / err
        n = 2 * n - 1
    raise InputError(f"could not fit {target} to eps={eps:g} on [-{radius:g}, {radius:g}]")


# --------------------------------------------------------------------------------------------------
# Two-argument sums for the loss derivative u(t, y) (Lemma 4, (C.13))
# --------------------------------------------------------------------------------------------------

# (directions, knots per direction) tried in turn; terms = directions * knots + 1 (the constant).
_RIDGE_SCHEDULE = ((4, 8), (6, 12), (8, 16), (12, 24), (16, 32), (24, 48), (32, 64))


def _ridge_features(radius: float, n_dir: int, n_knot: int) -> tuple[Tensor, Tensor]:
    """Ridge terms ``relu(cos θ t + sin θ y + b)`` for θ = π k / n_dir and knots spread uniformly over the
    projection range ``[-ρ, ρ]``, ρ = R(|cos θ| + |sin θ|), plus the constant ``relu(0 t + 0 y + 1)``.
    The knot at ``-ρ`` makes the term linear on the square, so linear functions are in the span.
    Returns ``a (F, 2)`` and ``b (F,)``."""
    th = torch.arange(n_dir, dtype=_F64) * math.pi / n_dir
    dirs = torch.stack([th.cos(), th.sin()], dim=1)
    dirs[dirs.abs() < 1e-15] = 0.0
    rho = radius * dirs.abs().sum(1)
    knots = -rho[:, None] + 2 * rho[:, None] * torch.arange(n_knot, dtype=_F64)[None, :] / n_knot
    a = dirs[:, None, :].expand(n_dir, n_knot, 2).reshape(-1, 2)
    b = -knots.reshape(-1)
    return torch.cat([a, torch.zeros(1, 2, dtype=_F64)]), torch.cat([b, torch.ones(1, dtype=_F64)])


def _square_grid(radius: float, n: int) -> tuple[Tensor, Tensor]:
    g = torch.linspace(-radius, radius, n, dtype=_F64)
    t, y = torch.meshgrid(g, g, indexing="ij")
    return t.reshape(-1), y.reshape(-1)


def fit_relu_sum2(
    fn: Callable[[Tensor, Tensor], Tensor],
    *,
    radius: float,
    eps: float,
    target: str = "g",
    max_terms: int = 1_200,
) -> ReluSum:
    """Fit ``sum_m c_m relu(a_m[0] t + a_m[1] y + b_m)`` to ``fn(t, y)`` with VERIFIED sup error <= eps
    on ``[-radius, radius]^2``.

    Sums of ridge functions along ``n_dir`` directions with ``n_knot`` knots each (see
    `_ridge_features`); coefficients by least squares (SVD, ``gelsd``) on a grid with about 3 points
    per knot spacing and axis; the error is measured on a separate, denser grid (at least 301 x 301
    points). The term count grows through ``_RIDGE_SCHEDULE`` until the measured error meets ``eps``;
    raises [`InputError`][icdl.errors.InputError] when that would take more than ``max_terms`` terms (or when
    the error, shrinking at most 4x per step, cannot reach ``eps`` within the cap).
    """
    eps = _check_positive("eps", eps)
    radius = _check_positive("radius", radius)
    _check_fit_radius(radius, target)
    if not isinstance(max_terms, int) or max_terms < 1:
        raise InputError(f"max_terms must be an integer >= 1, got {max_terms!r}")
    schedule = [s for s in _RIDGE_SCHEDULE if s[0] * s[1] + 1 <= max_terms]
    n_ver = min(1201, max(301, math.ceil(60 * radius) + 1))
    tv, yv = _square_grid(radius, n_ver)
    with torch.no_grad():
        fv = torch.as_tensor(fn(tv, yv), dtype=_F64)
    if not torch.isfinite(fv).all():
        raise InputError(f"{target} is not finite on [-{radius:g}, {radius:g}]^2")
    best_err = math.inf
    for step, (n_dir, n_knot) in enumerate(schedule):
        a, b = _ridge_features(radius, n_dir, n_knot)
        tg, yg = _square_grid(radius, max(41, 3 * n_knot + 1))
        with torch.no_grad():
            fg = torch.as_tensor(fn(tg, yg), dtype=_F64)
        design = torch.relu(tg[:, None] * a[:, 0] + yg[:, None] * a[:, 1] + b)
        c = torch.linalg.lstsq(design, fg[:, None], driver="gelsd").solution[:, 0]
        s = ReluSum(a, b, c, target=target, radius=radius, eps=eps, sup_error=0.0, exact=False)
        err = float((s(tv, yv) - fv).abs().max())
        if err <= eps:
            object.__setattr__(s, "sup_error", err)
            return s
        best_err = min(best_err, err)
        if err > eps * 4.0 ** (len(schedule) - 1 - step):
            break
    raise InputError(
        f"{target}: no two-argument ReLU sum with <= {max_terms} terms reaches eps={eps:g} on "
        f"[-{radius:g}, {radius:g}]^2 (best measured sup error {best_err:.3g}); raise eps or lower the range"
    )


def _exact_sum2(
    terms: list[tuple[float, float, float, float]], fn: Callable, target: str, radius: float
) -> ReluSum:
    a = torch.tensor([[t[0], t[1]] for t in terms], dtype=_F64)
    b = torch.tensor([t[2] for t in terms], dtype=_F64)
    c = torch.tensor([t[3] for t in terms], dtype=_F64)
    s = ReluSum(a, b, c, target=target, radius=radius, eps=0.0, sup_error=0.0, exact=True)
    tv, yv = _square_grid(radius, 401)
    object.__setattr__(s, "sup_error", float((fn(tv, yv) - s(tv, yv)).abs().max()))
    return s


def loss_derivative_sum(
    loss: str, *, eps: float = 1e-3, radius: float = 10.0, max_terms: int = 1_200
) -> ReluSum:
    """``u(t, y) = dl/dt`` of a coordinate-separable loss from `icdl.nets.LOSSES` as a two-argument
    ReLU sum on ``[-radius, radius]^2`` (paper Lemma 4, (C.13)).

    * ``squared``: ``2(t - y) = 2 relu(t - y) - 2 relu(y - t)``, exact (2 terms);
    * ``huber``: ``2 clamp(t - y, -1, 1) = 2 relu(t - y + 1) - 2 relu(t - y - 1) - 2``, exact (3 terms);
    * ``logistic``: ``-y sigmoid(-y t)`` is not a ridge function; fitted by
      [`fit_relu_sum2`][icdl.relu_sums.fit_relu_sum2] (raises [`InputError`][icdl.errors.InputError] when
      ``eps`` is out of reach within ``max_terms``).
    """
    eps = _check_positive("eps", eps)
    radius = _check_positive("radius", radius)
    if not isinstance(loss, str) or loss not in LOSSES:
        raise InputError(f"unknown loss {loss!r}; choose one of {', '.join(LOSSES)}")
    spec = LOSSES[loss]
    if not spec.separable:
        raise InputError(
            f"loss {loss!r} is not coordinate-separable; u(t, y) needs a sum over all coordinates"
        )
    fn = spec.deriv
    target = f"{loss}'"
    if loss == "squared":
        return _exact_sum2([(1.0, -1.0, 0.0, 2.0), (-1.0, 1.0, 0.0, -2.0)], fn, target, radius)
    if loss == "huber":
        d = float(HUBER_DELTA)
        return _exact_sum2(
            [(1.0, -1.0, d, 2.0), (1.0, -1.0, -d, -2.0), (0.0, 0.0, 1.0, -2.0 * d)], fn, target, radius
        )
    return fit_relu_sum2(fn, radius=radius, eps=eps, target=target, max_terms=max_terms)

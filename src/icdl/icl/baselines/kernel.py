"""Tuned ridge and kernel ridge baselines: ``ridge_tuned``, ``kernel``, ``radial`` (docs/baselines.md).

Both are kernel ridge regression on each prompt's first k examples, with one regulariser λ per k chosen
on HELD-OUT prompts ([`TunedKernelRidge.tune`][icdl.icl.baselines.kernel.TunedKernelRidge.tune]), never on the
test prompts:

* ``ridge_tuned`` ([`RidgeTunedBaseline`][icdl.icl.baselines.kernel.RidgeTunedBaseline]): the linear kernel
  ``K(x, x')
  = xᵀx'``, i.e. ridge regression WITHOUT intercept, ``ŷ_k = x_kᵀ (X_kᵀX_k + λI)⁻¹ X_kᵀ y_k`` (primal and dual
  forms agree);
* ``kernel`` ([`KernelBaseline`][icdl.icl.baselines.kernel.KernelBaseline]): the covariance of the task's
  LABELS — the
  NNGP kernel of the target family (the covariance of ``f(w, x)`` over the random weights of a bias-free
  N-layer network, [`nngp_kernel`][icdl.icl.baselines.kernel.nngp_kernel]: the arc-cosine recursion of order 1
  (Cho & Saul 2009) for ReLU, Gauss–Hermite quadrature otherwise), CENTRED over the task's own input
  distribution when ``standardize: task`` (issue 27: the uncentred kernel is the wrong prior there). Kernel
  ridge with it is the posterior mean of the infinite-width Gaussian limit of the task prior;
* ``radial`` ([`RadialRidgeBaseline`][icdl.icl.baselines.kernel.RadialRidgeBaseline]): ridge on ``[x, |x| -
  E|x|]``;
* ``blup`` ([`icdl.icl.baselines.blup`][icdl.icl.baselines.blup]): the finite-width Monte Carlo label moment
  of the sampler.

λ is searched on a quarter-decade grid 1e-8 .. 1e4, then refined per k (`TunedKernelRidge.tune`).

All prefixes of a prompt come from ONE Cholesky factorisation: with ``A = K + λI = L Lᵀ`` (T × T) the
leading k × k block of ``L`` is the Cholesky factor of ``A[:k, :k]``, ``L[k, :k]ᵀ = L_k⁻¹ K[:k, k]``, and
with ``z = L⁻¹ y`` the prediction for ``x_k`` after k examples is
``K[k, :k] A_k⁻¹ y_k = (L_k⁻¹ K[:k, k])ᵀ (L_k⁻¹ y_k) = Σ_{j<k} L[k, j] z_j`` — the strictly lower part of
``L`` times ``z``. It is causal by construction (row k of ``L`` and ``z_{<k}`` depend on points ``<= k``
and labels ``< k`` only); 0 at k = 0. Computed in float64, batched over prompts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from icdl.config import TaskConfig
from icdl.errors import InputError
from icdl.icl.baselines.moment import TaskSecondMoment
from icdl.icl.baselines.simple import check_prompts
from icdl.icl.tasks import sample_inputs, stream_generator
from icdl.nets import get_activation

__all__ = [
    "DEFAULT_LAMBDAS",
    "REFERENCE_GROUPS",
    "REFERENCE_SEED",
    "KernelBaseline",
    "RadialRidgeBaseline",
    "RidgeTunedBaseline",
    "TunedKernelRidge",
    "gauss_hermite_expectation",
    "hermite_pair",
    "krr_prefix_predictions",
    "linear_kernel",
    "nngp_cross",
    "nngp_kernel",
    "reference_inputs",
    "relu_expectation",
    "relu_pair",
]

# λ grid: 10^-8 .. 10^4 in quarter decades (49 values), refined per k between the best point's neighbours
# (`TunedKernelRidge.refine` rounds, REFINE_POINTS interior points each: 1/100 decade after 2 rounds); λ
# multiplies the identity added to the Gram matrix (squared errors SUMMED over the k examples, as
# LeastSquaresBaseline's ridge). A well-specified kernel on noiseless labels wants λ -> 0 (issue 27), so the
# grid reaches 1e-8; the half-decade 1e-4 .. 1e4 grid of before lost up to 0.03 R² between its points.
DEFAULT_LAMBDAS: tuple[float, ...] = tuple(float(10.0**e) for e in np.arange(-8.0, 4.01, 0.25))
REFINE_POINTS = 4
_QUAD_POINTS = 64  # 24 is 0.6 % off for tanh at unit-scale variances; 64 agrees with 100 to 1e-4
_CHUNK_BYTES = 2**27  # per (prompt-chunk x T x T) float64 intermediate


def linear_kernel(xs: Tensor) -> Tensor:
    """``K[b, i, j] = x_bi · x_bj`` for ``xs (B, T, d)``; returns ``(B, T, T)``."""
    return xs @ xs.transpose(-1, -2)


def _correlation(cov: Tensor, va: Tensor, vb: Tensor) -> tuple[Tensor, Tensor]:
    """``(sqrt(va_i vb_j), ρ_ij)``: the scale and the correlation, clamped to [-1, 1], of every pair."""
    norm = torch.sqrt(va.clamp(min=0)[..., :, None] * vb.clamp(min=0)[..., None, :])
    rho = torch.where(norm > 0, cov / norm.clamp(min=1e-300), torch.zeros_like(cov)).clamp(-1.0, 1.0)
    return norm, rho


def _hermite_nodes(points: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """Probabilists' Gauss–Hermite nodes and weights normalised to N(0, 1) (they sum to 1), as ``like``."""
    z_np, w_np = np.polynomial.hermite_e.hermegauss(points)
    z = torch.tensor(z_np, dtype=like.dtype, device=like.device)
    return z, torch.tensor(w_np / math.sqrt(2 * math.pi), dtype=like.dtype, device=like.device)


def relu_pair(cov: Tensor, va: Tensor, vb: Tensor) -> Tensor:
    """``E[relu(u) relu(v)]`` for ``(u, v) ~ N(0, [[va_i, cov_ij], [cov_ij, vb_j]])``, ``cov (..., Ta, Tb)``.

    Arc-cosine kernel of order 1 (Cho & Saul 2009, eq. 6 with the 1/(2π) normalisation):
    ``sqrt(va_i vb_j) / (2π) · (sin θ + (π - θ) cos θ)``, ``θ = arccos(ρ_ij)``.
    """
    norm, rho = _correlation(cov, va, vb)
    # arccos' is infinite at |ρ| = 1 (the diagonal), where autograd would give inf · 0 = NaN. The value
    # is the same with θ detached there, and so is the derivative: d/dρ [sin θ + (π - θ) ρ] = π - θ, which
    # the ρ factor alone carries once θ is constant (icdl.icl.analysis.sensitivity differentiates the kernel).
    inner = rho.abs() < 1.0
    theta = torch.where(inner, torch.arccos(torch.where(inner, rho, 0.0)), torch.arccos(rho).detach())
    return norm / (2 * math.pi) * (torch.sin(theta) + (math.pi - theta) * rho)


def hermite_pair(cov: Tensor, va: Tensor, vb: Tensor, fn: Any, points: int = _QUAD_POINTS) -> Tensor:
    """``E[fn(u) fn(v)]`` for ``(u, v) ~ N(0, [[va_i, cov_ij], [cov_ij, vb_j]])`` by tensor-product
    Gauss–Hermite quadrature; ``cov (..., Ta, Tb)``, ``va (..., Ta)``, ``vb (..., Tb)``.

    ``u = sqrt(va_i) z1``, ``v = sqrt(vb_j) (ρ z1 + sqrt(1 - ρ²) z2)`` with ``z1, z2 ~ N(0, 1)`` i.i.d.
    and ``points`` probabilists' Hermite nodes per dimension (exact for polynomials of degree
    ``< 2 points``; smooth activations such as sigmoid and tanh converge fast).
    """
    z, w = _hermite_nodes(points, cov)
    _, rho = _correlation(cov, va, vb)
    sa, sb = va.clamp(min=0).sqrt(), vb.clamp(min=0).sqrt()
    one_minus = 1 - rho**2
    # sqrt' is infinite at 0 (|ρ| = 1, the diagonal): keep autograd finite there (the value is 0 either way).
    s = torch.where(one_minus > 0, torch.sqrt(torch.where(one_minus > 0, one_minus, 1.0)), 0.0)
    fu = fn(sa[..., :, None] * z)  # (..., Ta, Q): fn(u) at node p for point i
    out = torch.empty_like(cov)
    Ta, Tb = cov.shape[-2], cov.shape[-1]
    rows = max(1, _CHUNK_BYTES // (8 * max(Tb, 1) * points * points * max(1, cov[..., 0, 0].numel())))
    for r in range(0, Ta, rows):
        c = slice(r, min(r + rows, Ta))
        # v at (i, j, p, q) = sd_j (ρ_ij z_p + s_ij z_q)
        inner = rho[..., c, :, None, None] * z[:, None] + s[..., c, :, None, None] * z[None, :]
        fv = fn(sb[..., None, :, None, None] * inner)  # (..., t, Tb, Q, Q)
        ev = (fv * w[None, :]).sum(-1)  # (..., t, Tb, Q): E over z2
        out[..., c, :] = (ev * (fu[..., c, None, :] * w)).sum(-1)
    return out


def relu_expectation(cov: Tensor) -> Tensor:
    """``E[relu(u) relu(v)]`` with ``(u, v) ~ N(0, [[c_ii, c_ij], [c_ij, c_jj]])`` for each pair of ``cov``:
    [`relu_pair`][icdl.icl.baselines.kernel.relu_pair] with both variances from ``cov``'s diagonal."""
    diag = cov.diagonal(dim1=-2, dim2=-1)
    return relu_pair(cov, diag, diag)


def gauss_hermite_expectation(cov: Tensor, fn: Any, points: int = _QUAD_POINTS) -> Tensor:
    """``E[fn(u) fn(v)]`` for every pair of ``cov (B, T, T)``:
    [`hermite_pair`][icdl.icl.baselines.kernel.hermite_pair] with both variances from ``cov``'s diagonal."""
    diag = cov.diagonal(dim1=-2, dim2=-1)
    return hermite_pair(cov, diag, diag, fn, points)


def _pair_step(cov: Tensor, va: Tensor, vb: Tensor, activation: str) -> tuple[Tensor, Tensor, Tensor]:
    """One layer of the NNGP recursion between two point sets: ``(E[r(u) r(v)], E[r(u)²], E[r(v)²])`` for
    ``(u, v) ~ N(0, [[va_i, cov_ij], [cov_ij, vb_j]])`` (each point's own variance carried along)."""
    if activation == "identity":
        return cov, va, vb
    if activation == "relu":
        return relu_pair(cov, va, vb), va.clamp(min=0) / 2, vb.clamp(min=0) / 2
    fn = get_activation(activation).fn
    z, w = _hermite_nodes(_QUAD_POINTS, cov)

    def second_moment(v: Tensor) -> Tensor:  # E[fn(u)²], u ~ N(0, v): the one-dimensional quadrature
        return (fn(v.clamp(min=0).sqrt()[..., :, None] * z) ** 2 * w).sum(-1)

    return hermite_pair(cov, va, vb, fn), second_moment(va), second_moment(vb)


def nngp_kernel(
    xs: Tensor,
    depth: int,
    *,
    activation: str = "relu",
    output: str = "linear",
    weight_std: float = 1.0,
    fan_in_scaling: bool = True,
    width: int = 1,
) -> Tensor:
    """Covariance ``E_w[f(w, x_i) f(w, x_j)]`` of a bias-free ``depth``-layer network with i.i.d. weights.

    ``V_j`` entries ``N(0, σ_j²)``, ``σ_j² = weight_std² · 2 / n_{j-1}`` with He scaling (else
    ``weight_std²``). In the infinite-width limit the pre-activations of layer j are a centred Gaussian
    process with covariance ``Σ_1 = σ_1² x_iᵀx_j`` and ``Σ_{j+1} = σ_{j+1}² n_j E[r(u) r(v)]``,
    ``(u, v) ~ N(0, Σ_j)`` — the recursion composed ``depth - 1`` times; the output is linear in the last
    features. ``output="same"`` applies r once more: the covariance of ``r(z_N)``. ``width`` only matters
    without He scaling (then ``n_j · σ² = width · weight_std²``). ReLU uses
    [`relu_pair`][icdl.icl.baselines.kernel.relu_pair], other activations
    [`hermite_pair`][icdl.icl.baselines.kernel.hermite_pair]. Returns ``(B, T, T)``: the recursion of
    [`nngp_cross`][icdl.icl.baselines.kernel.nngp_cross] with both point sets ``xs``.
    """
    return nngp_cross(
        xs, xs, depth, activation=activation, output=output, weight_std=weight_std,
        fan_in_scaling=fan_in_scaling, width=width,
    )  # fmt: skip


def nngp_cross(
    xa: Tensor,
    xb: Tensor,
    depth: int,
    *,
    activation: str = "relu",
    output: str = "linear",
    weight_std: float = 1.0,
    fan_in_scaling: bool = True,
    width: int = 1,
) -> Tensor:
    """``E_w[f(w, a) f(w, b)]`` for every ``a`` in ``xa (..., Ta, d)`` and ``b`` in ``xb (..., Tb, d)``:
    the recursion of [`nngp_kernel`][icdl.icl.baselines.kernel.nngp_kernel] between two point sets (each
    point's variance carried along). Returns ``(..., Ta, Tb)``."""
    if not isinstance(depth, int) or depth < 2:
        raise InputError(f"kernel depth must be an integer >= 2, got {depth!r}")
    get_activation(activation)  # an unknown name: one line, before any work
    var = weight_std**2
    first = var * (2.0 / xa.shape[-1] if fan_in_scaling else 1.0)
    gain = var * (2.0 if fan_in_scaling else float(width))
    cov = first * (xa @ xb.transpose(-1, -2))
    va, vb = first * (xa**2).sum(-1), first * (xb**2).sum(-1)
    for _ in range(depth - 1):
        cov, va, vb = (gain * t for t in _pair_step(cov, va, vb, activation))
    return _pair_step(cov, va, vb, activation)[0] if output == "same" else cov


def krr_prefix_predictions(K: Tensor, ys: Tensor, lam: float) -> Tensor:
    """Kernel ridge predictions for every prefix: ``out[:, k] = K[k, :k] (K[:k, :k] + λI)⁻¹ y_{:k}``.

    ``K (B, T, T)``, ``ys (B, T, d_y)``; one Cholesky factorisation and one triangular solve per prompt
    (module docstring); ``out[:, 0] = 0``.
    """
    eye = torch.eye(K.shape[-1], dtype=K.dtype, device=K.device)
    L = torch.linalg.cholesky(K + lam * eye)
    z = torch.linalg.solve_triangular(L, ys, upper=False)
    return L.tril(-1) @ z


@dataclass
class TunedKernelRidge:
    """Kernel ridge on each prompt's first k examples with a per-k λ tuned on held-out prompts.

    ``lam``: a fixed λ, or one λ per k (``lam[k]``; prompts longer than the list reuse its last value),
    normally set by `tune`. ``lambdas``: the grid `tune` searches; ``refine``: rounds of the per-k search
    between the best λ's neighbours after the grid (0: the grid only). Subclasses give `gram` and `name`.
    """

    lambdas: Sequence[float] = DEFAULT_LAMBDAS
    lam: float | Sequence[float] | None = None
    tuning: dict[str, Any] | None = field(default=None)
    refine: int = 2

    def __post_init__(self) -> None:
        grid = [float(v) for v in self.lambdas]
        if not grid or not all(math.isfinite(v) and v > 0 for v in grid):
            raise InputError(f"the λ grid must hold finite numbers > 0, got {list(self.lambdas)!r}")
        self.lambdas = tuple(grid)
        if not isinstance(self.refine, int) or isinstance(self.refine, bool) or self.refine < 0:
            raise InputError(f"refine must be an integer >= 0, got {self.refine!r}")
        if self.lam is not None:
            vals = [self.lam] if isinstance(self.lam, (int, float)) else list(self.lam)
            if not vals or not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in vals):
                raise InputError(f"lam must be a finite number > 0 or a list of them, got {self.lam!r}")

    @property
    def name(self) -> str:
        raise NotImplementedError

    def gram(self, xs: Tensor) -> Tensor:
        """The ``(B, T, T)`` Gram matrix of each prompt's points (float64)."""
        raise NotImplementedError

    def _chunks(self, B: int, T: int) -> list[slice]:
        size = max(1, _CHUNK_BYTES // (8 * T * T * 4))
        return [slice(s, min(s + size, B)) for s in range(0, B, size)]

    def grams(self, xs: Tensor) -> Tensor:
        """`gram` of every prompt, chunked (float64, ``(B, T, T)``): computed once per `tune` or call."""
        B, T, _ = xs.shape
        return torch.cat([self.gram(xs[c].double()) for c in self._chunks(B, T)])

    def predict_all(
        self, xs: Tensor, ys: Tensor, lambdas: Sequence[float], *, K: Tensor | None = None
    ) -> Tensor:
        """Predictions ``(len(lambdas), B, T, d_y)`` (float64) for every λ in ``lambdas`` (``K``: the
        prompts' `grams` when already computed)."""
        check_prompts(xs, ys)
        B, T, _ = xs.shape
        K = self.grams(xs) if K is None else K
        out = torch.empty((len(lambdas), B, T, ys.shape[-1]), dtype=torch.float64, device=xs.device)
        for c in self._chunks(B, T):
            y = ys[c].double()
            for i, lam in enumerate(lambdas):
                out[i, c] = krr_prefix_predictions(K[c], y, float(lam))
        return out

    def lam_per_k(self, n: int) -> list[float]:
        """λ for k = 0..n-1 (InputError when neither given nor tuned)."""
        if self.lam is None:
            raise InputError(f"{self.name}: λ is not set; call tune() on held-out prompts or give lam")
        vals = [float(self.lam)] if isinstance(self.lam, (int, float)) else [float(v) for v in self.lam]
        return [vals[min(k, len(vals) - 1)] for k in range(n)]

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        lams = self.lam_per_k(xs.shape[1])
        distinct = sorted(set(lams))
        preds = self.predict_all(xs, ys, distinct)
        pick = torch.tensor([distinct.index(v) for v in lams], device=xs.device)
        out = preds[pick, :, torch.arange(len(lams), device=xs.device)].transpose(0, 1)  # (B, T, d_y)
        return out.to(ys.dtype)

    def tune(self, xs_val: Tensor, ys_val: Tensor) -> list[float]:
        """Choose, for every k, the λ with the lowest held-out MSE(k) (mean over prompts and outputs).

        ``xs_val, ys_val`` must be prompts NOT in the test set (fresh prompts of the same task, another
        seed). First the grid ``lambdas``; then ``refine`` rounds per k, each evaluating ``REFINE_POINTS``
        log-spaced λ strictly between the current best's neighbours among the λ evaluated so far (the
        grid's end points bound the search). Ties go to the larger λ. Sets ``lam`` (one per k of the
        held-out prompts) and ``tuning = {"grid", "lam", "mse", "num_prompts", "refine", "edge"}``
        (``mse``: per k, at the grid; ``edge``: the k whose choice is the grid's smallest or largest λ);
        returns the chosen λ per k. k = 0 (prediction 0 for every λ) takes the largest λ.
        """
        grid = sorted(self.lambdas)
        K = self.grams(xs_val)
        y = ys_val.double()
        seen: dict[float, Tensor] = {}

        def evaluate(lams: Sequence[float]) -> None:
            todo = [v for v in dict.fromkeys(lams) if v not in seen]
            if todo:
                preds = self.predict_all(xs_val, ys_val, todo, K=K)
                mse = torch.nan_to_num(((preds - y[None]) ** 2).mean((1, 3)), nan=math.inf)  # (G, T)
                seen.update(zip(todo, mse, strict=True))

        evaluate(grid)
        T = xs_val.shape[1]

        def best_per_k() -> list[float]:
            lams = sorted(seen)
            mse = torch.stack([seen[v] for v in lams])  # (G, T), λ ascending
            idx = len(lams) - 1 - mse.flip(0).argmin(0)  # ties -> the larger λ
            return [lams[int(i)] for i in idx]

        for _ in range(self.refine):
            chosen = best_per_k()
            lams = sorted(seen)
            new: list[float] = []
            for k in range(1, T):
                i = lams.index(chosen[k])
                lo, hi = lams[max(i - 1, 0)], lams[min(i + 1, len(lams) - 1)]
                pts = np.exp(np.linspace(math.log(lo), math.log(hi), 2 * REFINE_POINTS + 3)[1:-1])
                new += [float(v) for v in pts if lo < v < hi]
            evaluate(new)
        chosen = best_per_k()
        chosen[0] = grid[-1]
        self.lam = chosen
        grid_mse = torch.stack([seen[v] for v in grid])
        self.tuning = {
            "grid": grid,
            "lam": chosen,
            "mse": grid_mse.T.tolist(),
            "num_prompts": int(xs_val.shape[0]),
            "refine": self.refine,
            "edge": [k for k in range(1, T) if chosen[k] in (grid[0], grid[-1])],
        }
        return chosen


@dataclass
class RidgeTunedBaseline(TunedKernelRidge):
    """Ridge regression WITHOUT intercept on the first k examples, λ per k tuned on held-out prompts:
    ``ŷ_k = x_kᵀ (X_kᵀX_k + λ_k I)⁻¹ X_kᵀ y_k`` (kernel ridge with the linear kernel)."""

    @property
    def name(self) -> str:
        return "ridge_tuned"

    def gram(self, xs: Tensor) -> Tensor:
        return linear_kernel(xs)


REFERENCE_SEED = 27_027  # the reference inputs of `KernelBaseline.for_task` and `RadialRidgeBaseline`
REFERENCE_GROUPS = 8  # reference sets of ``standardize_points`` inputs each (2,048 inputs by default)


def reference_inputs(task: TaskConfig, groups: int = REFERENCE_GROUPS, seed: int = REFERENCE_SEED) -> Tensor:
    """``(groups, task.standardize_points, d)`` float64 inputs from the task's own input distribution
    (mixtures, per-prompt components, uniform, centring: [`sample_inputs`][icdl.icl.tasks.sample_inputs]),
    drawn as the sampler draws one task's reference set per row, from a fixed generator."""
    g = stream_generator(seed, 0, "reference")
    return sample_inputs(task, (groups, task.standardize_points), g, dtype=torch.float64)


@dataclass
class KernelBaseline(TunedKernelRidge):
    """Kernel ridge with the covariance of the task's LABELS, λ per k tuned on held-out prompts.

    ``depth``, ``activation``, ``output``, ``weight_std``, ``fan_in_scaling`` and ``width`` describe the
    targets (a [`icdl.config.TaskConfig`][icdl.config.TaskConfig]); the base kernel ``k`` is their NNGP
    kernel ([`nngp_kernel`][icdl.icl.baselines.kernel.nngp_kernel], weight mean 0).

    With ``standardize="task"`` the labels are ``(f(x) - m̂) / ŝ``, ``m̂, ŝ`` the mean and std of ``f``
    over ``n = standardize_points`` reference inputs ``r`` of the task's input distribution, so their
    covariance is the CENTRED kernel (issue 27)::

        K(x, x') = [k(x, x') - μ(x) - μ(x') + v / n + (1 - 1/n) μ₀] / (v - μ₀),
        μ(x) = E_r k(x, r),  μ₀ = E_{r≠r'} k(r, r'),  v = E_r k(r, r)

    (``E[m̂²]`` is the bracket's constant; ``v - μ₀ = E[ŝ²]``, so ``K`` is the covariance of
    ``f - m̂`` over the mean label variance — up to the per-task ``1/ŝ²`` weighting, which only a Monte
    Carlo moment captures: [`icdl.icl.baselines.blup`][icdl.icl.baselines.blup]). The expectations are Monte
    Carlo averages
    over ``reference`` ``(groups, n, d)`` (one reference set per row, as the sampler draws them, so a
    per-prompt mixture component is averaged over correctly), the kernel between point sets by
    [`nngp_cross`][icdl.icl.baselines.kernel.nngp_cross] — any activation.

    With ``weight_mean != 0`` no NNGP limit exists (every unit of a layer shares the mean term, which
    grows like √width), so ``moment`` — the finite-width Monte Carlo second moment of the task sampler
    ([`icdl.icl.baselines.moment.TaskSecondMoment`][icdl.icl.baselines.moment.TaskSecondMoment]) — is the
    kernel; `for_task` sets
    it.
    """

    depth: int = 3
    activation: str = "relu"
    output: str = "linear"
    weight_std: float = 1.0
    fan_in_scaling: bool = True
    width: int = 1
    standardize: str = "none"
    standardize_points: int = 256
    reference: Tensor | None = None
    moment: Any = None

    @classmethod
    def for_task(cls, task: TaskConfig, **options: Any) -> KernelBaseline:
        """The label covariance of ``task``: its depth, activation, output, weight scale, width, and — when
        ``standardize: task`` — its input distribution and reference-set size; the sampler's Monte Carlo
        moment when ``weight_mean != 0``."""
        moment = None
        if task.weight_mean != 0:
            moment = TaskSecondMoment(task)
        return cls(
            depth=task.depth,
            activation=task.activation,
            output=task.output,
            weight_std=task.weight_std,
            fan_in_scaling=task.fan_in_scaling,
            width=task.width,
            standardize=task.standardize,
            standardize_points=task.standardize_points,
            reference=reference_inputs(task) if task.standardize == "task" and moment is None else None,
            moment=moment,
            **options,
        )

    @property
    def name(self) -> str:
        return "kernel"

    def _base(self, xa: Tensor, xb: Tensor | None = None) -> Tensor:
        opts: dict[str, Any] = {
            "activation": self.activation,
            "output": self.output,
            "weight_std": self.weight_std,
            "fan_in_scaling": self.fan_in_scaling,
            "width": self.width,
        }
        if xb is None:
            return nngp_kernel(xa, self.depth, **opts)
        return nngp_cross(xa, xb, self.depth, **opts)

    def reference_moments(self) -> tuple[float, float]:
        """``(v, μ₀)``: the means of ``k(r, r)`` and of ``k(r, r')`` (distinct pairs of one reference set)."""
        if self.reference is None:
            raise InputError(
                "kernel: standardize='task' needs reference inputs (use KernelBaseline.for_task)"
            )
        K = self._base(self.reference.double())  # (G, n, n)
        n = K.shape[-1]
        diag = K.diagonal(dim1=-2, dim2=-1).sum(-1)
        v = float((diag / n).mean())
        m0 = float(((K.sum((-1, -2)) - diag) / (n * (n - 1))).mean())
        return v, m0

    def mean_kernel(self, xs: Tensor) -> Tensor:
        """``μ(x) = E_r k(x, r)`` over all reference inputs, for every point of ``xs (..., T, d)``."""
        if self.reference is None:
            raise InputError(
                "kernel: standardize='task' needs reference inputs (use KernelBaseline.for_task)"
            )
        refs = self.reference.double().reshape(-1, self.reference.shape[-1])
        flat = xs.reshape(-1, xs.shape[-1])
        rows = max(1, 2**22 // refs.shape[0])
        mu = torch.cat([self._base(flat[s : s + rows], refs).mean(-1) for s in range(0, flat.shape[0], rows)])
        return mu.reshape(xs.shape[:-1])

    def gram(self, xs: Tensor) -> Tensor:
        if self.moment is not None:
            return self.moment.gram(xs)
        K = self._base(xs)
        if self.standardize != "task":
            return K
        v, m0 = self.reference_moments()
        n = self.standardize_points
        mu = self.mean_kernel(xs)
        return (K - mu[..., :, None] - mu[..., None, :] + v / n + (1 - 1 / n) * m0) / (v - m0)


@dataclass
class RadialRidgeBaseline(TunedKernelRidge):
    """``radial``: ridge (no intercept) on the features ``[x, |x| - E|x|]``, λ per k tuned on held-out
    prompts — the cheap nonlinear reference of issue 27 (for bias-free ReLU nets on ``N(0, I)`` the centred
    label process's mean part is ``∝ |x|``). ``abs_mean = E|x|`` over the task's input distribution
    (`for_task`: a Monte Carlo mean over the reference inputs)."""

    abs_mean: float = 0.0

    @classmethod
    def for_task(cls, task: TaskConfig, **options: Any) -> RadialRidgeBaseline:
        refs = reference_inputs(task)
        return cls(abs_mean=float(refs.norm(dim=-1).mean()), **options)

    @property
    def name(self) -> str:
        return "radial"

    def gram(self, xs: Tensor) -> Tensor:
        phi = torch.cat([xs, xs.norm(dim=-1, keepdim=True) - self.abs_mean], -1)
        return linear_kernel(phi)

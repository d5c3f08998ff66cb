"""Tuned ridge and kernel ridge baselines: ``ridge_tuned`` and ``kernel`` (docs/baselines.md).

Both are kernel ridge regression on each prompt's first k examples, with one regulariser λ per k chosen
on HELD-OUT prompts ([`TunedKernelRidge.tune`][icdl.icl.baselines.kernel.TunedKernelRidge.tune]), never on the
test prompts:

* ``ridge_tuned`` ([`RidgeTunedBaseline`][icdl.icl.baselines.kernel.RidgeTunedBaseline]): the linear kernel
  ``K(x, x') = xᵀx'``, i.e. ridge regression WITHOUT intercept, ``ŷ_k = x_kᵀ (X_kᵀX_k + λI)⁻¹ X_kᵀ y_k``
  (primal and dual forms agree);
* ``kernel`` ([`KernelBaseline`][icdl.icl.baselines.kernel.KernelBaseline]): the NNGP kernel of the target
  family itself — the covariance of ``f(w, x)`` over the random weights of a bias-free N-layer network
  ([`nngp_kernel`][icdl.icl.baselines.kernel.nngp_kernel]): the arc-cosine recursion of order 1 (Cho & Saul
  2009) for ReLU, Gauss–Hermite quadrature otherwise. Kernel ridge with this kernel is the posterior mean of
  the infinite-width limit of the task prior.

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
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from icdl.errors import InputError
from icdl.icl.baselines.simple import check_prompts
from icdl.nets import get_activation

if TYPE_CHECKING:
    from icdl.config import TaskConfig

__all__ = [
    "DEFAULT_LAMBDAS",
    "KernelBaseline",
    "RidgeTunedBaseline",
    "TunedKernelRidge",
    "gauss_hermite_expectation",
    "krr_prefix_predictions",
    "linear_kernel",
    "nngp_kernel",
    "relu_expectation",
]

# λ grid: 10^-4 .. 10^4 in half decades (17 values); λ multiplies the identity added to the Gram matrix
# (squared errors SUMMED over the k examples, as LeastSquaresBaseline's ridge).
DEFAULT_LAMBDAS: tuple[float, ...] = tuple(float(10.0**e) for e in np.arange(-4.0, 4.01, 0.5))
_QUAD_POINTS = 64  # 24 is 0.6 % off for tanh at unit-scale variances; 64 agrees with 100 to 1e-4
_CHUNK_BYTES = 2**27  # per (prompt-chunk x T x T) float64 intermediate


def linear_kernel(xs: Tensor) -> Tensor:
    """``K[b, i, j] = x_bi · x_bj`` for ``xs (B, T, d)``; returns ``(B, T, T)``."""
    return xs @ xs.transpose(-1, -2)


def relu_expectation(cov: Tensor) -> Tensor:
    """``E[relu(u) relu(v)]`` with ``(u, v) ~ N(0, [[c_ii, c_ij], [c_ij, c_jj]])`` for each pair of ``cov``.

    Arc-cosine kernel of order 1 (Cho & Saul 2009, eq. 6 with the 1/(2π) normalisation):
    ``sqrt(c_ii c_jj) / (2π) · (sin θ + (π - θ) cos θ)``, ``θ = arccos(c_ij / sqrt(c_ii c_jj))``.
    """
    diag = cov.diagonal(dim1=-2, dim2=-1).clamp(min=0)
    norm = torch.sqrt(diag[..., :, None] * diag[..., None, :])
    rho = torch.where(norm > 0, cov / norm.clamp(min=1e-300), torch.zeros_like(cov)).clamp(-1.0, 1.0)
    # arccos' is infinite at |ρ| = 1 (the diagonal), where autograd would give inf · 0 = NaN. The value
    # is the same with θ detached there, and so is the derivative: d/dρ [sin θ + (π - θ) ρ] = π - θ, which
    # the ρ factor alone carries once θ is constant (icdl.icl.analysis.sensitivity differentiates the kernel).
    inner = rho.abs() < 1.0
    theta = torch.where(inner, torch.arccos(torch.where(inner, rho, 0.0)), torch.arccos(rho).detach())
    return norm / (2 * math.pi) * (torch.sin(theta) + (math.pi - theta) * rho)


def gauss_hermite_expectation(cov: Tensor, fn: Any, points: int = _QUAD_POINTS) -> Tensor:
    """``E[fn(u) fn(v)]`` for every pair of ``cov (B, T, T)`` by tensor-product Gauss–Hermite quadrature.

    ``u = sqrt(c_ii) z1``, ``v = sqrt(c_jj) (ρ z1 + sqrt(1 - ρ²) z2)`` with ``z1, z2 ~ N(0, 1)`` i.i.d.
    and ``points`` probabilists' Hermite nodes per dimension (exact for polynomials of degree
    ``< 2 points``; smooth activations such as sigmoid and tanh converge fast).
    """
    z_np, w_np = np.polynomial.hermite_e.hermegauss(points)
    z = torch.tensor(z_np, dtype=cov.dtype, device=cov.device)
    w = torch.tensor(w_np / math.sqrt(2 * math.pi), dtype=cov.dtype, device=cov.device)
    sd = cov.diagonal(dim1=-2, dim2=-1).clamp(min=0).sqrt()  # (B, T)
    norm = sd[..., :, None] * sd[..., None, :]
    rho = torch.where(norm > 0, cov / norm.clamp(min=1e-300), torch.zeros_like(cov)).clamp(-1.0, 1.0)
    one_minus = 1 - rho**2
    # sqrt' is infinite at 0 (|ρ| = 1, the diagonal): keep autograd finite there (the value is 0 either way).
    s = torch.where(one_minus > 0, torch.sqrt(torch.where(one_minus > 0, one_minus, 1.0)), 0.0)
    fu = fn(sd[..., :, None] * z)  # (B, T, Q): fn(u) at node p for point i
    out = torch.empty_like(cov)
    T = cov.shape[-1]
    rows = max(1, _CHUNK_BYTES // (8 * max(T, 1) * points * points))
    for r in range(0, T, rows):
        c = slice(r, min(r + rows, T))
        # v at (i, j, p, q) = sd_j (ρ_ij z_p + s_ij z_q)
        inner = rho[..., c, :, None, None] * z[:, None] + s[..., c, :, None, None] * z[None, :]
        fv = fn(sd[..., None, :, None, None] * inner)  # (B, t, T, Q, Q)
        ev = (fv * w[None, :]).sum(-1)  # (B, t, T, Q): E over z2
        out[..., c, :] = (ev * (fu[..., c, None, :] * w)).sum(-1)
    return out


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
    [`relu_expectation`][icdl.icl.baselines.kernel.relu_expectation], other activations
    [`gauss_hermite_expectation`][icdl.icl.baselines.kernel.gauss_hermite_expectation]. Returns ``(B, T, T)``.
    """
    if not isinstance(depth, int) or depth < 2:
        raise InputError(f"kernel depth must be an integer >= 2, got {depth!r}")
    act = get_activation(activation)

    def expect(cov: Tensor) -> Tensor:
        if activation == "relu":
            return relu_expectation(cov)
        if activation == "identity":
            return cov
        return gauss_hermite_expectation(cov, act.fn)

    var = weight_std**2
    d = xs.shape[-1]
    cov = var * (2.0 / d if fan_in_scaling else 1.0) * linear_kernel(xs)
    for _ in range(depth - 1):
        cov = var * (2.0 if fan_in_scaling else float(width)) * expect(cov)
    return expect(cov) if output == "same" else cov


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
    normally set by `tune`. ``lambdas``: the grid `tune` searches. Subclasses give
    `gram` and `name`.
    """

    lambdas: Sequence[float] = DEFAULT_LAMBDAS
    lam: float | Sequence[float] | None = None
    tuning: dict[str, Any] | None = field(default=None)

    def __post_init__(self) -> None:
        grid = [float(v) for v in self.lambdas]
        if not grid or not all(math.isfinite(v) and v > 0 for v in grid):
            raise InputError(f"the λ grid must hold finite numbers > 0, got {list(self.lambdas)!r}")
        self.lambdas = tuple(grid)
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

    def predict_all(self, xs: Tensor, ys: Tensor, lambdas: Sequence[float]) -> Tensor:
        """Predictions ``(len(lambdas), B, T, d_y)`` (float64) for every λ in ``lambdas``."""
        check_prompts(xs, ys)
        B, T, _ = xs.shape
        out = torch.empty((len(lambdas), B, T, ys.shape[-1]), dtype=torch.float64, device=xs.device)
        for c in self._chunks(B, T):
            K = self.gram(xs[c].double())
            y = ys[c].double()
            for i, lam in enumerate(lambdas):
                out[i, c] = krr_prefix_predictions(K, y, float(lam))
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
        """Choose, for every k, the grid λ with the lowest held-out MSE(k) (mean over prompts and outputs).

        ``xs_val, ys_val`` must be prompts NOT in the test set (fresh prompts of the same task, another
        seed). Ties go to the larger λ. Sets ``lam`` (one per k of the held-out prompts) and ``tuning =
        {"grid", "lam", "mse", "num_prompts"}``; returns the chosen λ per k. k = 0 (prediction 0 for every
        λ) takes the largest λ.
        """
        grid = list(self.lambdas)
        preds = self.predict_all(xs_val, ys_val, grid)  # (G, B, T, d_y)
        mse = ((preds - ys_val.double()[None]) ** 2).mean((1, 3))  # (G, T)
        mse = torch.nan_to_num(mse, nan=math.inf)
        # Reverse the grid so argmin's first hit is the largest λ among ties.
        best = len(grid) - 1 - mse.flip(0).argmin(0)
        chosen = [grid[int(i)] for i in best]
        self.lam = chosen
        self.tuning = {
            "grid": grid,
            "lam": chosen,
            "mse": mse.T.tolist(),
            "num_prompts": int(xs_val.shape[0]),
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


@dataclass
class KernelBaseline(TunedKernelRidge):
    """Kernel ridge with the NNGP kernel of the task's target family
    ([`nngp_kernel`][icdl.icl.baselines.kernel.nngp_kernel]), λ per k tuned on held-out prompts. ``depth``,
    ``activation``, ``output``, ``weight_std``, ``fan_in_scaling`` and ``width`` describe the targets (a
    [`icdl.config.TaskConfig`][icdl.config.TaskConfig]); the kernel assumes weight mean 0."""

    depth: int = 3
    activation: str = "relu"
    output: str = "linear"
    weight_std: float = 1.0
    fan_in_scaling: bool = True
    width: int = 1

    @classmethod
    def for_task(cls, task: TaskConfig, **options: Any) -> KernelBaseline:
        """The kernel of ``task``'s target family (its depth, activation, output, weight scale, width)."""
        return cls(
            depth=task.depth,
            activation=task.activation,
            output=task.output,
            weight_std=task.weight_std,
            fan_in_scaling=task.fan_in_scaling,
            width=task.width,
            **options,
        )

    @property
    def name(self) -> str:
        return "kernel"

    def gram(self, xs: Tensor) -> Tensor:
        return nngp_kernel(
            xs,
            self.depth,
            activation=self.activation,
            output=self.output,
            weight_std=self.weight_std,
            fan_in_scaling=self.fan_in_scaling,
            width=self.width,
        )

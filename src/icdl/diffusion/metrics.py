"""Score-matching error curves (with the bootstrap bands of [`icdl.icl.metrics`][icdl.icl.metrics]) and sample
distances.

* [`score_error`][icdl.diffusion.metrics.score_error] — the h-weighted squared error against the exact score,
  per number of in-context examples k: ``E(k) = mean_{b, c} h_{t_bk} (ŝ_bkc - s_bkc)^2``, i.e.
  [`icdl.icl.metrics.mse_curve`][icdl.icl.metrics.mse_curve] of ``sqrt(h) ŝ`` against ``sqrt(h) s`` (``sqrt(h)
  s`` is minus the optimal noise prediction, so this is the noise-prediction error of the estimate). Bands
  resample prompts (percentile bootstrap).
* [`sliced_wasserstein`][icdl.diffusion.metrics.sliced_wasserstein] — the sliced 2-Wasserstein distance
  between two equal-size samples (``projections`` seeded random directions, sorted projections matched).
* [`mmd`][icdl.diffusion.metrics.mmd] — the unbiased squared MMD with a Gaussian kernel (bandwidth: the median
  heuristic of the pooled sample unless given).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from icdl.diffusion.task import ou_h
from icdl.errors import InputError
from icdl.icl import metrics as icl_metrics

__all__ = ["mmd", "score_error", "sliced_wasserstein"]


def score_error(
    preds: Tensor, exact: Tensor, t: Tensor, *, resamples: int = 1000, level: float = 0.9, seed: int = 0
) -> dict[str, Any]:
    """``{"mse": [...], "low": [...], "high": [...]}``: the h-weighted score error per k with bands.

    ``preds, exact (B, n, d)``, ``t (B, n)``; positions where ``preds`` has NaN give NaN.
    """
    w = ou_h(t.double()).sqrt()[..., None]
    p, y = preds.double() * w, exact.double() * w
    bands = icl_metrics.bootstrap_bands(p, y, resamples=resamples, level=level, seed=seed)
    return {
        "mse": icl_metrics.mse_curve(p, y).tolist(),
        "low": bands["mse_low"].tolist(),
        "high": bands["mse_high"].tolist(),
    }


def _check_samples(a: Tensor, b: Tensor) -> None:
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise InputError(f"samples must be (m, d) with the same d, got {tuple(a.shape)}, {tuple(b.shape)}")


def sliced_wasserstein(a: Tensor, b: Tensor, *, projections: int = 256, seed: int = 0) -> float:
    """Sliced W2: ``sqrt(mean_θ W2(θ·a, θ·b)^2)`` over ``projections`` random unit directions θ.

    ``a``, ``b``: ``(m, d)`` with the same m (1-D W2 between equal-size samples matches sorted values).
    """
    _check_samples(a, b)
    if a.shape[0] != b.shape[0]:
        raise InputError(f"sliced_wasserstein needs equal sample sizes, got {a.shape[0]} and {b.shape[0]}")
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(a.shape[1], projections, generator=g, dtype=torch.float64)
    theta = theta / theta.norm(dim=0, keepdim=True)
    pa = (a.double() @ theta).sort(0).values
    pb = (b.double() @ theta).sort(0).values
    return math.sqrt(float(((pa - pb) ** 2).mean()))


def mmd(a: Tensor, b: Tensor, *, bandwidth: float | None = None) -> float:
    """Unbiased squared MMD with ``k(x, y) = exp(-|x - y|^2 / (2 bw^2))`` (median heuristic bw)."""
    _check_samples(a, b)
    a, b = a.double(), b.double()
    if bandwidth is None:
        z = torch.cat([a, b])
        bandwidth = float(torch.cdist(z, z).median().clamp_min(1e-12))

    def k(x: Tensor, y: Tensor) -> Tensor:
        return torch.exp(-(torch.cdist(x, y) ** 2) / (2 * bandwidth**2))

    m, n = a.shape[0], b.shape[0]
    kaa, kbb = k(a, a), k(b, b)
    saa = (kaa.sum() - kaa.diagonal().sum()) / (m * (m - 1))
    sbb = (kbb.sum() - kbb.diagonal().sum()) / (n * (n - 1))
    return float(saa + sbb - 2 * k(a, b).mean())

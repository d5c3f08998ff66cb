"""Density-fit score estimators: a Gaussian KDE and a fitted mixture of the context's clean points.

Both are causal predictors with the signature of [`icdl.diffusion.baselines`][icdl.diffusion.baselines]
(``preds[:, j]`` uses the pairs ``i < j`` only) and work on the clean points the context reveals
(``alpha_i x_0,i = x_t,i + h_i y_i``, [`context_x0`][icdl.diffusion.baselines.context_x0]). Each fits an
isotropic Gaussian mixture ``p_0 = Σ_c w_c N(mu_c, s^2 I)`` and returns the exact score of its OU diffusion
to the query's time t, where component c becomes ``N(alpha mu_c, (alpha^2 s^2 + h) I)``:

```text
∇ log p_t(x) = -Σ_c r_c(x) (x - alpha mu_c) / v,   v = alpha^2 s^2 + h,   r_c ∝ w_c N(x; alpha mu_c, v I)
```

* [`KDEScore`][icdl.diffusion.density.KDEScore] — a Gaussian kernel density estimate with bandwidth b: one
  component per context point, ``mu_i = x_0,i``, ``s = b``, ``w_i = 1/k``. ``b = 0`` is
  [`EmpiricalScore`][icdl.diffusion.baselines.EmpiricalScore].
* [`MixtureFitScore`][icdl.diffusion.density.MixtureFitScore] — the task's own family: ``m`` components of
  spread ``s``, means fitted by MAP-EM under the task's prior on means ``N(0, mean_scale^2 I)`` (from a
  deterministic farthest-point start), weights uniform (or Dirichlet-smoothed EM weights).
* [`PopulationScore`][icdl.diffusion.density.PopulationScore] — no context: the task's own prior, the score of
  the population law of ``x_0`` over prompts, ``N(0, (mean_scale^2 + s^2) (k/d) I)`` (exact for
  ``latent_dim = d``; moment-matched otherwise). An ICL model can learn it in pretraining, so the tuned
  families may fall back to it.

Their bandwidth / spread / component count are tuned on held-out prompts by
[`icdl.diffusion.tuning`][icdl.diffusion.tuning]. ``log_density`` gives the diffused log-density, whose
autograd gradient the tests compare with ``__call__``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from icdl.diffusion.baselines import ScoreFn, context_x0
from icdl.diffusion.config import ScoreTaskConfig
from icdl.diffusion.task import ou_alpha, ou_h
from icdl.errors import InputError
from icdl.icl.baselines.simple import check_prompts

__all__ = ["KDEScore", "MixtureFitScore", "PopulationScore", "mixture_log_density", "mixture_score"]


def _diffused(means: Tensor, spread: float, t: Tensor) -> tuple[Tensor, Tensor]:
    """Diffused centres ``alpha mu_c`` ``(..., m, d)`` and variances ``(..., 1, 1)`` at ``t (...)``."""
    a, h = ou_alpha(t)[..., None, None], ou_h(t)[..., None, None]
    return a * means, a**2 * spread**2 + h


def mixture_log_density(x: Tensor, t: Tensor, means: Tensor, log_w: Tensor, spread: float) -> Tensor:
    """``log p_t(x)`` of ``Σ_c w_c N(mu_c, s^2 I)`` diffused to t.

    ``x (..., d)``, ``t (...)``, ``means (..., m, d)``, ``log_w (..., m)`` (``-inf`` drops a component).
    """
    centre, var = _diffused(means, spread, t)
    d = x.shape[-1]
    quad = ((x[..., None, :] - centre) ** 2).sum(-1) / var[..., 0]
    logn = -0.5 * (quad + d * torch.log(2 * math.pi * var[..., 0]))
    return torch.logsumexp(log_w + logn, -1)


def mixture_score(x: Tensor, t: Tensor, means: Tensor, log_w: Tensor, spread: float) -> Tensor:
    """``∇_x log p_t(x)`` of
    [`mixture_log_density`][icdl.diffusion.density.mixture_log_density], in closed form."""
    centre, var = _diffused(means, spread, t)
    diff = x[..., None, :] - centre  # (..., m, d)
    resp = torch.softmax(log_w - (diff**2).sum(-1) / (2 * var[..., 0]), -1)
    return -(resp[..., None] * diff).sum(-2) / var[..., 0]


def _check_spread(name: str, v: float, *, zero: bool) -> None:
    if not (math.isfinite(v) and (v >= 0 if zero else v > 0)):
        raise InputError(f"{name} must be a finite number {'>= 0' if zero else '> 0'}, got {v!r}")


@dataclass(frozen=True)
class PopulationScore:
    """``-x / (alpha^2 v + h)``: the score of the population law ``N(0, v I)`` of ``x_0`` diffused to t,
    ``v = (mean_scale^2 + component_std^2) latent_dim / dim``; uses no context."""

    variance: float

    @classmethod
    def for_task(cls, task: ScoreTaskConfig) -> PopulationScore:
        return cls((task.mean_scale**2 + task.component_std**2) * task.latent_dim / task.dim)

    @property
    def name(self) -> str:
        return "population"

    @property
    def params(self) -> dict[str, Any]:
        return {"estimator": "population", "variance": self.variance}

    def _score(self, x: Tensor, t: Tensor) -> Tensor:
        return -x / (ou_alpha(t) ** 2 * self.variance + ou_h(t))[..., None]

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        check_prompts(xs, ys)
        return self._score(xs[..., :-1], xs[..., -1])

    def score_fn(self, ctx_xs: Tensor, ctx_ys: Tensor) -> ScoreFn:
        def fn(x: Tensor, t: float) -> Tensor:
            return self._score(x, torch.full(x.shape[:1], t, dtype=x.dtype))

        return fn


@dataclass(frozen=True)
class KDEScore:
    """Exact score of the context's Gaussian KDE (bandwidth ``bandwidth``) diffused to the query's t.

    Point j sees components ``N(x_0,i, b^2 I)``, ``i < j``, with equal weights; the first point (no
    context) gets the prior ``-x``.
    """

    bandwidth: float

    def __post_init__(self) -> None:
        _check_spread("KDE bandwidth", self.bandwidth, zero=True)

    @property
    def name(self) -> str:
        return f"kde_b{self.bandwidth:g}"

    @property
    def params(self) -> dict[str, Any]:
        return {"estimator": "kde", "bandwidth": self.bandwidth}

    @staticmethod
    def _causal_log_w(n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        """``(n, n)`` log-weights: row j puts ``-log j`` on ``i < j`` and ``-inf`` elsewhere."""
        j = torch.arange(n, device=device)
        mask = j[None, :] < j[:, None]
        return torch.where(mask, -torch.log(j.clamp_min(1).to(dtype))[:, None], -math.inf)

    def log_density(self, xs: Tensor, ys: Tensor, x: Tensor) -> Tensor:
        """``log p_t`` ``(B, n)`` of the KDE of point j's context at ``x (B, n, d)``, ``t = xs[..., -1]``."""
        x0 = context_x0(xs, ys)
        n = xs.shape[1]
        means = x0[:, None].expand(-1, n, -1, -1)  # (B, j, i, d)
        log_w = self._causal_log_w(n, xs.dtype, xs.device)
        return mixture_log_density(x, xs[..., -1], means, log_w, self.bandwidth)

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        check_prompts(xs, ys)
        x0 = context_x0(xs, ys)
        n = xs.shape[1]
        x = xs[..., :-1]
        log_w = self._causal_log_w(n, xs.dtype, xs.device)
        score = mixture_score(x, xs[..., -1], x0[:, None].expand(-1, n, -1, -1), log_w, self.bandwidth)
        return torch.cat([-x[:, :1], score[:, 1:]], 1)

    def score_fn(self, ctx_xs: Tensor, ctx_ys: Tensor) -> ScoreFn:
        """The score function of one context (``(k, d+1)``, ``(k, d)``), ``k >= 1``."""
        x0 = context_x0(ctx_xs, ctx_ys)
        log_w = torch.full((x0.shape[0],), -math.log(x0.shape[0]), dtype=x0.dtype)

        def fn(x: Tensor, t: float) -> Tensor:
            return mixture_score(x, torch.full(x.shape[:1], t, dtype=x.dtype), x0, log_w, self.bandwidth)

        return fn


@dataclass(frozen=True)
class MixtureFitScore:
    """Exact diffused score of an ``m``-component isotropic mixture fitted to the context by MAP-EM.

    The family is the task's (``N(mu_c, s^2 I)`` with means ``~ N(0, mean_scale^2 I)``). For each prefix
    of k clean points: means start at a farthest-point selection of the points (the first point, then the
    point farthest from those chosen; components beyond k start at the prior mean 0), then ``iters`` EM
    steps with the MAP mean update ``mu_c = Σ_i r_ic x_i / (Σ_i r_ic + s^2 / mean_scale^2)``. Weights are
    ``1/m`` when ``concentration`` is None, else ``(Σ_i r_ic + concentration) / (k + m concentration)``.
    The first point gets the prior ``-x``.
    """

    components: int
    spread: float
    mean_scale: float = 1.5
    concentration: float | None = None
    iters: int = 30

    def __post_init__(self) -> None:
        if not isinstance(self.components, int) or self.components < 1:
            raise InputError(f"mixture components must be an integer >= 1, got {self.components!r}")
        _check_spread("mixture spread", self.spread, zero=False)
        _check_spread("mixture mean_scale", self.mean_scale, zero=False)

    @property
    def name(self) -> str:
        return f"mix{self.components}_s{self.spread:g}"

    @property
    def params(self) -> dict[str, Any]:
        return {"estimator": "mixture", "components": self.components, "spread": round(self.spread, 6)}

    def _start(self, x0: Tensor, mask: Tensor) -> Tensor:
        """Farthest-point start ``(B, J, m, d)`` for every prefix; ``mask (J, k)`` marks prefix j's points."""
        B, _, d = x0.shape
        J = mask.shape[0]
        means = torch.zeros(B, J, self.components, d, dtype=x0.dtype, device=x0.device)
        means[:, :, 0] = x0[:, None, 0]
        sq = ((x0 - x0[:, :1]) ** 2).sum(-1)  # (B, k): to the nearest chosen point
        dist = torch.where(mask, sq[:, None], -math.inf)  # (B, J, k)
        size = mask.sum(1)  # (J,) points per prefix
        for c in range(1, self.components):
            far = dist.argmax(-1)  # (B, J)
            pick = torch.gather(x0, 1, far[..., None].expand(-1, -1, d))  # (B, J, d)
            means[:, :, c] = torch.where((size > c)[None, :, None], pick, 0.0)
            new = ((x0[:, None] - means[:, :, c : c + 1]) ** 2).sum(-1)
            dist = torch.where(mask, torch.minimum(dist, new), -math.inf)
        return means

    def fit_prefixes(self, x0: Tensor) -> tuple[Tensor, Tensor]:
        """Means ``(B, k + 1, m, d)`` and log-weights ``(B, k + 1, m)`` fitted to every prefix of
        ``x0 (B, k, d)``: row j uses the points ``i < j`` (row 0 is the prior, means 0)."""
        B, k, _ = x0.shape
        m, s2 = self.components, self.spread**2
        mask = torch.ones(k + 1, k, dtype=torch.bool, device=x0.device).tril(-1)  # (J, k): i < j
        size = mask.sum(1).to(x0.dtype)[None, :, None]  # (1, J, 1)
        means = self._start(x0, mask)
        log_w = torch.full((B, k + 1, m), -math.log(m), dtype=x0.dtype, device=x0.device)
        shrink = s2 / self.mean_scale**2
        for _ in range(self.iters):
            sq = ((x0[:, None, :, None] - means[:, :, None]) ** 2).sum(-1)  # (B, J, k, m)
            r = torch.softmax(log_w[:, :, None] - sq / (2 * s2), -1) * mask[None, :, :, None]
            mass = r.sum(2)  # (B, J, m)
            means = torch.einsum("bjim,bid->bjmd", r, x0) / (mass + shrink)[..., None]
            if self.concentration is not None:
                a = self.concentration
                log_w = torch.log((mass + a) / (size + m * a))
        return means, log_w

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        check_prompts(xs, ys)
        x, n = xs[..., :-1], xs.shape[1]
        means, log_w = self.fit_prefixes(context_x0(xs, ys)[:, : n - 1])  # rows j = 0 .. n - 1
        score = mixture_score(x, xs[..., -1], means, log_w, self.spread)
        return torch.cat([-x[:, :1], score[:, 1:]], 1)

    def log_density(self, xs: Tensor, ys: Tensor, x: Tensor) -> Tensor:
        """``log p_t`` ``(B, n)`` of the mixture fitted to point j's context at ``x (B, n, d)``,
        ``t = xs[..., -1]`` (row 0: the mixture of the prior start, means 0)."""
        means, log_w = self.fit_prefixes(context_x0(xs, ys)[:, : xs.shape[1] - 1])
        return mixture_log_density(x, xs[..., -1], means, log_w, self.spread)

    def score_fn(self, ctx_xs: Tensor, ctx_ys: Tensor) -> ScoreFn:
        """Fit once on one context (``(k, d+1)``, ``(k, d)``, ``k >= 1``) and return its score function."""
        means, log_w = self.fit_prefixes(context_x0(ctx_xs, ctx_ys)[None])
        means, log_w = means[0, -1], log_w[0, -1]  # the prefix of all k points

        def fn(x: Tensor, t: float) -> Tensor:
            return mixture_score(x, torch.full(x.shape[:1], t, dtype=x.dtype), means, log_w, self.spread)

        return fn

"""In-context score estimation: per-prompt Gaussian mixtures on a random subspace, diffused by OU.

Each prompt draws its own data distribution ``p_0`` — a Gaussian mixture on a random
``k``-dimensional subspace of ``R^d`` (the low-dimensional setting of Chen et al. 2023, "Score
approximation, estimation and distribution recovery of diffusion models on low-dimensional data") — so
the score can only be learned from the prompt, in context (the paper's diffusion application).

Forward process (Ornstein-Uhlenbeck, ``dx = -x/2 dt + dW``):

```python
x_t = alpha_t x_0 + sqrt(h_t) z,   alpha_t = exp(-t/2),   h_t = 1 - exp(-t),   z ~ N(0, I)
```

In-context pairs are ``((x_t, t), y)`` with the denoising score-matching (DSM) target
``y = -(x_t - alpha_t x_0) / h_t = -z / sqrt(h_t)``, whose conditional mean given ``x_t`` is the score
``∇ log p_t(x_t)`` (Vincent 2011); so ``d_x = d + 1`` and ``d_y = d``.

The exact score of a mixture is closed form: component c of ``p_0`` is ``N(U m_c, s^2 U U^T)`` with
``U (d, k)`` orthonormal, so at time t it is ``N(alpha U m_c, Σ_c)`` with
``Σ_c = alpha^2 s^2 U U^T + h I``, whose inverse acts as ``1/(alpha^2 s^2 + h)`` on the subspace and
``1/h`` on its complement; the score is the responsibility-weighted ``-Σ_c^{-1} (x - alpha U m_c)``.

Usage:

```python
cfg = ScoreTaskConfig(dim=2, latent_dim=2, components=3)
b = sample_score_batch(cfg, 8, seed=0)       # b.xs (8, 41, 3) = [x_t, t], b.ys (8, 41, 2)
b.mixture.score(b.x_t, b.t)                  # the exact score at every point, (8, 41, 2)
```
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from icdl.diffusion.config import ScoreTaskConfig
from icdl.errors import InputError

__all__ = [
    "Mixture",
    "ScoreBatch",
    "dsm_target",
    "ou_alpha",
    "ou_h",
    "rng",
    "sample_mixtures",
    "sample_score_batch",
    "sample_times",
]

_STREAMS = {"mixture": 0, "data": 1, "times": 2, "noise": 3}


def rng(seed: int, step: int, stream: str) -> np.random.Generator:
    """A numpy generator for one random stream of one step, seeded by ``(seed, step, stream)``."""
    return np.random.default_rng(np.random.SeedSequence([seed, step, _STREAMS[stream]]))


def ou_alpha(t: Tensor) -> Tensor:
    """``alpha_t = exp(-t/2)``: the signal scale of the OU forward process."""
    return torch.exp(-t / 2)


def ou_h(t: Tensor) -> Tensor:
    """``h_t = 1 - exp(-t)``: the OU noise variance (as ``-expm1(-t)``, accurate at small t)."""
    return -torch.expm1(-t)


def dsm_target(x_t: Tensor, x_0: Tensor, t: Tensor) -> Tensor:
    """The DSM target ``y = -(x_t - alpha_t x_0) / h_t``; ``x_t, x_0 (..., d)``, ``t (...)``."""
    return -(x_t - ou_alpha(t)[..., None] * x_0) / ou_h(t)[..., None]


@dataclass
class Mixture:
    """A batch of Gaussian mixtures, one per prompt, on random subspaces.

    Attributes:
        basis: ``(B, d, k)`` orthonormal columns ``U`` spanning each prompt's subspace.
        latent_means: ``(B, m, k)`` component means in subspace coordinates.
        weights: ``(B, m)`` mixture weights (rows sum to 1).
        std: the isotropic latent standard deviation ``s`` of every component.
    """

    basis: Tensor
    latent_means: Tensor
    weights: Tensor
    std: float

    @property
    def means(self) -> Tensor:
        """Ambient component means ``U m_c``, ``(B, m, d)``."""
        return self.latent_means @ self.basis.transpose(-1, -2)

    def __getitem__(self, idx: int | slice) -> Mixture:
        sl = slice(idx, idx + 1) if isinstance(idx, int) else idx
        return Mixture(self.basis[sl], self.latent_means[sl], self.weights[sl], self.std)

    def sample(self, n: int, generator: np.random.Generator) -> Tensor:
        """``n`` i.i.d. draws of ``x_0`` per prompt, ``(B, n, d)`` (component then latent noise)."""
        B, _, k = self.latent_means.shape
        cum = np.cumsum(self.weights.double().cpu().numpy(), axis=1)[:, None, :-1]  # (B, 1, m-1)
        comp = (generator.random((B, n))[..., None] >= cum).sum(-1)  # (B, n)
        eps = generator.standard_normal((B, n, k))
        comp_t = torch.from_numpy(comp).to(self.latent_means.device)
        lat = torch.gather(self.latent_means, 1, comp_t[..., None].expand(B, n, k))
        lat = lat + self.std * torch.from_numpy(eps).to(lat)
        return lat @ self.basis.transpose(-1, -2)

    def _components(self, x: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        """Per component: ``log w_c N_c(x)`` ``(B, n, m)``, ``Σ_c^{-1}(x - alpha U m_c)`` ``(B, n, m, d)``."""
        d, k = self.basis.shape[-2:]
        a, h = ou_alpha(t)[..., None, None], ou_h(t)[..., None, None]  # (B, n, 1, 1)
        v = x[:, :, None, :] - a * self.means[:, None, :, :]  # (B, n, m, d)
        c = v @ self.basis[:, None]  # (B, n, m, k): subspace coordinates
        par = c @ self.basis[:, None].transpose(-1, -2)  # (B, n, m, d)
        perp = v - par
        var_par = a**2 * self.std**2 + h  # (B, n, 1, 1)
        quad = (c**2).sum(-1) / var_par[..., 0] + (perp**2).sum(-1) / h[..., 0]  # (B, n, m)
        logdet = k * torch.log(var_par[..., 0]) + (d - k) * torch.log(h[..., 0])  # (B, n, 1)
        logp = torch.log(self.weights)[:, None, :] - 0.5 * (quad + logdet + d * math.log(2 * math.pi))
        return logp, par / var_par + perp / h

    def log_density(self, x: Tensor, t: Tensor) -> Tensor:
        """``log p_t(x)`` of the diffused mixture; ``x (B, n, d)``, ``t (B, n)`` -> ``(B, n)``."""
        return torch.logsumexp(self._components(x, t)[0], dim=-1)

    def score(self, x: Tensor, t: Tensor) -> Tensor:
        """The exact score ``∇_x log p_t(x)``; ``x (B, n, d)``, ``t (B, n)`` -> ``(B, n, d)``."""
        logp, prec_v = self._components(x, t)
        resp = torch.softmax(logp, dim=-1)  # (B, n, m)
        return -(resp[..., None] * prec_v).sum(-2)


def sample_mixtures(
    cfg: ScoreTaskConfig, batch_size: int, generator: np.random.Generator, dtype: torch.dtype = torch.float32
) -> Mixture:
    """Draw ``batch_size`` mixtures: a Haar-random ``k``-frame (QR with sign fix), means
    ``N(0, mean_scale^2 I_k)``, weights uniform or ``Dirichlet(weight_concentration)``."""
    B, d, k, m = batch_size, cfg.dim, cfg.latent_dim, cfg.components
    g = generator.standard_normal((B, d, k))
    q, r = np.linalg.qr(g)
    q = q * np.sign(np.diagonal(r, axis1=-2, axis2=-1))[:, None, :]  # Haar measure on frames
    means = cfg.mean_scale * generator.standard_normal((B, m, k))
    if cfg.weight_concentration is None:
        w = np.full((B, m), 1.0 / m)
    else:
        w = generator.dirichlet(np.full(m, cfg.weight_concentration), size=B)
    return Mixture(
        torch.from_numpy(q).to(dtype),
        torch.from_numpy(means).to(dtype),
        torch.from_numpy(w).to(dtype),
        cfg.component_std,
    )


def sample_times(cfg: ScoreTaskConfig, shape: tuple[int, ...], generator: np.random.Generator) -> np.ndarray:
    """Diffusion times in ``[t_min, t_max]``, uniform in t or in log t (``cfg.t_sampling``)."""
    u = generator.random(shape)
    if cfg.t_sampling == "uniform":
        return cfg.t_min + (cfg.t_max - cfg.t_min) * u
    return np.exp(math.log(cfg.t_min) + (math.log(cfg.t_max) - math.log(cfg.t_min)) * u)


@dataclass
class ScoreBatch:
    """A batch of score-matching prompts.

    Attributes:
        xs: ``(B, n, d + 1)`` model inputs ``[x_t, t]``.
        ys: ``(B, n, d)`` DSM targets ``-(x_t - alpha_t x_0) / h_t``.
        x_0: ``(B, n, d)`` clean points; t: ``(B, n)`` times; mixture: the prompts' data distributions.
    """

    xs: Tensor
    ys: Tensor
    x_0: Tensor
    t: Tensor
    mixture: Mixture

    @property
    def x_t(self) -> Tensor:
        """``(B, n, d)`` the noisy points."""
        return self.xs[..., :-1]

    def exact_score(self) -> Tensor:
        """``(B, n, d)`` the exact score ``∇ log p_t(x_t)`` at every point."""
        return self.mixture.score(self.x_t, self.t)


def sample_score_batch(
    cfg: ScoreTaskConfig,
    batch_size: int,
    *,
    seed: int,
    step: int = 0,
    points: int | None = None,
    t: float | None = None,
    dtype: torch.dtype = torch.float32,
) -> ScoreBatch:
    """Sample ``batch_size`` prompts of ``points`` points (default ``cfg.examples + 1``).

    A pure function of ``(seed, step)`` and the config; four independent streams (mixture, data, times,
    noise), so e.g. fixing ``t`` keeps the same mixtures and clean points. ``t`` fixes every time.
    """
    n = cfg.points if points is None else points
    if n < 1 or batch_size < 1:
        raise InputError(f"need at least one prompt and one point, got {batch_size} x {n}")
    if t is not None and not (math.isfinite(t) and t > 0):
        raise InputError(f"t must be a finite number > 0, got {t!r}")
    mix = sample_mixtures(cfg, batch_size, rng(seed, step, "mixture"), torch.float64)
    x0 = mix.sample(n, rng(seed, step, "data"))
    times = (
        np.full((batch_size, n), t)
        if t is not None
        else sample_times(cfg, (batch_size, n), rng(seed, step, "times"))
    )
    tt = torch.from_numpy(times)
    z = torch.from_numpy(rng(seed, step, "noise").standard_normal((batch_size, n, cfg.dim)))
    x_t = ou_alpha(tt)[..., None] * x0 + ou_h(tt).sqrt()[..., None] * z
    ys = dsm_target(x_t, x0, tt)
    xs = torch.cat([x_t, tt[..., None]], dim=-1)
    mix = Mixture(mix.basis.to(dtype), mix.latent_means.to(dtype), mix.weights.to(dtype), mix.std)
    return ScoreBatch(xs.to(dtype), ys.to(dtype), x0.to(dtype), tt.to(dtype), mix)

"""``bayes``: the posterior mean of the next label under the task prior, by self-normalised importance
sampling with the prior as proposal (issue 27; a reference for small targets and short prompts).

For a prompt ``(x_0, y_0, ..., x_k)`` and ``S`` tasks ``y_s(·)`` drawn by the task sampler
([`icdl.icl.baselines.moment.TaskSecondMoment.labels`][icdl.icl.baselines.moment.TaskSecondMoment.labels]:
the same targets,
reference sets and standardisation as the prompts), the estimate is
``ŷ_k = Σ_s ω_s y_s(x_k)``, ``ω_s ∝ exp(-Σ_{i<k} (y_i - y_s(x_i))² / (2τ²))``: the posterior mean under
the prior with a Gaussian likelihood of variance ``τ²`` — the label noise when the task has some, else a
TEMPERED likelihood (noiseless labels give a degenerate posterior that no finite sample can hit). The
effective sample size ``(Σω)² / Σω²`` per prompt and k is the diagnostic (``diagnostics``): once it is a
handful, the estimate is the nearest drawn task, not the posterior mean. Cost: ``S`` target forward passes
per point, as ``blup``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from icdl.errors import InputError
from icdl.icl.baselines.simple import check_prompts

if TYPE_CHECKING:
    from icdl.icl.baselines.moment import TaskSecondMoment

__all__ = ["BayesISBaseline", "importance_posterior_mean"]


def importance_posterior_mean(draws: Tensor, ys: Tensor, tau: float) -> tuple[Tensor, Tensor]:
    """Posterior means ``(B, T, d_y)`` and effective sample sizes ``(B, T)`` for every prefix.

    ``draws (S, B, T, d_y)``: prior draws of the labels at each prompt's points; ``ys (B, T, d_y)``: the
    observed labels; ``tau``: the likelihood's noise std. Position k weights draw s by
    ``exp(-Σ_{i<k} |y_i - draws_s,i|² / (2τ²))`` (log-sum-exp, float64); k = 0 is the prior mean.
    """
    if not (math.isfinite(tau) and tau > 0):
        raise InputError(f"tau must be a finite number > 0, got {tau!r}")
    sq = ((draws.double() - ys.double()[None]) ** 2).sum(-1)  # (S, B, T)
    # exclusive prefix sums: position k sees i < k
    cum = torch.cat([torch.zeros_like(sq[:, :, :1]), sq.cumsum(-1)[:, :, :-1]], -1)
    logw = -cum / (2 * tau**2)
    w = torch.softmax(logw, dim=0)  # (S, B, T)
    mean = (w[..., None] * draws.double()).sum(0)
    ess = 1.0 / (w**2).sum(0)
    return mean, ess


@dataclass
class BayesISBaseline:
    """``bayes``: `importance_posterior_mean` over ``moment``'s sampler draws with likelihood std ``tau``
    (module docstring). ``diagnostics`` after a call: the median and minimum effective sample size per k."""

    moment: TaskSecondMoment
    tau: float = 0.1
    diagnostics: dict[str, Any] | None = field(default=None)

    @property
    def name(self) -> str:
        return "bayes"

    def __call__(self, xs: Tensor, ys: Tensor) -> Tensor:
        check_prompts(xs, ys)
        B, T, d = xs.shape
        draws = self.moment.labels(xs.reshape(B * T, d)).reshape(self.moment.targets, B, T, -1)
        mean, ess = importance_posterior_mean(draws, ys, self.tau)
        self.diagnostics = {
            "targets": self.moment.targets,
            "tau": self.tau,
            "ess_median": ess.median(0).values.tolist(),
            "ess_min": ess.min(0).values.tolist(),
        }
        return mean.to(ys.dtype)

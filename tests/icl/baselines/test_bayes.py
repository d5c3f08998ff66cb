"""``bayes`` (importance sampling from the task prior) against Bayesian linear regression in closed form."""

from __future__ import annotations

import math

import numpy as np
import torch

from icdl.config import TaskConfig, load_config
from icdl.icl.baselines.bayes import BayesISBaseline, importance_posterior_mean
from icdl.icl.baselines.blup import TaskSecondMoment
from icdl.icl.tasks import sample_batch

F64 = torch.float64


def test_importance_sampling_matches_bayesian_linear_regression() -> None:
    """Linear targets y = xᵀw, w ~ N(0, I_2), noise τ = 0.5: the posterior mean is
    x_kᵀ (XᵀX + τ² I)⁻¹ Xᵀ y; 200,000 prior draws give it to ~1e-2."""
    g = torch.Generator().manual_seed(0)
    B, T, d, S, tau = 3, 5, 2, 200_000, 0.5
    xs = torch.randn(B, T, d, generator=g, dtype=F64)
    w_true = torch.randn(B, d, 1, generator=g, dtype=F64)
    ys = xs @ w_true + tau * torch.randn(B, T, 1, generator=g, dtype=F64)
    w = torch.randn(S, d, generator=g, dtype=F64)
    draws = torch.einsum("btd,sd->sbt", xs, w)[..., None]
    mean, ess = importance_posterior_mean(draws, ys, tau)
    X, Y = xs.numpy(), ys.numpy()
    for b in range(B):
        assert abs(mean[b, 0, 0]) < 0.02  # prior mean
        for k in range(1, T):
            A = X[b, :k].T @ X[b, :k] + tau**2 * np.eye(d)
            ref = X[b, k] @ np.linalg.solve(A, X[b, :k].T @ Y[b, :k])
            assert abs(float(mean[b, k, 0]) - float(ref[0])) < 0.03, (b, k)
    assert float(ess[:, 0].min()) > S * 0.99 and float(ess[:, -1].max()) < S


def test_bayes_on_the_sampler_runs_and_reports_its_sample_size() -> None:
    data = load_config("cpu-centred").task.model_dump()
    data.update(dim=2, width=4, depth=2)
    task = TaskConfig.model_validate(data)
    pb = sample_batch(task, 4, seed=3, points=6)
    base = BayesISBaseline(TaskSecondMoment(task, targets=512), tau=0.3)
    out = base(pb.xs.double(), pb.ys.double())
    assert out.shape == pb.ys.shape and bool(out.isfinite().all())
    assert base.diagnostics is not None and len(base.diagnostics["ess_min"]) == 6
    assert base.diagnostics["ess_min"][0] > 500  # k = 0: every draw weighs the same


def test_bayes_matches_rejection_sampling_on_a_tiny_network() -> None:
    """A tiny target (d = 1, width 2, depth 2, labels standardised per task): ``bayes`` with 60,000 prior
    draws against rejection sampling from 60,000 independent draws of the same sampler (another seed),
    accepting draw s with probability ``exp(-Σ_{i<k} (y_i - y_s(x_i))² / (2τ²))``. The two estimate the
    same posterior mean; they agree within 5 combined Monte Carlo standard errors at every k, and the
    posterior moves away from the prior mean (the check is not vacuous)."""
    data = load_config("cpu-centred").task.model_dump()
    data.update(dim=1, width=2, depth=2)
    task = TaskConfig.model_validate(data)
    tau, S = 0.5, 60_000
    pb = sample_batch(task, 3, seed=11, points=4)
    xs, ys = pb.xs.double(), pb.ys.double()
    B, T, d = xs.shape
    base = BayesISBaseline(TaskSecondMoment(task, targets=S), tau=tau)
    is_mean = base(xs, ys)
    ess = torch.tensor(base.diagnostics["ess_min"])  # type: ignore[index]
    other = TaskSecondMoment(task, targets=S, seed=5)
    draws = other.labels(xs.reshape(B * T, d)).reshape(S, B, T, -1)
    sq = ((draws - ys[None]) ** 2).sum(-1)
    cum = torch.cat([torch.zeros_like(sq[:, :, :1]), sq.cumsum(-1)[:, :, :-1]], -1)  # i < k
    accept = torch.rand(cum.shape, generator=torch.Generator().manual_seed(1), dtype=F64) < torch.exp(
        -cum / (2 * tau**2)
    )
    moved = 0.0
    for b in range(B):
        for k in range(T):
            acc = draws[accept[:, b, k], b, k, 0]
            assert acc.numel() > 500, (b, k, acc.numel())
            sd = float(acc.std())
            err = sd * math.sqrt(1 / acc.numel() + 1 / float(ess[k]))
            assert abs(float(acc.mean()) - float(is_mean[b, k, 0])) < 5 * err + 1e-12, (b, k)
            moved = max(moved, abs(float(acc.mean()) - float(draws[:, b, k, 0].mean())))
    assert moved > 0.2  # the context moved the posterior mean well past the Monte Carlo error

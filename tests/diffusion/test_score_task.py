"""icdl.diffusion task, exact score, closed-form estimators, metrics and sampler: independent references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from icdl.diffusion.baselines import (
    ContextMLP,
    EmpiricalScore,
    GaussianFitScore,
    PriorScore,
    context_x0,
    score_fn,
)
from icdl.diffusion.config import ScoreTaskConfig, load_score_config
from icdl.diffusion.metrics import mmd, score_error, sliced_wasserstein
from icdl.diffusion.sampler import sample, time_grid
from icdl.diffusion.task import Mixture, ou_alpha, ou_h, sample_mixtures, sample_score_batch
from icdl.errors import InputError

F64 = torch.float64


def _reference_log_density(mix: Mixture, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """log p_t(x) from full covariance matrices and torch.distributions (no subspace algebra)."""
    B, n, d = x.shape
    U = mix.basis
    out = torch.empty(B, n, dtype=F64)
    for b in range(B):
        for i in range(n):
            a, h = math.exp(-float(t[b, i]) / 2), 1 - math.exp(-float(t[b, i]))
            cov = a**2 * mix.std**2 * U[b] @ U[b].T + h * torch.eye(d, dtype=F64)
            logs = [
                torch.log(mix.weights[b, c])
                + torch.distributions.MultivariateNormal(a * mix.means[b, c], cov).log_prob(x[b, i])
                for c in range(mix.weights.shape[1])
            ]
            out[b, i] = torch.logsumexp(torch.stack(logs), 0)
    return out


@pytest.mark.parametrize(("dim", "latent", "comps"), [(2, 2, 3), (3, 1, 2), (4, 2, 4)])
def test_exact_score_is_gradient_of_log_density(dim: int, latent: int, comps: int) -> None:
    cfg = ScoreTaskConfig(dim=dim, latent_dim=latent, components=comps, weight_concentration=1.0)
    mix = sample_mixtures(cfg, 3, np.random.default_rng(0), F64)
    g = torch.Generator().manual_seed(1)
    x = (2 * torch.randn(3, 5, dim, generator=g, dtype=F64)).requires_grad_()
    t = torch.exp(torch.empty(3, 5, dtype=F64).uniform_(math.log(0.02), math.log(5.0), generator=g))
    ref = _reference_log_density(mix, x, t)
    torch.testing.assert_close(mix.log_density(x, t), ref, rtol=1e-10, atol=1e-10)
    (grad,) = torch.autograd.grad(ref.sum(), x)
    torch.testing.assert_close(mix.score(x, t), grad, rtol=1e-9, atol=1e-9)


def test_batch_is_seeded_and_has_the_documented_structure() -> None:
    cfg = ScoreTaskConfig(dim=3, latent_dim=2, components=2, examples=7)
    a = sample_score_batch(cfg, 5, seed=3, step=2, dtype=F64)
    b = sample_score_batch(cfg, 5, seed=3, step=2, dtype=F64)
    c = sample_score_batch(cfg, 5, seed=3, step=3, dtype=F64)
    assert a.xs.shape == (5, 8, 4) and a.ys.shape == (5, 8, 3) and a.t.shape == (5, 8)
    assert torch.equal(a.xs, b.xs) and torch.equal(a.ys, b.ys)
    assert not torch.equal(a.xs, c.xs)
    assert torch.equal(a.xs[..., -1], a.t)
    assert float(a.t.min()) >= cfg.t_min and float(a.t.max()) <= cfg.t_max
    U = a.mixture.basis
    torch.testing.assert_close(U.transpose(-1, -2) @ U, torch.eye(2, dtype=F64).expand(5, 2, 2))
    # x_0 lies on its prompt's subspace; the target is -(x_t - alpha x_0)/h; the context reveals x_0
    resid = a.x_0 - a.x_0 @ U @ U.transpose(-1, -2)
    assert float(resid.abs().max()) < 1e-12
    al, h = ou_alpha(a.t)[..., None], ou_h(a.t)[..., None]
    torch.testing.assert_close(a.ys, -(a.x_t - al * a.x_0) / h)
    torch.testing.assert_close(context_x0(a.xs, a.ys), a.x_0)
    # a fixed t keeps mixtures and clean points (independent streams)
    f = sample_score_batch(cfg, 5, seed=3, step=2, t=0.5, dtype=F64)
    assert torch.equal(f.x_0, a.x_0) and bool((f.t == 0.5).all())
    with pytest.raises(InputError):
        sample_score_batch(cfg, 5, seed=0, t=-1.0)


def test_dsm_target_conditional_mean_is_the_score() -> None:
    """E[y | x_t] = ∇ log p_t(x_t): the residual y - s(x_t) is uncorrelated with functions of x_t.

    The same statistics reject the score of another time, so the tolerance (5 standard errors) can fail.
    """
    cfg = ScoreTaskConfig(dim=2, latent_dim=1, components=3, weight_concentration=2.0)
    b = sample_score_batch(cfg, 50, seed=0, points=2000, t=0.3, dtype=F64)
    x = b.x_t

    def max_z(score: torch.Tensor) -> float:
        r = b.ys - score  # (B, n, d)
        feats = [torch.ones_like(x), x, torch.tanh(2 * x), x.flip(-1), score]
        zs = []
        for g in feats:
            v = (r * g).reshape(-1)
            zs.append(float(v.mean().abs() / (v.std() / math.sqrt(v.numel()))))
        return max(zs)

    assert max_z(b.exact_score()) < 5.0
    assert max_z(b.mixture.score(x, torch.full_like(b.t, 0.6))) > 5.0


def test_empirical_score_is_the_mixture_of_context_points() -> None:
    cfg = ScoreTaskConfig(dim=2, latent_dim=2, examples=9)
    b = sample_score_batch(cfg, 3, seed=4, dtype=F64)
    preds = EmpiricalScore()(b.xs, b.ys)
    for k in (1, 4, 9):
        ctx = b.x_0[:, :k]
        # an independent route: Mixture with the context points as zero-variance components
        mix = Mixture(torch.eye(2, dtype=F64).expand(3, 2, 2), ctx, torch.full((3, k), 1 / k, dtype=F64), 0.0)
        want = mix.score(b.x_t[:, k : k + 1], b.t[:, k : k + 1])[:, 0]
        torch.testing.assert_close(preds[:, k], want, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(preds[:, 0], -b.x_t[:, 0])


def test_gaussian_fit_matches_a_direct_computation_and_is_causal() -> None:
    cfg = ScoreTaskConfig(dim=3, latent_dim=2, examples=8)
    b = sample_score_batch(cfg, 2, seed=5, dtype=F64)
    preds = GaussianFitScore()(b.xs, b.ys)
    for k in (0, 3, 8):
        x0 = b.x_0[:, :k]
        mu = x0.sum(1) / (k + 1)
        dev = x0 - mu[:, None]
        cov = (dev.transpose(-1, -2) @ dev + torch.eye(3, dtype=F64)) / (k + 1)
        a, h = ou_alpha(b.t[:, k]), ou_h(b.t[:, k])
        m = a[:, None, None] ** 2 * cov + h[:, None, None] * torch.eye(3, dtype=F64)
        want = -torch.linalg.solve(m, b.x_t[:, k] - a[:, None] * mu)
        torch.testing.assert_close(preds[:, k], want)
    torch.testing.assert_close(preds[:, 0], PriorScore()(b.xs, b.ys)[:, 0])
    xs2, ys2 = b.xs.clone(), b.ys.clone()
    xs2[:, 6:] += 1.0  # the query x_5 stays; y_5 and everything later change
    ys2[:, 5:] -= 2.0
    for est in (GaussianFitScore(), EmpiricalScore()):
        assert torch.equal(est(xs2, ys2)[:, :6], est(b.xs, b.ys)[:, :6])


def test_score_fn_appends_the_query_as_the_next_point() -> None:
    cfg = ScoreTaskConfig(dim=2, examples=6)
    b = sample_score_batch(cfg, 1, seed=6, dtype=F64)
    fn = score_fn(EmpiricalScore(), b.xs[0, :6], b.ys[0, :6])
    got = fn(b.x_t[0, 6:7], float(b.t[0, 6]))
    torch.testing.assert_close(got, EmpiricalScore()(b.xs, b.ys)[0, 6:7])


def test_context_mlp_fits_its_context_and_is_seeded() -> None:
    cfg = ScoreTaskConfig(dim=2, examples=12)
    b = sample_score_batch(cfg, 2, seed=7, dtype=torch.float32)
    mlp = ContextMLP(depth=2, width=16, epochs=150, lr=1e-2, ks=[12])
    p1, p2 = mlp(b.xs, b.ys), mlp(b.xs, b.ys)
    assert (
        torch.equal(p1.nan_to_num(), p2.nan_to_num())
        and torch.isnan(p1[:, 5]).all()
        and torch.isfinite(p1[:, 12]).all()
    )
    params = mlp.fit(b.xs[:, :12], b.ys[:, :12])
    before = mlp.init(12, 2, 3, 2, torch.float32)
    w = ou_h(b.t[:, :12])[..., None]
    loss = lambda ps: float((w * (ContextMLP.apply(ps, b.xs[:, :12]) - b.ys[:, :12]) ** 2).mean())  # noqa: E731
    assert loss(params) < 0.5 * loss(before)
    with pytest.raises(InputError):
        ContextMLP(depth=0)


def test_score_error_is_the_h_weighted_mse() -> None:
    g = torch.Generator().manual_seed(0)
    p, e = torch.randn(40, 6, 2, generator=g, dtype=F64), torch.randn(40, 6, 2, generator=g, dtype=F64)
    t = torch.rand(40, 6, generator=g, dtype=F64) + 0.1
    r = score_error(p, e, t, resamples=200)
    want = (ou_h(t)[..., None] * (p - e) ** 2).mean((0, 2))
    torch.testing.assert_close(torch.tensor(r["mse"], dtype=F64), want)
    assert all(lo <= m <= hi for lo, m, hi in zip(r["low"], r["mse"], r["high"], strict=True))


def test_sample_distances() -> None:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(1000, 2, generator=g, dtype=F64)
    b = torch.randn(1000, 2, generator=g, dtype=F64)
    assert sliced_wasserstein(a, a) == 0.0
    shift = torch.tensor([3.0, 0.0], dtype=F64)
    # shifting by v moves every 1-D projection by θ·v: E (θ·v)^2 = |v|^2 / d for uniform θ
    assert sliced_wasserstein(a, a + shift, projections=2000) == pytest.approx(3 / math.sqrt(2), rel=0.05)
    assert sliced_wasserstein(a, b) < 0.1 < sliced_wasserstein(a, b + 0.5)
    assert abs(mmd(a, b)) < 0.01 < mmd(a, b + 1.0)
    with pytest.raises(InputError):
        sliced_wasserstein(a, b[:10])
    with pytest.raises(InputError):
        mmd(a, torch.zeros(5, 3))


def _gaussian(mean: list[float], std: float) -> Mixture:
    return Mixture(
        torch.eye(2, dtype=F64)[None], torch.tensor([[mean]], dtype=F64), torch.ones(1, 1, dtype=F64), std
    )


@pytest.mark.parametrize("method", ["ode", "sde"])
def test_sampler_recovers_a_single_gaussian(method: str) -> None:
    """From N(0, I) at t_max the exact score leads the reverse process to p_{t_min} = N(a m, (a²s²+h) I)."""
    mix, m, s, t_min, t_max = (
        _gaussian([1.5, -0.5], 0.4),
        torch.tensor([1.5, -0.5], dtype=F64),
        0.4,
        0.05,
        8.0,
    )

    def exact(x: torch.Tensor, t: float) -> torch.Tensor:
        return mix.score(x[None], torch.full((1, x.shape[0]), t, dtype=F64))[0]

    kw = {"t_max": t_max, "t_min": t_min, "steps": 200, "method": method, "dtype": F64, "seed": 1}
    x = sample(exact, 4000, 2, denoise=False, **kw)
    a, h = math.exp(-t_min / 2), -math.expm1(-t_min)
    assert torch.allclose(x.mean(0), a * m, atol=0.05)
    assert torch.allclose(x.std(0), torch.full((2,), math.sqrt(a**2 * s**2 + h), dtype=F64), atol=0.04)
    # Tweedie's last step returns E[x_0 | x_t_min]: mean m
    xd = sample(exact, 4000, 2, denoise=True, **kw)
    assert torch.allclose(xd.mean(0), m, atol=0.05)
    # the prior score (-x) leaves N(0, I): the same checks reject it
    xp = sample(lambda x, t: -x, 4000, 2, denoise=False, **kw)
    assert not torch.allclose(xp.std(0), torch.full((2,), math.sqrt(a**2 * s**2 + h), dtype=F64), atol=0.04)


def test_sampler_and_config_errors() -> None:
    with pytest.raises(InputError):
        time_grid(1.0, 2.0, 10)
    with pytest.raises(InputError):
        sample(lambda x, t: -x, 10, 2, t_max=1.0, t_min=0.1, method="euler")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="latent_dim"):
        load_score_config("score-small", ["task.latent_dim=3"])
    with pytest.raises(InputError, match="unknown key"):
        load_score_config("score-small", ["task.nope=1"])
    with pytest.raises(InputError, match="unknown score preset"):
        load_score_config("cpu-small")
    assert load_score_config("score-small").task.d_x == 3


def test_score_config_files_get_the_same_checks_as_run_configs(tmp_path) -> None:
    """An empty file, a NaN and a misspelt key are one-line errors, the key with the nearest known one."""
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(InputError, match="is empty"):
        load_score_config(empty)
    with pytest.raises(InputError, match=r"task\.t_max"):
        load_score_config("score-small", ["task.t_max=.nan"])
    with pytest.raises(InputError, match=r"did you mean 'task\.latent_dim'"):
        load_score_config("score-small", ["task.latent_dims=2"])

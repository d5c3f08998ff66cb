"""Tuned score baselines (icdl.diffusion.density / tuning, GD from the prior start) against independent
references: autograd of torch.distributions log-densities, the exact -x output, a Monte Carlo population
variance, and held-out tuning that no change of the test prompts can move."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Independent, MixtureSameFamily, Normal

from icdl.cli import main
from icdl.diffusion.baselines import EmpiricalScore, GDScore, context_x0, prior_start_weights
from icdl.diffusion.config import ScoreTaskConfig, load_score_config
from icdl.diffusion.density import KDEScore, MixtureFitScore, PopulationScore
from icdl.diffusion.evaluate import mean_bands, sampling_distances
from icdl.diffusion.task import ou_alpha, ou_h, sample_mixtures, sample_score_batch
from icdl.diffusion.tuning import select, tune, tuned_baselines
from icdl.errors import InputError
from icdl.nets import NetSpec, empirical_risk, forward

F64 = torch.float64


def _reference_score(
    centres: torch.Tensor, log_w: torch.Tensor, std: torch.Tensor, x: torch.Tensor
) -> torch.Tensor:
    """Autograd of a torch.distributions isotropic mixture's log_prob: ``centres (m, d)``, ``std`` scalar."""
    comp = Independent(Normal(centres, std.expand_as(centres)), 1)
    mix = MixtureSameFamily(Categorical(logits=log_w), comp)
    xr = x.detach().clone().requires_grad_(True)
    (g,) = torch.autograd.grad(mix.log_prob(xr).sum(), xr)
    return g


@pytest.mark.parametrize(("dim", "depth", "width"), [(2, 3, 16), (3, 2, 6), (1, 4, 5), (2, 3, 4)])
def test_prior_start_outputs_minus_x_exactly_and_gd_moves_it(dim: int, depth: int, width: int) -> None:
    spec = NetSpec(depth, width, dim + 1, dim, activation="relu", output="linear")
    w0 = prior_start_weights(spec, generator=torch.Generator().manual_seed(dim), scale=0.7)
    g = torch.Generator().manual_seed(1)
    x = torch.cat(
        [3 * torch.randn(50, dim, generator=g, dtype=F64), 4 * torch.rand(50, 1, generator=g, dtype=F64)], -1
    )
    assert torch.equal(forward(spec, w0, x), -x[:, :dim])  # exactly, not just close
    if width > 2 * dim:  # the free units exist and have random input weights
        assert bool((w0 != 0).sum() > 2 * dim * depth)
    # non-degenerate: the DSM gradient at w0 is non-zero (by autograd), so GD leaves -x
    b = sample_score_batch(ScoreTaskConfig(dim=dim, latent_dim=dim, examples=12), 1, seed=dim, dtype=F64)
    w = w0.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(empirical_risk(spec, "squared", w, b.xs[0], b.ys[0]), w)
    assert bool((grad != 0).any())
    gd = GDScore(depth=depth, width=width, lr=1e-2, steps=3, init="prior", init_scale=0.7, seed=dim, ks=[12])
    p = gd(b.xs, b.ys)
    assert torch.equal(p[:, 0], -b.xs[:, 0, :dim]) and not torch.allclose(p[:, 12], -b.xs[:, 12, :dim])
    with pytest.raises(InputError, match="width >= 2d"):
        prior_start_weights(NetSpec(depth, 2 * dim - 1, dim + 1, dim, activation="relu", output="linear"))


@pytest.mark.parametrize("bandwidth", [0.0, 0.2, 0.9])
def test_kde_score_is_the_gradient_of_the_noised_kde_density(bandwidth: float) -> None:
    cfg = ScoreTaskConfig(dim=3, latent_dim=2, examples=9)
    b = sample_score_batch(cfg, 2, seed=3, dtype=F64)
    est = KDEScore(bandwidth)
    preds = est(b.xs, b.ys)
    x0 = context_x0(b.xs, b.ys)
    for p in range(2):
        for k in (1, 4, 9):
            a, h = ou_alpha(b.t[p, k]), ou_h(b.t[p, k])
            std = torch.sqrt(a**2 * bandwidth**2 + h)
            want = _reference_score(a * x0[p, :k], torch.zeros(k, dtype=F64), std, b.x_t[p, k])
            torch.testing.assert_close(preds[p, k], want, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(preds[:, 0], -b.x_t[:, 0])
    # its own log_density agrees with its score (autograd), and b = 0 is the empirical score
    x = b.x_t.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(est.log_density(b.xs, b.ys, x)[:, 1:].sum(), x)
    torch.testing.assert_close(g[:, 1:], preds[:, 1:], rtol=1e-9, atol=1e-9)
    if bandwidth == 0.0:
        torch.testing.assert_close(preds, EmpiricalScore()(b.xs, b.ys), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(("components", "concentration"), [(3, None), (2, 0.5), (4, None)])
def test_mixture_fit_score_is_the_gradient_of_its_density_and_causal(
    components: int, concentration: float | None
) -> None:
    cfg = ScoreTaskConfig(dim=2, latent_dim=2, examples=10)
    b = sample_score_batch(cfg, 3, seed=4, dtype=F64)
    est = MixtureFitScore(components, 0.4, mean_scale=1.5, concentration=concentration)
    preds = est(b.xs, b.ys)
    x0 = context_x0(b.xs, b.ys)
    for k in (1, 2, 5, 10):
        # the fit on exactly the first k points, alone (a separate call: causality and the prefix batching)
        means, log_w = est.fit_prefixes(x0[:, :k])
        means, log_w = means[:, -1], log_w[:, -1]
        for p in range(3):
            a, h = ou_alpha(b.t[p, k]), ou_h(b.t[p, k])
            std = torch.sqrt(a**2 * 0.4**2 + h)
            want = _reference_score(a * means[p], log_w[p], std, b.x_t[p, k])
            torch.testing.assert_close(preds[p, k], want, rtol=1e-9, atol=1e-9)
        fn = est.score_fn(b.xs[0, :k], b.ys[0, :k])
        torch.testing.assert_close(fn(b.x_t[0, k : k + 1], float(b.t[0, k]))[0], preds[0, k])
    # run long, EM ends at a fixed point of the MAP update (an independent re-derivation of one EM step)
    long = MixtureFitScore(components, 0.4, mean_scale=1.5, concentration=concentration, iters=500)
    means, log_w = long.fit_prefixes(x0[:, :10])
    mu, lw = means[:, -1], log_w[:, -1]
    r = torch.softmax(lw[:, None] - ((x0[:, :10, None] - mu[:, None]) ** 2).sum(-1) / (2 * 0.4**2), -1)
    upd = (r.transpose(1, 2) @ x0[:, :10]) / (r.sum(1) + 0.4**2 / 1.5**2)[..., None]
    torch.testing.assert_close(upd, mu, rtol=1e-7, atol=1e-7)
    # changing later pairs changes no earlier prediction
    ys2 = b.ys.clone()
    ys2[:, 6:] += 3.0
    assert torch.equal(est(b.xs, ys2)[:, :7], preds[:, :7])


def test_population_score_is_the_score_of_the_pooled_law_of_x0() -> None:
    cfg = ScoreTaskConfig(dim=2, latent_dim=2, components=3, mean_scale=1.5, component_std=0.3)
    mix = sample_mixtures(cfg, 4000, np.random.default_rng(0), F64)
    x0 = mix.sample(5, np.random.default_rng(1)).reshape(-1, 2)
    pop = PopulationScore.for_task(cfg)
    # Monte Carlo variance of x_0 pooled over prompts vs the closed form 1.5^2 + 0.3^2 (se ~ 0.03)
    assert abs(float(x0.var(0).mean()) - pop.variance) < 0.1 and abs(pop.variance - 2.34) < 1e-12
    x, t = torch.tensor([[1.0, -2.0]], dtype=F64), 0.7
    want = _reference_score(
        torch.zeros(1, 2, dtype=F64), torch.zeros(1, dtype=F64),
        torch.sqrt(ou_alpha(torch.tensor(t)) ** 2 * 2.34 + ou_h(torch.tensor(t))).to(F64), x[0],
    )  # fmt: skip
    torch.testing.assert_close(pop.score_fn(torch.zeros(0, 3), torch.zeros(0, 2))(x, t)[0], want)


def test_select_picks_the_best_candidate_per_cell_with_fallbacks() -> None:
    B, n, d = 6, 9, 2
    exact = torch.zeros(B, n, d, dtype=F64)
    t = torch.full((B, n), 0.1, dtype=F64)
    t[:, ::2] = 3.0  # two t bins, split at 1
    a = torch.where((t < 1)[..., None], 0.1, 1.0).expand(B, n, d).clone()  # good at small t
    c = torch.where((t < 1)[..., None], 1.0, 0.1).expand(B, n, d).clone()  # good at large t
    c[:, 5:] = math.inf  # diverged for k >= 5: never chosen there
    sel = select([a, c], exact, t, k_edges=(0, 1, 5), t_edges=(1.0,))
    assert sel.choice[1] == (0, 1) and sel.choice[2] == (0, 0)
    # k bin 0 holds only position 0 (t = 3): its small-t cell falls back to the bin's choice
    assert sel.choice[0] == (1, 1)


def _tiny_cfg():  # type: ignore[no-untyped-def]
    return load_score_config("score-small", ["task.examples=8", "model.max_points=9"])


def test_tuning_never_sees_the_test_prompts() -> None:
    cfg = _tiny_cfg()
    reports = [
        [t.report() for t in tuned_baselines(cfg, prompts=12, seed=5, test_seed=s, gd_ks=[2, 8])]
        for s in (1, 2)
    ]
    assert reports[0] == reports[1]
    assert reports[0] != [t.report() for t in tuned_baselines(cfg, prompts=12, seed=6, gd_ks=[2, 8])]
    with pytest.raises(InputError, match="must differ"):
        tune("kde", [KDEScore(0.1)], cfg, prompts=4, seed=3, test_seed=3)
    with pytest.raises(InputError, match="unknown score baseline"):
        tuned_baselines(cfg, ["nope"])


def test_cli_tuning_is_the_same_for_other_test_prompts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def evaluate(seed: int) -> dict:  # type: ignore[type-arg]
        with pytest.raises(SystemExit) as exc:
            main(
                ["score", "evaluate", "--baselines-only", "score-small", "--prompts", "4",
                 "--seed", str(seed), "--tune-prompts", "6", "--mlp-ks", "3", "--no-mlp", "--gd-steps", "0",
                 "--resamples", "10", "--json"]
            )  # fmt: skip
        out, err = capsys.readouterr()
        assert exc.value.code in (0, None), err
        return json.loads(out)

    r1, r2 = evaluate(1), evaluate(2)
    assert r1["tuning"] == r2["tuning"] and set(r1["tuning"]) == {"gd_prior", "kde", "mixture_fit"}
    assert r1["score_error"]["kde"]["mse"] != r2["score_error"]["kde"]["mse"]  # the test prompts did change
    assert {"population", "gd_prior", "kde", "mixture_fit"} <= set(r1["score_error"])


def test_sampling_bands_over_mixtures() -> None:
    v = [0.3, 0.5, 0.4, 0.6, 0.2]
    b = mean_bands(v, resamples=400)
    assert b["low"] <= b["mean"] <= b["high"] and b["high"] - b["low"] < 0.3
    assert b["mean"] == pytest.approx(0.4)
    assert math.isnan(mean_bands([0.1, math.nan])["mean"])
    cfg = _tiny_cfg()
    tuned = tuned_baselines(cfg, ["kde"], prompts=6, seed=5, test_seed=7)
    r = sampling_distances(None, cfg, ks=[2, 8], prompts=3, samples=30, steps=3, seed=7, tuned=tuned)
    assert set(r["sw"]) == {"prior", "population", "gaussian_fit", "empirical", "kde"}
    for name in r["sw"]:
        lo, mid, hi = (r["sw_bands"][key][name] for key in ("low", "mean", "high"))
        assert all(a <= m <= c for a, m, c in zip(lo, mid, hi, strict=True)) and len(mid) == 2
    assert len(r["sw_per_prompt"]["kde"][0]) == 3 and "minus_icl" not in r["sw_bands"]
    json.dumps(r)  # JSON-ready

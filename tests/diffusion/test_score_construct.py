"""The compiled GD transformer on a ReLU score network (d_x = d + 1, d_y = d) equals reference GD on
the DSM (squared) loss in float64, like tests/construct/test_construct.py for the paper's task."""

from __future__ import annotations

import pytest
import torch

from icdl.diffusion.construct import (
    compile_score_gd,
    score_gd_prompt,
    score_gd_prompt_info,
    score_net_spec,
    verify_score_gd,
)
from icdl.nets import empirical_risk, forward, lemma1_terms, reference_gd

# (d, N, K, n, L, lr)
CASES = [(2, 3, 8, 16, 5, 0.01), (3, 2, 6, 12, 4, 0.02), (2, 4, 6, 10, 3, 0.01), (1, 3, 5, 8, 6, 0.02)]


@pytest.mark.parametrize("case", CASES)
def test_compiled_score_gd_matches_reference_gd(case) -> None:
    d, N, K, n, L, lr = case
    model = compile_score_gd(d, N, K, lr=lr, steps=L, n=n)
    spec = model.spec
    assert (spec.in_dim, spec.out_dim, spec.output) == (d + 1, d, "linear")
    x, y, xq, w0 = score_gd_prompt(d, N, K, n, seed=3)
    assert x.shape == (n, d + 1) and y.shape == (n, d)
    out = model(model.build_prompt(x, y, xq, w0))
    ref = reference_gd(spec, "squared", w0, x, y, lr=lr, steps=L)
    # the only place ReLU GD may differ from the transformer: pre-activations inside (0, delta)
    x_all = torch.cat([x, xq[None]])
    for w in ref:
        for z in lemma1_terms(spec, "squared", w, x_all, torch.zeros(n + 1, d, dtype=x.dtype)).pre:
            assert int(((z > 0) & (z < 1e-9)).sum()) == 0
    W = out[0][:, model.layout.indices("W")]
    assert torch.equal(W, W[:1].expand_as(W))
    scale = max(1.0, float(ref.abs().max()))
    assert float((W[0] - ref[-1]).abs().max()) <= 1e-9 * scale
    assert float((ref[-1] - ref[0]).abs().max()) > 1e-3  # GD moved: the check is not vacuous
    pred, want = model.read_prediction(out)[0], forward(spec, ref[-1], xq[None])[0]
    assert float((pred - want).abs().max()) <= 1e-9 * max(1.0, float(want.abs().max()))
    # it is GD on the DSM loss: the risk falls along the trajectory
    risks = empirical_risk(spec, "squared", ref, x.expand(L + 1, -1, -1), y.expand(L + 1, -1, -1))
    assert float(risks[-1]) < float(risks[0])


def test_verify_on_a_score_prompt_and_linear_output_can_be_negative() -> None:
    model = compile_score_gd(2, 3, 6, lr=0.01, steps=3, n=8)
    rep = verify_score_gd(model, seed=1)
    assert rep.passed and rep.max_abs_err_weights <= 1e-12
    spec = score_net_spec(2, 3, 6)
    x, _, _, w0 = score_gd_prompt(2, 3, 6, 8, seed=1)
    assert float(forward(spec, w0, x).min()) < 0  # a score network must output negative values


def test_gd_baseline_is_what_the_compiled_transformer_computes() -> None:
    from icdl.diffusion.baselines import GDScore
    from icdl.diffusion.config import ScoreTaskConfig
    from icdl.diffusion.task import sample_score_batch

    gd = GDScore(depth=3, width=6, lr=0.02, steps=4, ks=[9])
    b = sample_score_batch(ScoreTaskConfig(dim=2, examples=9), 2, seed=8, dtype=torch.float64)
    preds = gd(b.xs, b.ys)
    model = compile_score_gd(2, 3, 6, lr=0.02, steps=4, n=9)
    for i in range(2):
        out = model(model.build_prompt(b.xs[i, :9], b.ys[i, :9], b.xs[i, 9], gd.w0(2)))
        torch.testing.assert_close(model.read_prediction(out)[0], preds[i, 9], rtol=0, atol=1e-12)
    assert torch.isnan(preds[:, 5]).all()


def _first_draw(d: int, N: int, K: int, n: int, seed: int) -> tuple[torch.Tensor, ...]:
    """The prompt a seed gave before redrawing existed: prompt (seed, step 0) of the default task, and w0
    the first He-scaled draw of a generator seeded with ``seed``."""
    from icdl.diffusion.config import ScoreTaskConfig
    from icdl.diffusion.task import sample_score_batch
    from icdl.nets import init_weights

    b = sample_score_batch(
        ScoreTaskConfig(dim=d, latent_dim=d), 1, seed=seed, points=n + 1, dtype=torch.float64
    )
    g = torch.Generator().manual_seed(seed)
    w0 = init_weights(score_net_spec(d, N, K), generator=g, fan_in_scaling=True, dtype=torch.float64)
    return b.xs[0, :n], b.ys[0, :n], b.xs[0, n], w0


def test_a_degenerate_score_prompt_is_redrawn_and_a_good_one_kept(assert_nondegenerate) -> None:
    """d = 1, N = 2, K = 1, n = 2: seed 2's first draw has its one hidden unit dead on both examples (GD
    never moves w, checked with reference GD); by default it is redrawn, while good first draws are kept."""
    spec = score_net_spec(1, 2, 1)
    raw = score_gd_prompt_info(1, 2, 1, 2, seed=2, nondegenerate=False)
    traj = reference_gd(spec, "squared", raw.w0, raw.x, raw.y, lr=1.0, steps=1)
    assert raw.draws == 1 and torch.equal(traj[1], traj[0])
    good = score_gd_prompt_info(1, 2, 1, 2, seed=2)
    assert good.draws > 1
    assert_nondegenerate(spec, good.x, good.y, good.w0)
    kept = 0
    for seed in range(6):
        first = _first_draw(1, 2, 1, 2, seed)
        assert all(
            torch.equal(a, b)
            for a, b in zip(first, score_gd_prompt(1, 2, 1, 2, seed=seed, nondegenerate=False), strict=True)
        )
        task = score_gd_prompt_info(1, 2, 1, 2, seed=seed)
        assert_nondegenerate(spec, task.x, task.y, task.w0)
        if task.draws == 1:
            kept += 1
            assert all(torch.equal(a, b) for a, b in zip(first, task.astuple(), strict=True))
    assert 0 < kept < 6

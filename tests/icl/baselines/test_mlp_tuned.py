"""mlp_tuned: a per-prompt MLP with (width, lr, weight decay, epochs) tuned on held-out prompts."""

from __future__ import annotations

import pytest
import torch

from icdl import nets
from icdl.errors import InputError
from icdl.icl.baselines.mlp_tuned import MLPSetting, MLPTunedBaseline, fit_predict, init_params

F64 = torch.float64


def _prompts(B: int, n: int, d: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    spec = nets.NetSpec(2, 8, d, 1, output="linear")
    g = torch.Generator().manual_seed(seed)
    w = nets.init_weights(spec, (B,), generator=g, fan_in_scaling=True, dtype=F64)
    xs = torch.randn(B, n, d, generator=g, dtype=F64)
    ys = nets.forward(spec, w, xs)
    assert float(ys.std()) > 0.1  # non-degenerate labels
    return xs, ys


def _reference(
    x: torch.Tensor, y: torch.Tensor, k: int, s: MLPSetting, depth: int, seed: int
) -> torch.Tensor:
    """One network on one prompt with torch.optim.AdamW: the plain loop the batched trainer must equal."""
    params = [
        (W.clone().requires_grad_(), b.clone().requires_grad_())
        for W, b in init_params(depth, s.width, x.shape[-1], y.shape[-1], seed=seed, k=k)
    ]
    opt = torch.optim.AdamW([t for p in params for t in p], lr=s.lr, weight_decay=s.weight_decay)

    def f(inp: torch.Tensor) -> torch.Tensor:
        h = inp
        for j, (W, b) in enumerate(params):
            h = h @ W + b
            h = torch.relu(h) if j < depth - 1 else h
        return h

    for _ in range(s.epochs):
        opt.zero_grad()
        ((f(x[:k]) - y[:k]) ** 2).mean().backward()
        opt.step()
    with torch.no_grad():
        return f(x[k : k + 1])[0]


def test_batched_training_equals_a_per_prompt_adamw_loop() -> None:
    xs, ys = _prompts(3, 7, 4, 0)
    grid = [(1e-2, 0.0), (3e-2, 1.0)]
    for k in (1, 3, 6):
        got = fit_predict(
            xs, ys, k, depth=3, width=5, lrs=[g[0] for g in grid], weight_decays=[g[1] for g in grid],
            epochs=[4, 9], seed=2,
        )  # fmt: skip
        for gi, (lr, wd) in enumerate(grid):
            for ei, e in enumerate((4, 9)):
                for b in range(3):
                    want = _reference(xs[b], ys[b], k, MLPSetting(5, lr, wd, e), 3, 2)
                    torch.testing.assert_close(got[ei, gi, b], want, rtol=1e-9, atol=1e-12)


def test_untrained_network_predicts_zero_and_training_moves_it() -> None:
    xs, ys = _prompts(4, 5, 3, 1)
    p = fit_predict(xs, ys, 3, depth=3, width=6, lrs=[1e-2], weight_decays=[0.0], epochs=[0, 20])
    assert torch.equal(p[0], torch.zeros_like(p[0]))  # zero output layer
    assert float(p[1].abs().min()) > 0


def test_causal_in_k() -> None:
    xs, ys = _prompts(3, 8, 3, 2)
    base = MLPTunedBaseline(depth=2, widths=(4,), lrs=(1e-2,), weight_decays=(0.0,), epochs=(5,))
    base.settings = [None] + [MLPSetting(4, 1e-2, 0.0, 5)] * 7
    ref = base(xs, ys)
    xs2, ys2 = xs.clone(), ys.clone()
    xs2[:, 5:] += 3.0  # later points
    ys2[:, 4:] -= 2.0  # the query's own label and later ones
    torch.testing.assert_close(base(xs2, ys2)[:, :5], ref[:, :5])
    assert torch.equal(ref[:, 0], torch.zeros_like(ref[:, 0]))


def test_tune_never_sees_test_labels_and_picks_the_lowest_held_out_mse() -> None:
    xv, yv = _prompts(6, 7, 3, 3)
    kw = {"depth": 2, "widths": (3, 6), "lrs": (1e-3, 3e-2), "weight_decays": (0.0, 1.0), "epochs": (2, 10)}
    base = MLPTunedBaseline(anchors=(1, 3), widen=0, **kw)  # type: ignore[arg-type]
    settings = base.tune(xv, yv)
    assert base.tuning is not None and base.tuning["anchors"] == [1, 3, 6]
    # the winner at anchor 3 is the grid setting with the lowest held-out MSE, by brute force
    errs = {}
    for s in base.grid():
        p = fit_predict(xv, yv, 3, depth=2, width=s.width, lrs=[s.lr], weight_decays=[s.weight_decay],
                        epochs=[s.epochs])[0, 0]  # fmt: skip
        errs[s] = float(((p - yv[:, 3]) ** 2).mean())
    assert settings[3] == min(errs, key=lambda s: errs[s])
    assert settings[2] == settings[3] and settings[4] == settings[3] and settings[5] == settings[6]
    # predicting on other prompts (any labels) leaves the tuned settings alone
    xs, ys = _prompts(4, 7, 3, 4)
    before = list(base.settings or [])
    base(xs, ys * 100.0)
    assert base.settings == before


def test_a_choice_on_the_grid_edge_widens_the_grid() -> None:
    """Learning rates far too small for 10 epochs: the choice sits on the grid's high-lr edge, so tuning
    scores larger learning rates and keeps the best of everything it scored (issue 27)."""
    xv, yv = _prompts(6, 7, 3, 3)
    kw = {"depth": 2, "widths": (4,), "lrs": (1e-4, 3e-4), "weight_decays": (0.0,), "epochs": (10,)}
    base = MLPTunedBaseline(anchors=(3,), **kw)  # type: ignore[arg-type]
    settings = base.tune(xv, yv)
    assert base.tuning is not None
    added = base.tuning["widened"]["3"]
    assert [a["lr"] for a in added] == pytest.approx([9e-4, 2.7e-3])  # 2 rounds, one lr beyond the edge
    errs = {}
    for lr in (1e-4, 3e-4, 9e-4, 2.7e-3):
        p = fit_predict(xv, yv, 3, depth=2, width=4, lrs=[lr], weight_decays=[0.0], epochs=[10])[0, 0]
        errs[lr] = float(((p - yv[:, 3]) ** 2).mean())
    assert settings[3] is not None and settings[3].lr == pytest.approx(min(errs, key=lambda v: errs[v]))
    assert settings[3].lr > 3e-4


def test_untuned_and_bad_grids_are_input_errors() -> None:
    with pytest.raises(InputError):
        MLPTunedBaseline()(torch.zeros(1, 3, 2, dtype=F64), torch.zeros(1, 3, 1, dtype=F64))
    for bad in ({"widths": (0,)}, {"lrs": (float("nan"),)}, {"weight_decays": (-1.0,)}, {"epochs": ()}):
        with pytest.raises(InputError):
            MLPTunedBaseline(**bad)  # type: ignore[arg-type]


def _set_base(k_max: int, epochs: int = 10) -> MLPTunedBaseline:
    base = MLPTunedBaseline(depth=3, seed=2)
    base.settings = [None] + [MLPSetting(8, 3e-2, 0.3, epochs) for _ in range(k_max)]
    return base


def test_differentiable_training_has_the_same_values_and_matches_finite_differences() -> None:
    from icdl.icl.analysis import sensitivity as sens

    g = torch.Generator().manual_seed(4)
    xs = torch.randn(3, 6, 2, generator=g, dtype=torch.float64)
    ys = torch.randn(3, 6, 1, generator=g, dtype=torch.float64)
    base = _set_base(5)
    with torch.no_grad():
        full = base(xs, ys)
    for k in (1, 5):
        x, y = sens.leaves(xs[:, : k + 1], ys[:, : k + 1])
        pred = sens.last_point(base)(x, y)  # predict_last: differentiable through the AdamW training
        assert pred.requires_grad
        torch.testing.assert_close(pred.detach(), full[:, k], rtol=0, atol=1e-12)
        s = sens.sensitivities([pred], x, y)[0]  # raises if the query's own label is read (causal)
        assert bool(s.d_y.abs().max() > 1e-3)  # non-vacuous (at k = 1 the trained net ignores x_q here)
        assert k == 1 or bool(s.d_x.abs().max() > 1e-3)
        h = 1e-6
        with torch.no_grad():
            for b in range(3):
                for i in range(k):
                    yp, ym = ys[b : b + 1, : k + 1].clone(), ys[b : b + 1, : k + 1].clone()
                    yp[0, i, 0] += h
                    ym[0, i, 0] -= h
                    xb = xs[b : b + 1, : k + 1]
                    fd = float(base.predict_last(xb, yp) - base.predict_last(xb, ym)) / (2 * h)
                    assert s.d_y[b, i].item() == pytest.approx(fd, rel=1e-4, abs=1e-7)
                for j in range(2):
                    xp, xm = xs[b : b + 1, : k + 1].clone(), xs[b : b + 1, : k + 1].clone()
                    xp[0, k, j] += h
                    xm[0, k, j] -= h
                    yb = ys[b : b + 1, : k + 1]
                    fd = float(base.predict_last(xp, yb) - base.predict_last(xm, yb)) / (2 * h)
                    assert s.d_x[b, j].item() == pytest.approx(fd, rel=1e-4, abs=1e-7)

"""Baselines against plain per-prompt reference implementations (float64), plus causality and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from icdl import nets
from icdl.errors import InputError
from icdl.icl import metrics
from icdl.icl.baselines import simple as bl

F64 = torch.float64


def _prompts(B: int = 10, n: int = 9, d: int = 3, d_y: int = 1, seed: int = 0, dtype=F64):
    """Prompts from random 3-layer ReLU nets on N(-2, I) inputs (the paper's task, small)."""
    g = torch.Generator().manual_seed(seed)
    spec = nets.NetSpec(3, 8, d, d_y, output="linear")
    w = nets.init_weights(spec, (B,), generator=g, fan_in_scaling=True, dtype=F64)
    xs = torch.randn(B, n, d, generator=g, dtype=F64) - 2
    ys = nets.forward(spec, w, xs)
    return xs.to(dtype), ys.to(dtype)


def test_zero() -> None:
    xs, ys = _prompts()
    assert torch.equal(bl.ZeroBaseline()(xs, ys), torch.zeros_like(ys))


@pytest.mark.parametrize("d_y", [1, 2])
def test_averaging_matches_loop(d_y: int) -> None:
    xs, ys = _prompts(d_y=d_y)
    got = bl.AveragingBaseline()(xs, ys)
    ref = torch.zeros_like(ys)
    for b in range(ys.shape[0]):
        for k in range(1, ys.shape[1]):
            ref[b, k] = ys[b, :k].mean(0)
    torch.testing.assert_close(got, ref, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("intercept", [False, True])
@pytest.mark.parametrize("d_y", [1, 2])
def test_min_norm_least_squares_matches_lstsq(intercept: bool, d_y: int) -> None:
    xs, ys = _prompts(B=6, n=10, d=4, d_y=d_y, seed=1)
    got = bl.LeastSquaresBaseline(intercept=intercept)(xs, ys)
    ref = torch.zeros_like(ys)
    for b in range(6):
        X = torch.cat([xs[b], torch.ones(10, 1, dtype=F64)], -1) if intercept else xs[b]
        for k in range(1, 10):  # k < 4 (or 5) is underdetermined: gelsd gives the min-norm solution
            w = torch.linalg.lstsq(X[:k], ys[b, :k], driver="gelsd").solution
            ref[b, k] = X[k] @ w
    torch.testing.assert_close(got, ref, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("intercept", [False, True])
def test_ridge_matches_normal_equations(intercept: bool) -> None:
    xs, ys = _prompts(B=5, n=8, d=3, d_y=2, seed=2)
    lam = 0.7
    got = bl.LeastSquaresBaseline(ridge=lam, intercept=intercept)(xs, ys)
    ref = torch.zeros_like(ys)
    for b in range(5):
        X = torch.cat([xs[b], torch.ones(8, 1, dtype=F64)], -1) if intercept else xs[b]
        D = torch.eye(X.shape[1], dtype=F64)
        if intercept:
            D[-1, -1] = 0
        for k in range(1, 8):
            w = torch.linalg.solve(X[:k].T @ X[:k] + lam * D, X[:k].T @ ys[b, :k])
            ref[b, k] = X[k] @ w
    torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("k_nn", [1, 3])
def test_knn_matches_brute_force(k_nn: int) -> None:
    xs, ys = _prompts(B=7, n=9, d=2, d_y=2, seed=3)
    got = bl.KNNBaseline(k_nn=k_nn)(xs, ys)
    ref = torch.zeros_like(ys)
    for b in range(7):
        for k in range(1, 9):
            dists = [float(((xs[b, i] - xs[b, k]) ** 2).sum()) for i in range(k)]
            nearest = sorted(range(k), key=lambda i: dists[i])[:k_nn]
            ref[b, k] = ys[b, nearest].mean(0)
    torch.testing.assert_close(got, ref, rtol=1e-13, atol=1e-13)


def _train_one(
    base: bl.MLPBaseline, x: torch.Tensor, y: torch.Tensor, k: int, b: int, B: int
) -> torch.Tensor:
    """One nn.Sequential network trained alone with torch.optim.Adam from the baseline's initial weights."""
    init = base.init_params(k, B, x.shape[-1], y.shape[-1])
    layers: list[nn.Module] = []
    for j, (W, bias) in enumerate(init):
        lin = nn.Linear(W.shape[1], W.shape[2]).to(F64)
        with torch.no_grad():
            lin.weight.copy_(W[b].T.to(F64))
            lin.bias.copy_(bias[b, 0].to(F64))
        layers.append(lin)
        if j < len(init) - 1:
            layers.append(nn.ReLU())
    net = nn.Sequential(*layers)
    opt = torch.optim.Adam(net.parameters(), lr=base.lr, foreach=False)
    outs = []
    for e in range(base.epochs + 1):
        with torch.no_grad():
            outs.append(net(x[k : k + 1])[0])
        if e == base.epochs:
            break
        opt.zero_grad()
        nn.functional.mse_loss(net(x[:k]), y[:k]).backward()
        opt.step()
    return torch.stack(outs)


def test_batched_mlp_matches_networks_trained_alone() -> None:
    xs, ys = _prompts(B=4, n=6, d=3, d_y=2, seed=4)
    base = bl.MLPBaseline(depth=3, width=16, epochs=15, seed=7)
    tr = base.trace(xs, ys)
    assert tr.preds.shape == (16, 4, 6, 2) and tr.ks == list(range(6))
    assert torch.equal(tr.preds[:, :, 0], torch.zeros(16, 4, 2, dtype=F64))
    for b in range(4):
        for k in (1, 3, 5):
            ref = _train_one(base, xs[b], ys[b], k, b, 4)
            torch.testing.assert_close(tr.preds[:, b, k], ref, rtol=1e-10, atol=1e-10)
    # Training moved the query prediction (the test would pass vacuously otherwise).
    assert not torch.allclose(tr.preds[0], tr.preds[-1])


def test_mlp_chunks_and_subsets_do_not_change_results() -> None:
    xs, ys = _prompts(B=5, n=6, d=3, seed=5)
    full = bl.MLPBaseline(depth=2, width=8, epochs=5).trace(xs, ys).preds
    chunked = bl.MLPBaseline(depth=2, width=8, epochs=5, chunk=2).trace(xs, ys).preds
    torch.testing.assert_close(chunked, full, rtol=1e-12, atol=1e-12)
    sub = bl.MLPBaseline(depth=2, width=8, epochs=5, ks=[2, 4]).trace(xs, ys)
    assert sub.ks == [0, 2, 4]
    torch.testing.assert_close(sub.preds[:, :, [0, 2, 4]], full[:, :, [0, 2, 4]], rtol=1e-12, atol=1e-12)
    assert bool(sub.preds[:, :, [1, 3, 5]].isnan().all())
    r2 = metrics.r2_curve(sub.last(), ys)
    assert r2[[1, 3, 5]].isnan().all() and r2[[2, 4]].isfinite().all()


def test_mlp_best_epoch_is_the_oracle_argmax() -> None:
    xs, ys = _prompts(B=12, n=5, d=3, seed=6)
    base = bl.MLPBaseline(depth=2, width=8, epochs=6, selection="best")
    tr = base.trace(xs, ys)
    best, epochs = tr.best(ys)
    assert epochs[0] is None
    for k in range(1, 5):
        scores = [metrics.r2_curve(tr.preds[e], ys)[k].item() for e in range(1, 7)]
        e_star = int(np.argmax(scores)) + 1
        assert epochs[k] == e_star
        torch.testing.assert_close(best[:, k], tr.preds[e_star, :, k])
        assert metrics.r2_curve(best, ys)[k] >= metrics.r2_curve(tr.last(), ys)[k]
    torch.testing.assert_close(base(xs, ys), best)


@pytest.mark.parametrize("box", [None, 0.8])
def test_gd_matches_reference_gd(box: float | None) -> None:
    spec = nets.NetSpec(3, 5, 3, 1, activation="relu", output="linear")
    xs, ys = _prompts(B=3, n=6, d=3, seed=7)
    gd = bl.GDBaseline(spec, steps=4, lr=0.02, seed=3, box=box)
    got = gd(xs, ys)
    w0 = gd.initial_weights(F64)
    for b in range(3):
        assert torch.allclose(got[b, 0], nets.forward(spec, w0, xs[b, :1])[0])
        for k in range(1, 6):
            w = nets.reference_gd(spec, "squared", w0, xs[b, :k], ys[b, :k], lr=0.02, steps=4, box=box)[-1]
            torch.testing.assert_close(got[b, k], nets.forward(spec, w, xs[b, k : k + 1])[0])
    assert not torch.allclose(got[:, 1:], nets.forward(spec, w0.expand(3, -1), xs)[:, 1:])


def test_gd_step_size_tuning_picks_best_mean_r2() -> None:
    spec = nets.NetSpec(2, 6, 3, 1, output="linear")
    xs, ys = _prompts(B=16, n=6, d=3, seed=8)
    grid = [1e-4, 3e-3, 3e-2, 1e100]  # 1e100 overflows to non-finite predictions
    gd = bl.GDBaseline(spec, steps=3)
    chosen = gd.tune_step_size(xs, ys, grid)
    scores = []
    for lr in grid:
        r2 = metrics.r2_curve(gd(xs, ys, lr=lr), ys)[1:]
        scores.append(float(r2.mean()) if bool(r2.isfinite().all()) else -math.inf)
    assert chosen == grid[int(np.argmax(scores))] == gd.lr
    assert gd.tuning is not None and gd.tuning["lr"] == chosen and gd.tuning["mean_r2"][-1] is None
    assert gd.tuning["grid"] == grid
    with pytest.raises(InputError):
        gd.tune_step_size(xs, ys, [])
    with pytest.raises(InputError):
        gd.tune_step_size(xs, ys, [1e100])


def _all_baselines(d: int, d_y: int) -> list:
    spec = nets.NetSpec(3, 4, d, d_y, output="linear")
    return [
        bl.ZeroBaseline(),
        bl.AveragingBaseline(),
        bl.LeastSquaresBaseline(),
        bl.LeastSquaresBaseline(intercept=False),
        bl.LeastSquaresBaseline(ridge=0.5),
        bl.KNNBaseline(),
        bl.MLPBaseline(depth=2, width=6, epochs=3),
        bl.GDBaseline(spec, steps=2, lr=0.01),
    ]


@pytest.mark.parametrize("i", [0, 2, 5])
def test_causality(i: int) -> None:
    """Changing y_i and x_{i+1..} leaves the predictions at positions <= i unchanged."""
    xs, ys = _prompts(B=4, n=7, d=3, d_y=2, seed=9)
    xs2, ys2 = xs.clone(), ys.clone()
    ys2[:, i] += 5.0
    xs2[:, i + 1 :] = -xs2[:, i + 1 :] * 3
    for base in _all_baselines(3, 2):
        a, b = base(xs, ys), base(xs2, ys2)
        assert torch.equal(a[:, : i + 1], b[:, : i + 1]), base.name
        assert not torch.equal(a[:, i + 1 :], b[:, i + 1 :]) or isinstance(base, bl.ZeroBaseline), base.name


def test_dtype_shape_and_names() -> None:
    xs, ys = _prompts(B=3, n=5, d=3, d_y=2, seed=10, dtype=torch.float32)
    names = set()
    for base in _all_baselines(3, 2):
        out = base(xs, ys)
        assert out.shape == ys.shape and out.dtype == torch.float32 and out.device == ys.device
        assert out[:, 1:].isfinite().all()
        names.add(base.name)
    assert len(names) == 8


@pytest.mark.parametrize(
    "make",
    [
        lambda: bl.KNNBaseline(k_nn=0),
        lambda: bl.LeastSquaresBaseline(ridge=-1.0),
        lambda: bl.MLPBaseline(depth=0),
        lambda: bl.MLPBaseline(depth=2, lr=0.0),
        lambda: bl.MLPBaseline(depth=2, selection="median"),
        lambda: bl.GDBaseline(nets.NetSpec(2, 3, 3, 1), lr=-1.0),
        lambda: bl.GDBaseline(nets.NetSpec(2, 3, 3, 1), steps=-1),
    ],
)
def test_bad_settings_are_input_errors(make) -> None:
    with pytest.raises(InputError):
        make()


@pytest.mark.parametrize(
    "call",
    [
        lambda xs, ys: bl.AveragingBaseline()(xs[0], ys[0]),
        lambda xs, ys: bl.AveragingBaseline()(xs, ys[:, :3]),
        lambda xs, ys: bl.KNNBaseline()(xs.long(), ys),
        lambda xs, ys: bl.LeastSquaresBaseline()(xs, ys.float()),
        lambda xs, ys: bl.MLPBaseline(depth=2, ks=[9])(xs, ys),
        lambda xs, ys: bl.GDBaseline(nets.NetSpec(2, 3, 5, 1))(xs, ys),
    ],
)
def test_bad_prompts_are_input_errors(call) -> None:
    xs, ys = _prompts(B=2, n=5, d=3)
    with pytest.raises(InputError):
        call(xs, ys)


def _trace_case() -> tuple[bl.MLPTrace, torch.Tensor]:
    """A hand-made trace of 3 epochs on 6 prompts, 3 positions (k = 0 unevaluated-as-0, 1, 2): at k = 1
    epoch 2 is exact, epoch 1 poor and epoch 3 NaN; at k = 2 epoch 3 is exact and 1 and 2 poor."""
    g = torch.Generator().manual_seed(0)
    B, n = 6, 3
    ys = torch.randn(B, n, 1, generator=g, dtype=torch.float64)
    preds = torch.zeros(4, B, n, 1, dtype=torch.float64)
    preds[:, :, 1:] = -3.0 * ys[None, :, 1:]  # badly wrong (negative R²) everywhere ...
    preds[2, :, 1] = ys[:, 1]  # ... except epoch 2 at k = 1
    preds[3, :, 1] = float("nan")  # a diverged epoch: never the choice
    preds[3, :, 2] = ys[:, 2]  # epoch 3 exact at k = 2
    return bl.MLPTrace(preds, ks=[0, 1, 2]), ys


def test_mlp_trace_best_takes_the_best_finite_epoch_per_k() -> None:
    trace, ys = _trace_case()
    for pooling in ("pooled", "batch_mean"):
        out, epochs = trace.best(ys, pooling=pooling, batch_size=3)  # type: ignore[arg-type]
        assert epochs == [None, 2, 3]
        assert torch.equal(out[:, 1], ys[:, 1]) and torch.equal(out[:, 2], ys[:, 2])
    out2, epochs2 = trace.best(ys[..., 0])  # (B, n) labels: the same choice
    assert epochs2 == [None, 2, 3] and torch.equal(out2, out)
    with pytest.raises(InputError, match=r"ys \(6, 2, 1\) does not match the trace \(6, 3, 1\)"):
        trace.best(ys[:, :2])


def test_mlp_trace_best_with_one_epoch_is_that_epoch_and_with_none_the_untrained_net() -> None:
    trace, ys = _trace_case()
    one = bl.MLPTrace(trace.preds[:2], ks=[0, 1, 2])
    out, epochs = one.best(ys)
    assert epochs == [None, 1, 1] and torch.equal(out, one.preds[1])
    none = bl.MLPTrace(trace.preds[:1], ks=[0, 1, 2])
    out0, epochs0 = none.best(ys)
    assert epochs0 == [None, None, None] and torch.equal(out0, none.preds[0])


def test_gd_tuning_errors_name_the_problem_and_the_record_keeps_every_finite_score() -> None:
    spec = nets.NetSpec(2, 6, 3, 1, output="linear")
    xs, ys = _prompts(B=16, n=6, d=3, seed=8)
    gd = bl.GDBaseline(spec, steps=3)
    with pytest.raises(InputError, match="the step-size grid is empty"):
        gd.tune_step_size(xs, ys, [])
    with pytest.raises(InputError, match=r"tuning needs prompts with at least 2 points \(k >= 1\)"):
        gd.tune_step_size(xs[:, :1], ys[:, :1], [1e-3])
    with pytest.raises(InputError, match=r"GD diverged \(non-finite R²\) for every step size in \[1e\+100\]"):
        gd.tune_step_size(xs, ys, [1e100])
    grid = [1e-4, 3e-3, 3e-2, 1e100]
    for pooling, batch in (("pooled", 64), ("batch_mean", 8)):
        gd.tune_step_size(xs, ys, grid, pooling=pooling, batch_size=batch)  # type: ignore[arg-type]
        want = [float(metrics.r2_curve(gd(xs, ys, lr=g), ys, pooling=pooling, batch_size=batch)[1:].mean())
                for g in grid[:3]]  # fmt: skip
        assert gd.tuning is not None and gd.tuning["mean_r2"][:3] == pytest.approx(want, rel=0, abs=0)
        assert gd.tuning["mean_r2"][3] is None and gd.tuning["num_prompts"] == 16
        assert gd.tuning["pooling"] == pooling
    # the smallest tunable prompts: 2 points, one input feature
    one = bl.GDBaseline(nets.NetSpec(2, 4, 1, 1, output="linear"), steps=1)
    x1, y1 = _prompts(B=4, n=2, d=1, seed=9)
    assert one.tune_step_size(x1, y1, [1e-3, 1e-2]) in (1e-3, 1e-2)


def test_gd_baseline_settings_and_its_starting_point() -> None:
    spec = nets.NetSpec(2, 4, 3, 1, output="linear")
    for steps in (-1, 1.5, True):
        with pytest.raises(InputError, match=f"GD steps must be an integer >= 0, got {steps!r}"):
            bl.GDBaseline(spec, steps=steps)  # type: ignore[arg-type]
    xs, ys = _prompts(B=3, n=4, d=3, seed=2)
    zero = bl.GDBaseline(spec, steps=0)  # no step: every k predicts f(w0, x_k)
    w0 = zero.initial_weights()
    assert torch.allclose(zero(xs, ys), nets.forward(spec, w0.expand(3, -1), xs), rtol=0, atol=1e-12)
    with pytest.raises(InputError, match=rf"w0 must have shape \({spec.num_params},\), got \(3,\)"):
        bl.GDBaseline(spec, w0=torch.zeros(3, dtype=torch.float64))
    given = torch.linspace(-1, 1, spec.num_params, dtype=torch.float64)
    assert torch.equal(bl.GDBaseline(spec, w0=given).initial_weights(), given)
    with pytest.raises(InputError, match=r"prompts have d_x=2, d_y=1; the GD network expects 3, 1"):
        zero(*_prompts(B=3, n=4, d=2, seed=2))
    # the default start is the He-scaled draw of N(0, init_std²) from the seed's own generator
    for std, fan_in in ((1.0, True), (0.5, False)):
        gd = bl.GDBaseline(spec, seed=4, init_std=std, fan_in_scaling=fan_in)
        g = torch.Generator().manual_seed(bl.derived_seed(4))
        want = nets.init_weights(spec, generator=g, std=std, fan_in_scaling=fan_in, dtype=torch.float64)
        assert torch.equal(gd.initial_weights(), want)
        assert gd.initial_weights(torch.float32).dtype == torch.float32


def test_mlp_baseline_settings_name_the_key_and_accept_their_smallest_values() -> None:
    for key, low in (("depth", 1), ("width", 1), ("epochs", 0)):
        bl.MLPBaseline(**{"depth": 1, key: low})  # the smallest value is valid
        for bad in (low - 1, 1.5, True):
            with pytest.raises(
                InputError, match=f"MLP baseline {key} must be an integer >= {low}, got {bad!r}"
            ):
                bl.MLPBaseline(**{"depth": 1, key: bad})
    for lr in (0.0, -1e-3, math.inf, math.nan):
        with pytest.raises(InputError, match="MLP baseline lr must be a finite number > 0, got"):
            bl.MLPBaseline(depth=1, lr=lr)
    with pytest.raises(InputError, match="selection must be 'last' or 'best', got 'first'"):
        bl.MLPBaseline(depth=1, selection="first")  # type: ignore[arg-type]
    bl.MLPBaseline(depth=1, chunk=1)
    for chunk in (0, 2.5):
        with pytest.raises(InputError, match=f"chunk must be a positive integer or None, got {chunk!r}"):
            bl.MLPBaseline(depth=1, chunk=chunk)  # type: ignore[arg-type]


def test_mlp_baseline_ks_may_be_any_position_of_the_prompt_and_nothing_else() -> None:
    xs, ys = _prompts(B=2, n=4, d=3, seed=5)
    out = bl.MLPBaseline(depth=2, width=4, epochs=2, ks=[0, 3])(xs, ys)
    assert (
        bool(out[:, 3].isfinite().all()) and bool(out[:, 1:3].isnan().all()) and bool((out[:, 0] == 0).all())
    )
    for bad in (4, -1):
        with pytest.raises(
            InputError, match=rf"ks must lie in 0\.\.3 for prompts of 4 points, got \[{bad}\]"
        ):
            bl.MLPBaseline(depth=2, width=4, epochs=2, ks=[1, bad])(xs, ys)

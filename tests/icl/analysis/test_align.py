"""Sensitivities and alignment metrics (icdl.icl.analysis.sensitivity, icdl.icl.analysis.align).

References: per-prompt central finite differences (independent of the batched autograd), the ridge
smoother's closed form (d ŷ/d y = x_qᵀ (XᵀX + λI)⁻¹ Xᵀ, d ŷ/d x_q = the fitted weights), GDBaseline (the
per-k loop of plain GD) and the compiled GD transformer against the GD point it compiles.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from icdl import nets
from icdl.config import ModelConfig
from icdl.errors import InputError
from icdl.icl.analysis import align
from icdl.icl.analysis import sensitivity as sens
from icdl.icl.baselines.kernel import KernelBaseline, RidgeTunedBaseline, relu_expectation
from icdl.icl.baselines.mlp_tuned import MLPSetting, MLPTunedBaseline
from icdl.icl.baselines.simple import AveragingBaseline, GDBaseline
from icdl.icl.models import build_model
from icdl.io import clean_json

D_X, K = 3, 5


def _prompts(B: int = 4, k: int = K, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(B, k + 1, D_X, generator=g, dtype=torch.float64)
    ys = torch.randn(B, k + 1, 1, generator=g, dtype=torch.float64)
    return xs, ys


def _finite_differences(fn, xs, ys, h: float = 1e-6):  # type: ignore[no-untyped-def]
    """Per prompt, one coordinate at a time: (d ŷ/d y_i for i < k, d ŷ/d x_query)."""
    k = xs.shape[1] - 1
    gy = torch.zeros(xs.shape[0], k)
    gx = torch.zeros(xs.shape[0], xs.shape[2])
    for b in range(xs.shape[0]):
        x, y = xs[b : b + 1], ys[b : b + 1]
        for i in range(k):
            yp, ym = y.clone(), y.clone()
            yp[0, i, 0] += h
            ym[0, i, 0] -= h
            gy[b, i] = float((fn(x, yp) - fn(x, ym))[0, 0]) / (2 * h)
        for j in range(xs.shape[2]):
            xp, xm = x.clone(), x.clone()
            xp[0, k, j] += h
            xm[0, k, j] -= h
            gx[b, j] = float((fn(xp, y) - fn(xm, y))[0, 0]) / (2 * h)
    return gy.double(), gx.double()


def _autograd(fn, xs, ys):  # type: ignore[no-untyped-def]
    x, y = sens.leaves(xs, ys)
    return sens.sensitivities([fn(x, y)], x, y)[0]


def _icl_model() -> torch.nn.Module:
    cfg = ModelConfig(attention="softmax", layers=2, heads=2, d_model=16, d_mlp=32, max_points=8)
    torch.manual_seed(0)
    return build_model(cfg, D_X, 1).double().eval()


def _gd_fn(spec: nets.NetSpec, w0: torch.Tensor, lr: float, L: int):  # type: ignore[no-untyped-def]
    return lambda x, y: sens.gd_predictions(spec, w0, x, y, lrs=[lr], steps=[L])[(lr, L)]


SPEC = nets.NetSpec(3, 8, D_X, 1)
W0 = GDBaseline(SPEC, seed=1, init_std=0.5).initial_weights()


@pytest.mark.parametrize(
    "name",
    ["icl", "gd", "kernel", "ridge_tuned", "averaging"],
)
def test_sensitivities_match_finite_differences(name: str) -> None:
    xs, ys = _prompts()
    fn = {
        "icl": sens.last_point(_icl_model()),
        "gd": _gd_fn(SPEC, W0, 0.3, 3),
        "kernel": sens.last_point(KernelBaseline(depth=3, lam=0.1)),
        "ridge_tuned": sens.last_point(RidgeTunedBaseline(lam=0.3)),
        "averaging": sens.last_point(AveragingBaseline()),
    }[name]
    s = _autograd(fn, xs, ys)
    with torch.no_grad():
        gy, gx = _finite_differences(fn, xs, ys)
    assert s.d_y.shape == (4, K) and s.d_x.shape == (4, D_X)
    assert bool(s.d_y.abs().max() > 1e-4), "vacuous: zero label sensitivity"
    torch.testing.assert_close(s.d_y, gy, atol=1e-8, rtol=1e-5)
    torch.testing.assert_close(s.d_x, gx, atol=1e-8, rtol=1e-5)
    if name != "averaging":
        assert bool(s.d_x.abs().max() > 1e-3), "vacuous: zero query sensitivity"


def test_ridge_sensitivity_is_the_smoother_row() -> None:
    lam = 0.7
    xs, ys = _prompts()
    s = _autograd(sens.last_point(RidgeTunedBaseline(lam=lam)), xs, ys)
    X, Y, xq = xs[:, :K], ys[:, :K], xs[:, K]
    A = X.transpose(1, 2) @ X + lam * torch.eye(D_X, dtype=torch.float64)
    smoother = (xq[:, None, :] @ torch.linalg.solve(A, X.transpose(1, 2)))[:, 0]  # (B, K)
    weights = torch.linalg.solve(A, X.transpose(1, 2) @ Y)[..., 0]  # (B, D_X)
    torch.testing.assert_close(s.d_y, smoother)
    torch.testing.assert_close(s.d_x, weights)
    torch.testing.assert_close(s.pred[:, 0], (xq * weights).sum(1))


def test_gd_predictions_equal_gd_baseline() -> None:
    xs, ys = _prompts(k=6)
    for lr, L in ((0.3, 1), (0.1, 4)):
        ref = GDBaseline(SPEC, steps=L, lr=lr, seed=1, init_std=0.5)(xs, ys)
        for k in (1, 3, 6):
            got = sens.gd_predictions(SPEC, W0, xs[:, : k + 1], ys[:, : k + 1], lrs=[lr], steps=[L, 7])
            torch.testing.assert_close(got[(lr, L)], ref[:, k], atol=1e-12, rtol=0)
    assert bool((ref[:, 1:] - ref[:, :1]).abs().max() > 1e-3), "vacuous: GD predicts a constant"


def test_self_alignment_is_one() -> None:
    xs, ys = _prompts(B=16)
    s = _autograd(sens.last_point(KernelBaseline(depth=3, lam=0.1)), xs, ys)
    cmp = align._compare(s, s)
    assert cmp["r2"] == pytest.approx(1.0, abs=1e-12) and cmp["corr"] == pytest.approx(1.0, abs=1e-12)
    assert cmp["cos_y"] == pytest.approx(1.0, abs=1e-12) and cmp["cos_x"] == pytest.approx(1.0, abs=1e-12)
    assert cmp["n_y"] == 16 and cmp["n_x"] == 16
    other = _autograd(sens.last_point(RidgeTunedBaseline(lam=0.1)), xs, ys)
    assert align._compare(s, other)["r2"] < 0.99 and align._compare(s, other)["cos_x"] < 0.99


def test_metric_values() -> None:
    t = torch.tensor([[1.0], [2.0], [3.0], [6.0]], dtype=torch.float64)
    assert align.agreement_r2(t, t.mean() * torch.ones_like(t)) == pytest.approx(0.0)
    assert align.agreement_r2(t, t + 1) == pytest.approx(1 - 4 / 14)
    assert math.isnan(align.agreement_r2(torch.ones(3, 1), torch.ones(3, 1)))
    # Correlation ignores scale and offset, and R² does not.
    assert align.correlation(t, 3 * t - 2) == pytest.approx(1.0)
    assert align.correlation(t, -t) == pytest.approx(-1.0)
    assert align.agreement_r2(t, 3 * t - 2) < 0
    a = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [2.0, 0.0]], dtype=torch.float64)
    b = torch.tensor([[0.0, 3.0], [-2.0, -2.0], [1.0, 0.0], [5.0, 0.0]], dtype=torch.float64)
    cos, n = align.mean_cosine(a, b)
    assert n == 3 and cos == pytest.approx((0.0 - 1.0 + 1.0) / 3)


def test_compiled_model_aligns_with_its_gd_point() -> None:
    from icdl.construct import compile_gd_transformer

    spec = nets.NetSpec(3, 6, D_X, 1)
    w0 = GDBaseline(spec, seed=2, init_std=0.5).initial_weights()
    lr, L = 0.3, 2
    cm = compile_gd_transformer(spec, lr=lr, steps=L, n=K, variant="compact")
    xs, ys = _prompts(B=6)
    c = _autograd(lambda x, y: sens.compiled_prediction(cm, w0, x, y), xs, ys)
    g = _autograd(_gd_fn(spec, w0, lr, L), xs, ys)
    cmp = align._compare(g, c)
    assert cmp["r2"] > 1 - 1e-9 and cmp["cos_y"] > 1 - 1e-9 and cmp["cos_x"] > 1 - 1e-9
    torch.testing.assert_close(c.d_y, g.d_y, atol=1e-8, rtol=1e-6)
    other = _autograd(_gd_fn(spec, w0, lr, L + 3), xs, ys)
    assert align._compare(other, c)["r2"] < 0.999, "vacuous: L and L + 3 steps agree"


def test_truncated_prompt_equals_full_prompt_for_the_icl_model() -> None:
    model = _icl_model()
    xs, ys = _prompts(k=7)
    with torch.no_grad():
        full = model(xs, ys)
        for k in (1, 4, 7):
            torch.testing.assert_close(sens.last_point(model)(xs[:, : k + 1], ys[:, : k + 1]), full[:, k])


@pytest.mark.parametrize("coef", [2.0, -2.0, -1e-9])
@pytest.mark.parametrize("only_one", [False, True])
def test_a_predictor_reading_the_query_label_is_refused(coef: float, only_one: bool) -> None:
    """Any dependence on the query's own label is refused: of either sign, however small, and on one
    prompt of the batch alone."""
    xs, ys = _prompts()
    x, y = sens.leaves(xs, ys)
    mask = torch.zeros(x.shape[0], 1, dtype=x.dtype)
    mask[-1 if only_one else slice(None)] = 1.0
    with pytest.raises(InputError, match="not causal"):
        sens.sensitivities([y[:, -1] * coef * mask + x[:, -1, :1]], x, y)


def test_relu_kernel_gradient_is_finite_and_value_unchanged() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 5, 4, dtype=torch.float64, generator=g)
    cov = (x @ x.transpose(1, 2)).requires_grad_(True)
    out = relu_expectation(cov)
    diag = cov.diagonal(dim1=-2, dim2=-1)
    norm = torch.sqrt(diag[..., :, None] * diag[..., None, :])
    rho = (cov / norm).clamp(-1, 1)
    th = torch.arccos(rho)
    ref = norm / (2 * math.pi) * (torch.sin(th) + (math.pi - th) * rho)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=0)
    (grad,) = torch.autograd.grad(out.sum(), cov)
    assert bool(grad.isfinite().all())


def test_default_ks_and_options() -> None:
    assert align.default_ks(30, 45) == (1, 2, 3, 5, 10, 15, 20, 25, 30, 35, 40, 45)
    assert align.default_ks(10, 15) == (1, 2, 3, 5, 10, 15)
    with pytest.raises(InputError, match="unknown baseline"):
        align.AlignOptions(baselines=("nope",))
    with pytest.raises(InputError, match="gd-lrs"):
        align.AlignOptions(gd_lrs=(0.1, -1.0))
    with pytest.raises(InputError, match="ks"):
        align.AlignOptions(ks=(0, 3))


def test_mlp_tuned_is_aligned_through_its_training(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``mlp_tuned`` in ``icdl align``: tuned on held-out prompts, its entry measured at every k, its
    sensitivities through the per-prompt training causal, and its agreement with itself 1."""
    from icdl.config import load_config
    from icdl.icl.training.train import train

    assert "mlp_tuned" in align.ALIGN_BASELINES and "mlp_tuned" not in align.DEFAULT_BASELINES
    run = tmp_path / "tiny"
    train(load_config("tiny", ["train.steps=4", "train.checkpoint_every=4"]), run, quiet=True)
    opts = align.AlignOptions(
        prompts=8, ks=(1, 4), baselines=("ridge_tuned", "mlp_tuned"), gd_lrs=(), gd_steps=(), gd_inits=(),
        compiled_ks=(), tuned_prompts=8, mlp_tune_prompts=4,
    )  # fmt: skip
    res = align.align_run(run, opts, progress=False)
    entry = res["predictors"]["mlp_tuned"]
    assert entry["kind"] == "baseline" and entry["params"]["name"] == "mlp_tuned"
    assert len(entry["r2"]) == 2 and all(math.isfinite(v) for v in entry["r2_truth"])
    assert entry["n_y"] == [8, 8] and all(-1 <= c <= 1 for c in entry["cos_y"])
    # its agreement with itself, through align's own sensitivity path
    base = MLPTunedBaseline(depth=2, seed=0)
    base.settings = [None] + [MLPSetting(8, 3e-2, 0.3, 10)] * 4
    xs, ys = _prompts(B=6, k=4)
    s = align._baseline_sens(base, xs, ys)
    assert bool(s.d_y.abs().max() > 1e-3)
    cmp = align._compare(s, s)
    assert cmp["r2"] == pytest.approx(1.0, abs=1e-12) and cmp["cos_y"] == pytest.approx(1.0, abs=1e-12)
    assert cmp["n_y"] == 6


@pytest.mark.parametrize("cap", [1, 3, 10, 30, None])
def test_the_compiled_point_is_the_best_gd_point_with_at_most_the_maximum_steps(cap: int | None) -> None:
    """The compiled model compiles the best-aligned GD point among L <= compiled_max_steps, the maximum
    itself included: scores grow with L, so the choice is the largest L allowed."""
    opts = align.AlignOptions(gd_lrs=(0.1, 0.3), gd_steps=(1, 3, 10, 30), gd_inits=(1.0,))
    per = {
        align.gd_name(lr, L, 1.0): {"r2": [0.01 * L + 0.001 * lr, 0.01 * L]}
        for lr in opts.gd_lrs
        for L in opts.gd_steps
    }
    per[align.gd_name(0.3, 3, 1.0)]["r2"] = [math.nan, 0.9]  # not finite at every k: left out
    want_L = max(L for L in opts.gd_steps if cap is None or cap >= L)
    want = align.gd_name(0.3 if want_L != 3 else 0.1, want_L, 1.0)
    assert align._best_gd(per, opts, cap) == want


def test_k_bands_split_at_5_15_and_the_training_length() -> None:
    assert align.k_bands(30, 45) == [(1, 5), (6, 15), (16, 30), (31, 45)]
    assert align.k_bands(10, 15) == [(1, 5), (6, 10), (11, 15)]
    assert align.k_bands(15, 15) == [(1, 5), (6, 15)]
    assert align.k_bands(3, 6) == [(1, 3), (4, 6)]
    for E, K in [(30, 45), (10, 15), (4, 4), (20, 60)]:
        bands = align.k_bands(E, K)
        covered = [k for lo, hi in bands for k in range(lo, hi + 1)]
        assert covered == list(range(1, K + 1))  # every k once, in order
        assert any(hi == min(E, K) for _, hi in bands)  # the training length closes a band


def test_closest_per_band_is_decided_per_band_not_over_all_ks() -> None:
    """The issue-27 artefact: predictor a is closest over all ks only because of the small ks; per band
    the answer differs, and ICL itself never counts."""
    ks = [1, 2, 3, 5, 10, 15, 20, 30]
    per = {
        "icl": {"kind": "icl", "corr": [1.0] * 8},
        "a": {"kind": "baseline", "corr": [0.9, 0.9, 0.9, 0.9, 0.5, 0.5, 0.5, 0.5]},
        "b": {"kind": "baseline", "corr": [0.1, 0.1, 0.1, 0.1, 0.6, 0.7, 0.8, 0.8]},
        "gd_lr1_L1_init1": {"kind": "gd", "corr": [0.2, 0.2, 0.2, 0.2, 0.55, 0.8, math.nan, math.nan]},
    }
    for e in per.values():
        for m in ("r2", "cos_y", "cos_x", "r2_truth"):
            e[m] = [math.nan] * 8
    bands = align.k_bands(30, 30)
    align._summaries(per, ks, bands, "bands")
    align._summaries(per, ks, [(1, 30)])
    assert per["a"]["ranges"]["1-30"]["corr"] > per["b"]["ranges"]["1-30"]["corr"]  # a wins overall...
    out = align.closest_per_band(per, bands)
    assert out["1-5"]["closest"] == "a" and out["1-5"]["runner_up"] == "gd_lr1_L1_init1"
    assert out["6-15"]["closest"] == "gd_lr1_L1_init1"  # mean of 0.55, 0.8 beats b's 0.65
    assert out["16-30"]["closest"] == "b" and out["16-30"]["margin"] == pytest.approx(0.3)
    assert all(row["closest"] != "icl" for row in out.values())


def test_align_reports_bands_and_the_linear_ceilings(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``icdl align``'s result: per-band means for every predictor, the closest predictor per band, and
    ``radial`` and ``blup`` in the default panel."""
    from icdl.cli.align import summary_lines
    from icdl.config import load_config
    from icdl.icl.training.train import train

    assert {"radial", "blup"} <= set(align.DEFAULT_BASELINES)
    run = tmp_path / "tiny"
    train(load_config("tiny", ["train.steps=4", "train.checkpoint_every=4"]), run, quiet=True)
    opts = align.AlignOptions(
        prompts=8, ks=(1, 3, 7, 12), gd_lrs=(), gd_steps=(), gd_inits=(), compiled_ks=(), tuned_prompts=8,
    )  # fmt: skip
    res = align.align_run(run, opts, progress=False)
    assert res["bands"] == [[1, 5], [6, 10], [11, 15]]
    for name in ("radial", "blup"):
        entry = res["predictors"][name]
        assert all(math.isfinite(v) for v in entry["r2_truth"])
        assert set(entry["bands"]) == {"1-5", "6-10", "11-15"}
    assert set(res["closest"]) == {"1-5", "6-10", "11-15"}
    assert all(row["closest"] in res["predictors"] for row in res["closest"].values())
    text = "\n".join(summary_lines(res))
    assert "closest to ICL per k band" in text and "k 11-15" in text
    # a result read back from its JSON (NaN written as null) and given its bands again: the same numbers
    # (scripts/align_bands.py upgrades committed results this way)
    back = json.loads(align.result_path(run).read_text())
    for entry in back["predictors"].values():
        del entry["bands"]
    del back["bands"], back["closest"]
    align.add_bands(back, 10, 15)
    assert back["closest"] == json.loads(json.dumps(clean_json(res["closest"])))

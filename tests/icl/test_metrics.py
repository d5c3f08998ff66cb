"""R²(k), MSE(k) and bootstrap bands against direct numpy formulas and explicit resampling loops."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from icdl.errors import InputError
from icdl.icl import metrics

F64 = torch.float64


def _data(B: int, n: int, d_y: int, seed: int, noise: float = 0.5, offset: float = 0.0):
    g = torch.Generator().manual_seed(seed)
    ys = torch.randn(B, n, d_y, generator=g, dtype=F64) * 2 + offset
    preds = ys + noise * torch.randn(B, n, d_y, generator=g, dtype=F64)
    return preds, ys


def _np_r2(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pooled R² per position: p, y of shape (B, n, d_y), coordinates pooled."""
    out = []
    for k in range(y.shape[1]):
        yk, pk = y[:, k, :], p[:, k, :]
        sse = np.sum((yk - pk) ** 2)
        sst = np.sum((yk - yk.mean(axis=0)) ** 2)
        out.append(1 - sse / sst)
    return np.array(out)


@pytest.mark.parametrize("d_y", [1, 3])
def test_pooled_r2_matches_numpy(d_y: int) -> None:
    preds, ys = _data(50, 7, d_y, seed=d_y)
    got = metrics.r2_curve(preds, ys).numpy()
    np.testing.assert_allclose(got, _np_r2(preds.numpy(), ys.numpy()), rtol=1e-12, atol=1e-12)


def test_two_dim_inputs_are_scalar_outputs() -> None:
    preds, ys = _data(20, 5, 1, seed=3)
    torch.testing.assert_close(metrics.r2_curve(preds[..., 0], ys[..., 0]), metrics.r2_curve(preds, ys))


def test_batch_mean_matches_loop_over_batches() -> None:
    preds, ys = _data(4 * 16, 6, 2, seed=4, noise=1.5)
    got = metrics.r2_curve(preds, ys, pooling="batch_mean", batch_size=16).numpy()
    ref = np.mean(
        [_np_r2(preds[i : i + 16].numpy(), ys[i : i + 16].numpy()) for i in range(0, 64, 16)], axis=0
    )
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    # Different from pooling over all prompts (the two definitions are not the same number).
    assert not np.allclose(got, metrics.r2_curve(preds, ys).numpy())


def test_mse_matches_numpy() -> None:
    preds, ys = _data(30, 4, 3, seed=5)
    ref = ((preds.numpy() - ys.numpy()) ** 2).mean(axis=(0, 2))
    np.testing.assert_allclose(metrics.mse_curve(preds, ys).numpy(), ref, rtol=1e-12)


def test_reference_points_perfect_and_mean_predictors() -> None:
    _, ys = _data(40, 5, 2, seed=6)
    assert torch.allclose(metrics.r2_curve(ys, ys), torch.ones(5, dtype=F64))
    mean_pred = ys.mean(0, keepdim=True).expand_as(ys)
    assert torch.allclose(metrics.r2_curve(mean_pred, ys), torch.zeros(5, dtype=F64), atol=1e-12)


def test_shift_invariance_with_large_offset() -> None:
    preds, ys = _data(200, 4, 1, seed=7)
    base = metrics.r2_curve(preds, ys)
    shifted = metrics.r2_curve(preds + 1e6, ys + 1e6)
    torch.testing.assert_close(shifted, base, rtol=0, atol=1e-6)
    b0 = metrics.bootstrap_bands(preds, ys, resamples=200, seed=1)
    b1 = metrics.bootstrap_bands(preds + 1e6, ys + 1e6, resamples=200, seed=1)
    torch.testing.assert_close(b1["r2_low"], b0["r2_low"], rtol=0, atol=1e-6)


def test_constant_labels_and_nan_predictions_give_nan() -> None:
    preds, ys = _data(10, 3, 1, seed=8)
    ys[:, 1] = 2.5
    preds[:, 2] = math.nan
    r2 = metrics.r2_curve(preds, ys)
    assert not r2[0].isnan() and r2[1].isnan() and r2[2].isnan()


def _explicit_bootstrap(preds, ys, resamples: int, seed: int, level: float):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(ys.shape[0], (resamples, ys.shape[0]), generator=g)
    r2 = torch.stack([metrics.r2_curve(preds[i], ys[i]) for i in idx])
    mse = torch.stack([metrics.mse_curve(preds[i], ys[i]) for i in idx])
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=F64)
    return torch.nanquantile(r2, q, dim=0), torch.nanquantile(mse, q, dim=0)


@pytest.mark.parametrize("d_y", [1, 2])
def test_vectorised_bootstrap_equals_explicit_resampling(d_y: int) -> None:
    preds, ys = _data(37, 5, d_y, seed=9, offset=-3.0)
    bands = metrics.bootstrap_bands(preds, ys, resamples=60, seed=11, level=0.8)
    r2_q, mse_q = _explicit_bootstrap(preds, ys, 60, 11, 0.8)
    torch.testing.assert_close(bands["r2_low"], r2_q[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(bands["r2_high"], r2_q[1], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(bands["mse_low"], mse_q[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(bands["mse_high"], mse_q[1], rtol=1e-10, atol=1e-10)


def test_batch_mean_bootstrap_resamples_batches() -> None:
    preds, ys = _data(5 * 8, 4, 1, seed=10, noise=1.0)
    bands = metrics.bootstrap_bands(preds, ys, pooling="batch_mean", batch_size=8, resamples=40, seed=2)
    per_batch = torch.stack([metrics.r2_curve(preds[i : i + 8], ys[i : i + 8]) for i in range(0, 40, 8)])
    g = torch.Generator().manual_seed(2)
    idx = torch.randint(5, (40, 5), generator=g)
    means = per_batch[idx].mean(1)
    q = torch.tensor([0.05, 0.95], dtype=F64)
    torch.testing.assert_close(bands["r2_low"], torch.quantile(means, q, dim=0)[0])
    torch.testing.assert_close(bands["r2_high"], torch.quantile(means, q, dim=0)[1])


def test_band_contains_estimate_and_narrows_with_more_prompts() -> None:
    widths = []
    for B in (100, 1600):
        preds, ys = _data(B, 6, 1, seed=B, noise=1.0)
        r2 = metrics.r2_curve(preds, ys)
        bands = metrics.bootstrap_bands(preds, ys, resamples=500, seed=0)
        assert bool((bands["r2_low"] <= r2).all() and (r2 <= bands["r2_high"]).all())
        mse = metrics.mse_curve(preds, ys)
        assert bool((bands["mse_low"] <= mse).all() and (mse <= bands["mse_high"]).all())
        widths.append(float((bands["r2_high"] - bands["r2_low"]).mean()))
    # Width scales like 1/sqrt(B): 16x the prompts should give about a quarter of the width.
    assert widths[1] < 0.5 * widths[0]


def test_bootstrap_is_seeded() -> None:
    preds, ys = _data(30, 3, 1, seed=12)
    a = metrics.bootstrap_bands(preds, ys, resamples=100, seed=5)
    b = metrics.bootstrap_bands(preds, ys, resamples=100, seed=5)
    c = metrics.bootstrap_bands(preds, ys, resamples=100, seed=6)
    assert torch.equal(a["r2_low"], b["r2_low"])
    assert not torch.equal(a["r2_low"], c["r2_low"])


def test_evaluate_and_json_round_trip(tmp_path) -> None:
    preds, ys = _data(64, 5, 1, seed=13)
    preds[:, 3] = math.nan  # a position that was not evaluated
    res = metrics.evaluate("demo", preds, ys, resamples=50, seed=3, meta={"lr": 0.1})
    assert res.k == [0, 1, 2, 3, 4] and res.num_prompts == 64
    assert math.isnan(res.r2[3]) and res.r2_low[0] <= res.r2[0] <= res.r2_high[0]
    d = res.to_dict()
    text = json.dumps(d, allow_nan=False)  # strict JSON: NaN became null
    back = metrics.R2Curve.from_dict(json.loads(text))
    assert back.meta == {"lr": 0.1} and back.name == "demo"
    np.testing.assert_array_equal(np.array(back.r2), np.array(res.r2))
    path = tmp_path / "curve.json"
    res.save(path)
    assert [p.name for p in tmp_path.iterdir()] == ["curve.json"]
    np.testing.assert_array_equal(np.array(metrics.R2Curve.load(path).mse), np.array(res.mse))
    assert res.mean(0, 2) == pytest.approx(float(np.mean(res.r2[:3])))
    assert res.mean(2, 4) == pytest.approx(float(np.mean([res.r2[2], res.r2[4]])))


@pytest.mark.parametrize(
    "call",
    [
        lambda p, y: metrics.r2_curve(p[:, :3], y),
        lambda p, y: metrics.r2_curve(p[:1], y[:1]),
        lambda p, y: metrics.r2_curve(p, y, pooling="median"),
        lambda p, y: metrics.r2_curve(p, y, pooling="batch_mean", batch_size=7),
        lambda p, y: metrics.bootstrap_bands(p, y, resamples=0),
        lambda p, y: metrics.bootstrap_bands(p, y, level=1.0),
        lambda p, y: metrics.r2_curve(p.numpy(), y),
        lambda p, y: metrics.mean_over_k([0.1, 0.2], 1, 2),
        lambda p, y: metrics.R2Curve.from_dict({"name": "x", "bogus": 1}),
    ],
)
def test_bad_input_is_input_error(call) -> None:
    preds, ys = _data(16, 4, 1, seed=14)
    with pytest.raises(InputError):
        call(preds, ys)


def test_nonlinear_skill_matches_explicit_ratio() -> None:
    g = torch.Generator().manual_seed(31)
    ys = torch.randn(50, 6, 2, generator=g, dtype=torch.float64)
    lin = ys + 0.8 * torch.randn(50, 6, 2, generator=g, dtype=torch.float64)
    pred = ys + 0.3 * torch.randn(50, 6, 2, generator=g, dtype=torch.float64)
    lin[:, 0] = ys[:, 0]  # MSE_lin = 0 -> NaN
    pred[:, 5] = math.nan  # not evaluated -> NaN
    got = metrics.nonlinear_skill(pred, lin, ys)
    Y, L, P = ys.numpy(), lin.numpy(), pred.numpy()
    for k in range(1, 5):
        ref = 1 - ((P[:, k] - Y[:, k]) ** 2).mean() / ((L[:, k] - Y[:, k]) ** 2).mean()
        assert abs(float(got[k]) - ref) < 1e-12
    assert math.isnan(float(got[0])) and math.isnan(float(got[5]))
    assert float(metrics.nonlinear_skill(lin, lin, ys)[2]) == 0.0

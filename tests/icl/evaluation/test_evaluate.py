"""`icdl evaluate`: results on a tiny trained run, caching, staleness, paired bootstrap, cost, CLI errors."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from icdl.config import load_config
from icdl.icl import metrics
from icdl.icl.evaluation.evaluate import (
    EvalOptions,
    evaluate_run,
    paired_difference,
    result_path,
    result_status,
)
from icdl.icl.models import build_model
from icdl.icl.training.cost import count_flops, icl_forward_flops, mlp_num_params
from icdl.icl.training.train import train

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
CHEAP = EvalOptions(baselines=("zero", "averaging", "ridge"), resamples=100, cost=False)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("eval") / "tiny"
    train(load_config("tiny", ["train.steps=20", "train.checkpoint_every=10"]), run_dir, quiet=True)
    return run_dir


def test_results_file(run: Path) -> None:
    opts = EvalOptions(
        baselines=("averaging", "mlp", "gd"), resamples=100, mlp_prompts=8, mlp_width=16, mlp_epochs=5,
        mlp_ks=(1, 10), gd_steps=2, gd_prompts=16, gd_tune_prompts=8,
    )  # fmt: skip
    res = evaluate_run(run, "in-distribution", prompts=64, options=opts, progress=False)
    saved = json.loads(result_path(run, "in-distribution").read_text())
    assert saved["suite"]["name"] == "in-distribution" and saved["checkpoint"]["step"] == 20
    assert saved["config"]["task"]["depth"] == 2 and saved["cost"]["icl"]["flops_exact"] > 0
    cond = saved["conditions"]["train"]
    assert cond["points"] == 16  # tiny: 10 examples -> 15 (1.5x), 16 positions
    kinds = {p["meta"]["kind"] for p in cond["predictors"].values()}
    assert kinds == {"icl", "averaging", "mlp-best", "mlp-last", "gd"}
    icl = cond["predictors"]["icl"]
    assert len(icl["r2"]) == 16 and icl["num_prompts"] == 64
    assert all(
        lo <= r <= hi for r, lo, hi in zip(icl["r2"][1:], icl["r2_low"][1:], icl["r2_high"][1:], strict=True)
    )
    mlp = next(p for p in cond["predictors"].values() if p["meta"]["kind"] == "mlp-best")
    assert mlp["num_prompts"] == 8 and mlp["meta"]["ks"] == [1, 10]
    assert mlp["r2"][1] is not None and mlp["r2"][5] is None  # evaluated at the chosen k only
    comp = cond["comparisons"]["averaging"]
    assert set(comp["ranges"]) == {"1-10", "11-15"}
    assert comp["ranges"]["1-10"]["verdict"] in ("beats", "matches", "trails")
    assert res["from_cache"] is False


def test_tuned_baselines_and_nonlinear_skill(run: Path) -> None:
    opts = EvalOptions(
        baselines=("averaging", "ridge_tuned", "kernel", "gd_target"), resamples=50, tuned_prompts=64,
        gd_prompts=16, gd_tune_prompts=8, cost=False,
    )  # fmt: skip
    res = evaluate_run(run, "in-distribution", prompts=64, options=opts, progress=False, force=True)
    cond = res["conditions"]["train"]
    preds = cond["predictors"]
    ridge, kern = preds["ridge_tuned"], preds["kernel"]
    assert ridge["meta"]["tune_seed"] != res["suite"]["seed"]  # λ tuned on held-out prompts
    assert len(ridge["meta"]["lam"]) == cond["points"]
    for name, curve in preds.items():
        if curve["num_prompts"] != 64:  # gd_target: skill vs ridge_tuned on its own 16 prompts
            continue
        for k in range(1, cond["points"]):
            ref = 1 - curve["mse"][k] / ridge["mse"][k]
            assert curve["skill"][k] == pytest.approx(ref, rel=1e-9, abs=1e-12), name
    assert all(s == 0 for s in ridge["skill"][1:])
    assert set(kern["skill_ranges"]) == {"1-10", "11-15"}
    gdt = preds["gd_target"]
    assert gdt["num_prompts"] == 16 and gdt["meta"]["steps"] in (1, 3, 10, 30, 100)
    assert gdt["meta"]["fallbacks"] >= 0 and all(v is not None for v in gdt["r2"])
    assert gdt["skill"][1] is not None  # skill on its own 16 prompts


def test_cache_reuse_and_staleness(run: Path, tmp_path: Path) -> None:
    import shutil

    rd = tmp_path / "copy"
    shutil.copytree(run, rd)
    first = evaluate_run(rd, "mixture", prompts=64, options=CHEAP, progress=False)
    path = result_path(rd, "mixture")
    stamp = path.stat().st_mtime_ns
    again = evaluate_run(rd, "mixture", prompts=64, options=CHEAP, progress=False)
    assert again["from_cache"] is True and path.stat().st_mtime_ns == stamp
    assert again["computed_at"] == first["computed_at"]
    assert result_status(rd, "mixture") == "ok"
    # A different request recomputes.
    other = evaluate_run(rd, "mixture", prompts=32, options=CHEAP, progress=False)
    assert other["from_cache"] is False and other["suite"]["prompts"] == 32
    # A newer checkpoint (training resumed for more steps) makes the cache stale.
    train(load_config("tiny", ["train.steps=30", "train.checkpoint_every=10"]), rd, quiet=True)
    assert result_status(rd, "mixture") == "stale"
    newer = evaluate_run(rd, "mixture", prompts=32, options=CHEAP, progress=False)
    assert newer["from_cache"] is False and newer["checkpoint"]["step"] == 30
    forced = evaluate_run(rd, "mixture", prompts=32, options=CHEAP, progress=False, force=True)
    assert forced["from_cache"] is False


def test_paired_difference_against_loop() -> None:
    g = torch.Generator().manual_seed(1)
    B, n = 40, 6
    ys = torch.randn(B, n, 1, generator=g, dtype=torch.float64)
    a = ys + 0.3 * torch.randn(B, n, 1, generator=g, dtype=torch.float64)
    b = ys + 0.6 * torch.randn(B, n, 1, generator=g, dtype=torch.float64)
    b[:, 2] = math.nan  # a baseline not evaluated at k = 2
    out = paired_difference(a, b, ys, [(1, 3), (4, 5)], resamples=200, seed=7)
    # Reference: the same resample indices, R² of each predictor recomputed by metrics.r2_curve.
    idx = torch.randint(B, (200, B), generator=torch.Generator().manual_seed(7))
    diffs = torch.stack([metrics.r2_curve(a[i], ys[i]) - metrics.r2_curve(b[i], ys[i]) for i in idx])
    q = torch.tensor([0.05, 0.95], dtype=torch.float64)
    for k in (0, 1, 3, 4, 5):
        ref = torch.quantile(diffs[:, k], q)
        assert out["diff_low"][k] == pytest.approx(ref[0].item(), abs=1e-9)
        assert out["diff_high"][k] == pytest.approx(ref[1].item(), abs=1e-9)
        assert out["diff"][k] == pytest.approx((metrics.r2_curve(a, ys) - metrics.r2_curve(b, ys))[k].item())
    assert math.isnan(out["diff"][2])
    r = out["ranges"]["1-3"]
    assert r["k_evaluated"] == 2 and r["verdict"] == "beats"  # a is the better predictor
    same = paired_difference(a, a, ys, [(1, 5)], resamples=50)
    assert same["ranges"]["1-5"]["verdict"] == "matches" and same["ranges"]["1-5"]["mean"] == 0


@pytest.mark.parametrize("attention", ["relu", "softmax"])
def test_exact_flops_match_counter(attention: str) -> None:
    cfg = load_config("tiny", [f"model.attention={attention}"])
    model = build_model(cfg.model, cfg.task.dim, cfg.task.out_dim).eval()
    xs, ys = torch.randn(1, 11, 5), torch.randn(1, 11, 1)
    exact = icl_forward_flops(cfg.model, 5, 1, 11)
    if attention == "relu":
        assert exact == count_flops(model, xs, ys)
    else:
        # The counter does not see the CPU scaled_dot_product_attention kernel: it misses exactly the
        # scores and values, 4 T^2 d per block (T = 22 tokens).
        assert exact - count_flops(model, xs, ys) == 4 * 22**2 * cfg.model.d_model * cfg.model.layers
    assert mlp_num_params(6, 200, 20, 20, bias=False) == 168_000  # the paper's P (docs/protocol.md, FLOPs)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "icdl", *args], capture_output=True, text=True, env=ENV)


def _one_line_error(p: subprocess.CompletedProcess[str]) -> None:
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert p.stderr.startswith("icdl: error:")


def test_cli(run: Path, tmp_path: Path) -> None:
    _one_line_error(_cli("evaluate", str(tmp_path / "missing")))
    (tmp_path / "empty").mkdir()
    _one_line_error(_cli("evaluate", str(tmp_path / "empty")))
    _one_line_error(_cli("evaluate", str(run), "--suite", "bogus"))
    _one_line_error(_cli("evaluate", str(run), "--baselines", "averaging,nope"))
    _one_line_error(_cli("evaluate", str(run), "--prompts", "1"))
    p = _cli("evaluate", str(run), "--suite", "centred", "--prompts", "32", "--baselines", "zero,averaging",
             "--resamples", "50", "--no-cost", "--json", "-q")  # fmt: skip
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["suite"]["name"] == "centred" and set(res["conditions"]["centred"]["predictors"]) == {
        "icl", "zero", "averaging"}  # fmt: skip
    # Standardised centred labels: the trivial predictors score about 0 or less.
    zero = res["conditions"]["centred"]["predictors"]["zero"]["r2"]
    assert max(v for v in zero[1:] if v is not None) < 0.2

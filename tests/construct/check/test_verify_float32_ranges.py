"""float32 ReLU: a pre-activation beyond the relu' step's floating-point range (|z| >= delta 2 / eps_mach,
168 at float32's delta 1e-5) is named as a range failure before the sublayer error it causes, and a relu'
window hit says what narrows the window (issue 29, item 6)."""

from __future__ import annotations

import torch

from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.construct.check.verify import relu_step_limit
from icdl.construct.compile import sample_task_info
from icdl.nets import NetSpec

SPEC = NetSpec(3, 8, 4, 1)


def test_the_step_limit_is_where_z_over_delta_loses_the_unit() -> None:
    limit = relu_step_limit(1e-5, torch.float32)
    assert 167 < limit < 168
    t = torch.tensor([limit / 1e-5 * 0.99, limit / 1e-5 * 1.01], dtype=torch.float32)
    step = torch.relu(t) - torch.relu(t - 1)
    assert step[0] == 1 and step[1] != 1  # beyond the limit t - 1 rounds back to t (or 2 below)


def test_a_float32_relu_prompt_beyond_the_step_range_is_a_range_failure() -> None:
    x, y, xq, w0, _ = sample_task(SPEC, 16, seed=0, dtype=torch.float32)
    model = compile_gd_transformer(SPEC, steps=2, n=16, dtype="float32")
    big = verify(model, 100 * x, y, 100 * xq, w0, lipschitz_iters=0)
    assert big.verdict == "FAIL" and big.step_range_count and big.step_range_count > 0
    first = big.failures[0]
    assert first.startswith("(b) range:") and "|z| >= 168" in first and "--dtype float64" in first
    assert any(f.startswith("(a) sublayer") for f in big.failures[1:])  # the error it causes comes after
    small = verify(model, 10 * x, y, 10 * xq, w0, lipschitz_iters=0)
    assert small.step_range_count == 0 and small.verdict == "PASS"
    # L = 0: only the readout runs, and it computes r, never r' (F_1..F_N and the readout MLP), so its
    # pre-activations beyond the relu' step's float range count in neither dtype (float32's limit is 168,
    # float64's 1e-9 2^53 = 9.0e6; GD with |x| ~ 100 would blow w up after a step in either)
    for dtype, tdtype in (("float32", torch.float32), ("float64", torch.float64)):
        xs, ys, xqs, w0s, _ = sample_task(SPEC, 16, seed=0, dtype=tdtype)
        m = compile_gd_transformer(SPEC, steps=0, n=16, dtype=dtype)
        rep = verify(m, 100 * xs, ys, 100 * xqs, w0s, lipschitz_iters=0)
        assert rep.step_range_count == 0, dtype


def test_a_float32_relu_window_hit_names_what_narrows_it() -> None:
    # icdl construct -N 5 -K 12 --in-dim 4 --out-dim 2 -n 40 -L 15 --lr 0.05 --dtype float32 --seed 1003
    spec = NetSpec(5, 12, 4, 2)
    t = sample_task_info(spec, 40, seed=1003, dtype=torch.float32, lr=0.05, steps=15)
    prompt = (t.x, t.y, t.x_query, t.w0)
    model = compile_gd_transformer(spec, lr=0.05, steps=15, n=40, dtype="float32")
    rep = verify(model, *prompt, lipschitz_iters=0)
    (line,) = [f for f in rep.failures if f.startswith("(b) relu' window")]
    assert "delta = 1e-05 (float32)" in line and "smaller --delta" in line and "--dtype float64" in line
    narrow = compile_gd_transformer(spec, lr=0.05, steps=15, n=40, dtype="float32", delta=2e-6)
    assert verify(narrow, *prompt, lipschitz_iters=0).delta_window_count == 0  # the hint works here

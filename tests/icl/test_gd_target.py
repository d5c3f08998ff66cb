"""gd_target: GD on the target architecture with (lr, steps) tuned on held-out prompts."""

from __future__ import annotations

import math

import pytest
import torch

from icdl import nets
from icdl.errors import InputError
from icdl.icl import baselines as bl
from icdl.icl.gd_target import GDTargetBaseline

F64 = torch.float64


def _prompts(B: int, n: int, d: int, seed: int, spec: nets.NetSpec):
    g = torch.Generator().manual_seed(seed)
    w = nets.init_weights(spec, (B,), generator=g, fan_in_scaling=True, dtype=F64)
    xs = torch.randn(B, n, d, generator=g, dtype=F64)
    return xs, nets.forward(spec, w, xs)


def test_matches_reference_gd_on_one_prompt() -> None:
    spec = nets.NetSpec(3, 5, 3, 1, output="linear")
    xs, ys = _prompts(1, 6, 3, 1, spec)
    base = GDTargetBaseline(spec, lr=0.05, steps=3, init_std=0.1, seed=4)
    got = base(xs, ys)
    w0 = base._gd(0.05, 3).initial_weights(F64)
    # a small start: init_std (0.1) times the He-scaled draw of the same seed
    unit = bl.GDBaseline(spec, seed=4, init_std=1.0).initial_weights(F64)
    torch.testing.assert_close(w0, 0.1 * unit)
    for k in range(1, 6):
        w = nets.reference_gd(spec, "squared", w0, xs[0, :k], ys[0, :k], lr=0.05, steps=3)[-1]
        torch.testing.assert_close(got[0, k], nets.forward(spec, w, xs[0, k : k + 1])[0])


def test_tune_picks_the_pair_with_lowest_held_out_mse() -> None:
    spec = nets.NetSpec(2, 6, 3, 1, output="linear")
    xv, yv = _prompts(12, 6, 3, 2, spec)
    base = GDTargetBaseline(spec, lr_grid=(1e-3, 0.1, 1e100), steps_grid=(1, 5))
    lr, steps = base.tune(xv, yv)
    best = math.inf
    for s in (1, 5):
        for r in (1e-3, 0.1, 1e100):
            p = GDTargetBaseline(spec, lr=r, steps=s)(xv, yv)
            err = float(((p - yv) ** 2)[:, 1:].mean())
            if math.isfinite(err) and err < best:
                best, pair = err, (r, s)
    assert (lr, steps) == pair
    assert base.tuning is not None and base.tuning["mse"][0][2] is None  # 1e100 diverges


def test_untuned_is_an_input_error() -> None:
    spec = nets.NetSpec(2, 3, 3, 1)
    with pytest.raises(InputError):
        GDTargetBaseline(spec)(torch.zeros(1, 3, 3), torch.zeros(1, 3, 1))
    with pytest.raises(InputError):
        GDTargetBaseline(spec, steps_grid=(0,))

"""gd_target: GD on the target architecture with (lr, steps) tuned on held-out prompts."""

from __future__ import annotations

import math

import pytest
import torch

from icdl import nets
from icdl.errors import InputError
from icdl.icl.baselines import simple as bl
from icdl.icl.baselines.gd_target import GDTargetBaseline

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


def test_every_checkpoint_of_the_trajectory_equals_a_fresh_gd_run() -> None:
    spec = nets.NetSpec(3, 4, 3, 1, output="linear")
    xs, ys = _prompts(5, 7, 3, 5, spec)
    base = GDTargetBaseline(spec, init_std=0.1, seed=2)
    traj = base.trajectory(xs, ys, 0.3, [1, 4, 9])
    for i, steps in enumerate((1, 4, 9)):
        torch.testing.assert_close(traj[i + 1], base._gd(0.3, steps)(xs, ys))
    w0 = base._gd(0.3, 1).initial_weights(F64).expand(5, -1)
    torch.testing.assert_close(traj[0], nets.forward(spec, w0, xs))


def _one_prompt_diverges(spec: nets.NetSpec) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = _prompts(8, 6, 3, 7, spec)
    xs[3] *= 4.0  # one prompt with large inputs: a step size fine elsewhere blows up there
    ys[3] = nets.forward(spec, nets.init_weights(spec, (1,), generator=torch.Generator().manual_seed(0),
                                                 fan_in_scaling=True, dtype=F64), xs[3:4])[0]  # fmt: skip
    return xs, ys


def test_a_pair_that_blows_up_on_some_held_out_prompts_is_excluded() -> None:
    spec = nets.NetSpec(2, 5, 3, 1, output="linear")
    xv, yv = _one_prompt_diverges(spec)
    base = GDTargetBaseline(spec, lr_grid=(0.01, 0.3), steps_grid=(20,))
    blown = base.trajectory(xv, yv, 0.3, [20])[1]
    ok = torch.ones(8, dtype=torch.bool)
    ok[3] = False
    bound = 10 * float(yv.abs().max())
    assert bool((~blown.isfinite() | (blown.abs() > bound))[3].any())  # non-vacuous: it does blow up there
    assert bool(blown[ok].isfinite().all()) and float(blown[ok].abs().max()) < bound
    lr, _ = base.tune(xv, yv)
    assert lr == 0.01
    assert base.tuning is not None and base.tuning["failed"] == [[False, True]]
    assert base.tuning["mse"][0][1] is None


def test_test_time_blow_ups_fall_back_to_the_start_and_r2_stays_finite() -> None:
    from icdl.icl import metrics

    spec = nets.NetSpec(2, 5, 3, 1, output="linear")
    xv, yv = _prompts(8, 6, 3, 8, spec)
    xs, ys = _one_prompt_diverges(spec)
    base = GDTargetBaseline(spec, lr_grid=(0.3,), steps_grid=(20,))
    base.tune(xv, yv)  # fine on the held-out prompts
    assert (base.lr, base.steps) == (0.3, 20)
    preds = base(xs, ys)
    traj = base.trajectory(xs, ys, 0.3, [20])
    assert base.fallbacks > 0
    assert bool(preds.isfinite().all()) and bool(metrics.r2_curve(preds, ys).isfinite().all())
    bad = ~traj[1].isfinite() | (traj[1].abs() > base.bound)
    torch.testing.assert_close(preds[bad], traj[0][bad])
    torch.testing.assert_close(preds[~bad], traj[1][~bad])


def _plain_loop(base: GDTargetBaseline, xs, ys, lrs, steps):
    """Per (step size, prompt, k): GD on that prompt's first k examples alone (no batching, no masks)."""
    S = max(steps)
    w0 = base._gd(1.0, 1).initial_weights(F64)
    B, n, _ = xs.shape
    out = torch.empty(len(lrs), len(steps) + 1, B, n, ys.shape[-1], dtype=F64)
    for j, lr in enumerate(lrs):
        for b in range(B):
            out[j, :, b] = nets.forward(base.spec, w0, xs[b])  # the start, and every checkpoint at k = 0
            for k in range(1, n):
                w = w0
                for step in range(1, S + 1):
                    w = w - lr * nets.gradient(base.spec, "squared", w, xs[b, :k], ys[b, :k])
                    if step in steps:
                        out[j, steps.index(step) + 1, b, k] = nets.forward(base.spec, w, xs[b, k : k + 1])[0]
    return out


@pytest.mark.parametrize("block", [1, 3, 7])
def test_vectorised_trajectories_equal_a_plain_loop_over_prompts_and_k(
    block: int, assert_nondegenerate
) -> None:
    spec = nets.NetSpec(3, 5, 3, 1, output="linear")
    xs, ys = _prompts(3, 9, 3, 11, spec)
    base = GDTargetBaseline(spec, init_std=0.3, seed=5)
    for b in range(3):
        assert_nondegenerate(spec, xs[b], ys[b], base._gd(1.0, 1).initial_weights(F64))
    lrs, steps = [0.05, 0.4], [1, 2, 5]
    got = base.trajectories(xs, ys, lrs, steps, block=block)
    want = _plain_loop(base, xs, ys, lrs, steps)
    assert float((want[:, 1:] - want[:, :1]).abs()[..., 1:, :].min()) > 1e-7  # every k moved from the start
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_dropping_a_diverged_step_size_leaves_the_others_and_marks_it_failed() -> None:
    spec = nets.NetSpec(2, 5, 3, 1, output="linear")
    xs, ys = _prompts(4, 6, 3, 12, spec)
    base = GDTargetBaseline(spec)
    lrs, steps = [0.1, 1e30, 0.3], [1, 5, 20]
    kept = base.trajectories(xs, ys, lrs, steps)
    dropped = base.trajectories(xs, ys, lrs, steps, drop_nan=True)
    torch.testing.assert_close(dropped[[0, 2]], kept[[0, 2]], rtol=0, atol=0)
    assert bool(kept[1, 1].isfinite().all())  # one step of 1e30 is huge but finite ...
    nan_k = kept[1].isnan().any(1, keepdim=True).expand_as(kept[1])  # (checkpoint, k) with a NaN prompt
    assert bool(nan_k[-1, :, 2:].all())  # ... and every k >= 2 has a NaN prompt by step 20 (non-vacuous)
    # once a k has a NaN prompt it stays so (NaN propagates), and dropping sets all its prompts to NaN
    assert bool((nan_k[1:] >= nan_k[:-1]).all())
    assert bool(dropped[1][nan_k].isnan().all())
    torch.testing.assert_close(dropped[1][~nan_k], kept[1][~nan_k], rtol=0, atol=0)


@pytest.mark.parametrize("steps", [[1, 5, 20], list(range(1, 21))])
def test_dropping_marks_the_checkpoint_of_the_step_where_nan_appears(steps: list[int]) -> None:
    """Dropping changes nothing but the bookkeeping: the dropped step size's trajectory is NaN exactly
    where a prompt of its k is NaN without dropping — including the checkpoint of the very step where the
    NaN appears (with every step a checkpoint, that step is always one)."""
    spec = nets.NetSpec(2, 5, 3, 1, output="linear")
    xs, ys = _prompts(4, 6, 3, 12, spec)
    base = GDTargetBaseline(spec)
    lrs = [0.1, 1e30]
    kept = base.trajectories(xs, ys, lrs, steps)
    dropped = base.trajectories(xs, ys, lrs, steps, drop_nan=True)
    nan_k = kept[1].isnan().any(1, keepdim=True).expand_as(kept[1])
    first = nan_k[1:] & ~nan_k[:-1]  # (checkpoint, k) where a NaN first shows
    assert bool(first.any())  # non-vacuous: NaN appears at a checkpoint after the start
    assert bool(dropped[1][nan_k].isnan().all())
    torch.testing.assert_close(dropped[1][~nan_k], kept[1][~nan_k], rtol=0, atol=0)


def test_large_negative_predictions_fall_back_like_large_positive_ones() -> None:
    """The divergence guard is on |prediction|: a finite prediction far below -bound is as blown up as
    one far above +bound, and falls back to the start."""
    spec = nets.NetSpec(2, 5, 3, 1, output="linear")
    xv, yv = _prompts(8, 6, 3, 8, spec)
    base = GDTargetBaseline(spec, lr_grid=(0.5,), steps_grid=(5,))
    base.tune(xv, yv)
    xs, ys = _prompts(16, 6, 3, 7, spec)
    xs = xs * 3.0  # large inputs: 0.5 blows up on some prompts, to both signs
    traj = base.trajectory(xs, ys, 0.5, [5])
    neg = traj[1].isfinite() & (traj[1] < -base.bound)
    assert bool(neg.any()) and bool((traj[1] > base.bound).any())  # non-vacuous, both signs
    preds = base(xs, ys)
    assert float(preds.abs().max()) <= base.bound
    torch.testing.assert_close(preds[neg], traj[0][neg], rtol=0, atol=0)

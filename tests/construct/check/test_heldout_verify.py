"""Properties of the verifier that held-out set 2 (issue 35, ``scripts/mutation_heldout.py --set 2``) showed
no test pinned down: each was written after its plant survived the fast tier, and checked to fail with the
plant and pass without it."""

from __future__ import annotations

import math

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.construct.check.stream import Comparison, Prompt, StreamCheck
from icdl.nets import HUBER_DELTA, NetSpec, forward, reference_gd


def test_the_gate_margin_is_below_the_largest_magnitude_of_an_asymmetric_loss_units_argument() -> None:
    """gate_margin = C - max |a0 p(N) + a1 y + b| over the loss units (a, b: the model's u sum), every token
    and every w. Huber's units are not symmetric (``2(t - y) + 2``, ``2(t - y) - 2``, the constant ``2``), so
    where the worst residual ``t - y`` is negative the largest magnitude, ``2 |t - y| + 2``, is far above the
    largest signed argument: the gate must hold for the magnitude."""
    spec = NetSpec(2, 3, 3, 2)
    n, lr, box, steps = 6, 0.2, 0.5, 2
    x, y, xq, w0, _ = sample_task(spec, n, seed=1, loss="huber")
    y = y.clone()
    y[0, 0] = 4.0  # one residual far below 0 at every step
    model = compile_gd_transformer(spec, steps=steps, n=n, lr=lr, projection="box", box=box, loss="huber")
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    traj = reference_gd(spec, "huber", w0, x, y, lr=lr, steps=steps, box=box)
    x_all = torch.cat([x, xq[None]])
    y_all = torch.cat([y, torch.zeros(1, spec.out_dim, dtype=y.dtype)])
    outs = [forward(spec, w, x_all) for w in traj]
    assert min(float((t - y_all).min()) for t in outs) < -3.0  # the premise: a large negative residual
    u = model.terms.u
    assert len(u.a) == 3 and HUBER_DELTA == 1.0  # the premise: huber's three units
    worst = max(
        float((a[0] * t + a[1] * y_all + b).abs().max()) for t in outs for a, b in zip(u.a, u.b, strict=True)
    )
    assert worst > 8.0  # 2 |t - y| + 2 with |t - y| > 3
    assert rep.gate_margin == pytest.approx(model.config.gate - worst, rel=0, abs=1e-6)


def test_a_nan_reaching_the_applied_gradient_after_the_first_step_makes_the_measured_eps_nan() -> None:
    """eps = max_l eps_l: with lr = 1e200 step 1 is exact and its weights overflow, so steps 2 and 3 apply a
    NaN gradient. The measured eps, and Corollary 1.1 at it, must be NaN too whichever step it came at (a
    finite maximum over the steps would report a measured error as small as step 1's)."""
    spec = NetSpec(2, 3, 3, 2)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=1)
    model = compile_gd_transformer(spec, steps=3, n=6, lr=1e200)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    errs = [e.grad_l2 for e in rep.steps]
    assert math.isfinite(errs[0]) and all(map(math.isnan, errs[1:]))  # the premise
    assert math.isnan(rep.eps_grad)
    assert math.isnan(rep.corollary_bound_measured)
    assert rep.verdict == "FAIL"


def _scratch_nan_run(split: bool) -> Comparison:
    """The streaming check of a run whose state gets a NaN in its last scratch column (query token) after
    step 1's block; ``split``: the check's scratch columns taken as two spans (``_spans`` gives several when
    the scratch slots are not adjacent), the NaN in the second."""
    spec = NetSpec(2, 3, 3, 2)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=1)
    model = compile_gd_transformer(spec, steps=2, n=6, lr=0.2, projection="box", box=0.5)
    prompt = Prompt.of(model, x, y, xq, w0)
    H0 = model.build_prompt(prompt.x, prompt.y, prompt.x_query, prompt.w0)
    check = StreamCheck(model, H0, prompt, 1e-9)
    (span,) = check.scratch_spans
    if split:
        check.scratch_spans = [slice(span.start, span.start + 1), slice(span.start + 1, span.stop)]
    last = len(model.block_layers) - 1

    def trace(pt, H):  # type: ignore[no-untyped-def]
        if pt.step == 0 and pt.index == last:
            H[0, -1, span.stop - 1] = math.nan
        check(pt, H)

    model.run(H0, trace=trace)
    return check.result()


@pytest.mark.parametrize("split", [False, True])
def test_a_nan_left_in_the_scratch_after_a_block_is_the_scratch_maximum(split: bool) -> None:
    """scratch_max = max |scratch| over the block ends, NaN as soon as one holds a NaN (max over floats would
    keep the previous maximum), however the scratch columns are split into spans."""
    cmp = _scratch_nan_run(split)
    assert math.isnan(cmp.scratch_max)

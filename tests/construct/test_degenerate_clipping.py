"""One definition of degenerate (`gd_is_degenerate`): GD's movement comes from the projection alone, or
there is none. Shared by `verify` (DEGENERATE), `task_is_degenerate` and the redraw; tested on the clipping
case: every gradient 0 (the first layer is 0, so every ReLU unit sits at z = 0 and is off) while w0 lies
outside the box, so projected GD moves w, but only by clipping."""

from __future__ import annotations

import torch

from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.construct.task import gd_is_degenerate, redraw_while_degenerate, task_is_degenerate
from icdl.nets import NetSpec, gradient, reference_gd

SPEC = NetSpec(2, 3, 2, 1)
BOX = 1.0


def _clipping_task() -> tuple[torch.Tensor, ...]:
    x, y, xq, w0, _ = sample_task(SPEC, 6, seed=3)
    w0 = w0.clone()
    k = SPEC.width * SPEC.in_dim  # V_1 (K x d_x) first (row-major V_1..V_N)
    w0[:k] = 0.0  # every unit of layer 1 at z = 0: off, and r'(0) = 0, so every gradient is 0
    w0[k:] = torch.where(w0[k:] < 0, -5.0, 5.0)  # V_2 outside the box |w_c| <= 1
    return x, y, xq, w0


def test_the_clipping_case_moves_only_by_projection() -> None:
    x, y, _, w0 = _clipping_task()
    traj = reference_gd(SPEC, "squared", w0, x, y, lr=0.2, steps=3, box=BOX)
    assert float((traj[-1] - traj[0]).abs().max()) == 4.0  # projected GD moves w ...
    for w in traj:  # ... but no gradient does
        assert torch.equal(gradient(SPEC, "squared", w, x, y), torch.zeros_like(w))
    assert gd_is_degenerate(SPEC, "squared", x, y, w0, lr=0.2, steps=3, box=BOX)
    assert task_is_degenerate(SPEC, "squared", x, y, w0, lr=0.2, steps=3, box=BOX)


def test_verify_calls_the_clipping_case_degenerate_not_pass() -> None:
    x, y, xq, w0 = _clipping_task()
    model = compile_gd_transformer(SPEC, lr=0.2, steps=3, n=6, projection="box", box=BOX)
    rep = verify(model, x, y, xq, w0)
    assert rep.failures == [] and rep.weights_moved == 4.0
    assert rep.degenerate and rep.verdict == "DEGENERATE" and not rep.passed
    assert rep.describe().startswith("DEGENERATE: GD's movement comes from the projection alone")


def test_a_task_whose_gradient_moves_w_is_not_degenerate() -> None:
    x, y, xq, w0, _ = sample_task(SPEC, 6, seed=3)
    assert not gd_is_degenerate(SPEC, "squared", x, y, w0, lr=0.2, steps=3, box=BOX)
    model = compile_gd_transformer(SPEC, lr=0.2, steps=3, n=6, projection="box", box=BOX)
    rep = verify(model, x, y, xq, w0)
    assert not rep.degenerate and rep.verdict == "PASS"
    assert not gd_is_degenerate(SPEC, "squared", x, y, w0, steps=0)  # no step: nothing to be degenerate


def test_the_redraw_rejects_the_clipping_case_with_the_same_definition() -> None:
    bad, good = _clipping_task(), sample_task(SPEC, 6, seed=3)[:4]
    draws = {1: bad, 2: good}

    def degenerate(t: tuple[torch.Tensor, ...]) -> bool:
        return task_is_degenerate(SPEC, "squared", t[0], t[1], t[3], lr=0.2, steps=3, box=BOX)

    task, n = redraw_while_degenerate(lambda i: draws[i], degenerate)
    assert n == 2 and task is good

"""(b) range counts only the pre-activations a fitted sum sees: a layer whose sums are exact (a linear
output's identity) is right at any argument, so its pre-activations beyond R must not make a FAIL."""

from __future__ import annotations

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.nets import NetSpec, forward, unflatten


@pytest.mark.parametrize("activation", ["tanh", "softplus"])
def test_an_exact_output_layer_beyond_r_is_not_out_of_range(activation: str) -> None:
    """A fitted hidden layer well inside ``[-R, R]`` and a linear output layer far outside it: nothing a
    fitted sum sees is out of range, so the count is 0 and the verdict PASS. The same prompt with the hidden
    layer pushed beyond R is counted (the check is not just switched off)."""
    spec = NetSpec(2, 4, 3, 1, activation=activation, output="linear")
    n, steps, radius = 8, 2, 3.0
    x, y, xq, w0, _ = sample_task(spec, n, seed=2)
    w0 = w0.clone()
    w0[: spec.offsets[1]] *= 0.1  # |z(1)| < R
    w0[spec.offsets[1] :] *= 30.0  # |z(2)| > R on some tokens
    xs = torch.cat([x, xq[None]])
    z1 = xs @ unflatten(spec, w0)[0].T
    z2 = forward(spec, w0, xs)
    assert float(z1.abs().max()) < radius / 2 and float(z2.abs().max()) > radius  # the premise
    model = compile_gd_transformer(spec, steps=steps, n=n, lr=1e-3, radius=radius, eps=1e-3)
    assert not model.terms.r[0].exact and model.terms.r[1].exact and model.terms.r_prime[1].exact
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.weights_moved > 0 and not rep.degenerate
    assert rep.out_of_range_count == 0
    assert not any(f.startswith("(b) range") for f in rep.failures)
    w_far = w0.clone()
    w_far[: spec.offsets[1]] *= 20.0  # now |z(1)| > R on some tokens
    assert float((xs @ unflatten(spec, w_far)[0].T).abs().max()) > radius
    assert verify(model, x, y, xq, w_far, lipschitz_iters=0).out_of_range_count > 0

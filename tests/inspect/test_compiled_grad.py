"""Gradients through a compiled GD transformer on request (``run(..., grad=True)``, or a prompt that requires
grad), checked against central finite differences of the gradient-free forward pass (float64).

The compiled model is piecewise linear in the prompt where it uses ReLU sums, so a central difference with a
small step is exact up to round-off unless a kink lies within the step; the check uses several random
directions and a relative tolerance far above round-off and far below any real disagreement.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from icdl.construct import compile_gd_transformer, sample_task
from icdl.errors import InputError
from icdl.hooks import HookPoint
from icdl.nets import NetSpec

SPEC = NetSpec(depth=2, width=3, in_dim=2, out_dim=1, activation="sigmoid")


@pytest.fixture(scope="module", params=["paper", "softmax"])
def setup(request: pytest.FixtureRequest) -> tuple:  # type: ignore[type-arg]
    model = compile_gd_transformer(SPEC, lr=0.1, steps=2, n=4, variant=request.param)
    x, y, xq, w0, _ = sample_task(SPEC, 4, seed=5)
    return model, model.build_prompt(x, y, xq, w0)


def _fd(f, H: Tensor, direction: Tensor, eps: float) -> Tensor:  # type: ignore[no-untyped-def]
    return (f(H + eps * direction) - f(H - eps * direction)) / (2 * eps)


def test_gradient_matches_finite_differences(setup: tuple) -> None:  # type: ignore[type-arg]
    model, H = setup
    W, X = model.layout.indices("W"), model.layout.indices("X")
    Hg = H.clone().requires_grad_(True)
    pred = model.read_prediction(model.run(Hg, grad=True)).sum()
    (g,) = torch.autograd.grad(pred, Hg)
    assert float(g[..., W].abs().max()) > 1e-3 and float(g[..., X].abs().max()) > 1e-3  # w0 and x matter
    f = lambda h: model.read_prediction(model.run(h)).sum()  # noqa: E731 - the gradient-free forward
    gen = torch.Generator().manual_seed(0)
    for _ in range(4):
        d = torch.randn(H.shape, generator=gen, dtype=H.dtype)
        d[..., [i for i in range(H.shape[-1]) if i not in set(W) | set(X)]] = 0.0  # inputs, not scratch
        fd = float(_fd(f, H, d, 1e-6))
        ad = float((g * d).sum())
        assert abs(ad - fd) <= 1e-5 * max(1.0, abs(fd)), (ad, fd)


def test_a_prompt_that_requires_grad_gets_a_graph(setup: tuple) -> None:  # type: ignore[type-arg]
    model, H = setup
    Hg = H.clone().requires_grad_(True)
    out = model(Hg)  # grad defaults to H.requires_grad
    assert out.requires_grad
    (g,) = torch.autograd.grad(model.read_prediction(out).sum(), Hg)
    (g2,) = torch.autograd.grad(model.read_prediction(model.run(Hg, grad=True)).sum(), Hg)
    assert torch.equal(g, g2)
    # the gradient-free run's values, up to round-off (it takes exact shortcuts for equal tokens)
    assert torch.allclose(out.detach(), model(H), rtol=0, atol=1e-12)
    with torch.no_grad():
        assert not model(Hg).requires_grad  # the caller's no_grad is respected by default
    assert not model(H).requires_grad
    with pytest.raises(InputError, match="grad=True"):
        model.run(Hg, grad=True, inplace=True)


def test_gradients_through_hooks(setup: tuple) -> None:  # type: ignore[type-arg]
    """A hook sees a stream in the graph: the gradient of the prediction with respect to the stream after
    step 0's update, read there, equals the finite difference of patching that stream."""
    model, H = setup
    name = "steps.0.update.hook_out"
    kept: dict[str, Tensor] = {}

    def keep(act: Tensor, hook: HookPoint) -> Tensor:
        act = act.detach().requires_grad_(True)  # a leaf: the gradient with respect to this stream
        kept["act"] = act
        return act

    pred = model.read_prediction(model.run_with_hooks(H, fwd_hooks=[(name, keep)], grad=True)).sum()
    (g,) = torch.autograd.grad(pred, kept["act"])
    W = model.layout.indices("W")
    assert float(g[:, -1, W].abs().max()) > 1e-3
    d = torch.zeros_like(H)
    d[:, -1, W] = torch.randn(len(W), generator=torch.Generator().manual_seed(1), dtype=H.dtype)

    def f(delta: Tensor) -> Tensor:
        shift = lambda act, hook: act + delta  # noqa: E731
        return model.read_prediction(model.run_with_hooks(H, fwd_hooks=[(name, shift)])).sum()

    fd = float(_fd(f, torch.zeros_like(H), d, 1e-6))
    assert abs(float((g * d).sum()) - fd) <= 1e-5 * max(1.0, abs(fd))

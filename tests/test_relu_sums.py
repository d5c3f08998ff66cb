"""Sum-of-ReLU fits (icdl.relu_sums): verified sup errors, exact representations, term-count goals."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icdl.errors import InputError
from icdl.nets import LOSSES
from icdl.relu_sums import (
    ReluSum,
    fit_relu_sum,
    fit_relu_sum2,
    loss_derivative_sum,
    relu_sum_for,
    target_function,
)

F64 = torch.float64
SMOOTH = ["sigmoid", "tanh", "softplus", "sigmoid'", "tanh'", "softplus'"]


def loop_eval(s: ReluSum, t: torch.Tensor) -> torch.Tensor:
    """Independent reference: a plain Python loop over the terms."""
    out = torch.zeros_like(t)
    for a, b, c in s.terms():
        out = out + c * torch.relu(a * t + b)
    return out


def independent_sup(s: ReluSum, fn, radius: float, n: int = 200_003, seed: int = 0) -> float:
    """max |f - sum| on a grid unrelated to the fit's (odd size, shifted) plus random points."""
    g = torch.Generator().manual_seed(seed)
    t = torch.cat(
        [
            torch.linspace(-radius, radius, n, dtype=F64),
            (torch.rand(50_000, generator=g, dtype=F64) * 2 - 1) * radius,
        ]
    )
    return float((fn(t) - s(t)).abs().max())


@given(
    name=st.sampled_from(SMOOTH),
    log_eps=st.floats(math.log(1e-4), math.log(1e-1)),
    radius=st.floats(0.5, 20.0),
)
@settings(max_examples=25)
def test_fitted_sums_meet_eps(name: str, log_eps: float, radius: float) -> None:
    eps = math.exp(log_eps)
    s = relu_sum_for(name, eps=eps, radius=radius)
    fn = target_function(name)
    assert not s.exact and s.eps == eps and s.radius == radius
    assert 0 < s.sup_error <= eps
    assert independent_sup(s, fn, radius) <= eps
    # knots inside [-R, R], so the sum is flat outside it
    a, b = s.a, s.b
    knots = -b[a != 0] / a[a != 0]
    assert bool(((knots >= -radius - 1e-12) & (knots <= radius + 1e-12)).all())
    edge = torch.tensor([-radius, radius], dtype=F64)
    far = torch.tensor([-radius - 3.0, radius + 7.0], dtype=F64)
    torch.testing.assert_close(s(far), s(edge), atol=1e-12 * (1 + s.coef_mass * radius), rtol=0)
    # __call__ agrees with a plain loop over the terms
    t = torch.linspace(-1.5 * radius, 1.5 * radius, 501, dtype=F64)
    torch.testing.assert_close(s(t), loop_eval(s, t), atol=1e-12 * (1 + s.coef_mass * radius), rtol=0)


@pytest.mark.parametrize("name", ["sigmoid", "tanh"])
def test_term_count_goals(name: str) -> None:
    fn = target_function(name)
    for eps, cap in ((1e-3, 40), (1e-6, 1500)):
        s = relu_sum_for(name, eps=eps, radius=10.0)
        assert s.num_terms <= cap, (name, eps, s.num_terms)
        assert s.sup_error <= eps
        assert independent_sup(s, fn, 10.0, n=400_001) <= eps


def test_fewer_terms_than_uniform_interpolation() -> None:
    # Uniform piecewise-linear interpolation of sigmoid with step 0.5 (42 terms) has error ~3e-3;
    # the adaptive minimax fit reaches 1e-3 with fewer terms than that.
    t = torch.linspace(-10, 10, 200_001, dtype=F64)
    knots = torch.linspace(-10, 10, 41, dtype=F64)
    interp_err = float((torch.sigmoid(t) - _interp(t, knots, torch.sigmoid(knots))).abs().max())
    assert interp_err > 2e-3
    assert relu_sum_for("sigmoid", eps=1e-3).num_terms < 42


def _interp(t: torch.Tensor, xk: torch.Tensor, yk: torch.Tensor) -> torch.Tensor:
    i = torch.searchsorted(xk, t).clamp(1, len(xk) - 1)
    w = (t - xk[i - 1]) / (xk[i] - xk[i - 1])
    return yk[i - 1] + w * (yk[i] - yk[i - 1])


@given(x=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=50))
def test_exact_sums_are_exact(x: list[float]) -> None:
    t = torch.tensor(x, dtype=F64)
    relu, ident, one = relu_sum_for("relu"), relu_sum_for("identity"), relu_sum_for("identity'")
    assert relu.exact and ident.exact and one.exact
    assert (relu.num_terms, ident.num_terms, one.num_terms) == (1, 2, 1)
    assert torch.equal(relu(t), torch.relu(t))
    assert torch.equal(ident(t), t)
    assert torch.equal(one(t), torch.ones_like(t))
    assert torch.equal(relu(t.float()), torch.relu(t.float()))
    assert relu.sup_error == ident.sup_error == one.sup_error == 0.0
    assert relu.eps == 0.0


def test_relu_deriv_delta_step() -> None:
    delta = 2.0**-20  # a power of two: the step is then exact in float64 on dyadic points
    s = relu_sum_for("relu'", delta=delta, radius=4.0)
    assert s.exact and s.num_terms == 2 and s.target == "relu'"
    assert s.terms() == [[1 / delta, 0.0, 1.0], [1 / delta, -1.0, -1.0]]
    t = torch.cat([torch.arange(-4 * 2**10, 4 * 2**10 + 1, dtype=F64) / 2**10, torch.tensor([delta, 0.0])])
    outside = (t <= 0) | (t >= delta)
    assert torch.equal(s(t[outside]), (t[outside] > 0).to(F64))
    assert float(s(torch.tensor([0.0], dtype=F64))) == 0.0  # r'(0) = 0, as in PyTorch
    assert s.sup_error == 0.0
    # Default delta = 1e-9 (not a power of two): still exactly 1{t > 0} in float64 outside the
    # window, because t/delta - 1 is exact once t/delta >= 1/2 (the form (1, -delta, -1/delta)
    # form would lose |t| 2^-52 / delta ~ 2e-6 here).
    d = relu_sum_for("relu'", radius=10.0)
    tt = torch.linspace(-10, 10, 10_001, dtype=F64)
    tt = torch.cat([tt, torch.tensor([1.01e-9, 2e-9, 1e-8, -1e-300], dtype=F64)])
    tt = tt[(tt <= 0) | (tt > 1.001e-9)]  # fl(1/delta) < 1/delta: the window's right edge is blurred by 1 ulp
    assert torch.equal(d(tt), (tt > 0).to(F64))
    assert d.sup_error <= 2.0**-52


def test_prime_and_deriv_suffix() -> None:
    a, b = relu_sum_for("sigmoid'", eps=1e-3), relu_sum_for("sigmoid-deriv", eps=1e-3)
    assert a.target == b.target == "sigmoid'"
    assert a.terms() == b.terms()


def test_fit_custom_function_and_autograd() -> None:
    s = fit_relu_sum(torch.cos, radius=3.0, eps=1e-3, target="cos")
    assert s.target == "cos" and s.sup_error <= 1e-3
    assert independent_sup(s, torch.cos, 3.0) <= 1e-3
    t = torch.tensor([0.3, -1.1], dtype=F64, requires_grad=True)
    s(t).sum().backward()
    torch.testing.assert_close(t.grad, -torch.sin(t.detach()), atol=0.1, rtol=0)  # slope of a short chord
    x = torch.rand(3, 4, 5, dtype=torch.float32)
    y = s(x)
    assert y.shape == x.shape and y.dtype == torch.float32


def test_flat_tails_cost_no_terms() -> None:
    # sigmoid is within 1e-3 of 0 / 1 beyond |t| ~ 6.9: doubling the range adds no terms
    assert (
        relu_sum_for("sigmoid", eps=1e-3, radius=20.0).num_terms
        == relu_sum_for("sigmoid", eps=1e-3).num_terms
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"eps": 0.0},
        {"eps": -1e-3},
        {"eps": float("nan")},
        {"radius": 0.0},
        {"radius": float("inf")},
        {"delta": 0.0},
        {"eps": "abc"},
    ],
)
def test_bad_arguments(kwargs: dict) -> None:
    with pytest.raises(InputError):
        relu_sum_for("sigmoid", **kwargs)


def test_bad_names_and_functions() -> None:
    with pytest.raises(InputError, match="unknown function"):
        relu_sum_for("gelu")
    with pytest.raises(InputError, match="not finite"):
        fit_relu_sum(torch.log, radius=1.0, eps=1e-3)
    with pytest.raises(InputError, match="max_terms"):
        fit_relu_sum(torch.sin, radius=10.0, eps=1e-4, max_terms=5)
    with pytest.raises(InputError, match="too small"):
        fit_relu_sum(torch.sin, radius=1000.0, eps=1e-12)


def test_to_dict_is_json_ready() -> None:
    s = relu_sum_for("tanh", eps=1e-2)
    d = json.loads(json.dumps(s.to_dict()))
    assert d["num_terms"] == s.num_terms == len(d["terms"])
    assert d["coef_mass"] == pytest.approx(sum(abs(c) for _, _, c in d["terms"]))
    assert d["max_abs_a"] == max(abs(a) for a, _, _ in d["terms"])
    assert {"target", "range", "eps", "exact", "sup_error"} <= d.keys()


# -- two-argument sums ---------------------------------------------------------------------------


def _square_points(radius: float, n: int = 20_000, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    pts = (torch.rand(2, n, generator=g, dtype=F64) * 2 - 1) * radius
    return pts[0], pts[1]


@pytest.mark.parametrize("loss", ["squared", "huber"])
def test_loss_derivative_exact(loss: str) -> None:
    s = loss_derivative_sum(loss, radius=10.0)
    assert isinstance(s, ReluSum) and s.num_args == 2 and s.exact and s.eps == 0.0
    assert s.num_terms == {"squared": 2, "huber": 3}[loss]
    t, y = _square_points(10.0)
    torch.testing.assert_close(s(t, y), LOSSES[loss].deriv(t, y), atol=1e-13, rtol=0)
    assert s.sup_error <= 1e-13


def test_logistic_meets_eps() -> None:
    s = loss_derivative_sum("logistic", eps=1e-2, radius=1.0)
    assert not s.exact and s.sup_error <= 1e-2 and s.target == "logistic'"
    t, y = _square_points(1.0)
    assert float((s(t, y) - LOSSES["logistic"].deriv(t, y)).abs().max()) <= 1e-2
    # __call__ against a plain loop, and the reported sizes
    ref = sum(c * torch.relu(a0 * t + a1 * y + b) for a0, a1, b, c in s.terms())
    torch.testing.assert_close(s(t, y), ref, atol=1e-12, rtol=0)
    assert s.max_abs_a == pytest.approx(max(abs(a0) + abs(a1) for a0, a1, _, _ in s.terms()))
    assert json.loads(json.dumps(s.to_dict()))["num_terms"] == s.num_terms


@pytest.mark.parametrize("loss", ["squared", "huber"])
def test_two_argument_sum_under_autograd(loss: str) -> None:
    """With arguments that require grad, ``__call__`` takes its differentiable path: same values as the
    no-grad path and as the exact derivative, and the gradient of the loss derivative (by autograd through
    the exact formula) in both arguments."""
    s = loss_derivative_sum(loss, radius=10.0)
    t0, y0 = _square_points(10.0, n=500)
    t, y = t0.clone().requires_grad_(True), y0.clone().requires_grad_(True)
    out = s(t, y)
    torch.testing.assert_close(out.detach(), s(t0, y0), atol=1e-12, rtol=0)
    torch.testing.assert_close(out.detach(), LOSSES[loss].deriv(t0, y0), atol=1e-12, rtol=0)
    out.sum().backward()
    te, ye = t0.clone().requires_grad_(True), y0.clone().requires_grad_(True)
    LOSSES[loss].deriv(te, ye).sum().backward()
    assert te.grad is not None and ye.grad is not None and float(ye.grad.abs().max()) > 0
    torch.testing.assert_close(t.grad, te.grad, atol=1e-9, rtol=0)
    torch.testing.assert_close(y.grad, ye.grad, atol=1e-9, rtol=0)


def test_two_argument_errors() -> None:
    with pytest.raises(InputError, match="no two-argument ReLU sum"):
        loss_derivative_sum("logistic", eps=1e-3, radius=10.0)
    with pytest.raises(InputError, match="unknown loss"):
        loss_derivative_sum("hinge")
    with pytest.raises(InputError):
        fit_relu_sum2(lambda t, y: t * y, radius=-1.0, eps=1e-2)


def test_a_feature_between_the_probe_points_is_caught() -> None:
    """A tent of half-width h/2 centred on a midpoint of the fitter's first grid (spacing h) is 0 at every
    grid point: only the fitter's own check between grid points can see it. The returned sum must still meet
    eps, measured independently on a dense grid around the tent."""
    radius, eps = 1.0, 1e-2
    g = torch.linspace(-radius, radius, 20_001, dtype=F64)  # the fitter's first grid (_MIN_GRID points)
    k = 12_345
    m, w = float((g[k] + g[k + 1]) / 2), float((g[k + 1] - g[k]) / 2)

    def tent(t: torch.Tensor) -> torch.Tensor:
        return torch.clamp(1.0 - (t - m).abs() / w, min=0.0)

    assert float(tent(g).max()) < 1e-6  # invisible on the grid itself
    s = fit_relu_sum(tent, radius=radius, eps=eps, target="tent")
    dense = torch.cat([torch.linspace(m - 4 * w, m + 4 * w, 80_001, dtype=F64), g])
    err = float((s(dense) - tent(dense)).abs().max())
    assert err <= eps
    assert s.sup_error <= eps


def test_repr_is_one_line_summary_not_every_coefficient() -> None:
    """A notebook cell or REPL shows target, arguments, term count, range and error in one line."""
    s = relu_sum_for("sigmoid", eps=1e-3, radius=10.0)
    text = repr(s)
    assert "\n" not in text and len(text) < 120, text
    assert text.startswith("ReluSum('sigmoid', 1 arg, ") and f"{s.num_terms} terms on [-10, 10]" in text
    assert f"measured sup error {s.sup_error:.1e}" in text and "eps 1.0e-03" in text
    assert s.num_terms > 5 and f"{s.c[0].item():.4f}" not in text  # no coefficients listed
    exact = relu_sum_for("relu")
    assert repr(exact) == "ReluSum('relu', 1 arg, 1 term on [-10, 10], exact)"
    two = loss_derivative_sum("squared", radius=4.0)
    assert repr(two) == 'ReluSum("squared\'", 2 args, 2 terms on [-4, 4]^2, exact)'

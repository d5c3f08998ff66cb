"""The prediction bound (`icdl.construct.bounds.prediction`): G(ρ) bounds ||∇_w f_i(w, x_q)|| on the ball of
radius ρ (checked with autograd at random points of the ball, and within a modest factor of the largest
gradient there: not vacuous), G(ρ) ρ bounds |f(w, x_q) - f(w_GD, x_q)|, and `verify` reports the a-priori
bound (Corollary 1.1 at the budget times G) above the measured |f(w_TF, x_q) - f(w_GD, x_q)| and well below
the prediction's own size."""

from __future__ import annotations

import json

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.construct.bounds.prediction import activation_bounds, prediction_bound, prediction_lipschitz
from icdl.nets import NetSpec, forward, unflatten

SPECS = [
    NetSpec(2, 4, 3, 1),
    NetSpec(3, 5, 2, 2, activation="sigmoid"),
    NetSpec(3, 4, 3, 1, activation="tanh"),
    NetSpec(4, 3, 2, 2, activation="softplus"),
    NetSpec(3, 4, 3, 2, activation="sigmoid", output="linear"),
]


def _grad_norms(spec: NetSpec, w: torch.Tensor, xq: torch.Tensor) -> list[float]:
    out = []
    for i in range(spec.out_dim):
        v = w.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(forward(spec, v, xq[None])[0, i], v)
        out.append(float(g.norm()))
    return out


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.activation}-{s.output}-N{s.depth}")
def test_the_lipschitz_bound_holds_on_the_ball_and_is_not_vacuous(spec: NetSpec) -> None:
    g = torch.Generator().manual_seed(0)
    checked = 0
    for seed in range(6):
        _, _, xq, w, _ = sample_task(spec, 4, seed=seed)
        if max(_grad_norms(spec, w, xq)) == 0:  # every ReLU unit dead at the query: f is flat there
            continue
        checked += 1
        f0 = forward(spec, w, xq[None])[0]
        for rho in (0.0, 1e-3, 0.1, 0.5):
            G = prediction_lipschitz(spec, w, xq, rho)
            worst = 0.0
            for k in range(20):
                d = w.clone() if k == 0 else torch.randn(w.shape, generator=g, dtype=w.dtype)
                t = 1.0 if k == 0 else float(torch.rand((), generator=g, dtype=w.dtype))
                v = w + rho * t * d / d.norm()  # first the boundary point that scales every weight up
                assert max(_grad_norms(spec, v, xq)) <= G * (1 + 1e-12)
                err = float((forward(spec, v, xq[None])[0] - f0).abs().max())
                assert err <= prediction_bound(spec, w, xq, rho) * (1 + 1e-12) + 1e-15
                worst = max(worst, max(_grad_norms(spec, v, xq)))
            at_w = max(_grad_norms(spec, w, xq))
            assert at_w > 0  # non-degenerate: f moves with w at the query
            if rho <= 0.1:  # not vacuous at the radii Corollary 1.1 gives: a modest factor over the gradients
                assert 100 * max(worst, at_w) >= G
        Gs = [prediction_lipschitz(spec, w, xq, r) for r in (0.0, 1e-3, 0.1, 0.5)]
        assert Gs == sorted(Gs) and Gs[0] < Gs[-1]  # the ball's weights may be larger than w's
    assert checked >= 3


@pytest.mark.parametrize(
    "activation, eps", [("relu", 1e-3), ("sigmoid", 1e-3), ("tanh", 1e-4), ("softplus", 1e-4)]
)
def test_verify_reports_a_prediction_bound_that_holds(activation: str, eps: float) -> None:
    spec = NetSpec(3, 4, 3, 2, activation=activation)
    model = compile_gd_transformer(spec, lr=0.2, steps=3, n=8, eps=eps)
    for seed in range(3):
        x, y, xq, w0, _ = sample_task(spec, 8, seed=seed)
        rep = verify(model, x, y, xq, w0)
        assert rep.failures == [] and rep.weights_moved > 0
        assert 0 <= rep.max_abs_err_f <= rep.prediction_bound
        assert rep.prediction_bound < 0.2 * max(1.0, rep.extra["max_abs_prediction"])  # says something
        assert rep.steps[-1].prediction_bound == pytest.approx(rep.prediction_bound)
        assert all(
            a.prediction_bound <= b.prediction_bound for a, b in zip(rep.steps, rep.steps[1:], strict=False)
        )
        d = json.loads(json.dumps(rep.to_dict()))
        assert d["prediction_bound"] == rep.prediction_bound and d["max_abs_err_f"] == rep.max_abs_err_f
        assert "a-priori bound" in rep.table()


def test_a_zero_or_infinite_radius() -> None:
    spec = SPECS[1]
    _, _, xq, w, _ = sample_task(spec, 4, seed=0)
    assert prediction_bound(spec, w, xq, 0.0) == 0.0
    assert prediction_bound(spec, w, xq, float("inf")) == float("inf")


def _p(spec: NetSpec, w: torch.Tensor, xq: torch.Tensor, j: int) -> torch.Tensor:
    """``p(j)`` of the exact network at the query (eq. 3.3)."""
    p = xq
    for k, V in enumerate(unflatten(spec, w)[:j], start=1):
        p = spec.layer_act(k).fn(V @ p)
    return p


@pytest.mark.parametrize("spec", SPECS[:3], ids=lambda s: f"{s.activation}-N{s.depth}")
def test_activation_bounds_hold_against_an_adversary_on_the_ball(spec: NetSpec) -> None:
    """``||p(j)(v)|| <= activation_bounds[j]`` where projected gradient ascent on ``||p(j)(v)||`` over the
    ball ``||v - w|| <= ρ`` pushes hardest (random points would hardly leave ``||p^w(j)||``)."""
    _, _, xq, w, _ = sample_task(spec, 4, seed=1)
    rho = 0.5
    bounds = activation_bounds(spec, w, xq, rho)
    assert bounds[0] == pytest.approx(float(xq.norm()))
    for j in range(1, spec.depth + 1):
        v = w.detach().clone()
        for _ in range(60):  # projected gradient ascent of ||p(j)(v)|| over the ball
            v.requires_grad_(True)
            (g,) = torch.autograd.grad(_p(spec, v, xq, j).norm(), v)
            with torch.no_grad():
                v = v + 0.1 * rho * g / g.norm().clamp_min(1e-30)
                d = v - w
                v = w + d * min(1.0, rho / float(d.norm()))
        got = float(_p(spec, v.detach(), xq, j).norm())
        assert float(_p(spec, w, xq, j).norm()) < got <= bounds[j] * (1 + 1e-12)

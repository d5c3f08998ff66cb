"""The verifier's report, field by field, against independent computations (issue 35: mutmut's survivors in
``construct/verify``): the transformer's own trajectory read off a plain run, reference GD, the exact
gradient, the a-priori budget from scratch, Corollary 1.1 and the prediction bound; and the small helpers
(the L_f estimate's points, its description, the relu' step limit) on exact values."""

from __future__ import annotations

import math

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.construct.bounds.budget import largest, step_budget
from icdl.construct.bounds.prediction import prediction_bound
from icdl.construct.check.report import corollary_bound
from icdl.construct.check.verify import (
    estimate_lipschitz,
    lipschitz_method,
    lipschitz_points,
    relu_step_limit,
)
from icdl.construct.variants import get_variant
from icdl.nets import NetSpec, empirical_risk, forward, gradient, lemma1_terms, reference_gd

SPEC = NetSpec(2, 3, 2, 1, activation="tanh")
N, STEPS, LR = 6, 3, 0.3


@pytest.fixture(scope="module")
def case():  # type: ignore[no-untyped-def]
    model = compile_gd_transformer(SPEC, steps=STEPS, n=N, eps=1e-2, lr=LR)
    x, y, xq, w0, _ = sample_task(SPEC, N, seed=3)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=20)
    return model, (x, y, xq, w0), rep


def test_every_step_of_the_report_is_its_independent_value(case, own_trajectory) -> None:  # type: ignore[no-untyped-def]
    model, (x, y, xq, w0), rep = case
    H0 = model.build_prompt(x, y, xq, w0)
    w_tf, _ = own_trajectory(model, H0)
    w_gd = reference_gd(SPEC, "squared", w0, x, y, lr=LR, steps=STEPS, box=model.config.box)
    dec = get_variant(model.config.variant).budget(model)
    assert model.config.delta is not None
    budgets = [
        step_budget(SPEC, "squared", dec, w, x, y, lr=LR, tol=rep.tol, delta=model.config.delta)
        for w in w_tf[:STEPS]
    ]
    assert [e.step for e in rep.steps] == [1, 2, 3]
    lf = rep.lipschitz_f
    assert lf > 0
    errs = []
    for l, e in enumerate(rep.steps, start=1):
        d = w_tf[l] - w_gd[l]
        true = gradient(SPEC, "squared", w_tf[l - 1], x, y)
        applied = (w_tf[l - 1] - w_tf[l]) / LR  # no projection: the step's end weights give it exactly
        errs.append(float((applied - true).norm()))
        assert e.w == float(d.abs().max()) and e.trajectory_l2 == pytest.approx(float(d.norm()), rel=1e-12)
        assert e.grad_l2 == pytest.approx(errs[-1], rel=1e-9)
        assert e.grad_norm == pytest.approx(float(true.norm()), rel=1e-12)
        assert e.applied_norm == pytest.approx(float(applied.norm()), rel=1e-9)
        b = budgets[l - 1]
        assert e.budget_l2 == pytest.approx(b.total, rel=1e-12)
        assert (e.budget_approximation, e.budget_tolerance, e.budget_roundoff) == pytest.approx(
            (b.approximation, b.tolerance, b.roundoff), rel=1e-12
        )
        assert e.weight_norm == pytest.approx(float(w_gd[l].norm()), rel=1e-15)
        worst_budget = max(bb.total for bb in budgets[:l])
        assert e.bound_measured_l2 == pytest.approx(corollary_bound(max(errs), LR, lf, l), rel=1e-9)
        assert e.bound_budget_l2 == pytest.approx(corollary_bound(worst_budget, LR, lf, l), rel=1e-12)
        assert e.prediction_bound == pytest.approx(prediction_bound(SPEC, w_gd[l], xq, e.bound_budget_l2))
        for q in ("p", "r_prime", "u", "s"):  # against exact terms: finite, small, not 0 with fitted sums
            v = getattr(e, q)
            assert math.isnan(v) or 0 <= v < 1e-1, (q, v)
    assert rep.eps_grad == pytest.approx(max(errs), rel=1e-9)
    assert rep.grad_budget == pytest.approx(max(b.total for b in budgets), rel=1e-12)
    assert rep.extra["budget_parts"] == largest(budgets)
    assert rep.corollary_bound_measured == pytest.approx(corollary_bound(max(errs), LR, lf, STEPS), rel=1e-9)
    assert rep.corollary_bound_budget == rep.steps[-1].bound_budget_l2


def test_the_report_totals_are_their_independent_values(case, own_trajectory) -> None:  # type: ignore[no-untyped-def]
    model, (x, y, xq, w0), rep = case
    H0 = model.build_prompt(x, y, xq, w0)
    w_tf, out = own_trajectory(model, H0)
    w_gd = reference_gd(SPEC, "squared", w0, x, y, lr=LR, steps=STEPS, box=model.config.box)
    tf, gd = torch.stack(w_tf), w_gd
    pred = model.read_prediction(out)[0]
    f_gd, f_own = forward(SPEC, gd[-1], xq[None])[0], forward(SPEC, tf[-1], xq[None])[0]
    assert rep.max_abs_err_weights == float((tf - gd).abs().max()) > 0
    assert rep.trajectory_error == pytest.approx(float((tf[-1] - gd[-1]).norm()), rel=1e-12)
    assert rep.max_abs_err_prediction == float((pred - f_gd).abs().max())
    assert rep.max_abs_err_prediction_own_w == float((pred - f_own).abs().max())
    assert rep.max_abs_err_f == float((f_own - f_gd).abs().max()) > 0
    assert rep.prediction_bound == pytest.approx(
        prediction_bound(SPEC, gd[-1], xq, rep.corollary_bound_budget)
    )
    assert rep.weights_moved == float((gd[-1] - gd[0]).abs().max()) > 0 and not rep.degenerate
    assert rep.extra["max_abs_weight"] == float(gd.abs().max())
    assert rep.extra["max_abs_prediction"] == float(f_gd.abs().max())
    assert rep.extra["product_error_ratios"] == {}
    assert rep.tol == 1e-9 and rep.dtype == "float64" and rep.range_auto is False
    assert rep.trajectory_checked and rep.lipschitz_method == lipschitz_method(20, 2 * (STEPS + 1))
    assert rep.window_hits_allowed == get_variant("paper").budget(model).window_hits
    # tanh: no relu' step, fitted sums whose ranges are counted
    assert rep.delta_window_count is None and rep.delta is None
    assert rep.step_range_count is None and rep.step_limit is None
    assert rep.out_of_range_count == 0
    assert rep.sum_error_ratio is not None and 0 < rep.sum_error_ratio <= 1 and rep.worst_sum is not None
    name, layer, err, declared = rep.worst_sum
    assert name in ("r", "r'") and layer in (1, 2) and err == pytest.approx(rep.sum_error_ratio * declared)
    assert rep.product_error_ratio is None and rep.worst_product is None
    assert 0 < rep.gate_margin < math.inf
    assert rep.weights_spread == 0.0 and rep.scratch_max == 0.0
    assert rep.seconds_forward > 0 and rep.seconds_reference > 0
    assert rep.seconds_verify >= rep.seconds_forward + rep.seconds_reference
    assert rep.verdict == "PASS", rep.describe()


def test_a_relu_report_counts_the_relu_step_and_its_range() -> None:
    spec = NetSpec(2, 3, 2, 1)
    model = compile_gd_transformer(spec, steps=2, n=N, lr=LR)
    x, y, xq, w0, _ = sample_task(spec, N, seed=3)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert model.config.delta is not None
    assert rep.delta == model.config.delta and rep.delta_window_count == 0
    assert rep.step_range_count == 0 and rep.step_limit == relu_step_limit(model.config.delta, torch.float64)
    assert rep.out_of_range_count is None and rep.sum_error_ratio is None and rep.worst_sum is None
    assert not rep.trajectory_checked and rep.lipschitz_f == 0.0 and rep.lipschitz_method == "not estimated"
    assert rep.corollary_bound_budget == pytest.approx(2 * LR * rep.grad_budget, rel=1e-15)


def test_lipschitz_points_spread_evenly_with_both_ends() -> None:
    assert lipschitz_points(5) == [0, 1, 2, 3, 4]
    assert lipschitz_points(8) == list(range(8))
    assert lipschitz_points(20) == [0, 3, 5, 8, 11, 14, 16, 19]
    assert lipschitz_points(20, 3) == [0, 10, 19]
    assert lipschitz_points(9, None) == list(range(9))
    assert lipschitz_points(9, 2) == [0, 8]


def test_lipschitz_method_says_how_many_points_and_steps() -> None:
    assert lipschitz_method(20, 6) == (
        "max |Hessian eigenvalue| by power iteration at 6 trajectory points: up to 20 steps at the first, "
        "up to 5 warm-started at each other, until ||Hv|| grows by < 0.0001 (local)"
    )
    assert lipschitz_method(20, 20) == (
        "max |Hessian eigenvalue| by power iteration at 8 of 20 trajectory points (evenly spread): up to 20 "
        "steps at the first, up to 5 warm-started at each other, until ||Hv|| grows by < 0.0001 (local)"
    )
    assert lipschitz_method(3, 20, 4).endswith(
        "at 4 of 20 trajectory points (evenly spread): up to 3 steps at the first, up to 1 warm-started at "
        "each other, until ||Hv|| grows by < 0.0001 (local)"
    )
    assert lipschitz_method(3, 4, None).startswith(
        "max |Hessian eigenvalue| by power iteration at 4 trajectory"
    )


def test_relu_step_limit_is_delta_times_two_over_eps_mach() -> None:
    assert relu_step_limit(1e-5, torch.float32) == pytest.approx(1e-5 * 2 * 2.0**23, rel=1e-15)
    assert 167 < relu_step_limit(1e-5, torch.float32) < 168  # the docstring's |z| >= 168
    assert relu_step_limit(1e-9, torch.float64) == pytest.approx(1e-9 * 2 * 2.0**52, rel=1e-15)


def test_the_lipschitz_estimate_is_the_largest_eigenvalue_over_its_points(case) -> None:  # type: ignore[no-untyped-def]
    """At every point (few points: each from its own start) and at evenly spread ones (many points: warm
    starts), against the exact Hessians' eigenvalues; a lower bound at the points visited, 0 without steps."""
    spec, model = SPEC, case[0]  # the estimate reads the model's net and loss only
    x, y, _, w0, _ = sample_task(spec, N, seed=4)
    g = torch.Generator().manual_seed(1)
    points = [w0 + 0.7 * k * torch.randn(w0.shape, generator=g, dtype=w0.dtype) for k in range(6)]

    def top(w: torch.Tensor) -> float:
        H = torch.autograd.functional.hessian(lambda v: empirical_risk(spec, "squared", v, x, y), w)
        return float(torch.linalg.eigvalsh(H).abs().max())

    exact = [top(w) for w in points]
    assert len({round(e, 6) for e in exact}) == len(exact)  # the points differ: the max is one of them
    few = estimate_lipschitz(model, points[:3], x, y, iters=80, max_points=3, rtol=0.0)
    assert few == pytest.approx(max(exact[:3]), rel=1e-6)
    many = estimate_lipschitz(model, points, x, y, iters=80, max_points=3)
    visited = [exact[i] for i in lipschitz_points(6, 3)]
    assert many <= max(visited) * (1 + 1e-9) and many == pytest.approx(max(visited), rel=1e-3)
    every = estimate_lipschitz(model, points, x, y, iters=80, max_points=None, rtol=0.0)
    assert every == pytest.approx(max(exact), rel=1e-6)
    # stopping once ||Hv|| grows by < rtol: a lower bound, close to the full iteration's
    stopped = estimate_lipschitz(model, points, x, y, iters=80, max_points=None)
    assert stopped <= every * (1 + 1e-12) and stopped == pytest.approx(every, rel=1e-4)
    assert estimate_lipschitz(model, points[:1], x, y, iters=0, max_points=None) == 0.0
    # warm-started points get max(1, iters // 4) steps: one each, a lower bound
    assert 0 < estimate_lipschitz(model, points, x, y, iters=0, max_points=None) <= max(exact) * (1 + 1e-9)
    assert 0 < estimate_lipschitz(model, points, x, y, iters=0, max_points=3) <= max(visited) * (1 + 1e-9)
    bad = w0.clone()
    bad[0] = math.nan
    assert estimate_lipschitz(model, [bad], x, y, iters=5) == 0.0  # a NaN Hessian gives no estimate
    assert estimate_lipschitz(model, [bad, points[1]], x, y, iters=80, rtol=0.0) == pytest.approx(
        exact[1], rel=1e-6
    )


def test_the_lipschitz_estimate_visits_a_repeated_point_once(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """w0 starts both trajectories: its Hessian-vector products are not computed twice, and the estimate
    is the same."""
    model = compile_gd_transformer(SPEC, steps=1, n=N, eps=1e-2, lr=LR)
    x, y, _, w0, _ = sample_task(SPEC, N, seed=4)
    w1 = w0 + 0.01
    calls = []
    real = torch.autograd.grad

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", counted)
    once = estimate_lipschitz(model, [w0, w1], x, y, iters=8, rtol=0.0)
    n_once = len(calls)
    calls.clear()
    twice = estimate_lipschitz(model, [w0, w1, w0.clone(), w1], x, y, iters=8, rtol=0.0)
    assert twice == once and len(calls) == n_once == (1 + 8) + (1 + 2)


def test_the_budget_covers_the_gd_steps_not_the_readout(own_trajectory) -> None:  # type: ignore[no-untyped-def]
    """The a-priori budget is taken at the L step-start weights only: the readout's reference (the final
    weights) computes no gradient. On this prompt (tanh, small w0) the budget grows along the trajectory, so
    one taken at the final weights would be the largest and would show (held-out plant, issue 35)."""
    model = compile_gd_transformer(SPEC, steps=STEPS, n=N, eps=1e-2, lr=LR)
    x, y, xq, w0, _ = sample_task(SPEC, N, seed=3, w0_scale=0.1)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=5)
    w_tf, _ = own_trajectory(model, model.build_prompt(x, y, xq, w0))
    dec = get_variant(model.config.variant).budget(model)
    assert model.config.delta is not None
    totals = [
        step_budget(SPEC, "squared", dec, w, x, y, lr=LR, tol=rep.tol, delta=model.config.delta).total
        for w in w_tf
    ]
    assert totals[-1] > max(totals[:STEPS])  # the final weights' budget would be the largest: not degenerate
    assert rep.grad_budget == pytest.approx(max(totals[:STEPS]), rel=1e-12)
    assert len(rep.steps) == STEPS


def test_the_declared_sum_check_is_its_independent_value(case, own_trajectory) -> None:  # type: ignore[no-untyped-def]
    """``worst_sum``'s error: over every reference the check evaluates (each step's start weights and the
    final ones), every layer and both fitted sums (r, r'), the largest ``|sum(z) - true(z)| - tol max(|true|,
    1)`` on the surrogate's pre-activations inside the sum's range, computed here from Lemma 1's recursion
    with the model's own sums."""
    model, (x, y, xq, w0), rep = case
    w_tf, _ = own_trajectory(model, model.build_prompt(x, y, xq, w0))
    x_all = torch.cat([x, xq[None]])
    y_all = torch.cat([y, torch.zeros(1, 1, dtype=y.dtype)])
    worst = -math.inf
    for w in w_tf:
        g = lemma1_terms(SPEC, "squared", w, x_all, y_all, r=list(model.terms.r))
        for j, z in enumerate(g.pre):
            act = SPEC.layer_act(j + 1)
            for terms, true in ((model.terms.r[j], act.fn), (model.terms.r_prime[j], act.deriv)):
                inside = z[z.abs() <= terms.radius]
                exact = true(inside)
                worst = max(
                    worst, float(((terms(inside) - exact).abs() - rep.tol * exact.abs().clamp_min(1.0)).max())
                )
    assert rep.worst_sum is not None and rep.worst_sum[2] == pytest.approx(worst, rel=1e-9)


def test_every_measured_product_kind_is_reported_even_below_tolerance() -> None:
    """``product_error_ratios`` has every kind of approximate product the variant measured, also when its
    measured error is below the tolerance (a negative margin), not only the kinds that exceed it."""
    spec = NetSpec(2, 2, 1, 1)
    model = compile_gd_transformer(spec, steps=1, n=3, variant="softmax", eps=1e-2, radius=4.0)
    x, y, xq, w0, _ = sample_task(spec, 3, seed=0)
    kinds = {"forward v*p", "transpose v*s", "gradient p*s"}
    tight = verify(model, x, y, xq, w0, lipschitz_iters=3).extra["product_error_ratios"]
    loose = verify(model, x, y, xq, w0, tol=1.0, lipschitz_iters=3).extra["product_error_ratios"]
    assert set(tight) == set(loose) == kinds
    assert all(v > 0 for v in tight.values()) and all(v < 0 for v in loose.values())

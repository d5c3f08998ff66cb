"""Survivors of the second ``check/verify.py`` mutmut shard (issue 35: ``trace``, ``compare``, ``_count``,
``_gd_check``, ``_step_errors`` and ``report``, the functions the first shard did not reach): each test
states the property the mutant broke."""

from __future__ import annotations

import time

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.construct.bounds.budget import step_budget
from icdl.construct.check import verify as vmod
from icdl.construct.check.stream import Prompt
from icdl.construct.task import gd_is_degenerate
from icdl.nets import NetSpec, gradient, reference_gd

SPEC = NetSpec(2, 3, 2, 1, activation="tanh", output="linear")


def _checked(steps: int, *, counters: bool = True, seed: int = 3, lr: float = 0.3):  # type: ignore[no-untyped-def]
    """A tanh model's run on one prompt as ``report`` receives it: with the counters ``verify`` fills as the
    check runs, or (``counters=False``) with none (``compare`` without ``on_step``)."""
    model = compile_gd_transformer(SPEC, steps=steps, n=6, eps=1e-2, lr=lr)
    x, y, xq, w0, _ = sample_task(SPEC, 6, seed=seed)
    prompt = Prompt.of(model, x, y, xq, w0)
    H0 = model.build_prompt(prompt.x, prompt.y, prompt.x_query, prompt.w0)
    c = vmod._Counters()
    tol = 1e-9

    def on_step(ref):  # type: ignore[no-untyped-def]
        vmod._count(model, ref, c, prompt.n, prompt.y_all, stepping=len(c.budgets) < model.steps)
        vmod._budget(model, ref, c, prompt, tol)
        vmod._declared_check(model, ref, c, tol)

    tr, cmp = vmod.compare(model, H0, prompt, tol=tol, on_step=on_step if counters else None)
    return vmod.Checked(model, prompt, tr, cmp, c, tol, time.perf_counter()), (x, y, xq, w0)


@pytest.mark.parametrize("iters", [1, 3])
def test_one_gd_step_and_few_power_steps_still_estimate_lf_with_those_steps(iters: int) -> None:
    """L_f is estimated whenever there is a step and a power-iteration step (``lipschitz_iters >= 1``,
    ``steps >= 1``), with exactly ``lipschitz_iters`` steps: the estimate equals ``estimate_lipschitz`` at
    the two trajectories' points with that many, which differs from the default 20's."""
    c, _ = _checked(1)
    rep = vmod.report(c, lipschitz_iters=iters)
    assert rep.trajectory_checked and rep.lipschitz_method != "not estimated"
    p, model = c.prompt, c.model
    traj = reference_gd(model.spec, model.config.loss, p.w0, p.x, p.y, lr=model.config.lr, steps=1)
    points = [*c.comparison.w_tf, *traj]
    want = vmod.estimate_lipschitz(model, points, p.x, p.y, iters=iters)
    assert want > 0 and rep.lipschitz_f == want
    assert want != vmod.estimate_lipschitz(model, points, p.x, p.y, iters=20)  # the premise


def test_no_gd_step_no_lf_estimate() -> None:
    """A model with no GD step (the readout only) has no trajectory to estimate L_f on."""
    c, _ = _checked(0)
    rep = vmod.report(c, lipschitz_iters=20)
    assert not rep.trajectory_checked and rep.lipschitz_method == "not estimated" and rep.lipschitz_f == 0.0


def test_report_default_is_twenty_power_steps() -> None:
    """``report``'s default L_f cost is ``verify``'s: 20 power-iteration steps at the first point."""
    c, _ = _checked(1)
    assert "up to 20 steps at the first" in vmod.report(c).lipschitz_method


def test_a_report_without_the_checks_counters_recomputes_the_same_budgets() -> None:
    """``report`` on a comparison made without ``verify``'s counters (no declared errors, no budgets yet)
    computes the variant's declared errors and every step's budget itself: the same as with them."""
    with_c, _ = _checked(2)
    without, _ = _checked(2, counters=False)
    assert without.counters.declared is None and not without.counters.budgets  # the premise
    a, b = vmod.report(with_c, lipschitz_iters=0), vmod.report(without, lipschitz_iters=0)
    assert [e.budget_l2 for e in a.steps] == pytest.approx([e.budget_l2 for e in b.steps], rel=1e-12)
    assert a.grad_budget == pytest.approx(b.grad_budget, rel=1e-12) and a.grad_budget > 0
    assert a.window_hits_allowed == b.window_hits_allowed


def test_verify_computes_each_steps_budget_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The budgets the check computed at the transformer's step-start weights are the report's: ``verify``
    calls ``step_budget`` once per GD step, not again in the report."""
    calls = []
    real = vmod.step_budget

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(vmod, "step_budget", counted)
    model = compile_gd_transformer(SPEC, steps=3, n=6, eps=1e-2, lr=0.3)
    x, y, xq, w0, _ = sample_task(SPEC, 6, seed=3)
    verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert len(calls) == 3


def test_each_step_reports_its_own_exact_term_errors_and_budget_parts() -> None:
    """Step l's p, r', u, s errors are the check's step-l errors and its budget parts are the budget at
    the step's own start weights (the steps' values differ, so a neighbour's would show)."""
    c, _ = _checked(3)
    rep = vmod.report(c, lipschitz_iters=0)
    model, cmp = c.model, c.comparison
    cfg = model.config
    declared = c.counters.declared
    assert declared is not None
    for l, e in enumerate(rep.steps, start=1):
        assert [e.p, e.r_prime, e.u, e.s] == [cmp.per_step[l - 1][k] for k in ("p", "r_prime", "u", "s")]
        b = step_budget(
            model.spec,
            cfg.loss,
            declared,
            cmp.w_tf[l - 1],
            c.prompt.x,
            c.prompt.y,
            lr=cfg.lr,
            tol=c.tol,
            delta=cfg.delta,
        )
        assert e.budget_roundoff == pytest.approx(b.roundoff, rel=1e-9, abs=0.0)
        assert e.budget_approximation == pytest.approx(b.approximation, rel=1e-9, abs=0.0)
    ps = [e.p for e in rep.steps]
    rounds = [e.budget_roundoff for e in rep.steps]
    assert len(set(ps)) == len(ps) and len(set(rounds)) == len(rounds)  # the premise: the steps differ


def _boxed_dead_task():  # type: ignore[no-untyped-def]
    """A ReLU net with every hidden unit dead on every example at w0 (zero gradient) whose first-layer
    weights lie outside the box: the projection clips them and brings units to life, so GD moves from the
    second step on."""
    spec = NetSpec(2, 2, 2, 1, output="linear")
    x = torch.tensor([[0.1, 1.0], [0.2, 0.9], [0.15, 0.8], [0.3, 1.0]], dtype=torch.float64)
    y = torch.tensor([[0.5], [-0.3], [0.2], [0.4]], dtype=torch.float64)
    xq = torch.tensor([0.12, 0.95], dtype=torch.float64)
    w0 = torch.tensor([-10.0, 0.5, -8.0, 0.6, 1.5, -1.2], dtype=torch.float64)
    return spec, x, y, xq, w0


def test_degeneracy_follows_the_projected_trajectory_over_every_step() -> None:
    """DEGENERATE is decided on the same projected GD as the comparison, over all its steps: a task whose
    first gradient is 0 but whose projection revives units is not degenerate with the box and 2 steps
    (it would be with no box, or judged on one step)."""
    spec, x, y, xq, w0 = _boxed_dead_task()
    assert float(gradient(spec, "squared", w0, x, y).abs().max()) == 0.0  # the premise
    assert gd_is_degenerate(spec, "squared", x, y, w0, lr=0.5, steps=2)
    assert gd_is_degenerate(spec, "squared", x, y, w0, lr=0.5, steps=1, box=1.0)
    model = compile_gd_transformer(spec, steps=2, n=4, lr=0.5, projection="box", box=1.0)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert not rep.degenerate and rep.verdict == "PASS", rep.failures


def test_degeneracy_uses_the_models_learning_rate() -> None:
    """A learning rate so small that ``w - lr ∇L_n(w)`` rounds back to w is degenerate GD (DEGENERATE),
    although the same task moves at lr = 1."""
    spec = NetSpec(2, 3, 2, 1)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=1)
    assert not gd_is_degenerate(spec, "squared", x, y, w0, lr=1.0, steps=1)  # the premise
    model = compile_gd_transformer(spec, steps=1, n=6, lr=1e-20)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.degenerate and rep.verdict == "DEGENERATE"


def test_the_report_keeps_the_forward_passs_time() -> None:
    """``seconds_forward`` is the trace's forward time (a positive float)."""
    c, _ = _checked(1)
    rep = vmod.report(c, lipschitz_iters=0)
    assert rep.seconds_forward == c.trace.seconds_forward > 0


def test_the_report_records_whether_the_range_was_set_automatically() -> None:
    """``range_auto``: True for ``radius="auto"``, False for a fixed R (the (b) hint depends on it)."""
    x, y, xq, w0, _ = sample_task(SPEC, 6, seed=3)
    for radius, auto in ((3.0, False), ("auto", True)):
        model = compile_gd_transformer(
            SPEC, steps=1, n=6, eps=1e-2, lr=0.3, radius=radius, prompt=(x, y, xq, w0)
        )
        assert verify(model, x, y, xq, w0, lipschitz_iters=0).range_auto is auto


def test_the_prediction_errors_and_bound_are_those_of_the_two_final_weights() -> None:
    """``max_abs_err_f`` is the exact network's output gap between the transformer's final weights and GD's,
    and ``prediction_bound`` is ``prediction_bound`` at GD's final weights with the budget's Corollary 1.1
    radius (both computed here independently)."""
    from icdl.construct.bounds.prediction import prediction_bound
    from icdl.nets import forward

    c, _ = _checked(2)
    rep = vmod.report(c, lipschitz_iters=0)
    cfg = c.model.config
    gd = reference_gd(SPEC, cfg.loss, c.prompt.w0, c.prompt.x, c.prompt.y, lr=cfg.lr, steps=2)
    xq64 = c.prompt.x_query[None]
    gap = float((forward(SPEC, c.comparison.w_tf[-1], xq64) - forward(SPEC, gd[-1], xq64)).abs().max())
    assert gap > 0 and rep.max_abs_err_f == pytest.approx(gap, rel=1e-9, abs=0.0)
    want = prediction_bound(SPEC, gd[-1], c.prompt.x_query, rep.corollary_bound_budget)
    assert 0 < want < float("inf") and rep.prediction_bound == pytest.approx(want, rel=1e-12)


def test_the_variants_window_allowance_is_the_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    """``window_hits_allowed`` is what the variant's declared errors allow (here a variant allowing 2)."""
    import dataclasses

    real = vmod.get_variant

    def allowing(name):  # type: ignore[no-untyped-def]
        v = real(name)
        return dataclasses.replace(
            v, budget=lambda model: dataclasses.replace(v.budget(model), window_hits=2)
        )

    monkeypatch.setattr(vmod, "get_variant", allowing)
    model = compile_gd_transformer(NetSpec(2, 3, 2, 1), steps=1, n=6, lr=0.3)
    x, y, xq, w0, _ = sample_task(model.spec, 6, seed=3)
    assert verify(model, x, y, xq, w0, lipschitz_iters=0).window_hits_allowed == 2


def test_a_model_without_a_relu_step_reports_no_window_or_delta() -> None:
    """Only a relu' step has a window (0, delta) and a float limit: a tanh model reports neither (None),
    a ReLU one both."""
    c, _ = _checked(1)
    rep = vmod.report(c, lipschitz_iters=0)
    assert rep.delta is None and rep.delta_window_count is None and rep.step_limit is None
    model = compile_gd_transformer(NetSpec(2, 3, 2, 1), steps=1, n=6, lr=0.3)
    x, y, xq, w0, _ = sample_task(model.spec, 6, seed=3)
    relu = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert relu.delta == model.config.delta and relu.delta_window_count is not None

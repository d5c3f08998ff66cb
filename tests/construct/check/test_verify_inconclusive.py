"""INCONCLUSIVE: a step whose a-priori budget is not below half its gradient norm cannot certify that GD was
applied (a no-op update could pass), nor can a Corollary 1.1 bound above half the weights' scale say anything
about the trajectory. Planted no-op and uphill update sublayers are never PASS; FAIL comes before DEGENERATE,
DEGENERATE before INCONCLUSIVE."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from icdl.construct import compile_gd_transformer, verify
from icdl.construct.check.report import CHECKABLE_FRACTION, VerifyReport
from icdl.construct.compile import sample_task_info
from icdl.nets import NetSpec

# The issue's command `icdl construct --activation sigmoid --dtype float32 --lr 0.001` (its defaults: N=3
# K=8 d_x=4 d_y=1, n=32, L=5, seed 0): a step budget of 1.05 against a gradient norm of 0.05.
SPEC = NetSpec(3, 8, 4, 1, activation="sigmoid")


def _model(dtype: str = "float32", lr: float = 0.001, steps: int = 5, **kw):
    model = compile_gd_transformer(SPEC, lr=lr, steps=steps, n=32, eps=1e-3, dtype=dtype, **kw)
    t = sample_task_info(SPEC, 32, seed=0, dtype=model.config.torch_dtype, lr=lr, steps=steps)
    return model, (t.x, t.y, t.x_query, t.w0)


def _plant(model, how: str) -> None:
    """Make the update sublayer of every step apply no gradient (``"noop"``: every coefficient 0, so it adds
    nothing) or step uphill (``"uphill"``: its value coefficients negated, so it adds +eta g)."""
    (update,) = [s for s in model.block if s.info.role == "update"]
    with torch.no_grad():
        if how == "noop":
            for t in update.coefficient_tables():
                t.zero_()
        else:
            update.v_coef.neg_()


def test_the_issue_command_is_inconclusive_and_names_its_steps_and_remedy() -> None:
    model, prompt = _model()
    rep = verify(model, *prompt, lipschitz_iters=0)
    assert rep.failures == [] and not rep.degenerate
    assert rep.verdict == "INCONCLUSIVE" and not rep.passed
    assert rep.uncheckable_steps == [1, 2, 3, 4, 5]
    for e in rep.steps:  # the budget is not below half the gradient: that is what makes it uncheckable
        assert e.grad_norm > 0 and e.budget_l2 >= CHECKABLE_FRACTION * e.grad_norm
        assert e.budget_tolerance > e.budget_approximation  # float32's tol / lr dominates
    (line,) = rep.inconclusive
    assert line.startswith("(i) budget: steps 1-5 (5 of 5)") and "float64" in line and "--lr" in line
    assert rep.describe().startswith("INCONCLUSIVE: (i) budget")
    assert "uncheckable" in rep.table() and "inconclusive (i) budget" in rep.table()
    d = json.loads(json.dumps(rep.to_dict()))
    assert d["verdict"] == "INCONCLUSIVE" and d["uncheckable_steps"] == [1, 2, 3, 4, 5]
    assert d["inconclusive"] == rep.inconclusive and d["steps"][0]["grad_norm"] == rep.steps[0].grad_norm


def test_float64_or_a_larger_lr_makes_it_checkable() -> None:
    for dtype, lr in (("float64", 0.001), ("float32", 0.1)):
        model, prompt = _model(dtype=dtype, lr=lr)
        rep = verify(model, *prompt, lipschitz_iters=0)
        assert rep.verdict == "PASS", (dtype, lr, rep.inconclusive)
        assert rep.uncheckable_steps == [] and rep.inconclusive == []
        assert all(e.budget_l2 < CHECKABLE_FRACTION * min(e.grad_norm, e.applied_norm) for e in rep.steps)


@pytest.mark.parametrize("how", ["noop", "uphill"])
def test_a_planted_update_that_applies_no_gradient_is_never_pass(how: str) -> None:
    # float32 at lr 0.001: the planted update stays within the sublayer tolerance, so only the budget could
    # catch it, and it is too large: INCONCLUSIVE, not PASS
    model, prompt = _model()
    _plant(model, how)
    rep = verify(model, *prompt, lipschitz_iters=0)
    assert rep.verdict in ("INCONCLUSIVE", "FAIL") and not rep.passed
    # float64 at lr 0.001: the budget certifies every step, so the same planted bug FAILs
    model, prompt = _model(dtype="float64")
    _plant(model, how)
    rep = verify(model, *prompt, lipschitz_iters=0)
    assert rep.verdict == "FAIL" and any(f.startswith(("(a)", "(c)")) for f in rep.failures)


def test_a_certified_step_rules_out_a_no_op_and_an_uphill_step() -> None:
    """The arithmetic behind the fraction: with budget < g/2, ḡ = 0 errs by g and ḡ = -g by 2g, both above
    the budget; at budget >= g/2 ... >= g a no-op fits."""
    model, prompt = _model(dtype="float64", lr=0.1)
    rep = verify(model, *prompt, lipschitz_iters=0)
    for e in rep.steps:
        assert e.certifies()
        assert e.grad_norm > e.budget_l2 and 2 * e.grad_norm > e.budget_l2  # a no-op / uphill step FAILs (c)


def _report(**changes) -> VerifyReport:
    model, prompt = _model(dtype="float64", lr=0.1, steps=2)
    rep = verify(model, *prompt)
    assert rep.verdict == "PASS" and rep.trajectory_checked
    return dataclasses.replace(rep, **changes)


def test_precedence_fail_then_degenerate_then_inconclusive() -> None:
    rep = _report()
    loose = [dataclasses.replace(e, budget_l2=e.grad_norm) for e in rep.steps]  # uncheckable, not failed
    assert dataclasses.replace(rep, steps=loose).verdict == "INCONCLUSIVE"
    assert dataclasses.replace(rep, steps=loose, degenerate=True).verdict == "DEGENERATE"
    assert dataclasses.replace(rep, steps=loose, degenerate=True, out_of_range_count=1).verdict == "FAIL"
    # a step whose gradient is exactly 0 has no update to certify (GD does not move there)
    zero = [dataclasses.replace(e, grad_norm=0.0, applied_norm=0.0, budget_l2=1.0) for e in rep.steps]
    assert dataclasses.replace(rep, steps=zero).verdict == "PASS"
    # but a tiny non-zero one under a larger budget cannot be told from none
    tiny = [dataclasses.replace(e, grad_norm=e.budget_l2) for e in rep.steps]
    assert dataclasses.replace(rep, steps=tiny).verdict == "INCONCLUSIVE"


def test_a_corollary_bound_above_the_weights_scale_is_inconclusive() -> None:
    rep = _report()
    vac = [dataclasses.replace(e, bound_budget_l2=e.weight_norm) for e in rep.steps]
    bad = dataclasses.replace(rep, steps=vac)
    assert bad.verdict == "INCONCLUSIVE" and bad.vacuous_bound_steps == [1, 2]
    assert any(line.startswith("(ii) trajectory: steps 1, 2 (2 of 2)") for line in bad.inconclusive)
    assert all(e.weight_norm > 0 and e.bound_informative() for e in rep.steps)
    # without an L_f estimate the trajectory part is not checked, so it cannot be vacuous either
    assert dataclasses.replace(bad, trajectory_checked=False).verdict == "PASS"


@pytest.mark.parametrize("margin", [0.0, -1e-12, float("nan"), float("-inf")])
def test_a_gate_margin_that_is_not_positive_fails_condition_b(margin: float) -> None:
    """The gate needs |u|, |p(N)| strictly below C: a margin of 0, below 0 or NaN (nothing measured) is a
    (b) failure; the smallest positive margin is not."""
    rep = _report()
    assert rep.verdict == "PASS" and rep.gate_margin > 0  # the premise: a clean report
    bad = dataclasses.replace(rep, gate_margin=margin)
    assert bad.verdict == "FAIL" and any(f.startswith("(b) gate") for f in bad.failures)
    assert dataclasses.replace(rep, gate_margin=5e-324).verdict == "PASS"


@pytest.mark.parametrize("failing", [None, "range", "gate", "budget"])
@pytest.mark.parametrize("degenerate", [False, True])
@pytest.mark.parametrize("uncheckable", [False, True])
def test_the_verdict_table_over_every_combination_of_its_conditions(
    failing: str | None, degenerate: bool, uncheckable: bool
) -> None:
    """Every combination of (a failed condition of each kind, a degenerate task, an uncheckable step) gives
    the verdict of the documented precedence: FAIL, then DEGENERATE, then INCONCLUSIVE, else PASS."""
    rep = _report()
    steps = rep.steps
    if uncheckable:
        steps = [dataclasses.replace(e, budget_l2=e.grad_norm) for e in steps]
    change: dict = {"steps": steps, "degenerate": degenerate}
    if failing == "range":
        change["out_of_range_count"] = 1
    elif failing == "gate":
        change["gate_margin"] = 0.0
    elif failing == "budget":  # the measured gradient error of one step above its budget
        change["steps"] = [dataclasses.replace(steps[0], grad_l2=2 * steps[0].budget_l2 + 1.0), *steps[1:]]
    got = dataclasses.replace(rep, **change)
    want = "FAIL" if failing else "DEGENERATE" if degenerate else "INCONCLUSIVE" if uncheckable else "PASS"
    assert got.verdict == want, (got.failures, got.inconclusive)
    assert got.passed == (want == "PASS")

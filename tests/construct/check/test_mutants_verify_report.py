"""The verifier's report on its own (issue 35: mutmut's survivors in ``verify_report``): the exact text of the
table, the summary, the failures, the remedies and the step lists a user reads, and the small functions the
verdict is made of, on reports built field by field (no model is run, so each test takes milliseconds).

The expected texts are written out in full: a change of wording is a change of what the user reads and must
be made here too."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from icdl.construct.check.report import (
    CHECKABLE_FRACTION,
    Divergence,
    StepErrors,
    VerifyReport,
    corollary_bound,
    max_or_nan,
    verdict_label,
)


def _step(step: int, **changes: float) -> StepErrors:
    fields: dict[str, float] = dict(
        p=1.5e-3,
        r_prime=math.nan,
        u=2.5e-3,
        s=3.5e-3,
        w=4.5e-3,
        grad_l2=1.25e-6,
        budget_l2=1.5e-5,
        trajectory_l2=1.75e-7,
        bound_measured_l2=2.25e-7,
        bound_budget_l2=3.25e-7,
        grad_norm=1.125,
        applied_norm=1.0625,
        budget_approximation=1e-6,
        budget_tolerance=8e-6,
        budget_roundoff=1e-7,
        weight_norm=2.5,
        prediction_bound=6e-7,
    )
    fields.update(changes)
    return StepErrors(step, **fields)  # type: ignore[arg-type]


def _report(steps: list[StepErrors] | None = None, **changes: object) -> VerifyReport:
    """A passing report (every field set to a distinct value), with ``changes``."""
    fields: dict[str, object] = dict(
        steps=[_step(1), _step(2)] if steps is None else steps,
        first_divergence=None,
        tol=1e-9,
        max_sublayer_err=3.5e-12,
        max_abs_err_weights=4.5e-8,
        max_abs_err_prediction=5.5e-9,
        max_abs_err_prediction_own_w=6.5e-10,
        weights_spread=0.0,
        scratch_max=0.0,
        delta_window_count=0,
        out_of_range_count=None,
        gate_margin=7.25,
        eps_grad=1.25e-6,
        grad_budget=1.5e-5,
        lipschitz_f=3.75,
        lipschitz_method="estimate",
        corollary_bound_measured=2.25e-7,
        corollary_bound_budget=3.25e-7,
        trajectory_error=1.75e-7,
        seconds_forward=0.1,
        seconds_reference=0.2,
        seconds_verify=0.3,
        weights_moved=0.125,
        max_abs_err_f=8.5e-9,
        prediction_bound=6e-7,
        extra={"budget_parts": {"approximation": 1e-6, "tolerance": 8e-6, "round-off": 1e-7}},
    )
    fields.update(changes)
    return VerifyReport(**fields)  # type: ignore[arg-type]


HEAD = (
    "step         p   r_prime         u         s         w     eps_l    budget    |grad|   traj_l2   bnd_eps"
    "  bnd_budg"
)
ROW = (
    "1.50e-03         —  2.50e-03  3.50e-03  4.50e-03  1.25e-06  1.50e-05  {g}  1.75e-07  2.25e-07  3.25e-07"
)
LEGEND = [
    "legend: p, r_prime, u, s = max |slot - exact Lemma 1 term| at the transformer's w (— = not a slot of "
    "this "
    "variant); w = max |w_TF - w_GD|;",
    "        eps_l = ||applied gradient - grad L_n||_2; budget = its a-priori bound; |grad| = ||grad "
    "L_n||_2; "
    "traj_l2 = ||w_TF - w_GD||_2;",
    "        uncheckable = budget not below 0.5 x |grad| (or the applied gradient's norm): the step cannot "
    "tell GD "
    "from no update;",
    "        bnd_eps, bnd_budg = Corollary 1.1 (corrected) at step l, at the measured eps / at the budget",
]
SUMMARY = [
    "sublayer check (tol 1e-09): max err 3.50e-12; first divergence: none",
    "max |w_TF - w_GD| = 4.50e-08; prediction error = 5.50e-09",
    "|f(w_TF, x_q) - f(w_GD, x_q)| = 8.50e-09; a-priori bound 6.00e-07 (Corollary 1.1 at the budget x the "
    "Lipschitz constant of f(., x_q))",
    "w spread across tokens = 0.0e+00; scratch after blocks = 0.0e+00",
    "relu' window (0, delta) hits = 0 (allowed 0); outside [-R, R] = —; gate margin = 7.25",
    "eps = 1.25e-06 measured, 1.50e-05 a-priori budget (approximation 1.0e-06, tolerance 8.0e-06, round-off "
    "1.0e-07); L_f ~ 3.75 (estimate)",
    "Corollary 1.1 bound 3.25e-07 at the budget (2.25e-07 at the measured eps) vs trajectory error 1.75e-07",
    "GD moves w by max |w_L - w_0| = 1.25e-01",
]
TOLERANCE_REMEDY = (
    "the budget is mostly tolerance: a larger --lr (the tolerance's share is tol max(1, |w|) / lr) or a "
    "smaller "
    "--tol"
)
UNCHECKABLE_2 = (
    "(i) budget: step 2 (1 of 2): a-priori budget not below 0.5 x the gradient norm (worst: step 2, budget "
    "1.5e-05 vs ||grad L_n|| 1e-06, applied 1.06), so a step that applied no gradient could pass; to make "
    "them "
    "checkable: " + TOLERANCE_REMEDY
)


def test_the_table_of_a_passing_report_is_its_exact_text() -> None:
    rep = _report()
    want = [
        HEAD,
        "   1  " + ROW.format(g="1.12e+00"),
        "   2  " + ROW.format(g="1.12e+00"),
        *LEGEND,
        *SUMMARY,
        "conditions   all hold",
    ]
    assert rep.table().split("\n") == want
    assert rep.verdict == "PASS" and rep.passed
    assert rep.describe() == "PASS: sublayers within tol, ranges hold, every step within its a-priori budget"


def test_the_table_marks_an_uncheckable_step_and_says_why() -> None:
    rep = _report([_step(1), _step(2, grad_norm=1e-6)])
    lines = rep.table().split("\n")
    assert lines[1] == "   1  " + ROW.format(g="1.12e+00")
    assert lines[2] == "   2  " + ROW.format(g="1.00e-06") + "  uncheckable"
    assert lines[-2:] == ["conditions   all hold", "inconclusive " + UNCHECKABLE_2]
    assert rep.inconclusive == [UNCHECKABLE_2]
    assert rep.describe() == "INCONCLUSIVE: " + UNCHECKABLE_2
    assert rep.verdict == "INCONCLUSIVE" and not rep.passed
    # the table's mark and the legend use the report's own fraction: 0.7 < 0.75 x 1.0625, not < 0.5 x 1.0625
    half = _report([_step(1, budget_l2=0.7), _step(2)])
    assert half.uncheckable_steps == [1] and half.table().split("\n")[1].endswith("  uncheckable")
    strict = dataclasses.replace(half, checkable_fraction=0.75)
    assert strict.uncheckable_steps == [] and not strict.table().split("\n")[1].endswith("uncheckable")
    assert "uncheckable = budget not below 0.75 x |grad|" in strict.table()
    stricter = dataclasses.replace(half, checkable_fraction=0.25, steps=[_step(1, budget_l2=0.3)])
    assert "budget not below 0.25 x the gradient norm" in stricter.inconclusive[0]


def test_the_summary_shows_every_measured_quantity_and_the_failed_conditions() -> None:
    div = Divergence(1, 3, "F_2", "forward", "P2", 2.5e-6)
    rep = _report(
        first_divergence=div,
        delta_window_count=None,
        out_of_range_count=4,
        extra={},
        trajectory_checked=False,
        degenerate=True,
        range_auto=False,
    )
    lines = rep.table().split("\n")
    summary = lines[len(lines) - len(SUMMARY) - 1 :]
    assert summary[0] == (
        "sublayer check (tol 1e-09): max err 3.50e-12; first divergence: step 2, sublayer 4 (F_2), slot P2: "
        "|err| = 2.5e-06"
    )
    assert summary[4] == (
        "relu' window (0, delta) hits = — (allowed 0); outside [-R, R] = 4; gate margin = 7.25"
    )
    assert summary[5] == "eps = 1.25e-06 measured, 1.50e-05 a-priori budget; L_f ~ 3.75 (estimate)"
    assert summary[6] == SUMMARY[6] + " (not checked: no L_f estimate)"
    assert summary[7] == SUMMARY[7] + "; DEGENERATE task: GD never moves w, so the check proves nothing"
    fails = rep.failures
    assert fails == [
        "(a) sublayer beyond tol 1e-09: step 2, sublayer 4 (F_2), slot P2: |err| = 2.5e-06",
        "(b) range: 4 argument(s) of fitted sums or products outside the range they were fitted on (a fixed "
        "range: --range auto / radius='auto' fits the ranges to this prompt)",
    ]
    assert summary[8] == "conditions   FAILED: " + "; ".join(fails)
    assert rep.describe() == "FAIL: " + "; ".join(fails)
    # on FAIL the summary names no inconclusive step, even one that is
    bad = dataclasses.replace(rep, steps=[_step(1, grad_norm=1e-6), _step(2)])
    assert bad.inconclusive and bad.table().split("\n")[-1] == summary[8]


def test_a_degenerate_report_says_so() -> None:
    rep = _report(degenerate=True, steps=[_step(1, grad_norm=1e-6)])
    assert rep.verdict == "DEGENERATE"
    assert rep.describe() == (
        "DEGENERATE: GD's movement comes from the projection alone (or nothing), so the check proves nothing"
    )


def test_every_failure_line_is_its_exact_text() -> None:
    steps = [
        _step(1),
        _step(2, grad_l2=2e-5, trajectory_l2=4e-7),
        _step(3, grad_l2=math.nan, trajectory_l2=math.nan),
    ]
    rep = _report(
        steps,
        step_range_count=3,
        step_limit=168.0,
        dtype="float32",
        delta=1e-5,
        delta_window_count=2,
        window_hits_allowed=1,
        out_of_range_count=5,
        range_auto=True,
        sum_error_ratio=1.5,
        worst_sum=("r", 2, 3e-3, 2e-3),
        product_error_ratio=2.5,
        worst_product=("forward", 1, 5e-4, 2e-4),
        gate_margin=-0.5,
    )
    assert rep.failures == [
        "(b) range: 3 ReLU pre-activation(s) with |z| >= 168 = delta x 2 / eps_mach (float32), where the "
        "relu' "
        "step relu(z/delta) - relu(z/delta - 1) is no longer 0 or 1; use --dtype float64, a larger "
        "--delta, or "
        "a prompt with smaller |z|",
        "(b) range: 5 argument(s) of fitted sums or products outside the range they were fitted on (--range "
        "auto capped a bound with the box: try a smaller --box or an explicit --range)",
        "(b) relu' window: 2 hits 0 < z < delta (the variant allows 1); delta = 1e-05 (float32): a smaller "
        "--delta narrows the window, or --dtype float64 (delta 1e-9)",
        "(b) declared: the r sum of layer 2 errs by 0.003 on the arguments it saw, above its declared sup "
        "error "
        "0.002 (the budget assumes the declared one)",
        "(b) declared: the forward product of layer 1 errs by 0.0005 on the factors it saw, above its "
        "declared "
        "sup error 0.0002 (the budget assumes the declared one)",
        "(b) gate: |u| or |p(N)| reaches the gate constant C (margin -0.5)",
        "(c) budget: step 2 applied-gradient error 2e-05 > a-priori budget 1.5e-05 (2 steps over)",
        "(c) trajectory: step 2 ||w_TF - w_GD|| 4e-07 > Corollary 1.1 at the budget 3.25e-07 (2 steps over)",
    ]
    assert verdict_label(rep.verdict, rep.failures) == (
        "FAIL (b) declared, (b) gate, (b) range, (b) relu' window, (c) budget, (c) trajectory"
    )


def test_failure_lines_of_one_step_and_without_hints() -> None:
    rep = _report(
        [_step(1, grad_l2=2e-5), _step(2, trajectory_l2=4e-7)],
        delta_window_count=2,
        out_of_range_count=1,
        range_auto=None,
    )
    assert rep.failures == [
        "(b) range: 1 argument(s) of fitted sums or products outside the range they were fitted on",
        "(b) relu' window: 2 hits 0 < z < delta (the variant allows 0)",
        "(c) budget: step 1 applied-gradient error 2e-05 > a-priori budget 1.5e-05",
        "(c) trajectory: step 2 ||w_TF - w_GD|| 4e-07 > Corollary 1.1 at the budget 3.25e-07",
    ]
    # float64 needs no dtype hint; the allowance is what the hits are compared with
    f64 = dataclasses.replace(rep, delta=1e-9, out_of_range_count=0)
    assert f64.failures[0] == (
        "(b) relu' window: 2 hits 0 < z < delta (the variant allows 0); delta = 1e-09 (float64): a smaller "
        "--delta narrows the window"
    )
    assert not any("window" in f for f in dataclasses.replace(rep, window_hits_allowed=2).failures)
    assert any("window" in f for f in dataclasses.replace(rep, window_hits_allowed=1).failures)


def test_the_trajectory_check_allows_a_relative_1e_9_and_only_when_checked() -> None:
    b = _step(1).bound_budget_l2
    within = _report([_step(1, trajectory_l2=b * (1 + 0.5e-9))])
    assert within.failures == [] and within.verdict == "PASS"
    assert _report([_step(1, trajectory_l2=b * (1 + 1e-9))]).failures == []  # the slack itself passes
    beyond = _report([_step(1, trajectory_l2=b * (1 + 2e-9))])
    assert [f.split(":")[0] for f in beyond.failures] == ["(c) trajectory"]
    assert dataclasses.replace(beyond, trajectory_checked=False).failures == []
    # the budget check has no slack: equal passes, the next float above fails
    e = _step(1)
    assert _report([dataclasses.replace(e, grad_l2=e.budget_l2)]).failures == []
    over = _report([dataclasses.replace(e, grad_l2=math.nextafter(e.budget_l2, 1.0))])
    assert [f.split(":")[0] for f in over.failures] == ["(c) budget"]


def test_declared_errors_fail_only_above_their_declared_sup_error() -> None:
    sums = dict(sum_error_ratio=1.0, worst_sum=("r'", 1, 2e-3, 2e-3))
    assert _report(**sums).failures == []
    above = _report(**{**sums, "sum_error_ratio": 1.0000001})
    assert above.failures[0].startswith("(b) declared: the r' sum")
    assert _report(sum_error_ratio=2.0, worst_sum=None).failures == []
    prods = dict(product_error_ratio=1.0, worst_product=("gradient", 3, 1e-4, 1e-4))
    assert _report(**prods).failures == []
    line = _report(**{**prods, "product_error_ratio": 1.5}).failures[0]
    assert line.startswith("(b) declared: the gradient product of layer 3")
    assert _report(product_error_ratio=2.0, worst_product=None).failures == []
    assert _report(step_range_count=0, step_limit=1.0).failures == []


@pytest.mark.parametrize(
    ("parts", "dtype", "remedy"),
    [
        ((8e-6, 1e-6, 1e-7), "float64", TOLERANCE_REMEDY),
        (
            (8e-6, 1e-6, 1e-7),
            "float32",
            "the budget is mostly tolerance: float64 (--dtype float64: tol 1e-9 instead of 1e-4), a larger "
            "--lr "
            "(the tolerance's share is tol max(1, |w|) / lr) or a smaller --tol",
        ),
        (
            (1e-6, 8e-6, 1e-7),
            "float32",
            "the budget is mostly approximation: a smaller --eps (the declared errors of the fitted sums and "
            "products)",
        ),
        ((1e-7, 1e-6, 8e-6), "float32", "the budget is mostly round-off: float64 (--dtype float64)"),
        ((1e-7, 1e-6, 8e-6), "float64", "the budget is mostly round-off: a larger --lr"),
        (
            (1e-7, math.nan, 8e-6),
            "float64",
            "the budget is mostly approximation: a smaller --eps (the declared errors of the fitted sums and "
            "products)",
        ),
        ((math.inf, 1e-6, 8e-6), "float64", TOLERANCE_REMEDY),
    ],
)
def test_the_remedy_names_the_largest_part_of_the_worst_budget(
    parts: tuple[float, float, float], dtype: str, remedy: str
) -> None:
    """Parts are (tolerance, approximation, round-off); a NaN or inf part counts as the largest."""
    tol, approx, roundoff = parts
    worst = _step(
        2, grad_norm=1e-6, budget_tolerance=tol, budget_approximation=approx, budget_roundoff=roundoff
    )
    # step 1 is uncheckable too, but less so (budget / grad_norm smaller), and its parts say otherwise
    other = _step(1, grad_norm=1e-5, budget_tolerance=0.0, budget_approximation=0.0, budget_roundoff=1.0)
    rep = _report([other, worst], dtype=dtype)
    (line,) = rep.inconclusive
    assert line.startswith("(i) budget: steps 1, 2 (2 of 2): ")
    assert "(worst: step 2, budget 1.5e-05 vs ||grad L_n|| 1e-06, applied 1.06)" in line
    assert line.endswith("; to make them checkable: " + remedy)


def test_the_worst_uncheckable_step_is_the_one_with_the_largest_budget_per_gradient() -> None:
    # a zero gradient certifies; the worst among the others is the largest budget / grad_norm, even when a
    # later step has a larger budget
    steps = [
        _step(1, grad_norm=2e-5, budget_l2=1.5e-5),
        _step(2, grad_norm=1e-6, budget_l2=1.5e-5),
        _step(3, grad_norm=1e-3, budget_l2=9e-4),
        _step(4, grad_norm=0.0, applied_norm=0.0, budget_l2=1.0),
    ]
    rep = _report(steps)
    assert rep.uncheckable_steps == [1, 2, 3]
    (line,) = rep.inconclusive
    assert line.startswith("(i) budget: steps 1-3 (3 of 4): ")
    assert "(worst: step 2, budget 1.5e-05 vs ||grad L_n|| 1e-06, applied 1.06)" in line


def test_a_vacuous_trajectory_bound_is_its_exact_text() -> None:
    steps = [_step(1), _step(2, bound_budget_l2=1.25), _step(3, bound_budget_l2=2.0), _step(4)]
    rep = _report(steps)
    assert rep.vacuous_bound_steps == [2, 3]
    assert rep.inconclusive == [
        "(ii) trajectory: steps 2, 3 (2 of 4): Corollary 1.1 at the budget not below 0.5 x ||w_GD|| (first: "
        "step 2, 1.25 vs 2.5); to make it informative: fewer --steps, a smaller --lr or a smaller budget"
    ]
    assert rep.verdict == "INCONCLUSIVE"
    assert dataclasses.replace(rep, trajectory_checked=False).vacuous_bound_steps == []
    # the report's fraction decides: 1.25 < 0.75 x 2.5, 2.0 is not
    assert dataclasses.replace(rep, checkable_fraction=0.75).vacuous_bound_steps == [3]


@pytest.mark.parametrize(
    ("steps", "total", "text"),
    [
        ([3], 5, "step 3 (1 of 5)"),
        ([1, 2], 2, "steps 1, 2 (2 of 2)"),
        ([1, 2, 3, 4, 5], 5, "steps 1-5 (5 of 5)"),
        ([1, 4, 7], 9, "steps 1, 4, 7 (3 of 9)"),
        ([1, 2, 3, 5, 6, 8, 9, 10], 10, "steps 1-3, 5, 6, 8-10 (8 of 10)"),
    ],
)
def test_step_lists_are_runs_of_consecutive_steps(steps: list[int], total: int, text: str) -> None:
    rep = _report([_step(l, grad_norm=1e-6 if l in steps else 1.125) for l in range(1, total + 1)])
    assert rep.uncheckable_steps == steps
    assert rep.inconclusive[0].startswith(f"(i) budget: {text}: ")


def test_to_dict_holds_every_field_and_the_derived_ones_as_json() -> None:
    div = Divergence(None, 0, "readout", "readout", "Y", math.inf, "inf")
    rep = _report([_step(1, grad_norm=1e-6)], first_divergence=div)
    d = rep.to_dict()
    assert d["verdict"] == "FAIL" and d["passed"] is False
    assert d["failures"] == rep.failures and d["inconclusive"] == rep.inconclusive
    assert d["uncheckable_steps"] == [1] and d["vacuous_bound_steps"] == []
    assert d["first_divergence"] == "readout, sublayer 1 (readout), slot Y: inf"
    assert d["first_divergence_at"] == {
        "step": None,
        "index": 0,
        "name": "readout",
        "role": "readout",
        "slot": "Y",
        "error": math.inf,
        "kind": "inf",
    }
    for f in dataclasses.fields(VerifyReport):
        if f.name not in ("steps", "first_divergence"):
            assert d[f.name] == getattr(rep, f.name), f.name
    assert d["steps"][0]["grad_norm"] == 1e-6 and d["steps"][0]["step"] == 1
    json.dumps(d, allow_nan=True)
    clean = _report().to_dict()
    assert clean["first_divergence"] is None and clean["first_divergence_at"] is None
    assert clean["verdict"] == "PASS" and clean["passed"] is True and clean["failures"] == []


@pytest.mark.parametrize(
    ("div", "text"),
    [
        (
            Divergence(0, 2, "E_1", "backward", "S1", 1.25e-3),
            "step 1, sublayer 3 (E_1), slot S1: |err| = 0.00125",
        ),
        (Divergence(4, 0, "F_1", "forward", "P1", math.nan, "nan"), "step 5, sublayer 1 (F_1), slot P1: NaN"),
        (
            Divergence(None, 1, "out", "readout", "Y", math.inf, "inf"),
            "readout, sublayer 2 (out), slot Y: inf",
        ),
    ],
)
def test_a_divergence_describes_where_and_what(div: Divergence, text: str) -> None:
    assert div.describe() == text


def test_verdict_label_names_each_label_once_in_order() -> None:
    assert verdict_label("PASS", []) == "PASS"
    fails = ["(c) budget: x", "(b) range: y", "(b) range: z: w"]
    assert verdict_label("FAIL", fails) == "FAIL (b) range, (c) budget"


def test_max_or_nan() -> None:
    assert max_or_nan([]) == 0.0
    assert max_or_nan([-3.0, -2.0]) == -2.0
    assert max_or_nan([1.0, 3.0, 2.0]) == 3.0
    assert math.isnan(max_or_nan([1.0, math.nan])) and math.isnan(max_or_nan([math.nan, 1.0]))
    assert max_or_nan([1.0, math.inf]) == math.inf


@pytest.mark.parametrize("lr", [0.1, 0.5])
@pytest.mark.parametrize("steps", [1, 4])
def test_corollary_bound_is_the_corrected_corollary_or_steps_lr_eps(lr: float, steps: int) -> None:
    eps = 1e-3
    for lf in (2.0, 0.5):  # any positive L_f, below 1 too
        # an independent sum: each of the l steps adds eps lr, grown by (1 + lr L_f) per later step
        want = sum(lr * eps * (1 + lr * lf) ** k for k in range(steps))
        assert corollary_bound(eps, lr, lf, steps) == pytest.approx(want, rel=1e-12)
    lf = 2.0
    for no_lf in (0.0, -1.0, math.inf, math.nan):
        assert corollary_bound(eps, lr, no_lf, steps) == pytest.approx(steps * lr * eps, rel=1e-15)
    assert math.isnan(corollary_bound(math.nan, lr, lf, steps))
    assert corollary_bound(math.inf, lr, lf, steps) == math.inf
    assert corollary_bound(-math.inf, lr, 0.0, steps) == -math.inf


def test_certifies_compares_the_budget_with_both_norms_strictly() -> None:
    e = _step(1, budget_l2=1.0, grad_norm=2.5, applied_norm=2.5)
    assert e.certifies()  # 1 < 0.5 x 2.5
    assert not dataclasses.replace(e, applied_norm=2.0).certifies()  # 1 < 1 is false: strict
    assert not dataclasses.replace(e, grad_norm=2.0).certifies()
    assert not dataclasses.replace(e, applied_norm=1.5).certifies()  # the smaller norm decides
    assert e.certifies(0.41) and not e.certifies(0.4)
    assert not dataclasses.replace(e, grad_norm=math.nan).certifies()
    assert not dataclasses.replace(e, applied_norm=math.nan).certifies()  # as the docstring says
    # a true gradient of exactly 0: nothing to tell from none
    assert dataclasses.replace(e, grad_norm=0.0, applied_norm=0.0, budget_l2=1e9).certifies()
    assert CHECKABLE_FRACTION == 0.5


def test_bound_informative_is_strict_and_uses_its_fraction() -> None:
    e = _step(1, bound_budget_l2=1.0, weight_norm=2.0)
    assert not e.bound_informative()  # 1 < 0.5 x 2 is false
    assert dataclasses.replace(e, weight_norm=2.000001).bound_informative()
    assert e.bound_informative(0.51) and not e.bound_informative(0.5)


def test_an_inconclusive_report_joins_both_reasons() -> None:
    rep = _report([_step(1, grad_norm=1e-6), _step(2, bound_budget_l2=1.25)])
    first, second = rep.inconclusive
    assert first.startswith("(i) budget: step 1 (1 of 2)") and second.startswith("(ii) trajectory: step 2")
    assert rep.describe() == f"INCONCLUSIVE: {first}; {second}"
    assert rep.table().split("\n")[-2:] == [f"inconclusive {first}", f"inconclusive {second}"]

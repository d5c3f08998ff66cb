"""Survivors of the ``check/verify.py`` mutmut shard (issue 35) outside the L_f estimate
(``test_mutants_verify_lipschitz.py``): each test states the property the mutant broke."""

from __future__ import annotations

import math

import pytest

from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.nets import NetSpec


@pytest.mark.parametrize("depth", [2, 3])
def test_a_linear_output_layer_checks_each_hidden_sum_against_its_own_activation(depth: int) -> None:
    """With ``output="linear"`` the last layer is the identity and the hidden layers keep r: the declared-sum
    check compares each fitted hidden sum with tanh (the identity is exact and not checked), so a clean
    construction is within its declared errors."""
    spec = NetSpec(depth, 3, 2, 1, activation="tanh", output="linear")
    model = compile_gd_transformer(spec, steps=2, n=6, eps=1e-2, lr=0.3)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=3)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.worst_sum is not None and 1 <= rep.worst_sum[1] < depth  # only hidden layers' sums are fitted
    assert rep.sum_error_ratio is not None and 0 < rep.sum_error_ratio <= 1
    assert not any(f.startswith("(b) declared") for f in rep.failures), rep.failures


def test_the_worst_sum_is_named_as_the_failures_name_it() -> None:
    """``worst_sum = (name, layer, measured, declared)`` with name ``"r"`` or ``"r'"`` (the failure line's
    "the r' sum of layer j"): two prompts whose worst fitted sum is the r one and the r' one."""
    spec = NetSpec(2, 3, 2, 1, activation="tanh", output="linear")
    model = compile_gd_transformer(spec, steps=2, n=6, eps=1e-2, lr=0.3)
    names = set()
    for seed in (0, 1):
        x, y, xq, w0, _ = sample_task(spec, 6, seed=seed)
        rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
        assert rep.worst_sum is not None
        names.add(rep.worst_sum[0])
    assert names == {"r", "r'"}


def test_a_sum_that_sees_no_argument_inside_its_range_is_not_measured() -> None:
    """A fitted range too small for every pre-activation of the one fitted layer (the output layer is
    linear, exact): nothing to compare its sums on (no declared-sum ratio), and the arguments outside it are
    what fails, (b) range."""
    spec = NetSpec(2, 3, 2, 1, activation="tanh", output="linear")
    model = compile_gd_transformer(spec, steps=1, n=6, eps=1e-8, lr=0.3, radius=1e-6)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=3)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.out_of_range_count is not None and rep.out_of_range_count > 0
    assert rep.worst_sum is None and rep.sum_error_ratio is None
    assert any(f.startswith("(b) range") for f in rep.failures)


def _with_products(monkeypatch: pytest.MonkeyPatch, measured: list[tuple[str, int, float, float]]):
    """verify() of a paper model whose variant reports ``measured`` as its products' (kind, layer, measured
    error, declared error) at every reference."""
    import dataclasses

    import icdl.construct.check.verify as vmod

    real = vmod.get_variant

    def patched(name: str):
        return dataclasses.replace(real(name), product_errors=lambda ref, tol: list(measured))

    monkeypatch.setattr(vmod, "get_variant", patched)
    spec = NetSpec(2, 3, 2, 1)
    model = compile_gd_transformer(spec, steps=2, n=6, lr=0.3)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=3)
    return verify(model, x, y, xq, w0, lipschitz_iters=0)


def test_the_product_check_skips_kinds_with_no_factor_pair_and_rates_an_exact_declaration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each product kind's ratio is measured / declared: ``-inf`` measured (no factor pair inside its box) is
    skipped and the kinds after it still rated; a kind declared exact (0) rates 0 when it measured no error
    and inf when it measured any; of two kinds with the same ratio the first stays the worst."""
    rep = _with_products(
        monkeypatch,
        [("forward", 1, -math.inf, 1e-3), ("transpose", 2, 0.0, 0.0), ("gradient", 1, 2e-3, 1e-3),
         ("derivative", 2, 4e-3, 2e-3)],
    )  # fmt: skip
    assert rep.extra["product_error_ratios"] == {"transpose": 0.0, "gradient": 2.0, "derivative": 2.0}
    assert rep.worst_product == ("gradient", 1, 2e-3, 1e-3) and rep.product_error_ratio == 2.0
    assert any(f.startswith("(b) declared: the gradient product of layer 1") for f in rep.failures)
    rep = _with_products(monkeypatch, [("transpose", 2, 1e-5, 0.0), ("gradient", 1, 5e-4, 1e-3)])
    assert rep.extra["product_error_ratios"] == {"transpose": math.inf, "gradient": 0.5}
    assert rep.worst_product == ("transpose", 2, 1e-5, 0.0) and rep.product_error_ratio == math.inf
    assert rep.verdict == "FAIL"


def test_the_report_times_the_reference_and_the_default_lipschitz_iterations() -> None:
    """``seconds_reference`` is the reference GD's wall time (a float >= 0, within the whole verification's)
    and the default L_f estimate runs up to 20 power-iteration steps at the first point, as its method
    says."""
    spec = NetSpec(2, 3, 2, 1)
    model = compile_gd_transformer(spec, steps=2, n=6, lr=0.3)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=3)
    rep = verify(model, x, y, xq, w0)
    assert isinstance(rep.seconds_reference, float) and 0 <= rep.seconds_reference <= rep.seconds_verify
    assert "up to 20 steps at the first" in rep.lipschitz_method


def test_a_fitted_loss_derivative_counts_the_labels_outside_its_range() -> None:
    """The logistic loss's u is a fitted two-argument sum on ``[-R, R]^2``: with ``R`` below ``|y| = 1``
    every label of every step is outside it, and the budget's out-of-range count says so."""
    spec = NetSpec(2, 3, 2, 1)
    n, steps = 6, 2
    x, y, xq, w0, _ = sample_task(spec, n, seed=3, loss="logistic")
    assert bool((y.abs() == 1).all())
    model = compile_gd_transformer(spec, steps=steps, n=n, lr=0.3, loss="logistic", radius=0.5, eps=1e-2)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.out_of_range_count is not None and rep.out_of_range_count >= steps * n
    assert rep.verdict == "FAIL" and any(f.startswith("(b) range") for f in rep.failures)


def test_the_declared_sum_check_allows_tol_times_the_magnitude_above_one(own_trajectory) -> None:  # type: ignore[no-untyped-def]
    """The declared-sum check's error is ``|sum(z) - r(z)| - tol max(1, |r(z)|)``: softplus's r exceeds 1
    (unlike tanh's r and r'), so the allowance scales with it there. Computed here at every reference the
    check sees (the transformer's step-start weights and its final ones), every fitted sum, with a
    tolerance (3e-3, against the sums' eps 1e-2) at which the worst error is where softplus is above 1 for
    the allowance ``tol / max(1, |r|)`` and elsewhere for the right one."""
    import torch

    from icdl.nets import lemma1_terms

    spec = NetSpec(2, 3, 2, 1, activation="softplus", output="linear")
    n, steps, tol = 6, 2, 3e-3
    model = compile_gd_transformer(spec, steps=steps, n=n, eps=1e-2, lr=0.3, radius=6.0)
    x, y, xq, w0, _ = sample_task(spec, n, seed=3)
    x = 3 * x  # pre-activations where softplus is well above 1
    rep = verify(model, x, y, xq, w0, tol=tol, lipschitz_iters=0)
    ws, _ = own_trajectory(model, model.build_prompt(x, y, xq, w0))
    x_all = torch.cat([x, xq[None]])
    y_all = torch.cat([y, torch.zeros(1, 1, dtype=y.dtype)])
    worst, above_one = -math.inf, False
    for w in ws:
        g = lemma1_terms(spec, "squared", w, x_all, y_all, r=list(model.terms.r))
        for j, z in enumerate(g.pre):
            act = spec.layer_act(j + 1)
            for terms, true in ((model.terms.r[j], act.fn), (model.terms.r_prime[j], act.deriv)):
                if terms.exact:
                    continue
                inside = z[z.abs() <= terms.radius]
                exact = true(inside)
                above_one |= bool((exact.abs() > 1.5).any())
                allowed = tol * exact.abs().clamp_min(1.0)
                worst = max(worst, float(((terms(inside) - exact).abs() - allowed).max()))
    assert above_one  # the premise: the allowance is above tol somewhere
    assert rep.worst_sum is not None and rep.worst_sum[2] == pytest.approx(worst, rel=1e-12, abs=0)

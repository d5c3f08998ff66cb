"""Properties of the verifier that held-out set 4 (issue 35, ``scripts/mutation_heldout.py --set 4``) showed
no test pinned down: each was written after its plant survived the fast tier, and checked to fail with the
plant and pass without it."""

from __future__ import annotations

import dataclasses
import math
import time

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.construct.check import verify as vmod
from icdl.construct.check.stream import Prompt
from icdl.nets import NetSpec, reference_gd


def test_a_relu_network_with_a_linear_output_reports_its_relu_window_and_step_limit() -> None:
    """The relu' window and the step's float limit belong to the layers that have a step: a ReLU hidden
    layer under a linear output (whose r' is the constant 1, no step) still reports both, and counts the
    window hits a prompt with pre-activations inside (0, delta) has."""
    spec = NetSpec(2, 3, 2, 1, output="linear")
    n = 6
    x, y, xq, w0, _ = sample_task(spec, n, seed=3)
    model = compile_gd_transformer(spec, steps=1, n=n, lr=0.3, delta=0.5)
    assert model.terms.r_prime[0].delta is not None and model.terms.r_prime[1].delta is None  # the premise
    z1 = x @ w0[: spec.offsets[1]].reshape(spec.shapes[0]).T
    hits = int(((z1 > 0) & (z1 < 0.5)).sum())
    assert hits > 0
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.delta == 0.5 and rep.step_limit is not None and rep.step_range_count == 0
    assert rep.delta_window_count is not None and rep.delta_window_count >= hits


def test_the_weight_error_is_the_largest_over_every_step_not_the_last() -> None:
    """``max_abs_err_weights`` is ``max |w̄^l - w^l_GD|`` over all steps l: the transformer's weights moved
    by 0.5 after the first of three steps (and right again after the last) give 0.5, not the final error."""
    spec = NetSpec(2, 3, 2, 1, activation="tanh", output="linear")
    model = compile_gd_transformer(spec, steps=3, n=6, eps=1e-2, lr=0.3)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=3)
    prompt = Prompt.of(model, x, y, xq, w0)
    H0 = model.build_prompt(prompt.x, prompt.y, prompt.x_query, prompt.w0)
    tr, cmp = vmod.compare(model, H0, prompt, tol=1e-9)
    c = vmod.Checked(model, prompt, tr, cmp, vmod._Counters(), 1e-9, time.perf_counter())
    clean = vmod.report(c, lipschitz_iters=0).max_abs_err_weights
    assert clean < 0.05
    cmp.w_tf[1] = cmp.w_tf[1].clone()
    cmp.w_tf[1][0] += 0.5
    rep = vmod.report(c, lipschitz_iters=0)
    gd = reference_gd(spec, model.config.loss, prompt.w0, prompt.x, prompt.y, lr=model.config.lr, steps=3)
    want = float((torch.stack(cmp.w_tf) - gd).abs().max())
    assert want > 0.45 and rep.max_abs_err_weights == want


def test_a_fitted_sum_declared_exact_that_errs_fails_declared(monkeypatch: pytest.MonkeyPatch) -> None:
    """A variant that declares its fitted r sums exact (sup error 0) while they err by about eps on the
    arguments they saw: the measured/declared ratio is infinite and the check FAILs (b) declared, however
    loose the budget; the same sums honestly declared keep their finite ratio."""
    spec = NetSpec(3, 4, 3, 2, activation="sigmoid")
    model = compile_gd_transformer(spec, lr=0.2, steps=2, n=8, eps=1e-3)
    assert not model.terms.r[0].exact  # the premise: a fitted sum
    x, y, xq, w0, _ = sample_task(spec, 8, seed=0)
    honest = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert honest.sum_error_ratio is not None and 0.0 < honest.sum_error_ratio <= 1.0
    real = vmod.get_variant

    def declared_exact(name: str):  # type: ignore[no-untyped-def]
        v = real(name)

        def budget(m):  # type: ignore[no-untyped-def]
            d = v.budget(m)
            return dataclasses.replace(d, r=tuple(0.0 for _ in d.r))

        return dataclasses.replace(v, budget=budget)

    monkeypatch.setattr(vmod, "get_variant", declared_exact)
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.sum_error_ratio == math.inf and rep.worst_sum is not None and rep.worst_sum[0] == "r"
    assert rep.worst_sum[2] > 0.0 and rep.worst_sum[3] == 0.0
    assert rep.verdict == "FAIL" and any(f.startswith("(b) declared") for f in rep.failures)

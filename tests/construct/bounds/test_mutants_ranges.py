"""Survivors of the ``bounds/ranges.py`` mutmut shard (issue 35): each test states the property the mutant
broke. The interval pieces (``_forward``, ``_backward``) are tested on point weights, where every width an
interval has comes from an error it was told to allow."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task
from icdl.construct.bounds import ranges
from icdl.construct.bounds.ranges import RangeBounds, RangeNeeds, auto_ranges, explain_auto_range
from icdl.errors import InputError
from icdl.nets import NetSpec


def _passes(spec: NetSpec, loss: str, err: ranges._Errors, seed: int = 0):  # type: ignore[no-untyped-def]
    """The forward and backward intervals of one step at point weights (w0 of a sampled task)."""
    x, y, xq, w0, _ = sample_task(spec, 6, seed=seed, loss=loss)
    x_all = torch.cat([x, xq[None]])
    D = spec.offsets
    Vs = [ranges._Iv.point(w0[D[j] : D[j + 1]].reshape(spec.shapes[j])) for j in range(spec.depth)]
    _, ps, rps = ranges._forward(spec, Vs, x_all, err)
    return ranges._backward(spec, loss, Vs, ps, rps, y, err)


def _width(v: ranges._Iv) -> float:
    return float((v.hi - v.lo).max())


def test_range_needs_refuses_unknown_names_and_names_them() -> None:
    """Every known quantity and product is accepted; an unknown one, among quantities or products, is a
    ValueError that names it."""
    RangeNeeds(quantities=ranges.QUANTITIES, products=ranges.PRODUCTS)
    for kwargs, bad in (({"quantities": ("z", "zz")}, "zz"), ({"products": ("forward", "outer")}, "outer")):
        with pytest.raises(ValueError, match=f"unknown range quantities or products: .*'{bad}'"):
            RangeNeeds(**kwargs)  # type: ignore[arg-type]


def test_range_bounds_of_nothing_is_zero_and_its_dict_names_both_parts() -> None:
    b = RangeBounds({"z": 2.0, "t": 3.0}, (1.0, 1.5))
    assert b.bound([]) == 0.0 and b.bound(["z"]) == 2.0 and b.bound(["z", "t"]) == 3.0
    assert b.to_dict() == {"maxima": {"z": 2.0, "t": 3.0}, "weights": [1.0, 1.5]}


def test_an_exact_loss_derivative_is_not_widened_by_the_fit_error_and_a_fitted_one_is() -> None:
    """u of the squared loss (an exact two-argument sum) stays a point at point weights whatever the fit
    error; the logistic loss's (fitted) is widened by it on both sides."""
    spec = NetSpec(2, 3, 2, 1)  # relu: exact activations, no product errors
    err = ranges._Errors(0.25, {}, 0.0)
    u_sq = _passes(spec, "squared", err)[0]
    u_log = _passes(spec, "logistic", err)[0]
    assert _width(u_sq) == 0.0
    assert _width(u_log) == pytest.approx(0.5, rel=1e-12)


def test_the_derivative_product_error_widens_only_fitted_layers() -> None:
    """With an approximate r'(z) * back product, s of a tanh layer is widened by its error and s of the
    linear output layer (identity: exact) is not."""
    spec = NetSpec(2, 3, 2, 1, activation="tanh", output="linear")
    _, s, _, _ = _passes(spec, "squared", ranges._Errors(0.0, {"derivative": 0.125}, 0.0))
    assert _width(s[1]) == 0.0
    assert _width(s[0]) >= 0.25


def test_the_transpose_product_error_is_scaled_by_the_width_it_sums_over() -> None:
    """``back(j-1) = s(j) V_j`` sums over the ``widths[j+1]`` outputs of layer j, each product within eps:
    at point weights its interval is exactly ``2 widths[j+1] eps`` wide (in/out sizes differ here)."""
    spec = NetSpec(2, 3, 4, 2)
    assert spec.widths[2] != spec.widths[0]
    eps = 0.125
    _, _, back, _ = _passes(spec, "squared", ranges._Errors(0.0, {"transpose": eps}, 0.0))
    assert _width(back[0]) == pytest.approx(2 * spec.widths[2] * eps, rel=1e-12)


def _config(**kw):  # type: ignore[no-untyped-def]
    spec = NetSpec(2, 3, 2, 1, activation="tanh")
    return compile_gd_transformer(spec, steps=1, n=6, eps=1e-2, radius=3.0, **kw).config


def test_explain_auto_range_names_the_range_it_set_once() -> None:
    """A fitter's refusal under ``--range auto`` says which R (and weight range) the bound set and what to
    change; one already explained is not explained again; a fixed range leaves the error alone."""
    cfg = dataclasses.replace(_config(), auto_range=True, weight_range=2.5)
    e = explain_auto_range(InputError("eps too small"), cfg)
    assert str(e) == (
        "eps too small [R = 3, weights 2.5 was set by --range auto: the a-priori bound on this prompt's "
        "trajectory; use a larger --eps, an explicit --range R, fewer --steps or a smaller --lr]"
    )
    assert str(explain_auto_range(e, cfg)) == str(e)
    plain = dataclasses.replace(cfg, weight_range=None)
    assert str(explain_auto_range(InputError("x"), plain)).startswith("x [R = 3 was set by --range auto:")
    original = InputError("y")
    assert explain_auto_range(original, dataclasses.replace(cfg, auto_range=False)) is original


def test_the_automatic_range_uses_the_models_relu_step_width_and_gate() -> None:
    """``radius="auto"`` bounds the trajectory with the model's relu' step ``clamp(z/delta, 0, 1)`` (a wide
    step slows GD and lowers the bound here) and refuses a prompt whose bound exceeds the model's gate C."""
    spec = NetSpec(2, 4, 3, 1)
    x, y, xq, w0, _ = sample_task(spec, 8, seed=3)
    x, y, xq = 3 * x, 3 * y, 3 * xq
    kw = dict(lr=1.0, steps=4, box=None, x=x, y=y, x_query=xq, w0=w0, eps=1e-3)
    wide, sharp = (
        auto_ranges(spec, "squared", delta=0.5, **kw).radius,
        auto_ranges(spec, "squared", **kw).radius,
    )
    assert wide < sharp  # the premise
    model = compile_gd_transformer(
        spec, steps=4, n=8, lr=1.0, delta=0.5, radius="auto", prompt=(x, y, xq, w0)
    )
    assert model.config.radius == wide
    with pytest.raises(InputError, match=r"above 100"):
        compile_gd_transformer(
            spec, steps=4, n=8, lr=1.0, delta=0.5, radius="auto", prompt=(x, y, xq, w0), gate=100.0
        )

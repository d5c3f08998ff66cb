"""The streaming sublayer check's small parts on their own (issue 35: mutmut's survivors in
``construct/check/stream.py``): what ``slot_error`` reports for NaN, inf and finite slots, written out from
the definition ``max |got - want| / max(1, |want|)`` with non-finite values named."""

from __future__ import annotations

import itertools
import math
import sys

import torch

from icdl.construct import compile_gd_transformer, sample_task
from icdl.construct.check.stream import Prompt, SlotError, _spans, recursion, slot_error
from icdl.construct.engine.layout import Slot
from icdl.construct.engine.terms import Terms
from icdl.nets import NetSpec


def _t(*v: float) -> torch.Tensor:
    return torch.tensor([v], dtype=torch.float64)


def test_a_finite_slot_error_is_the_largest_relative_difference() -> None:
    """``|got - want| / max(1, |want|)``: the relative error where ``|want| > 1``, the absolute one below."""
    assert slot_error("s", _t(1.5, 5.0, -0.25), _t(1.0, 4.0, 0.0)) == SlotError("s", 0.5, 1.0, "finite")
    assert slot_error("s", _t(3.0, 10.0), _t(1.0, 4.0)) == SlotError("s", 2.0, 6.0, "finite")


def test_a_nan_or_inf_where_the_reference_has_none_is_named() -> None:
    """A NaN (before any inf) or an inf in the slot where the reference is finite: both errors NaN or inf."""
    nan = slot_error("s", _t(1.0, math.nan, math.inf), _t(1.0, 2.0, 3.0))
    assert nan.kind == "nan" and math.isnan(nan.rel) and math.isnan(nan.abs)
    assert slot_error("s", _t(math.inf, 1.0), _t(1.0, 1.0)) == SlotError("s", math.inf, math.inf, "inf")
    assert slot_error("s", _t(1.0, -math.inf), _t(1.0, 1.0)) == SlotError("s", math.inf, math.inf, "inf")


def test_a_nan_the_reference_has_too_is_no_new_divergence() -> None:
    """Where got and want are both NaN the entry adds 0; the other entries keep their relative errors."""
    assert slot_error("s", _t(math.nan, 5.0), _t(math.nan, 4.0)) == SlotError("s", 0.25, 1.0, "finite")
    assert slot_error("s", _t(math.nan, 0.5), _t(math.nan, 0.0)) == SlotError("s", 0.5, 0.5, "finite")


def test_a_finite_slot_against_an_infinite_reference_is_a_finite_error() -> None:
    """The slot holds no NaN or inf, so the kind is finite; its difference to inf is the largest float (and
    an infinite reference is divided by 1, not by inf)."""
    big = sys.float_info.max
    assert slot_error("s", _t(1.0, 2.0), _t(math.inf, 2.0)) == SlotError("s", big, big, "finite")


def _relu_sum(terms: Terms, *args: float) -> float:
    """``sum_m c_m relu(a_m · args + b_m)`` in Python floats (Definition 4)."""
    out = 0.0
    for a, b, c in zip(terms.a, terms.b, terms.c, strict=True):
        out += c * max(0.0, sum(ai * t for ai, t in zip(a, args, strict=True)) + b)
    return out


def _close(got: torch.Tensor, want: list[list[float]]) -> None:
    torch.testing.assert_close(got, torch.tensor(want, dtype=got.dtype), rtol=1e-12, atol=1e-15)


def test_the_surrogate_recursion_uses_the_models_fitted_sums() -> None:
    """``recursion(surrogate=True)`` is Lemma 1 with the model's conditioned ReLU sums for r, r' and u: each
    layer's p and r' and the loss derivative u equal the sums evaluated entry by entry on the surrogate's own
    pre-activations, and differ from the exact recursion's (fitted sums, not the functions)."""
    spec = NetSpec(3, 3, 2, 1, activation="tanh")
    model = compile_gd_transformer(spec, lr=0.2, steps=1, n=4, loss="logistic", eps=0.05, radius=3.0)
    x, y, xq, w0, _ = sample_task(spec, 4, seed=100, loss="logistic")
    prompt = Prompt.of(model, x, y, xq, w0)
    sur = recursion(model, w0, prompt.x_all, prompt.y_all, prompt.mask, surrogate=True)
    exact = recursion(model, w0, prompt.x_all, prompt.y_all, prompt.mask, surrogate=False)
    sums = model.terms
    for j in range(spec.depth):
        z = sur.pre[j].tolist()
        p = [[_relu_sum(sums.r[j], v) for v in row] for row in z]
        rp = [[_relu_sum(sums.r_prime[j], v) for v in row] for row in z]
        _close(sur.p[j + 1], p)
        _close(sur.r_prime[j], rp)
        assert not torch.equal(sur.p[j + 1], exact.p[j + 1]) and not torch.equal(
            sur.r_prime[j], exact.r_prime[j]
        )
    out, labels = sur.p[-1].tolist(), prompt.y_all.tolist()
    u = [
        [t * _relu_sum(sums.u, o, yy) for o, yy in zip(ro, ry, strict=True)]
        for ro, ry, t in zip(out, labels, prompt.mask.tolist(), strict=True)
    ]
    _close(sur.u, u)
    assert not torch.equal(sur.u, exact.u)


def test_a_prompt_is_taken_in_the_models_dtype() -> None:
    """``Prompt.of`` converts float64 inputs to a float32 model's dtype (the values rounded, not changed
    otherwise); its tokens are the examples then the query, labelled 0 and masked out."""
    spec = NetSpec(3, 3, 2, 1)
    model = compile_gd_transformer(spec, lr=0.2, steps=1, n=4, dtype="float32")
    x, y, xq, w0, _ = sample_task(spec, 4, seed=100)
    prompt = Prompt.of(model, x, y, xq, w0)
    for got, src in zip((prompt.x, prompt.y, prompt.x_query, prompt.w0), (x, y, xq, w0), strict=True):
        assert got.dtype == torch.float32 and torch.equal(got, src.float())
    assert prompt.n == 4 and torch.equal(prompt.x_all, torch.cat([x, xq[None]]).float())
    assert prompt.y_all.tolist() == [*y.float().tolist(), [0.0]] and prompt.mask.tolist() == [1.0] * 4 + [0.0]


def test_the_scratch_spans_cover_exactly_the_scratch_columns() -> None:
    """``_spans``: the slots' columns as the fewest contiguous ranges, in column order: touching slots merge,
    a gap between two is not covered (the scratch maximum must not read a non-scratch column)."""
    slots = [Slot("a", None, 7, 1), Slot("b", None, 0, 2), Slot("c", 1, 2, 3), Slot("d", None, 5, 1)]
    assert _spans(slots) == [slice(0, 6), slice(7, 8)]
    assert _spans([Slot("a", None, 4, 2), Slot("b", None, 0, 1)]) == [slice(0, 1), slice(4, 6)]
    assert _spans([]) == []
    layout = compile_gd_transformer(NetSpec(3, 3, 2, 1), lr=0.2, steps=1, n=4).layout
    spans = _spans(layout.scratch_slots())
    covered = [c for sp in spans for c in range(sp.start, sp.stop)]
    assert covered == sorted(c for s in layout.scratch_slots() for c in s.indices)
    assert all(a.stop < b.start for a, b in itertools.pairwise(spans))


def test_a_negative_or_nan_tolerance_fails_the_first_sublayer_on_its_first_worst_slot() -> None:
    """No error is ``<= -1`` or ``<= NaN``: every slot, named or kept, fails the first sublayer, and the
    divergence names the slot with the largest error, the first in layout order among equals."""
    from icdl.construct import verify

    spec = NetSpec(3, 3, 2, 1)
    model = compile_gd_transformer(spec, lr=0.2, steps=1, n=4)
    x, y, xq, w0, _ = sample_task(spec, 4, seed=100)
    baseline = verify(model, x, y, xq, w0)
    assert baseline.first_divergence is None
    for tol in (-1.0, math.nan):
        rep = verify(model, x, y, xq, w0, tol=tol)
        div = rep.first_divergence
        assert div is not None and (div.step, div.index) == (0, 0) and rep.verdict == "FAIL"
        if div.error == 0.0:  # all errors 0: the first slot of the layout
            assert div.slot == model.layout.slots[0].label

"""The streaming sublayer check's small parts on their own (issue 35: mutmut's survivors in
``construct/check/stream.py``): what ``slot_error`` reports for NaN, inf and finite slots, written out from
the definition ``max |got - want| / max(1, |want|)`` with non-finite values named."""

from __future__ import annotations

import math
import sys

import torch

from icdl.construct.check.stream import SlotError, slot_error


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

"""The fitted sums' declared sup errors are checked on the arguments they actually saw: a sum planted 2x
worse than declared, or with a wrong knot, FAILs (b) declared, even where the budget is loose enough to
hide it; honest fits stay below their declaration (their measured/declared ratio is reported)."""

from __future__ import annotations

import dataclasses

import pytest

import icdl.construct.compile as compile_mod
from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.construct.terms import Terms
from icdl.nets import NetSpec

SPEC = NetSpec(3, 4, 3, 2, activation="sigmoid")
EPS = 1e-3


def _worse(t: Terms) -> Terms:
    """Every term scaled by 1 + 4 eps (a, b scaled: c relu(a t + b) is positively homogeneous): up to
    4 eps max|r| + eps off, about 2x the declared 1.01 eps where sigmoid is near 1/2 or more."""
    k = 1 + 4 * t.eps
    return dataclasses.replace(t, a=tuple(tuple(k * v for v in a) for a in t.a), b=tuple(k * b for b in t.b))


def _wrong_knot(t: Terms) -> Terms:
    """The knot of the term in the middle of the list moved: beyond it the sum is off by 3 eps."""
    m = len(t.b) // 2
    b = list(t.b)
    b[m] = b[m] + 3 * t.eps
    return dataclasses.replace(t, b=tuple(b))


def _compile_with(monkeypatch: pytest.MonkeyPatch, plant):
    fetch = compile_mod._fetch_terms

    def planted(cfg):
        st = fetch(cfg)
        return dataclasses.replace(st, r=tuple(plant(t) if not t.exact else t for t in st.r))

    monkeypatch.setattr(compile_mod, "_fetch_terms", planted)
    return compile_gd_transformer(SPEC, lr=0.2, steps=3, n=8, eps=EPS)


def test_honest_fits_stay_within_their_declaration() -> None:
    for seed in range(3):
        x, y, xq, w0, _ = sample_task(SPEC, 8, seed=seed)
        rep = verify(compile_gd_transformer(SPEC, lr=0.2, steps=3, n=8, eps=EPS), x, y, xq, w0)
        assert rep.verdict == "PASS" and rep.weights_moved > 0
        assert rep.sum_error_ratio is not None and 0.5 < rep.sum_error_ratio <= 1.0  # tight, not slack
        assert not any(f.startswith("(b) declared") for f in rep.failures)


@pytest.mark.parametrize("plant", [_worse, _wrong_knot], ids=["2x-worse", "wrong-knot"])
def test_a_planted_bad_sum_fails_declared(monkeypatch: pytest.MonkeyPatch, plant) -> None:
    model = _compile_with(monkeypatch, plant)
    x, y, xq, w0, _ = sample_task(SPEC, 8, seed=0)
    rep = verify(model, x, y, xq, w0)
    assert rep.first_divergence is None  # the heads compute the (planted) sums: (a) cannot see it
    assert rep.verdict == "FAIL" and rep.sum_error_ratio is not None and rep.sum_error_ratio > 1.5
    (line,) = [f for f in rep.failures if f.startswith("(b) declared")]
    assert "the r sum of layer" in line

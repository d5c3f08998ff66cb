"""The fitted sums' declared sup errors are checked on the arguments they actually saw: a sum planted 2x
worse than declared, or with a wrong knot, FAILs (b) declared, even where the budget is loose enough to
hide it; honest fits stay below their declaration (their measured/declared ratio is reported). Likewise
the softmax variant's approximate products, on the factors they actually multiplied: a product kind planted
3x worse than declared FAILs (b) declared naming the kind and its layer, even where the sublayer check (the
heads use the same product) and the budget pass; honest products stay within their closed-form ``h^2/16``
and keep their verdict."""

from __future__ import annotations

import dataclasses
import math

import pytest

import icdl.construct.compile as compile_mod
import icdl.construct.variants.softmax as softmax_mod
from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.construct.engine.products import ProductTerms
from icdl.construct.engine.terms import Terms
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


KINDS = {
    "forward": "forward v*p",
    "transpose": "transpose v*s",
    "derivative": "derivative r'*z",
    "gradient": "gradient p*s",
}


@dataclasses.dataclass(frozen=True)
class _Wider(ProductTerms):
    """Knots sqrt(3)x as far apart as those of ``declared_pieces`` (so the sup error is 3x), declaring the
    error of the honest spacing."""

    declared_pieces: int = 1

    @property
    def sup_error(self) -> float:
        return (self.square_range / self.declared_pieces) ** 2 / 16.0


def _wider(p: ProductTerms) -> ProductTerms:
    return _Wider(
        p.x_range, p.y_range, max(1, round(p.pieces / math.sqrt(3))), p.eps, declared_pieces=p.pieces
    )


def _model(act: str, seed: int, monkeypatch: pytest.MonkeyPatch | None = None, kind: str | None = None):
    spec = NetSpec(2, 3, 2, 1, activation=act)
    if monkeypatch is not None and kind is not None:
        honest = softmax_mod.products

        def planted(*args, **kwargs):  # one kind's product, for the heads, the surrogate and the declaration
            prods = honest(*args, **kwargs)
            return dataclasses.replace(prods, **{kind: _wider(getattr(prods, kind))})

        monkeypatch.setattr(softmax_mod, "products", planted)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=seed)
    model = compile_gd_transformer(
        spec, lr=0.2, steps=2, n=6, eps=EPS, variant="softmax", radius="auto", prompt=(x, y, xq, w0)
    )
    return verify(model, x, y, xq, w0)


@pytest.mark.parametrize("act", ["sigmoid", "relu"])
def test_honest_products_stay_within_their_declaration(act: str) -> None:
    for seed in range(3):
        rep = _model(act, seed)
        assert rep.verdict == "PASS" and rep.weights_moved > 0
        ratios = rep.extra["product_error_ratios"]
        expected = {"forward", "transpose", "gradient"} | ({"derivative"} if act != "relu" else set())
        assert set(ratios) == {KINDS[k] for k in expected}
        assert all(0.3 < r <= 1.0 for r in ratios.values()), ratios  # measured, and within h^2/16
        assert rep.product_error_ratio is not None and rep.product_error_ratio <= 1.0
        assert not any(f.startswith("(b) declared") for f in rep.failures)


@pytest.mark.parametrize(
    ("act", "kind"),
    [
        ("sigmoid", "forward"),
        ("sigmoid", "transpose"),
        ("sigmoid", "derivative"),
        ("sigmoid", "gradient"),
        ("relu", "transpose"),
    ],
)
def test_a_product_3x_worse_fails_declared(monkeypatch: pytest.MonkeyPatch, act: str, kind: str) -> None:
    rep = _model(act, 0, monkeypatch, kind)
    assert rep.first_divergence is None  # the heads compute the (planted) products: (a) cannot see it
    assert all(e.grad_l2 <= e.budget_l2 for e in rep.steps)  # nor can the budget
    assert rep.verdict == "FAIL" and rep.product_error_ratio is not None and rep.product_error_ratio > 1.5
    (line,) = [f for f in rep.failures if f.startswith("(b) declared")]
    assert f"the {KINDS[kind]} product of layer" in line
    assert rep.worst_product is not None and rep.worst_product[0] == KINDS[kind]

"""Token-local products with ReLU MLPs (icdl.construct.engine.products) against direct products."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from icdl.construct.engine.layers import ReLUMLP, UnitTable
from icdl.construct.engine.layout import Layout
from icdl.construct.engine.products import (
    add_mask_in_place,
    add_mask_product,
    product_mlp,
    product_terms,
)
from icdl.errors import InputError
from icdl.nets import NetSpec

F64 = torch.float64


@pytest.mark.parametrize(
    "rx, ry, eps", [(1.0, 1.0, 1e-2), (4.0, 0.25, 1e-3), (10.0, 3.0, 1e-4), (0.5, 8, 1e-5)]
)
def test_sup_error_is_the_stated_bound_and_below_eps(rx: float, ry: float, eps: float) -> None:
    p = product_terms(rx, ry, eps)
    assert p.sup_error <= eps
    measured = p.measured_sup_error(points=201)
    # h^2/16 is attained (u at a midpoint, v at a knot) and never exceeded on the box.
    assert measured == pytest.approx(p.sup_error, rel=1e-6)
    # Dense random points inside the box never beat the bound.
    g = torch.Generator().manual_seed(0)
    x = (2 * torch.rand(20_000, generator=g, dtype=F64) - 1) * rx
    y = (2 * torch.rand(20_000, generator=g, dtype=F64) - 1) * ry
    assert float((p(x, y) - x * y).abs().max()) <= p.sup_error * (1 + 1e-9) + 1e-12


@pytest.mark.parametrize("rx, ry, eps", [(1.0, 1.0, 1e-2), (4.0, 0.25, 1e-3), (10.0, 3.0, 1e-4)])
def test_hidden_width_is_fewest_pieces_for_eps(rx: float, ry: float, eps: float) -> None:
    p = product_terms(rx, ry, eps)
    m = p.pieces
    assert p.hidden == 4 * m
    # m = ceil(2 sqrt(R_x R_y) / (4 sqrt(eps))), up to one extra piece for the rounding of the bound
    assert m - math.ceil(2 * math.sqrt(rx * ry) / (4 * math.sqrt(eps))) in (0, 1)
    # one piece fewer would miss eps: (R_s / (m - 1))^2 / 16 > eps
    if m > 1:
        assert (p.square_range / (m - 1)) ** 2 / 16 > eps
    assert len(p.units()) == p.hidden


@given(
    x=st.floats(-3.0, 3.0, allow_nan=False),
    y=st.floats(-0.7, 0.7, allow_nan=False),
    eps=st.sampled_from([1e-2, 1e-3, 1e-4]),
)
def test_product_within_bound_hypothesis(x: float, y: float, eps: float) -> None:
    p = product_terms(3.0, 0.7, eps)
    got = float(p(torch.tensor(x, dtype=F64), torch.tensor(y, dtype=F64)))
    assert abs(got - x * y) <= p.sup_error * (1 + 1e-9) + 1e-13


@given(x=st.floats(-5.0, 5.0, allow_nan=False))
def test_second_factor_zero_gives_exact_zero(x: float) -> None:
    p = product_terms(5.0, 2.0, 1e-3)
    assert float(p(torch.tensor(x, dtype=F64), torch.tensor(0.0, dtype=F64))) == 0.0


def test_bad_ranges_are_input_errors() -> None:
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(InputError):
            product_terms(bad, 1.0, 1e-3)
        with pytest.raises(InputError):
            product_terms(1.0, 1.0, bad)


def _toy_layout() -> Layout:
    spec = NetSpec(2, 3, 2, 1)
    return Layout(spec, [("X", None, 3), ("Y", None, 3), ("Z", None, 3), ("M", None, 3), ("ONE", None, 1)])


def test_product_mlp_on_slots_matches_direct_products() -> None:
    L = _toy_layout()
    mlp, prod = product_mlp(L, ("X", None), ("Y", None), ("Z", None), x_range=2.0, y_range=1.5, eps=1e-4)
    assert mlp.hidden == 3 * prod.hidden
    g = torch.Generator().manual_seed(1)
    H = torch.zeros(4, 9, L.dim, dtype=F64)
    H[..., L.indices("X")] = (2 * torch.rand(4, 9, 3, generator=g, dtype=F64) - 1) * 2.0
    H[..., L.indices("Y")] = (2 * torch.rand(4, 9, 3, generator=g, dtype=F64) - 1) * 1.5
    H[..., L.index("ONE")] = 1.0
    H[:, -1, L.indices("Y")] = 0.0  # a "query" token whose second factor is 0
    out = mlp(H)
    want = H[..., L.indices("X")] * H[..., L.indices("Y")]
    got = out[..., L.indices("Z")]
    assert float((got - want).abs().max()) <= prod.sup_error * (1 + 1e-9)
    assert torch.equal(got[:, -1], torch.zeros_like(got[:, -1]))  # exactly 0 on the query
    # the surrogate evaluation is the same function to round-off
    assert torch.allclose(got, prod(H[..., L.indices("X")], H[..., L.indices("Y")]), rtol=0, atol=1e-14)
    # nothing but Z changes
    others = [i for i in range(L.dim) if i not in L.indices("Z")]
    assert torch.equal(out[..., others], H[..., others])


def test_product_mlp_is_bias_free_definition_8() -> None:
    L = _toy_layout()
    mlp, _ = product_mlp(L, ("X", None), ("Y", None), ("Z", None), x_range=1.0, y_range=1.0, eps=1e-2)
    W1, W2 = mlp.dense()
    H = torch.randn(2, 5, L.dim, dtype=F64)
    H[..., L.index("ONE")] = 1.0
    assert torch.allclose(mlp(H), H + torch.relu(H @ W1.t()) @ W2.t(), atol=1e-13)


def _mask_state(L: Layout, C: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(2)
    H = torch.zeros(3, 50, L.dim, dtype=F64)
    H[..., L.indices("X")] = (2 * torch.rand(3, 50, 3, generator=g, dtype=F64) - 1) * C
    H[..., L.indices("M")] = torch.randint(0, 2, (3, 50, 3), generator=g).to(F64)
    H[..., L.index("ONE")] = 1.0
    H[:, 0, L.indices("X")] = torch.tensor([C, -C, 0.0], dtype=F64)  # the range edges
    return H


@pytest.mark.parametrize("C", [1.0, 1e6])
def test_mask_product_is_exact(C: float) -> None:
    L = _toy_layout()
    units = UnitTable()
    one = L.index("ONE")
    for m, z, o in zip(L.indices("M"), L.indices("X"), L.indices("Z"), strict=True):
        add_mask_product(units, m, z, one, o, bound=C)
    mlp = ReLUMLP(units.tensors(F64), L.dim)
    H = _mask_state(L, C)
    out = mlp(H)
    assert torch.equal(out[..., L.indices("Z")], H[..., L.indices("M")] * H[..., L.indices("X")])


@pytest.mark.parametrize("C", [1.0, 1e6])
def test_mask_in_place_is_exact(C: float) -> None:
    L = _toy_layout()
    units = UnitTable()
    for m, z in zip(L.indices("M"), L.indices("X"), strict=True):
        add_mask_in_place(units, m, z, bound=C)
    mlp = ReLUMLP(units.tensors(F64), L.dim)
    H = _mask_state(L, C)
    out = mlp(H)
    assert torch.equal(out[..., L.indices("X")], H[..., L.indices("M")] * H[..., L.indices("X")])
    # the exactness needs |z| <= C: beyond it the mask leaks (the documented range assumption)
    H2 = H.clone()
    H2[..., L.indices("X")] = 3 * C
    H2[..., L.indices("M")] = 1.0
    assert torch.equal(mlp(H2)[..., L.indices("X")], torch.full_like(H2[..., L.indices("X")], C))


@given(
    z=st.floats(-1e6, 1e6, allow_nan=False),
    m=st.sampled_from([0.0, 1.0]),
)
def test_mask_product_exact_hypothesis(z: float, m: float) -> None:
    L = _toy_layout()
    units = UnitTable()
    add_mask_product(units, L.index("M"), L.index("X"), L.index("ONE"), L.index("Z"), bound=1e6)
    add_mask_in_place(units, L.index("M", None, 1), L.index("X", None, 1), bound=1e6)
    H = torch.zeros(1, 1, L.dim, dtype=F64)
    H[0, 0, [L.index("X"), L.index("X", None, 1)]] = z
    H[0, 0, [L.index("M"), L.index("M", None, 1)]] = m
    H[0, 0, L.index("ONE")] = 1.0
    out = ReLUMLP(units.tensors(F64), L.dim)(H)[0, 0]
    assert float(out[L.index("Z")]) == m * z
    assert float(out[L.index("X", None, 1)]) == m * z

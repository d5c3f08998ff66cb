"""Token-local products with bias-free ReLU MLPs (what the paper's EWML, Definition 6, is for).

An MLP (Definition 8) acts on one token at a time and is piecewise linear, so it cannot multiply two slots
of a token exactly; the paper adds the element-wise multiplication layer (Definition 6, eq. (3.18)) for the
backward products of Lemma 5 and notes (Remark 3) that attention cannot form them. This module builds the
standard-layer replacements:

* [`ProductTerms`][icdl.construct.engine.products.ProductTerms] — ``x y`` on a box ``|x| <= R_x, |y| <= R_y``
  by polarisation, ``x y = ((x/a + a y)^2 - (x/a - a y)^2) / 4`` with ``a = sqrt(R_x / R_y)``, each square a
  sum of ReLUs (Definition 4): the piecewise-linear interpolant of ``t^2`` on ``m`` equal pieces of
  ``[-R_s, R_s]``, ``R_s = 2 sqrt(R_x R_y)``,

      t^2 ~ sum_{i<m} c_i (relu(t - i h) + relu(-t - i h)),   h = R_s / m,  c_0 = h,  c_i = 2h (i >= 1).

  The interpolant overshoots by ``e(t) in [0, h^2/4]``, so the product error ``(e(u) - e(v)) / 4`` lies in
  ``[-h^2/16, h^2/16]``, and this bound is attained (``u`` at a midpoint, ``v`` at a knot). For a target
  ``eps``: ``m = ceil(R_s / (4 sqrt(eps)))`` pieces, ``4m`` hidden units. The biases ``-i h`` are read from
  the token's ONE slot. Outside the box the error grows like ``(|u| - R_s)^2``.
* [`add_mask_product`][icdl.construct.engine.products.add_mask_product] — the exact special case for ReLU
  networks, where one factor is a 0/1 mask (``r'`` of Lemma 3): ``m z = relu(z - C(1 - m)) - relu(-z - C(1 -
  m))`` for ``|z| <= C``; and [`add_mask_in_place`][icdl.construct.engine.products.add_mask_in_place], which
  turns a slot holding ``z`` into ``m z`` (``-(1 - m) z`` is added).

Exact zeros: the units of [`ProductTerms`][icdl.construct.engine.products.ProductTerms] are stored in (u, v)
pairs with equal biases, so when the *second* factor is exactly 0 (``u = v``) every pair cancels exactly and
the product is exactly 0. Builders put the factor that vanishes on the query token (``s``, ``u``) second, so
the query still adds nothing to the gradient (Lemma 4's gate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from icdl.construct.engine.layers import ReLUMLP, Role, UnitTable
from icdl.construct.engine.layout import Layout
from icdl.errors import InputError

__all__ = [
    "ProductTerms",
    "UnitSink",
    "add_mask_in_place",
    "add_mask_product",
    "add_product",
    "product_mlp",
    "product_terms",
]


class UnitSink(Protocol):
    """Anything that collects MLP hidden units as ``add(reads, writes)`` (e.g. the compiler's unit table)."""

    def add(self, reads: Sequence[tuple[int, float]], writes: Sequence[tuple[int, float]]) -> None: ...


@dataclass(frozen=True)
class ProductTerms:
    """``x y ~ sum_units w_k relu(a_k x + b_k y + c_k)`` on ``|x| <= x_range``, ``|y| <= y_range``.

    Attributes:
        x_range, y_range: the assumed ranges ``R_x``, ``R_y`` of the two factors.
        pieces: ``m``, the pieces of each square's interpolant on ``[-R_s, R_s]``.
        eps: the requested sup error (the bound ``h^2 / 16`` is at most this).
    """

    x_range: float
    y_range: float
    pieces: int
    eps: float

    @property
    def scale(self) -> float:
        """``a = sqrt(R_x / R_y)``: balances the factors so that ``|x/a|, |a y| <= sqrt(R_x R_y)``."""
        return math.sqrt(self.x_range / self.y_range)

    @property
    def square_range(self) -> float:
        """``R_s = 2 sqrt(R_x R_y)``: the range of ``u = x/a + a y`` and ``v = x/a - a y``."""
        return 2.0 * math.sqrt(self.x_range * self.y_range)

    @property
    def step(self) -> float:
        """``h = R_s / m``, the knot spacing of the squares."""
        return self.square_range / self.pieces

    @property
    def sup_error(self) -> float:
        """The exact sup error on the box: ``h^2 / 16`` (attained)."""
        return self.step**2 / 16.0

    @property
    def hidden(self) -> int:
        """Hidden units per product: ``4m`` (two squares, each ``2m`` one-sided ReLUs)."""
        return 4 * self.pieces

    def units(self) -> list[tuple[float, float, float, float]]:
        """The units as ``(coef of x, coef of y, bias, output weight)``, in stored order: for each knot i,
        ``+relu(u - ih)``, ``-relu(v - ih)``, ``+relu(-u - ih)``, ``-relu(-v - ih)`` (times ``c_i / 4``)."""
        a, h = self.scale, self.step
        out: list[tuple[float, float, float, float]] = []
        for i in range(self.pieces):
            c = (h if i == 0 else 2.0 * h) / 4.0
            b = -i * h
            for sign in (1.0, -1.0):
                out.append((sign / a, sign * a, b, c))  # ±u
                out.append((sign / a, -sign * a, b, -c))  # ±v
        return out

    def __call__(self, x: Tensor, y: Tensor) -> Tensor:
        """Evaluate the ReLU sum elementwise on broadcast ``x`` and ``y``, unit by unit in stored order (the
        order the MLP sums its hidden units in), so it matches the compiled MLP to round-off."""
        x, y = torch.broadcast_tensors(x, y)
        out = torch.zeros_like(x)
        for ax, ay, b, w in self.units():
            out = out + w * torch.relu(ax * x + ay * y + b)
        return out

    def measured_sup_error(self, points: int = 401) -> float:
        """``max |sum - x y|`` on a ``points x points`` grid of the box and at a worst-case pair."""
        xs = torch.linspace(-self.x_range, self.x_range, points, dtype=torch.float64)
        ys = torch.linspace(-self.y_range, self.y_range, points, dtype=torch.float64)
        X, Y = torch.meshgrid(xs, ys, indexing="ij")
        err = float((self(X, Y) - X * Y).abs().max())
        # The bound is attained where u = x/a + a y sits at a midpoint and v = x/a - a y at a knot.
        a, h = self.scale, self.step
        x0, y0 = torch.tensor(a * h / 4, dtype=torch.float64), torch.tensor(h / (4 * a), dtype=torch.float64)
        return max(err, float((self(x0, y0) - x0 * y0).abs()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "x_range": self.x_range,
            "y_range": self.y_range,
            "square_range": self.square_range,
            "pieces": self.pieces,
            "hidden": self.hidden,
            "eps": self.eps,
            "sup_error": self.sup_error,
        }


def product_terms(x_range: float, y_range: float, eps: float) -> ProductTerms:
    """The fewest-piece [`ProductTerms`][icdl.construct.engine.products.ProductTerms] with sup error ``<=
    eps`` on ``|x| <= x_range, |y| <= y_range``.

    ``m = ceil(2 sqrt(R_x R_y) / (4 sqrt(eps)))``: the hidden width ``4m`` grows like ``sqrt(R_x R_y / eps)``.
    """
    for name, v in (("x_range", x_range), ("y_range", y_range), ("eps", eps)):
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise InputError(f"product {name} must be a finite number > 0, got {v!r}")
    rs = 2.0 * math.sqrt(x_range * y_range)
    m = max(1, math.ceil(rs / (4.0 * math.sqrt(eps))))
    p = ProductTerms(float(x_range), float(y_range), m, float(eps))
    while p.sup_error > eps:  # ceil() rounding of the bound itself; at most a step or two
        m += 1
        p = ProductTerms(float(x_range), float(y_range), m, float(eps))
    return p


def add_product(
    units: UnitSink,
    prod: ProductTerms,
    x: int,
    y: int,
    one: int,
    dst: int,
    weight: float = 1.0,
    gate: Sequence[tuple[int, float]] = (),
) -> None:
    """Add the ``4m`` units that add ``weight * x y`` (approximately, see
    [`ProductTerms`][icdl.construct.engine.products.ProductTerms]) to coordinate ``dst``; ``x``, ``y``,
    ``one`` are coordinates of the same token.

    ``gate``: reads accumulated *first* into every unit (e.g. ``[(ONE, -C), (R, C)]`` turns the product off
    where the mask R is 0 and leaves it unchanged, exactly, where R is 1)."""
    for ax, ay, b, w in prod.units():
        reads = [*gate, (x, ax), (y, ay)]
        if b != 0.0:
            reads.append((one, b))
        units.add(reads, [(dst, weight * w)])


def add_mask_product(
    units: UnitSink, mask: int, z: int, one: int, dst: int, bound: float, weight: float = 1.0
) -> None:
    """Add ``weight * m z`` to ``dst`` exactly for ``m in {0, 1}`` and ``|z| <= bound`` (two units):
    ``m z = relu(z - C(1 - m)) - relu(-z - C(1 - m))``.

    The gate ``-C ONE + C m`` is accumulated first: it is exactly 0 for ``m = 1`` (then ``+ z`` is exact) and
    ``-C`` for ``m = 0`` (both units off)."""
    C = float(bound)
    units.add([(one, -C), (mask, C), (z, 1.0)], [(dst, weight)])
    units.add([(one, -C), (mask, C), (z, -1.0)], [(dst, -weight)])


def add_mask_in_place(units: UnitSink, mask: int, z: int, bound: float) -> None:
    """Turn coordinate ``z`` into ``m z`` (residual MLP: add ``-(1 - m) z``), exactly for ``m in {0, 1}`` and
    ``|z| <= bound``: ``(1 - m) z = relu(z - C m) - relu(-z - C m)``; for ``m = 0`` the result is
    ``z - relu(z) + relu(-z) = 0`` exactly."""
    C = float(bound)
    units.add([(mask, -C), (z, 1.0)], [(z, -1.0)])
    units.add([(mask, -C), (z, -1.0)], [(z, 1.0)])


SlotRef = tuple[str, int | None]


def product_mlp(
    layout: Layout,
    x: SlotRef,
    y: SlotRef,
    out: SlotRef,
    *,
    x_range: float,
    y_range: float,
    eps: float,
    dtype: torch.dtype = torch.float64,
) -> tuple[ReLUMLP, ProductTerms]:
    """A bias-free ReLU MLP (Definition 8) that adds ``x[k] * y[k]`` to ``out[k]`` for every entry k of three
    equally sized slots of the same token (slots named as ``(name, layer)``), with sup error
    ``<= eps`` while ``|x[k]| <= x_range`` and ``|y[k]| <= y_range``. Returns the MLP and its
    [`ProductTerms`][icdl.construct.engine.products.ProductTerms] (sup error, hidden width per product, range
    assumptions)."""
    xs, ys, os = layout.indices(*x), layout.indices(*y), layout.indices(*out)
    if not len(xs) == len(ys) == len(os):
        raise ValueError(f"slots {x}, {y}, {out} have sizes {len(xs)}, {len(ys)}, {len(os)}")
    prod = product_terms(x_range, y_range, eps)
    units = UnitTable()
    one = layout.index("ONE")
    for i, j, o in zip(xs, ys, os, strict=True):
        add_product(units, prod, i, j, one, o)
    role = Role("product", "token-local product (docs/construction.md)")
    return ReLUMLP(units.tensors(dtype), layout.dim, role=role, labels=layout.slot_labels()), prod

"""Sum-of-ReLU terms as the compiler uses them: fetched from [`icdl.relu_sums`][icdl.relu_sums], then
*conditioned*.

Each term ``c relu(a t + b)`` becomes one attention head (or MLP hidden unit). Because ReLU is positively
homogeneous, ``c relu(a t + b) = (c / lam) relu(lam a t + lam b)`` for any ``lam > 0``; we pick ``lam =
|c|`` so that every head writes ``±1`` and all the magnitude sits in the score. For the exact relu'
delta-step ``relu(t)/delta - relu(t - delta)/delta`` this gives ``relu(X) - relu(X - 1)`` with ``X = t /
delta``: when the two heads share their leading reads and the bias ``-1`` is added last (see
[`icdl.construct.engine.layers`][icdl.construct.engine.layers]), ``X - 1`` is exact for ``X >= 1/2`` and the
difference is *exactly* 1 — where the unconditioned form loses ``ulp(t) / delta ~ 1e-7`` to rounding. For
exact sums, conditioned ``b`` and ``c`` within a few ulps of an integer are snapped to it (``fl(delta *
fl(1/delta))`` is not always 1, e.g. for ``delta = 1e-9``).

The same conditioned terms are evaluated by the verifier's surrogate recursion, so "what the transformer
should compute" and "what it computes" use identical coefficients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from icdl.errors import InputError
from icdl.relu_sums import loss_derivative_sum, relu_sum_for

__all__ = ["SumTerms", "Terms", "activation_terms", "loss_terms"]

_SNAP_ULPS = 8.0


def _snap(x: float) -> float:
    r = float(round(x))
    if r != 0.0 and abs(x - r) <= _SNAP_ULPS * math.ulp(abs(r)):
        return r
    return x


@dataclass(frozen=True)
class Terms:
    """Conditioned ReLU sum ``g(t_1..t_k) = sum_m c_m relu(a_m · (t_1..t_k) + b_m)`` (Definition 4): one
    argument for an activation (Lemmas 2-3), two for the loss derivative ``u(t, y)[k]`` (Lemma 4, (C.13)).

    Attributes:
        a: per term, the k input weights (tuples of floats); b, c: per term (``|c_m| = 1`` after
            conditioning).
        target: the function approximated (``"sigmoid"``, ``"relu'"``, ``"squared'"`` ...).
        exact: the sum equals the target (outside ``(0, delta)`` for the relu' step).
        radius: the range ``[-R, R]`` of the fit (a fitted one-argument sum is flat outside it).
        sup_error: measured sup error on ``[-R, R]^k`` reported by [`icdl.relu_sums`][icdl.relu_sums].
        eps: requested sup error (0 for exact sums).
        delta: width of the step's uncertainty window for relu' (None otherwise).
    """

    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    c: tuple[float, ...]
    target: str
    exact: bool
    radius: float
    sup_error: float
    eps: float
    delta: float | None = None
    source: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def num_terms(self) -> int:
        return len(self.b)

    @property
    def num_args(self) -> int:
        return len(self.a[0]) if self.a else 1

    def __call__(self, *args: Tensor) -> Tensor:
        """Evaluate the sum elementwise, term by term in order (the order the heads/units are summed);
        within a term the inputs are accumulated in argument order, then the bias."""
        if len(args) != self.num_args:
            raise TypeError(f"these terms take {self.num_args} argument(s), got {len(args)}")
        out = torch.zeros_like(args[0])
        for a, b, c in zip(self.a, self.b, self.c, strict=True):
            pre = a[0] * args[0]
            for ai, t in zip(a[1:], args[1:], strict=True):
                pre = pre + ai * t
            out = out + c * torch.relu(pre + b)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "exact": self.exact,
            "radius": self.radius,
            "eps": self.eps,
            "sup_error": self.sup_error,
            "delta": self.delta,
            "num_terms": self.num_terms,
            "terms": [[*a, b, c] for a, b, c in zip(self.a, self.b, self.c, strict=True)],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Terms:
        rows = d["terms"]
        return cls(
            tuple(tuple(float(v) for v in r[:-2]) for r in rows),
            tuple(float(r[-2]) for r in rows),
            tuple(float(r[-1]) for r in rows),
            d["target"],
            d["exact"],
            d["radius"],
            d["sup_error"],
            d["eps"],
            d.get("delta"),
        )


def _condition(
    a: list[list[float]], b: list[float], c: list[float], exact: bool
) -> tuple[tuple[tuple[float, ...], ...], tuple[float, ...], tuple[float, ...]]:
    """Rescale every term to ``|c| = 1`` (drop terms that are zero everywhere); snap near-integers when the
    sum is exact."""
    A: list[tuple[float, ...]] = []
    Bs: list[float] = []
    Cs: list[float] = []
    for ai, bi, ci in zip(a, b, c, strict=True):
        if ci == 0.0 or (all(x == 0.0 for x in ai) and bi <= 0.0):
            continue  # contributes nothing anywhere
        lam = abs(ci)
        an, bn = [x * lam for x in ai], bi * lam
        if exact:
            an, bn = [_snap(x) for x in an], _snap(bn)
        A.append(tuple(an))
        Bs.append(bn)
        Cs.append(math.copysign(1.0, ci))
    return tuple(A), tuple(Bs), tuple(Cs)


def _from_relu_sum(s: Any, delta: float | None = None) -> Terms:
    """Conditioned [`Terms`][icdl.construct.engine.terms.Terms] of an
    [`icdl.relu_sums.ReluSum`][icdl.relu_sum_type.ReluSum] (any number of arguments)."""
    a = s.a.reshape(s.num_terms, -1).tolist()
    A, B, C = _condition(a, s.b.tolist(), s.c.tolist(), bool(s.exact))
    if not A:
        raise InputError(f"the ReLU sum for {s.target!r} has no non-zero terms")
    return Terms(
        A,
        B,
        C,
        s.target,
        bool(s.exact),
        float(s.radius),
        float(s.sup_error),
        float(s.eps),
        delta,
        s.to_dict(),
    )


def activation_terms(name: str, *, derivative: bool, eps: float, radius: float, delta: float) -> Terms:
    """Conditioned terms of activation ``name`` (or its derivative) from ``icdl.relu_sums.relu_sum_for``."""
    target = f"{name}'" if derivative else name
    s = relu_sum_for(target, eps=eps, radius=radius, delta=delta)
    return _from_relu_sum(s, delta if (name == "relu" and derivative) else None)


def loss_terms(loss: str, *, eps: float, radius: float) -> Terms:
    """Conditioned two-argument terms of ``u(t, y)[k]`` (Lemma 4, (C.13)).

    Squared loss is exact: ``2(t - y) = relu(2t - 2y) - relu(2y - 2t)`` (conditioned to ``|c| = 1``, with an
    infinite range). Other losses come from ``icdl.relu_sums.loss_derivative_sum``.
    """
    if loss == "squared":
        a = ((2.0, -2.0), (-2.0, 2.0))
        return Terms(a, (0.0, 0.0), (1.0, -1.0), "squared'", True, math.inf, 0.0, 0.0)

    return _from_relu_sum(loss_derivative_sum(loss, eps=eps, radius=radius))


@dataclass
class SumTerms:
    """The conditioned ReLU sums a model uses: ``r`` and ``r_prime`` per layer (index j-1), ``u``."""

    r: tuple[Terms, ...]
    r_prime: tuple[Terms, ...]
    u: Terms
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "r": [t.to_dict() for t in self.r],
            "r_prime": [t.to_dict() for t in self.r_prime],
            "u": self.u.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SumTerms:
        return cls(
            r=tuple(Terms.from_dict(t) for t in d["r"]),
            r_prime=tuple(Terms.from_dict(t) for t in d["r_prime"]),
            u=Terms.from_dict(d["u"]),
        )

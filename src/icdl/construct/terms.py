"""Sum-of-ReLU terms as the compiler uses them: fetched from :mod:`icdl.relu_sums`, then *conditioned*.

Each term ``c relu(a t + b)`` becomes one attention head (or MLP hidden unit). Because ReLU is positively
homogeneous, ``c relu(a t + b) = (c / lam) relu(lam a t + lam b)`` for any ``lam > 0``; we pick ``lam = |c|``
so that every head writes ``±1`` and all the magnitude sits in the score. For the exact relu' delta-step
``relu(t)/delta - relu(t - delta)/delta`` this gives ``relu(X) - relu(X - 1)`` with ``X = t / delta``: when
the two heads share their leading reads and the bias ``-1`` is added last (see :mod:`icdl.layers`), ``X - 1``
is exact for ``X >= 1/2`` and the difference is *exactly* 1 — where the unconditioned form loses
``ulp(t) / delta ~ 1e-7`` to rounding. For exact sums, conditioned ``b`` and ``c`` within a few ulps of an
integer are snapped to it (``fl(delta * fl(1/delta))`` is not always 1, e.g. for ``delta = 1e-9``).

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

__all__ = ["Terms", "Terms2", "activation_terms", "loss_terms"]

_SNAP_ULPS = 8.0


def _snap(x: float) -> float:
    r = float(round(x))
    if r != 0.0 and abs(x - r) <= _SNAP_ULPS * math.ulp(abs(r)):
        return r
    return x


@dataclass(frozen=True)
class Terms:
    """Conditioned one-argument ReLU sum ``g(t) = sum_m c_m relu(a_m t + b_m)`` (Definition 4).

    Attributes:
        a, b, c: term coefficients (tuples of floats), ``|c_m| = 1`` after conditioning.
        target: the function approximated (``"sigmoid"``, ``"relu'"`` ...).
        exact: the sum equals the target (outside ``(0, delta)`` for the relu' step).
        radius: the range ``[-R, R]`` of the fit (a fitted sum is flat outside it).
        sup_error: measured sup error on ``[-R, R]`` reported by :mod:`icdl.relu_sums`.
        eps: requested sup error (0 for exact sums).
        delta: width of the step's uncertainty window for relu' (None otherwise).
    """

    a: tuple[float, ...]
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
        return len(self.a)

    def __call__(self, t: Tensor) -> Tensor:
        """Evaluate the sum elementwise, term by term in order (the order the heads are summed)."""
        out = torch.zeros_like(t)
        for a, b, c in zip(self.a, self.b, self.c, strict=True):
            out = out + c * torch.relu(a * t + b)
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
            "terms": [[a, b, c] for a, b, c in zip(self.a, self.b, self.c, strict=True)],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Terms:
        a, b, c = zip(*d["terms"], strict=True) if d["terms"] else ((), (), ())
        return cls(
            tuple(a),
            tuple(b),
            tuple(c),
            d["target"],
            d["exact"],
            d["radius"],
            d["sup_error"],
            d["eps"],
            d["delta"],
        )


@dataclass(frozen=True)
class Terms2:
    """Conditioned two-argument sum ``g(t, y) = sum_m c_m relu(a0_m t + a1_m y + b_m)`` for ``u(t, y)[k]``."""

    a0: tuple[float, ...]
    a1: tuple[float, ...]
    b: tuple[float, ...]
    c: tuple[float, ...]
    target: str
    exact: bool
    radius: float
    sup_error: float
    eps: float

    @property
    def num_terms(self) -> int:
        return len(self.a0)

    def __call__(self, t: Tensor, y: Tensor) -> Tensor:
        out = torch.zeros_like(t)
        for a0, a1, b, c in zip(self.a0, self.a1, self.b, self.c, strict=True):
            out = out + c * torch.relu(a0 * t + a1 * y + b)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "exact": self.exact,
            "radius": self.radius,
            "eps": self.eps,
            "sup_error": self.sup_error,
            "num_terms": self.num_terms,
            "terms": [list(t) for t in zip(self.a0, self.a1, self.b, self.c, strict=True)],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Terms2:
        a0, a1, b, c = zip(*d["terms"], strict=True)
        return cls(
            tuple(a0),
            tuple(a1),
            tuple(b),
            tuple(c),
            d["target"],
            d["exact"],
            d["radius"],
            d["sup_error"],
            d["eps"],
        )


def _condition(a: list[float], b: list[float], c: list[float], exact: bool) -> tuple[list, list, list]:
    """Rescale every term to ``|c| = 1`` (drop zero terms); snap near-integers when the sum is exact."""
    A: list[float] = []
    Bs: list[float] = []
    Cs: list[float] = []
    for ai, bi, ci in zip(a, b, c, strict=True):
        if ci == 0.0 or (ai == 0.0 and bi <= 0.0):
            continue  # contributes nothing anywhere
        lam = abs(ci)
        an, bn = ai * lam, bi * lam
        if exact:
            an, bn = _snap(an), _snap(bn)
        A.append(an)
        Bs.append(bn)
        Cs.append(math.copysign(1.0, ci))
    return A, Bs, Cs


def activation_terms(name: str, *, derivative: bool, eps: float, radius: float, delta: float) -> Terms:
    """Conditioned terms of activation ``name`` (or its derivative) from ``icdl.relu_sums.relu_sum_for``."""
    from icdl.relu_sums import relu_sum_for

    target = f"{name}'" if derivative else name
    s = relu_sum_for(target, eps=eps, radius=radius, delta=delta)
    a, b, c = _condition(s.a.tolist(), s.b.tolist(), s.c.tolist(), bool(s.exact))
    if not a:
        raise InputError(f"the ReLU sum for {target!r} has no non-zero terms")
    is_step = name == "relu" and derivative
    return Terms(
        tuple(a),
        tuple(b),
        tuple(c),
        target,
        bool(s.exact),
        float(s.radius),
        float(s.sup_error),
        float(s.eps),
        delta if is_step else None,
        s.to_dict(),
    )


def loss_terms(loss: str, *, eps: float, radius: float) -> Terms2:
    """Conditioned two-argument terms of ``u(t, y)[k]`` (Lemma 4, (C.13)).

    Squared loss is exact: ``2(t - y) = 2 relu(t - y) - 2 relu(y - t)``. Other losses come from
    ``icdl.relu_sums.loss_derivative_sum``.
    """
    if loss == "squared":
        # Conditioned form of the brief's units relu(±(2 P_N[k] - 2 Y[k])) with output weights ±1.
        a0, a1, b, c = [2.0, -2.0], [-2.0, 2.0], [0.0, 0.0], [1.0, -1.0]
        return Terms2(tuple(a0), tuple(a1), tuple(b), tuple(c), "squared'", True, math.inf, 0.0, 0.0)
    try:
        from icdl.relu_sums import loss_derivative_sum
    except ImportError:  # pragma: no cover - depends on the relu_sums module's progress
        raise InputError(
            f"loss {loss!r} needs icdl.relu_sums.loss_derivative_sum, which is not available"
        ) from None
    s = loss_derivative_sum(loss, eps=eps, radius=radius)
    a = s.a.tolist()
    a0 = [float(x[0]) for x in a]
    a1 = [float(x[1]) for x in a]
    # Condition each term to |c| = 1 (as for one-argument sums).
    A0, A1, B, C = [], [], [], []
    for x0, x1, bi, ci in zip(a0, a1, s.b.tolist(), s.c.tolist(), strict=True):
        if ci == 0.0:
            continue
        lam = abs(ci)
        vals = [x0 * lam, x1 * lam, bi * lam]
        if s.exact:
            vals = [_snap(v) for v in vals]
        A0.append(vals[0])
        A1.append(vals[1])
        B.append(vals[2])
        C.append(math.copysign(1.0, ci))
    return Terms2(
        tuple(A0),
        tuple(A1),
        tuple(B),
        tuple(C),
        f"{loss}'",
        bool(s.exact),
        float(s.radius),
        float(s.sup_error),
        float(s.eps),
    )

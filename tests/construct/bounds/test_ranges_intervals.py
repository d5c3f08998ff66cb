"""The interval rules of ``--range auto`` (``icdl.construct.bounds.ranges``) contain what they bound: r and
r' of every activation over an interval hold r(z) and r'(z) for every z in it (issue 35, held-out set 2)."""

from __future__ import annotations

import pytest
import torch

from icdl.construct.bounds.ranges import _activation, _Iv
from icdl.nets import ACTIVATIONS

DELTA = 1e-2


def _exact(name: str, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """r(z), r'(z) as the construction computes them (relu': the step clamp(z / delta, 0, 1))."""
    if name == "relu":
        return z.clamp(min=0), (z / DELTA).clamp(0, 1)
    act = ACTIVATIONS[name]
    return act.fn(z), act.deriv(z)


@pytest.mark.parametrize("name", ["relu", "identity", "softplus", "sigmoid", "tanh"])
@pytest.mark.parametrize("seed", range(3))
def test_r_and_r_prime_of_an_interval_contain_r_and_r_prime_of_its_members(name: str, seed: int) -> None:
    """Intervals below 0, above 0, across 0 and of width 0, far and near: every member's r(z) and r'(z) lies
    in the interval rule's result (r' of sigmoid and tanh is even and unimodal, so its lower end is at the
    endpoint farthest from 0, whichever side that is)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(400, generator=g, dtype=torch.float64) * 3
    b = torch.randn(400, generator=g, dtype=torch.float64) * 3
    lo, hi = torch.minimum(a, b), torch.maximum(a, b)
    lo[:20] = hi[:20]  # points
    lo[20:40], hi[20:40] = -5.0 - lo[20:40].abs(), -lo[20:40].abs() / 10  # far below 0, ending near it
    p, rp = _activation(name, _Iv(lo, hi), 0.0, DELTA)
    for t in torch.linspace(0, 1, 41, dtype=torch.float64):
        z = lo + t * (hi - lo)
        r, d = _exact(name, z)
        tol = 1e-12
        assert bool(((p.lo - tol <= r) & (r <= p.hi + tol)).all()), name
        assert bool(((rp.lo - tol <= d) & (d <= rp.hi + tol)).all()), name

"""Properties of the a-priori ranges and the prediction bound that held-out set 4 (issue 35,
``scripts/mutation_heldout.py --set 4``) showed no test pinned down: each was written after its plant
survived the fast tier, and checked to fail with the plant and pass without it."""

from __future__ import annotations

import math

import pytest
import torch

from icdl.construct.bounds.prediction import activation_bounds
from icdl.construct.bounds.ranges import DEFAULT_NEEDS, auto_ranges, trajectory_bounds
from icdl.construct.compile import sample_task_info
from icdl.errors import InputError
from icdl.nets import NetSpec, forward


def test_the_labels_bound_is_their_largest_magnitude_negative_ones_included() -> None:
    """``maxima["y"]`` bounds ``|y|``: with every label negative it is ``max |y|``, not the largest label
    (which would give a fitted loss derivative a range that misses every label)."""
    spec = NetSpec(2, 3, 2, 1)
    tk = sample_task_info(spec, 6, seed=2)
    y = -(tk.y.abs() + 1.0)
    b = trajectory_bounds(
        spec, "squared", lr=0.1, steps=2, box=None, x=tk.x, y=y, x_query=tk.x_query, w0=tk.w0
    )
    assert b.maxima["y"] == pytest.approx(float(y.abs().max()), abs=0.0)
    assert b.maxima["y"] >= 1.0 > float(y.max())  # the premise: the largest label is below -1


@pytest.mark.parametrize("steps", [1, 3])
def test_an_overflow_leaves_one_infinite_weight_bound_per_remaining_step(steps: int) -> None:
    """``weights`` has one bound per step ``l = 0..L`` whatever happens: a prompt whose first forward
    overflows (inputs of 1e200 through three layers) gives ``w^(0)``'s bound and then ``inf`` for each of the
    L later steps."""
    spec = NetSpec(3, 4, 2, 1)
    tk = sample_task_info(spec, 5, seed=1)
    x = tk.x * 1e200
    b = trajectory_bounds(spec, "squared", lr=0.1, steps=steps, box=None, x=x, y=tk.y, x_query=tk.x_query,
                          w0=tk.w0)  # fmt: skip
    assert len(b.weights) == steps + 1
    assert b.weights[0] == pytest.approx(float(tk.w0.abs().max()), abs=0.0)
    assert all(v == math.inf for v in b.weights[1:])
    assert b.maxima["z"] == math.inf  # the premise: it did overflow


def test_auto_range_refuses_a_backward_signal_above_the_gate_constant() -> None:
    """The gate constant C must exceed ``|back|`` (Lemma 4's gate multiplies it): a prompt whose forward is
    tiny (first layer 0, so ``z``, ``t`` and ``u`` stay small) but whose output weights are large has
    ``|back| = |u V_2|`` above C, and ``--range auto`` says no range fits."""
    spec = NetSpec(2, 3, 2, 1, output="linear")
    tk = sample_task_info(spec, 4, seed=0)
    w0 = tk.w0.clone()
    w0[: spec.offsets[1]] = 0.0
    w0[spec.offsets[1] :] = 500.0
    y = torch.ones_like(tk.y)
    kw = {"lr": 1e-9, "steps": 1, "box": None, "x": tk.x, "y": y, "x_query": tk.x_query, "w0": w0}
    b = trajectory_bounds(spec, "squared", **kw)  # type: ignore[arg-type]
    m = b.maxima
    assert m["back"] > 100.0 > max(m["z"], m["t"], m["u"]), m  # the premise: only |back| is above C
    with pytest.raises(InputError, match="--range auto: no range fits"):
        auto_ranges(spec, "squared", eps=1e-3, needs=DEFAULT_NEEDS, limit=100.0, **kw)  # type: ignore[arg-type]
    assert auto_ranges(spec, "squared", eps=1e-3, needs=DEFAULT_NEEDS, limit=1e4, **kw).radius > 0  # type: ignore[arg-type]


@pytest.mark.parametrize("scale", [0.0, 1e-3])
def test_activation_bounds_cover_a_point_that_moves_two_layers_at_once(scale: float) -> None:
    """Near ``w = 0`` the activations move only to second order: ``V_1 = a u x^T / |x|``,
    ``V_2 = a u' u^T`` (u, u' positive unit vectors, ``a = ρ / sqrt 2``, so the point is on the ball)
    gives ``p(2) = a^2 |x| u'``, of norm ``ρ^2 |x| / 2``; the bound must cover it, so the deviation
    ``d_2`` must use ``||V_2|| + ρ`` (the module docstring), not ``||V_2^w||`` alone (about 0 here)."""
    spec = NetSpec(3, 4, 3, 1)
    g = torch.Generator().manual_seed(0)
    xq = torch.rand(3, generator=g, dtype=torch.float64) + 0.5
    w = scale * torch.randn(spec.num_params, generator=g, dtype=torch.float64)
    rho = 2.0
    a = rho / math.sqrt(2.0)
    u = torch.full((4,), 0.5, dtype=torch.float64)  # unit, positive
    d = torch.zeros_like(w)
    D = spec.offsets
    d[D[0] : D[1]] = (a * torch.outer(u, xq / xq.norm())).flatten()
    d[D[1] : D[2]] = (a * torch.outer(u, u)).flatten()
    v = w + d
    assert float((v - w).norm()) <= rho * (1 + 1e-12)
    Vs = [v[D[j] : D[j + 1]].reshape(spec.shapes[j]) for j in range(spec.depth)]
    p2 = torch.relu(Vs[1] @ torch.relu(Vs[0] @ xq))
    assert float(p2.norm()) > 0.9 * rho**2 * float(xq.norm()) / 2  # the premise: it moved to second order
    bounds = activation_bounds(spec, w, xq, rho)
    assert float(p2.norm()) <= bounds[2]
    out = forward(spec, v, xq[None])[0]
    assert float(out.norm()) <= bounds[3]

"""The L_f estimate's iteration, step by step (issue 35: survivors of the ``check/verify.py`` mutmut shard in
``estimate_lipschitz``): how many Hessian-vector products each point gets (the default ``iters``, the warm
starts' ``max(1, iters // 4)``, the stop once ``||Hv||`` grows by less than ``rtol``), that a repeated point
does not end the visit, and that a point with a zero Hessian gives the next point a fresh start."""

from __future__ import annotations

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task
from icdl.construct.check.verify import estimate_lipschitz, lipschitz_points
from icdl.nets import NetSpec, unflatten

SPEC = NetSpec(2, 3, 2, 1, activation="tanh")
N = 6


@pytest.fixture(scope="module")
def setup():  # type: ignore[no-untyped-def]
    model = compile_gd_transformer(SPEC, steps=1, n=N, eps=1e-2, lr=0.3)
    x, y, _, w0, _ = sample_task(SPEC, N, seed=4)
    g = torch.Generator().manual_seed(2)
    w1 = w0 + 0.8 * torch.randn(w0.shape, generator=g, dtype=w0.dtype)
    return model, x, y, w0, w1


@pytest.fixture
def hvps(monkeypatch):  # type: ignore[no-untyped-def]
    """The Hessian-vector products ``estimate_lipschitz`` forms (autograd calls without create_graph)."""
    calls: list[int] = []
    real = torch.autograd.grad

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not kwargs.get("create_graph", False):
            calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", counted)
    return calls


def test_the_default_is_20_steps_at_the_first_point(setup, hvps) -> None:  # type: ignore[no-untyped-def]
    model, x, y, w0, _ = setup
    estimate_lipschitz(model, [w0], x, y, rtol=0.0)
    assert len(hvps) == 20  # verify's lipschitz_iters default, the report's "up to 20 steps"


@pytest.mark.parametrize(("iters", "warm"), [(4, 1), (7, 1), (8, 2), (13, 3)])
def test_a_warm_started_point_gets_max_1_iters_over_4_steps(setup, hvps, iters: int, warm: int) -> None:  # type: ignore[no-untyped-def]
    model, x, y, w0, w1 = setup
    estimate_lipschitz(model, [w0, w1], x, y, iters=iters, rtol=0.0)
    assert len(hvps) == iters + warm


def test_the_iteration_stops_once_the_norm_grows_by_less_than_rtol(setup, hvps) -> None:  # type: ignore[no-untyped-def]
    """With rtol = 0.5 the iteration stops at the first step that does not grow ||Hv|| by half: after a few
    steps, not all 20 (the norms of H^k v / |H^(k-1) v| never decrease and converge)."""
    model, x, y, _, w1 = setup
    full = estimate_lipschitz(model, [w1], x, y, iters=20, rtol=0.0)
    hvps.clear()
    stopped = estimate_lipschitz(model, [w1], x, y, iters=20, rtol=0.5)
    assert 2 <= len(hvps) < 20
    assert 0 < stopped <= full * (1 + 1e-12)


def test_a_repeated_point_does_not_end_the_visit(setup, hvps) -> None:  # type: ignore[no-untyped-def]
    """w0 starts both trajectories: a copy of an earlier point is skipped, and the points after it are still
    visited (the same estimate and products as without the copy)."""
    model, x, y, w0, w1 = setup
    once = estimate_lipschitz(model, [w1, w0], x, y, iters=8, rtol=0.0)
    n_once = len(hvps)
    hvps.clear()
    assert estimate_lipschitz(model, [w1], x, y, iters=8, rtol=0.0) < once  # the premise: w0 is the larger
    hvps.clear()
    again = estimate_lipschitz(model, [w1, w1.clone(), w0], x, y, iters=8, rtol=0.0)
    assert again == once and len(hvps) == n_once


def test_a_point_with_a_zero_hessian_gives_the_next_point_a_fresh_start() -> None:
    """A ReLU network whose first layer is 0 has every pre-activation at 0, where autograd's relu'' and relu'
    are 0: its Hessian is exactly 0 (Hv = 0, no direction to normalise). The next point starts afresh and is
    estimated as if it came first (up to the random start)."""
    spec = NetSpec(2, 3, 2, 1)
    model = compile_gd_transformer(spec, steps=1, n=N, lr=0.3)
    x, y, _, w0, _ = sample_task(spec, N, seed=4)
    dead = w0.clone()
    unflatten(spec, dead)[0].zero_()  # a view: the first layer's weights
    assert float(unflatten(spec, dead)[0].abs().max()) == 0.0 < float(dead.abs().max())
    assert estimate_lipschitz(model, [dead], x, y, iters=10) == 0.0  # the premise: a zero Hessian
    alone = estimate_lipschitz(model, [w0], x, y, iters=60, rtol=0.0)
    after = estimate_lipschitz(model, [dead, w0], x, y, iters=60, rtol=0.0)
    assert alone > 0 and after == pytest.approx(alone, rel=1e-6)


@pytest.mark.parametrize("count", [1, 2, 5, 8])
def test_as_many_points_as_allowed_are_all_visited(count: int) -> None:
    """``count <= max_points``: every index, in order (one point and one allowed included)."""
    assert lipschitz_points(count, count) == list(range(count))

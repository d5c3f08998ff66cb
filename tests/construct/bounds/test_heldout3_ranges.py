"""Properties of ``--range auto`` that held-out set 3 (issue 35, ``scripts/mutation_heldout.py --set 3``)
showed no test pinned down: each was written after its plant survived the fast tier, and checked to fail with
the plant and pass without it."""

from __future__ import annotations

import pytest

from icdl.construct.bounds.ranges import DEFAULT_NEEDS, auto_ranges
from icdl.construct.compile import sample_task_info
from icdl.nets import NetSpec


@pytest.mark.parametrize(("first", "second"), [(0.1, 1.0), (1.0, 1.0), (0.2, 0.7)])
def test_a_fitted_loss_derivative_gets_a_range_covering_its_outputs_and_labels(
    first: float, second: float
) -> None:
    """The logistic loss's u is a two-argument sum fitted on ``[-R, R]^2`` over ``(p(N), y)``: R is at least
    the bound on every pre-activation and on ``|p(N)|`` and ``|y|``. With softplus at the output and small
    first-layer weights the output's bound is above every pre-activation's and above the floor 1 (the
    first case), so R comes from ``t``."""
    spec = NetSpec(2, 3, 2, 1, activation="softplus")
    tk = sample_task_info(spec, 6, seed=3, loss="logistic")
    w0 = tk.w0.clone()
    cut = spec.offsets[1]
    w0[:cut] *= first
    w0[cut:] = w0[cut:].abs() * second
    ar = auto_ranges(spec, "logistic", lr=0.3, steps=3, box=None, x=tk.x, y=tk.y, x_query=tk.x_query, w0=w0,
                     eps=1e-2, needs=DEFAULT_NEEDS)  # fmt: skip
    m = ar.bounds.maxima
    assert all(ar.radius >= m[q] for q in ("z", "t", "y")), (ar.radius, m)
    if (first, second) == (0.1, 1.0):
        assert m["t"] > max(m["z"], 1.0)  # the premise: only t's bound makes R above 1

"""The compact variant (2N+3 sublayers per step): exact ReLU GD like the paper's variant."""

from __future__ import annotations

import pytest
import torch

from icdl import theory
from icdl.construct import compile_gd_transformer, sample_task, verify
from icdl.nets import NetSpec, forward, reference_gd

# (N, K, d_x, d_y, n, L, box) — d_x != d_y throughout
CASES = [
    (2, 4, 3, 1, 10, 5, None),
    (2, 5, 4, 2, 8, 4, 0.6),
    (3, 5, 4, 2, 7, 3, 0.8),
    (3, 6, 2, 3, 9, 4, None),
    (6, 3, 2, 1, 8, 3, None),
    (6, 4, 5, 2, 6, 3, 0.5),
]


@pytest.mark.parametrize("case", CASES)
def test_compact_matches_reference_gd(case) -> None:
    N, K, dx, dy, n, L, box = case
    spec = NetSpec(N, K, dx, dy)
    x, y, xq, w0, _ = sample_task(spec, n, seed=N + K)
    proj = "box" if box else "none"
    model = compile_gd_transformer(spec, lr=0.1, steps=L, n=n, projection=proj, box=box, variant="compact")
    assert model.sublayers_per_step == 2 * N + 3 == theory.sublayers_per_step(N) - 1
    out = model(model.build_prompt(x, y, xq, w0))
    ref = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=L, box=box)
    W = model.read_weights(out)[0]
    assert float((W - ref[-1]).abs().max()) <= 1e-9 * max(1.0, float(ref.abs().max()))
    want = forward(spec, ref[-1], xq[None])[0]
    got = model.read_prediction(out)[0]
    assert float((got - want).abs().max()) <= 1e-9 * max(1.0, float(want.abs().max()))
    rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
    assert rep.passed and rep.delta_window_count == 0 and rep.max_sublayer_err <= 1e-12


def test_compact_structure_and_same_heads_as_paper() -> None:
    spec = NetSpec(3, 5, 3, 2)
    paper = compile_gd_transformer(spec, steps=2, n=6)
    compact = compile_gd_transformer(spec, steps=2, n=6, variant="compact")
    infos = compact.infos()
    assert [i.role for i in infos] == ["forward_derivative"] * 3 + ["loss"] + ["backward"] * 3 + [
        "update",
        "project",
    ]
    assert [i.writes for i in infos[:3]] == [("P_1", "R_1"), ("P_2", "R_2"), ("P_3", "R_3")]
    assert sum(i.heads for i in infos) == sum(i.heads for i in paper.infos())  # heads moved, not added
    assert compact.embedding_dim == paper.embedding_dim
    x, y, xq, w0, _ = sample_task(spec, 6, seed=3)
    a = paper.read_weights(paper(paper.build_prompt(x, y, xq, w0)))
    b = compact.read_weights(compact(compact.build_prompt(x, y, xq, w0)))
    torch.testing.assert_close(a, b, rtol=0, atol=1e-14)


def test_compact_smooth_network_matches_paper_surrogate() -> None:
    """With fitted sums both variants compute the same surrogate; the verifier passes both."""
    spec = NetSpec(2, 3, 2, 1, activation="tanh")
    x, y, xq, w0, _ = sample_task(spec, 5, seed=2)
    for variant in ("paper", "compact"):
        model = compile_gd_transformer(spec, steps=2, n=5, eps=1e-2, variant=variant)
        rep = verify(model, x, y, xq, w0, lipschitz_iters=0)
        assert rep.passed and rep.trajectory_error <= rep.corollary_bound_budget

"""icdl.construct: structure, per-layer semantics (Lemmas 2-5), end-to-end ReLU exactness."""

from __future__ import annotations

import pytest
import torch

from icdl import theory
from icdl.construct import compile_gd_transformer, sample_task
from icdl.construct.compile import with_steps
from icdl.construct.engine.layout import SCRATCH
from icdl.errors import InputError
from icdl.nets import NetSpec, forward, gradient, lemma1_terms, project, reference_gd


def _trace(model, H):  # (step, index) -> state after that sublayer (step None: the readout)
    out = {}
    model.run(H, trace=lambda pt, X: out.__setitem__((pt.step, pt.index), X[0].clone()))
    return out


def _window_hits(spec, w_traj, x, delta=1e-9) -> int:
    """Pre-activations of the examples inside (0, delta) along a trajectory."""
    hits = 0
    for w in w_traj:
        for z in lemma1_terms(
            spec, "squared", w, x, torch.zeros(x.shape[0], spec.out_dim, dtype=x.dtype)
        ).pre:
            hits += int(((z > 0) & (z < delta)).sum())
    return hits


# (N, K, d_x, d_y, n, L, box) — d_x != d_y throughout; fast tier
CASES = [
    (2, 4, 3, 1, 10, 5, None),
    (3, 5, 4, 2, 7, 3, 0.8),  # the numpy prototype's setting (docs/paper.md, token layout)
    (4, 6, 5, 3, 12, 4, 0.5),
    (6, 3, 2, 1, 8, 3, None),
]
# N in {2, 3, 4, 6}, K up to 16, n up to 64, L up to 20, with and without box (under a second each)
BIG_CASES = [
    (2, 16, 8, 1, 64, 20, None),
    (3, 16, 8, 1, 64, 10, None),
    (3, 16, 8, 1, 64, 10, 0.3),
    (4, 12, 6, 2, 48, 20, 0.4),
    (6, 8, 5, 3, 32, 20, None),
    (6, 16, 4, 2, 64, 10, 0.5),
]


def _check_relu_exact(check_task, N, K, dx, dy, n, L, box, seed=0):
    spec = NetSpec(N, K, dx, dy)
    x, y, xq, w0, _ = sample_task(spec, n, seed=seed)
    check_task(spec, x, y, w0)  # else GD never moves w and the comparison below is vacuous
    model = compile_gd_transformer(spec, lr=0.1, steps=L, n=n, projection="box" if box else "none", box=box)
    out = model(model.build_prompt(x, y, xq, w0))
    ref = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=L, box=box)
    assert _window_hits(spec, ref, torch.cat([x, xq[None]])) == 0  # the only place ReLU may differ from GD
    W = out[0][:, model.layout.indices("W")]
    assert torch.equal(W, W[:1].expand_as(W))  # w identical in every token
    scale = max(1.0, float(ref.abs().max()))
    assert float((W[0] - ref[-1]).abs().max()) <= 1e-9 * scale
    pred, want = model.read_prediction(out)[0], forward(spec, ref[-1], xq[None])[0]
    assert float((pred - want).abs().max()) <= 1e-9 * max(1.0, float(want.abs().max()))


@pytest.mark.parametrize("case", CASES + BIG_CASES)
def test_relu_end_to_end_matches_reference_gd(case, assert_nondegenerate) -> None:
    _check_relu_exact(assert_nondegenerate, *case)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 6))
@pytest.mark.parametrize("case", BIG_CASES)
def test_relu_end_to_end_seed_sweep(case, seed: int, assert_nondegenerate) -> None:
    _check_relu_exact(assert_nondegenerate, *case, seed=seed)


@pytest.mark.parametrize("N", [2, 3, 4])
@pytest.mark.parametrize("box", [None, 1.0])
def test_structure_matches_paper_and_theory(N: int, box) -> None:
    spec = NetSpec(N, 5, 3, 2)
    model = compile_gd_transformer(spec, steps=3, n=6, projection="box" if box else "none", box=box)
    infos = model.infos()
    assert len(infos) == 2 * N + 4 == theory.sublayers_per_step(N)
    assert model.num_sublayers == (2 * N + 4) * 3 == theory.sublayers(N, 3)
    roles = ["forward"] * N + ["derivative", "loss"] + ["backward"] * N + ["update", "project"]
    kinds = ["relu_attention"] * (N + 1) + ["mlp"] + ["ewml"] * N + ["relu_attention", "mlp"]
    assert [i.role for i in infos] == roles
    assert [i.kind for i in infos] == kinds
    assert [i.layer for i in infos if i.role == "backward"] == list(range(N, 0, -1))
    assert model.embedding_dim == theory.embedding_dim(spec)
    terms = theory.term_counts(spec, "squared")
    table = theory.block_table(spec, terms, "box" if box else "none")
    assert [(i.heads, i.hidden) for i in infos] == [(t.heads, t.hidden) for t in table]
    # one SublayerInfo: every field the theory table fills is derived identically from the compiled tables
    assert [i.sizes() for i in infos] == [t.sizes() for t in table]
    rt = theory.readout_table(spec, terms)
    assert [(m.info.heads, m.info.hidden) for m in model.readout] == [(t.heads, t.hidden) for t in rt]
    assert [i.sizes() for i in model.readout_infos()] == [t.sizes() for t in rt]
    assert model.max_heads == theory.max_heads(spec, terms)
    assert model.readout_sublayers == theory.readout_sublayers(N)


def test_sizes_match_theory_for_fitted_sums() -> None:
    spec = NetSpec(3, 4, 2, 2, activation="tanh", output="linear")
    model = compile_gd_transformer(spec, steps=1, n=5, eps=1e-2)
    terms = theory.term_counts(
        spec, "squared", r_terms=model.terms.r[0].num_terms, r_prime_terms=model.terms.r_prime[0].num_terms
    )
    assert [(i.heads, i.hidden) for i in model.infos()] == [
        (t.heads, t.hidden) for t in theory.block_table(spec, terms)
    ]


def test_each_sublayer_does_its_job() -> None:
    """Lemmas 2-5: after F_j P_j = r(V_j p(j-1)); R_j = r'(pre); G = 2(p(N) - y) on examples and 0
    on the query; S_j = the backprop delta; W = w - eta ∇L_n(w); after the projection W = clip and
    scratch = 0."""
    N, n, lr, box = 3, 9, 0.2, 0.6
    spec = NetSpec(N, 4, 3, 2)
    x, y, xq, w0, _ = sample_task(spec, n, seed=3)
    model = compile_gd_transformer(spec, lr=lr, steps=1, n=n, projection="box", box=box)
    H = model.build_prompt(x, y, xq, w0)
    st = _trace(model, H)
    lay = model.layout
    x_all = torch.cat([x, xq[None]])
    t = lemma1_terms(spec, "squared", w0, x, y)
    tq = lemma1_terms(spec, "squared", w0, xq[None], torch.zeros(1, 2, dtype=x.dtype))
    close = dict(rtol=0, atol=1e-12)
    for j in range(1, N + 1):  # forward layers: every token, the query too
        got = st[(0, j - 1)][:, lay.indices("P", j)]
        torch.testing.assert_close(got, torch.cat([t.p[j], tq.p[j]]), **close)
    for j in range(1, N + 1):
        got = st[(0, N)][:, lay.indices("R", j)]
        torch.testing.assert_close(got, torch.cat([t.r_prime[j - 1], tq.r_prime[j - 1]]), **close)
    G = st[(0, N + 1)][:, lay.indices("G")]
    torch.testing.assert_close(G[:n], 2 * (t.p[N] - y), **close)
    assert torch.equal(G[n], torch.zeros(2, dtype=G.dtype))
    for i, j in enumerate(range(N, 0, -1)):
        S = st[(0, N + 2 + i)][:, lay.indices("S", j)]
        torch.testing.assert_close(S[:n], t.s[j - 1], **close)
        assert torch.equal(S[n], torch.zeros_like(S[n]))
    W = st[(0, 2 * N + 2)][:, lay.indices("W")]
    torch.testing.assert_close(W, (w0 - lr * gradient(spec, "squared", w0, x, y)).expand_as(W), **close)
    final = st[(0, 2 * N + 3)]
    torch.testing.assert_close(final[:, lay.indices("W")], project(W, box), **close)
    assert torch.equal(final[:, lay.scratch_indices()], torch.zeros_like(final[:, lay.scratch_indices()]))
    # untouched slots stay as in the prompt
    for name in ("X", "Y", "ONE", "T"):
        assert torch.equal(final[:, lay.indices(name)], H[0][:, lay.indices(name)])
    assert torch.equal(final[:n, lay.indices("X")], x_all[:n])


def test_blocks_leave_w_replicated_and_scratch_zero() -> None:
    spec = NetSpec(3, 6, 4, 2)
    x, y, xq, w0, _ = sample_task(spec, 11, seed=5)
    model = compile_gd_transformer(spec, steps=4, n=11)
    st = _trace(model, model.build_prompt(x, y, xq, w0))
    last = len(model.block) - 1
    for step in range(4):
        H = st[(step, last)]
        W = H[:, model.layout.indices("W")]
        assert torch.equal(W, W[:1].expand_as(W))
        for s in model.layout.slots:
            if s.name in SCRATCH:
                assert torch.equal(H[:, list(s.indices)], torch.zeros(H.shape[0], s.size, dtype=H.dtype))


def test_permuting_examples_leaves_w_unchanged() -> None:
    spec = NetSpec(3, 5, 3, 2)
    n = 10
    x, y, xq, w0, _ = sample_task(spec, n, seed=6)
    model = compile_gd_transformer(spec, steps=3, n=n)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    a = model.read_weights(model(model.build_prompt(x, y, xq, w0)))
    b = model.read_weights(model(model.build_prompt(x[perm], y[perm], xq, w0)))
    torch.testing.assert_close(a, b, rtol=0, atol=1e-14)


def test_fast_paths_do_not_change_the_result() -> None:
    spec = NetSpec(2, 4, 3, 1)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=7)
    model = compile_gd_transformer(spec, steps=2, n=6)
    H = model.build_prompt(x, y, xq, w0)
    fast = model(H)
    for m in [*model.block, *model.readout]:
        if hasattr(m, "fast_paths"):
            m.fast_paths = False
    torch.testing.assert_close(model(H), fast, rtol=0, atol=1e-13)


def test_batched_prompts_match_single_ones() -> None:
    spec = NetSpec(2, 4, 3, 2)
    model = compile_gd_transformer(spec, steps=2, n=5)
    tasks = [sample_task(spec, 5, seed=s) for s in range(3)]
    Hb = torch.cat([model.build_prompt(*t[:4]) for t in tasks])
    ob = model(Hb)
    for b, t in enumerate(tasks):
        torch.testing.assert_close(ob[b : b + 1], model(model.build_prompt(*t[:4])), rtol=0, atol=1e-15)


def test_w0_zero_is_a_fixed_point_for_relu() -> None:
    """The paper's w^(0) = 0 never moves for a bias-free ReLU network (docs/paper.md, erratum E14)."""
    spec = NetSpec(2, 4, 3, 1)
    x, y, xq, _, _ = sample_task(spec, 6, seed=8)
    model = compile_gd_transformer(spec, steps=3, n=6)
    w = model.read_weights(model(model.build_prompt(x, y, xq, torch.zeros(spec.num_params, dtype=x.dtype))))
    assert torch.equal(w, torch.zeros_like(w))


def test_same_block_reused_and_with_steps() -> None:
    spec = NetSpec(2, 3, 2, 1)
    x, y, xq, w0, _ = sample_task(spec, 4, seed=9)
    m5 = compile_gd_transformer(spec, steps=5, n=4)
    m2 = with_steps(m5, 2)
    assert m2.block[0] is m5.block[0]
    ref = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=2)
    torch.testing.assert_close(
        m2.read_weights(m2(m2.build_prompt(x, y, xq, w0)))[0], ref[-1], rtol=0, atol=1e-14
    )


def test_linear_output_and_float32() -> None:
    spec = NetSpec(3, 5, 3, 2, output="linear")
    x, y, xq, w0, _ = sample_task(spec, 8, seed=10)
    model = compile_gd_transformer(spec, steps=3, n=8)
    ref = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=3)
    torch.testing.assert_close(
        model.read_weights(model(model.build_prompt(x, y, xq, w0)))[0], ref[-1], rtol=0, atol=1e-12
    )
    m32 = compile_gd_transformer(spec, steps=3, n=8, dtype="float32")
    assert m32.config.delta == 1e-5
    out = m32(m32.build_prompt(x, y, xq, w0))
    assert out.dtype == torch.float32
    assert float((m32.read_weights(out)[0].double() - ref[-1]).abs().max()) < 1e-4


def test_wrong_prompt_length_and_bad_config_are_rejected() -> None:
    spec = NetSpec(2, 3, 2, 1)
    model = compile_gd_transformer(spec, steps=1, n=4)
    x, y, xq, w0, _ = sample_task(spec, 5, seed=0)
    with pytest.raises(InputError, match="n=4"):
        model.build_prompt(x, y, xq, w0)
    H = torch.zeros(1, 7, model.embedding_dim, dtype=torch.float64)
    with pytest.raises(InputError, match="tokens"):
        model(H)
    for kwargs in (
        {"lr": -1.0},
        {"n": 0},
        {"projection": "box"},
        {"projection": "ball"},
        {"delta": 1e-300},
        {"variant": "nope"},
        {"loss": "nope"},
        {"dtype": "float16"},
    ):
        with pytest.raises(InputError):
            compile_gd_transformer(spec, **{"steps": 1, "n": 4, **kwargs})

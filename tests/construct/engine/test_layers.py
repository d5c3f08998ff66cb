"""icdl.construct.engine.layers: compact sublayers against dense implementations of Definitions 6-8 and
eq. (E.1)."""

from __future__ import annotations

import pytest
import torch

from icdl.construct.engine.layers import EWML, HeadTable, ReLUAttention, ReLUMLP, SoftmaxAttention, UnitTable

D = 9


def _random_heads(g: torch.Generator, heads: int = 5, dh: int = 3, entries: int = 2) -> HeadTable:
    t = HeadTable()
    for m in range(heads):
        w = 1 + m % dh  # heads of different widths exercise the padding
        idx = torch.randint(0, D, (3, w), generator=g).tolist()
        coef = torch.randn(3, w, generator=g, dtype=torch.float64).tolist()
        t.add(
            q=list(zip(idx[0], coef[0], strict=True)),
            k=list(zip(idx[1], coef[1], strict=True)),
            v=[
                (int(torch.randint(0, D, (1,), generator=g)), int(torch.randint(0, D, (1,), generator=g)), c)
                for c in coef[2][:entries]
            ],
        )
    return t


def _dense_attention(
    H: torch.Tensor, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, kind: str
) -> torch.Tensor:
    """Definition 7 (vector form) / eq. (E.1) with plain loops over heads, tokens i and keys s."""
    B, T, _ = H.shape
    out = H.clone()
    for b in range(B):
        for m in range(Q.shape[0]):
            scores = torch.stack(
                [torch.stack([(Q[m] @ H[b, i]) @ (K[m] @ H[b, s]) for s in range(T)]) for i in range(T)]
            )
            w = torch.relu(scores) / T if kind == "relu" else torch.softmax(scores, dim=1)
            for i in range(T):
                for s in range(T):
                    out[b, i] += w[i, s] * (V[m] @ H[b, s])
    return out


@pytest.mark.parametrize("accumulate", ["tokens", "heads"])
@pytest.mark.parametrize("fast", [True, False])
def test_relu_attention_matches_definition_7(accumulate: str, fast: bool) -> None:
    g = torch.Generator().manual_seed(0)
    tables = _random_heads(g).tensors()
    layer = ReLUAttention(tables, D, accumulate=accumulate, fast_paths=fast)  # type: ignore[arg-type]
    H = torch.randn(2, 4, D, generator=g, dtype=torch.float64)
    Q, K, V = layer.dense()
    torch.testing.assert_close(layer(H), _dense_attention(H, Q, K, V, "relu"), rtol=1e-12, atol=1e-12)


def test_relu_attention_fast_paths_on_equal_tokens() -> None:
    """Tokens equal in the slots keys/values (or queries) read: the shortcuts give the plain result."""
    g = torch.Generator().manual_seed(1)
    tables = _random_heads(g, heads=7).tensors()
    H = torch.randn(1, 5, D, generator=g, dtype=torch.float64)
    H[:] = H[:, :1]  # all tokens identical: both shortcuts fire
    H2 = H.clone()
    H2[0, :, 0] = torch.arange(5.0, dtype=torch.float64)  # slot 0 differs across tokens
    for X in (H, H2):
        for acc in ("tokens", "heads"):
            fast = ReLUAttention(tables, D, accumulate=acc, fast_paths=True)  # type: ignore[arg-type]
            slow = ReLUAttention(tables, D, accumulate=acc, fast_paths=False)  # type: ignore[arg-type]
            torch.testing.assert_close(fast(X), slow(X), rtol=1e-13, atol=1e-13)


def test_relu_attention_chunking_is_invisible() -> None:
    g = torch.Generator().manual_seed(2)
    tables = _random_heads(g, heads=11).tensors()
    H = torch.randn(2, 6, D, generator=g, dtype=torch.float64)
    for acc in ("tokens", "heads"):
        big = ReLUAttention(tables, D, accumulate=acc)  # type: ignore[arg-type]
        small = ReLUAttention(tables, D, accumulate=acc, max_chunk_elems=7)  # type: ignore[arg-type]
        torch.testing.assert_close(big(H), small(H), rtol=1e-13, atol=1e-13)


def test_softmax_attention_matches_eq_e1() -> None:
    g = torch.Generator().manual_seed(3)
    layer = SoftmaxAttention(_random_heads(g).tensors(), D)
    H = torch.randn(2, 4, D, generator=g, dtype=torch.float64)
    Q, K, V = layer.dense()
    torch.testing.assert_close(layer(H), _dense_attention(H, Q, K, V, "softmax"), rtol=1e-12, atol=1e-12)


def test_ewml_matches_definition_6() -> None:
    g = torch.Generator().manual_seed(4)
    layer = EWML(_random_heads(g).tensors(), D)
    H = torch.randn(2, 4, D, generator=g, dtype=torch.float64)
    Q, K, V = layer.dense()
    want = H.clone()
    for b in range(2):
        for i in range(4):
            h = H[b, i]
            for m in range(Q.shape[0]):
                want[b, i] += ((Q[m] @ h) @ (K[m] @ h)) * (V[m] @ h)  # same token, no ReLU, no 1/T
    torch.testing.assert_close(layer(H), want, rtol=1e-12, atol=1e-12)


def test_mlp_matches_definition_8() -> None:
    g = torch.Generator().manual_seed(5)
    units = UnitTable()
    for u in range(6):
        reads = [
            (int(i), float(c))
            for i, c in zip(
                torch.randint(0, D, (1 + u % 3,), generator=g),
                torch.randn(1 + u % 3, generator=g),
                strict=True,
            )
        ]
        writes = [(int(torch.randint(0, D, (1,), generator=g)), float(torch.randn(1, generator=g)))]
        units.add(reads, writes)
    layer = ReLUMLP(units.tensors(), D)
    H = torch.randn(3, 4, D, generator=g, dtype=torch.float64)
    W1, W2 = layer.dense()
    torch.testing.assert_close(layer(H), H + torch.relu(H @ W1.t()) @ W2.t(), rtol=1e-12, atol=1e-12)
    # processing the units in chunks (memory bound) gives the same bits as one pass
    small = ReLUMLP(units.tensors(), D, max_chunk_elems=1)
    assert torch.equal(small(H), layer(H))


def test_mlp_plan_follows_in_place_table_edits() -> None:
    """The cached gather/scatter plan is rebuilt when a table is edited in place (ablations, tests)."""
    units = UnitTable()
    units.add([(0, 1.0), (1, -2.0)], [(2, 3.0), (0, 1.0)])
    layer = ReLUMLP(units.tensors(), 3)
    H = torch.tensor([[[1.0, -1.0, 0.5], [2.0, 4.0, 0.0]]], dtype=torch.float64)
    before = layer(H)
    layer.w2_coef.mul_(2.0)
    W1, W2 = layer.dense()
    assert torch.equal(layer(H), H + torch.relu(H @ W1.t()) @ W2.t())
    assert not torch.equal(layer(H), before)
    assert torch.equal(layer(H[:, :1]), H[:, :1] + torch.relu(H[:, :1] @ W1.t()) @ W2.t())  # other shape


def test_ordered_sum_adds_left_to_right_bit_for_bit() -> None:
    """The one-call sum used for scores and EWML products equals the pair-by-pair loop in every bit, also
    where the order matters (terms of very different sizes) and for long rows (d_h > 16)."""
    from icdl.construct.engine.kernels import ordered_sum

    g = torch.Generator().manual_seed(3)
    for width in (1, 2, 17, 70):
        x = torch.randn(5, width, 3, 7, generator=g, dtype=torch.float64)
        x = x * 10.0 ** torch.randint(-12, 12, x.shape, generator=g)
        loop = x[:, 0]
        for r in range(1, width):
            loop = loop + x[:, r]
        assert torch.equal(ordered_sum(x, 1), loop)
    big = torch.tensor([1e16, 1.0, -1e16, 1.0], dtype=torch.float64)[None]
    assert ordered_sum(big, 1).item() == 1.0  # ((1e16 + 1) - 1e16) + 1: not the exact sum 2


def test_relu_attention_shared_leading_pairs_give_the_same_bits() -> None:
    """Heads that differ only in their last (bias) pair share their leading partial score; the result
    equals the head-by-head computation bit for bit, and relu(X) - relu(X - 1) stays exactly 1."""
    t = HeadTable()
    for k in range(3):
        lead_q, lead_k = [(k, 1e8), (3, 1.0)], [(4, 1.0), (k + 1, 1.0)]
        t.add(q=[*lead_q, (5, 0.0)], k=[*lead_k, (5, 0.0)], v=[(5, 6, 1.0)])
        t.add(q=[*lead_q, (5, -1.0)], k=[*lead_k, (5, 1.0)], v=[(5, 6, -1.0)])
    for acc in ("tokens", "heads"):
        layer = ReLUAttention(t.tensors(), 8, accumulate=acc)  # type: ignore[arg-type]
        assert layer._prefixes(torch.zeros(1, 1, 8, dtype=torch.float64)) is not None
        plain = ReLUAttention(t.tensors(), 8, accumulate=acc)  # type: ignore[arg-type]
        plain._prefixes = lambda H, plans=None: None  # type: ignore[method-assign]
        g = torch.Generator().manual_seed(1)
        H = torch.rand(2, 5, 8, generator=g, dtype=torch.float64) + 0.5
        H[..., 5] = 1.0
        H[..., 6] = 0.0
        out = layer(H)
        assert torch.equal(out, plain(H))
        assert torch.equal(out[..., 6], torch.full_like(out[..., 6], 3.0))  # 3 steps of 1 per key, / T


def test_mlp_accumulates_reads_in_order() -> None:
    """The gate pattern of Lemma 4: (-C) + C + x is exact because the two large reads come first."""
    units = UnitTable()
    units.add([(0, -1e6), (1, 1e6), (2, 1.0)], [(3, 1.0)])
    layer = ReLUMLP(units.tensors(), 4)
    x = 0.1234567890123456789
    H = torch.tensor([[[1.0, 1.0, x, 0.0]]], dtype=torch.float64)
    assert layer(H)[0, 0, 3].item() == x


def test_padding_keeps_bias_last_and_counts() -> None:
    t = HeadTable()
    t.add(q=[(1, 2.0)], k=[(2, 3.0)], v=[(0, 4, 1.0)])
    t.add(q=[(1, 1.0), (3, 5.0)], k=[(2, 1.0), (3, 1.0)], v=[(0, 4, 1.0), (1, 5, 2.0)])
    tab = t.tensors()
    assert tab["q_coef"][0].tolist() == [0.0, 2.0]  # front padding
    layer = ReLUAttention(tab, 6)
    assert layer.num_heads == 2 and layer.head_dim == 2
    assert layer.stored_coefficients() == 2 * 2 + 2 * 2 + 2 * 2
    assert layer.nonzero_coefficients() == 3 + 3 + 3  # q, k, v entries that are not padding
    assert layer.dense_parameters() == 3 * 2 * 36


def test_bad_tables_are_rejected() -> None:
    t = HeadTable()
    with pytest.raises(ValueError):
        t.add(q=[(0, 1.0)], k=[], v=[(0, 0, 1.0)])
    t.add(q=[(9, 1.0)], k=[(0, 1.0)], v=[(0, 0, 1.0)])
    with pytest.raises(ValueError, match="outside"):
        ReLUAttention(t.tensors(), 4)
    ok = HeadTable()
    ok.add(q=[(0, 1.0)], k=[(0, 1.0)], v=[(0, 0, 1.0)])
    with pytest.raises(ValueError, match="shape"):
        ReLUAttention(ok.tensors(), 4)(torch.zeros(1, 2, 5, dtype=torch.float64))

"""icdl.construct.engine.layers: the sublayers against plain per-head / per-unit loops that follow the stored
floating-point order (icdl.construct.engine.sublayers), bit for bit (``torch.equal``), in float64 and float32;
and ``CompiledModel.run(reuse=True)`` against fresh states."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from icdl.construct import compile_gd_transformer, sample_task
from icdl.construct.engine import kernels
from icdl.construct.engine.layers import EWML, HeadTable, ReLUAttention, ReLUMLP, UnitTable
from icdl.nets import NetSpec

D = 9


def _heads(g: torch.Generator, heads: int = 6, shared_q: bool = False, widths: int = 3) -> HeadTable:
    """Random heads of widths 1..3 (padding exercised), values of 1-2 entries; ``shared_q``: half the heads
    read the same query slots with the same coefficients (the distinct reads are gathered once)."""
    t = HeadTable()
    q0 = [(1, 0.75), (2, -1.5), (3, 3.0), (4, -6.0), (5, 12.0), (6, -24.0)][:widths]
    for m in range(heads):
        w = 1 + m % widths
        idx = torch.randint(0, D, (3, w), generator=g).tolist()
        c = torch.randn(3, w, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(
            -3, 4, (3, w), generator=g
        )
        q = q0[:w] if shared_q and m % 2 else list(zip(idx[0], c[0].tolist(), strict=True))
        k = list(zip(idx[1], c[1].tolist(), strict=True))
        v = [
            (int(s), int(d), float(x))
            for s, d, x in zip(idx[2][:2], idx[0][::-1][:2], c[2].tolist(), strict=False)
        ]
        t.add(q=q, k=k, v=v)
    return t


def _sc(x: float, dt: torch.dtype) -> Tensor:
    return torch.tensor(x, dtype=dt)


def _head_loop(layer: ReLUAttention | EWML, H: Tensor, attention: bool) -> Tensor:
    """One token at a time (T = 1 for attention: no sum over keys), one head at a time: score pair by pair
    in stored order, each value entry added into 0 in (head, entry) order per coordinate, then h + acc
    (only where something is written)."""
    dt = H.dtype
    out = H.clone()
    for b in range(H.shape[0]):
        for i in range(H.shape[1]):
            h = H[b, i]
            acc: dict[int, Tensor] = {}
            for m in range(layer.num_heads):
                s = _sc(0.0, dt)
                for r in range(layer.head_dim):
                    kr = layer.k_coef[m, r].to(dt) * h[layer.k_idx[m, r]]
                    qr = layer.q_coef[m, r].to(dt) * h[layer.q_idx[m, r]]
                    s = kr * qr if r == 0 else s + kr * qr
                a = torch.relu(s) / 1 if attention else s
                for e in range(layer.v_src.shape[1]):
                    d = int(layer.v_dst[m, e])
                    z = a * (layer.v_coef[m, e].to(dt) * h[layer.v_src[m, e]])
                    acc[d] = acc.get(d, _sc(0.0, dt)) + z
            for d, x in acc.items():
                out[b, i, d] = h[d] + x
    return out


@pytest.fixture(params=["stacked", "pairwise"])
def score_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a score is summed in float64: the stacked products (small sizes) and pair by pair (a
    product above ``STACKED_ELEMS``); float32 always goes pair by pair."""
    if request.param == "pairwise":
        monkeypatch.setattr(kernels, "STACKED_ELEMS", 0)
    return str(request.param)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_ewml_equals_the_head_loop_bit_for_bit(dtype: torch.dtype, score_path: str) -> None:
    g = torch.Generator().manual_seed(11)
    layer = EWML(_heads(g, shared_q=True).tensors(dtype), D)
    H = torch.randn(2, 5, D, generator=g, dtype=torch.float64).to(dtype)
    for X in (H, H[:, :1].expand(2, 5, D).clone()):  # tokens that differ; tokens equal (queries from one)
        want = _head_loop(layer, X, attention=False)
        assert torch.equal(layer(X), want)
        buf = torch.full_like(X, float("nan"))
        assert layer(X, out=buf) is buf and torch.equal(buf, want)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_relu_attention_on_one_token_equals_the_head_loop_bit_for_bit(
    dtype: torch.dtype, score_path: str
) -> None:
    g = torch.Generator().manual_seed(12)
    layer = ReLUAttention(_heads(g, heads=8, shared_q=True).tensors(dtype), D)
    H = torch.randn(3, 1, D, generator=g, dtype=torch.float64).to(dtype)
    want = _head_loop(layer, H, attention=True)
    assert torch.equal(layer(H), want)
    buf = torch.full_like(H, float("nan"))
    assert torch.equal(layer(H, out=buf), want)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_wide_heads_sum_their_pairs_in_stored_order(dtype: torch.dtype, score_path: str) -> None:
    """Heads of up to 6 pairs: any other order of the pair sum (the stacked path's included) changes bits."""
    g = torch.Generator().manual_seed(14)
    for shared in (False, True):
        table = _heads(g, heads=12, shared_q=shared, widths=6).tensors(dtype)
        for layer, X, attn in (
            (EWML(table, D), torch.randn(2, 5, D, generator=g, dtype=torch.float64).to(dtype), False),
            (ReLUAttention(table, D), torch.randn(3, 1, D, generator=g, dtype=torch.float64).to(dtype), True),
        ):
            assert torch.equal(layer(X), _head_loop(layer, X, attention=attn))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_mlp_equals_the_unit_loop_bit_for_bit(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(13)
    units = UnitTable()
    for u in range(7):
        idx = torch.randint(0, D, (4,), generator=g).tolist()
        c = (
            torch.randn(4, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-4, 5, (4,), generator=g)
        ).tolist()
        units.add(list(zip(idx[: 1 + u % 3], c, strict=False)), [(idx[3], c[3]), ((idx[3] + u) % D, 1.0)])
    H = torch.randn(2, 4, D, generator=g, dtype=torch.float64).to(dtype)
    want = H.clone()
    for b in range(2):
        for i in range(4):
            h, acc = H[b, i], {}
            for u in range(len(units)):
                pre = None
                for s, c in units.reads[u]:
                    x = _sc(c, dtype) * h[s]
                    pre = x if pre is None else pre + x
                for d, c in units.writes[u]:
                    acc[d] = acc.get(d, _sc(0.0, dtype)) + torch.relu(pre) * _sc(c, dtype)
            for d, x in acc.items():
                want[b, i, d] = h[d] + x
    for chunk in (1 << 22, 5):  # the flat plan and the chunked path
        layer = ReLUMLP(units.tensors(dtype), D, max_chunk_elems=chunk)
        assert torch.equal(layer(H), want)
        buf = torch.full_like(H, float("nan"))
        assert torch.equal(layer(H, out=buf), want)


@pytest.mark.parametrize("variant", ["paper", "rows"])
def test_run_with_reused_states_gives_every_state_bit_for_bit(variant: str, assert_nondegenerate) -> None:
    spec = NetSpec(depth=3, width=4, in_dim=2, out_dim=1)
    x, y, xq, w0, _ = sample_task(spec, 6, seed=1)
    assert_nondegenerate(spec, x, y, w0)
    model = compile_gd_transformer(spec, steps=2, n=6, variant=variant)
    H = model.build_prompt(x, y, xq, w0)
    H0 = H.clone()
    fresh: list[Tensor] = []
    out = model.run(H, trace=lambda pt, S: fresh.append(S.clone()), reuse=False)
    seen: list[Tensor] = []
    buffers: set[int] = set()

    def keep(pt: object, S: Tensor) -> None:
        seen.append(S.clone())
        buffers.add(S.data_ptr())

    reused = model.run(H, trace=keep, reuse=True)
    assert torch.equal(H, H0)  # the prompt is never written
    assert len(buffers) == 2 and len(seen) == len(fresh)
    assert all(torch.equal(a, b) for a, b in zip(seen, fresh, strict=True))
    assert torch.equal(reused, out) and torch.equal(model(H), out)


def test_run_reusing_states_calls_a_patched_forward_plainly() -> None:
    """A sublayer whose forward was replaced on the instance (no ``out`` argument) still runs untraced."""
    spec = NetSpec(depth=2, width=2, in_dim=2, out_dim=1)
    x, y, xq, w0, _ = sample_task(spec, 4, seed=0)
    model = compile_gd_transformer(spec, steps=1, n=4)
    H = model.build_prompt(x, y, xq, w0)
    want = model(H).clone()
    m = model.block_layers[0]
    inner = m.forward
    m.forward = lambda H: inner(H)  # type: ignore[method-assign]
    assert torch.equal(model(H), want)

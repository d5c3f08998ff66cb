"""The ICL transformer: attention against plain references, causality, a functional re-implementation."""

from __future__ import annotations

import math

import pytest
import torch

from icdl.config import load_config
from icdl.errors import InputError
from icdl.icl.models import ICLTransformer, build_model, relu_attention


def loop_relu_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, norm: str) -> torch.Tensor:
    """Reference: one query at a time, sum over visible keys."""
    T, dh = q.shape[-2], q.shape[-1]
    out = torch.zeros_like(v)
    for i in range(T):
        acc = torch.zeros_like(v[:, :, 0])
        for j in range(i + 1):
            s = torch.relu((q[:, :, i] * k[:, :, j]).sum(-1) / math.sqrt(dh))
            acc = acc + s.unsqueeze(-1) * v[:, :, j]
        out[:, :, i] = acc / ((i + 1) if norm == "causal" else T)
    return out


@pytest.mark.parametrize("norm", ["causal", "length"])
def test_relu_attention_matches_loop(norm: str) -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 4, generator=g, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(relu_attention(q, k, v, norm), loop_relu_attention(q, k, v, norm))  # type: ignore[arg-type]


def reference_forward(
    model: ICLTransformer, xs: torch.Tensor, ys: torch.Tensor, attention: str
) -> torch.Tensor:
    """Functional re-implementation from the module's parameters (explicit masks, explicit softmax)."""
    B, n, _ = xs.shape
    d = model.d_tok
    tok = torch.zeros(B, 2 * n, d, dtype=xs.dtype)
    tok[:, 0::2, : xs.shape[-1]] = xs
    tok[:, 1::2, : ys.shape[-1]] = ys
    h = tok @ model.read_in.weight.T + model.read_in.bias + model.wpe.weight[: 2 * n]
    T = 2 * n
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for blk in model.blocks:
        a_in = torch.nn.functional.layer_norm(h, (h.shape[-1],), blk.ln1.weight, blk.ln1.bias)
        qkv = a_in @ blk.attn.qkv.weight.T + blk.attn.qkv.bias
        q, k, v = qkv.split(h.shape[-1], -1)
        H = blk.attn.heads
        dh = h.shape[-1] // H
        q, k, v = (t.reshape(B, T, H, dh).permute(0, 2, 1, 3) for t in (q, k, v))
        s = q @ k.transpose(-1, -2) / math.sqrt(dh)
        if attention == "softmax":
            s = s.masked_fill(~mask, float("-inf")).softmax(-1)
        else:
            s = torch.relu(s) * mask / torch.arange(1, T + 1, dtype=xs.dtype).unsqueeze(-1)
        a = (s @ v).permute(0, 2, 1, 3).reshape(B, T, H * dh)
        h = h + a @ blk.attn.proj.weight.T + blk.attn.proj.bias
        m_in = torch.nn.functional.layer_norm(h, (h.shape[-1],), blk.ln2.weight, blk.ln2.bias)
        hid = m_in @ blk.mlp.fc.weight.T + blk.mlp.fc.bias
        hid = 0.5 * hid * (1 + torch.tanh(math.sqrt(2 / math.pi) * (hid + 0.044715 * hid**3)))
        h = h + hid @ blk.mlp.proj.weight.T + blk.mlp.proj.bias
    h = torch.nn.functional.layer_norm(h, (h.shape[-1],), model.ln_f.weight, model.ln_f.bias)
    return h[:, 0::2] @ model.read_out.weight.T + model.read_out.bias


def small_model(attention: str, d_x: int = 5, d_y: int = 1) -> ICLTransformer:
    torch.manual_seed(0)
    m = ICLTransformer(d_x, d_y, layers=2, heads=2, d_model=16, d_mlp=24, max_points=12, attention=attention)  # type: ignore[arg-type]
    # Perturb every parameter so LayerNorm affine terms and biases are not trivial.
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return m.double()


@pytest.mark.parametrize("attention", ["softmax", "relu"])
def test_forward_matches_functional_reference(attention: str) -> None:
    m = small_model(attention)
    g = torch.Generator().manual_seed(1)
    xs = torch.randn(3, 9, 5, generator=g, dtype=torch.float64)
    ys = torch.randn(3, 9, 1, generator=g, dtype=torch.float64)
    torch.testing.assert_close(m(xs, ys), reference_forward(m, xs, ys, attention), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("attention", ["softmax", "relu"])
def test_prediction_at_i_sees_only_the_prefix(attention: str) -> None:
    m = small_model(attention)
    g = torch.Generator().manual_seed(2)
    xs = torch.randn(2, 10, 5, generator=g, dtype=torch.float64)
    ys = torch.randn(2, 10, 1, generator=g, dtype=torch.float64)
    base = m(xs, ys)
    for i in range(10):
        xs2, ys2 = xs.clone(), ys.clone()
        ys2[:, i:] += 5.0  # y_i and everything later
        xs2[:, i + 1 :] -= 3.0  # x_{i+1} and later
        out = m(xs2, ys2)
        torch.testing.assert_close(out[:, : i + 1], base[:, : i + 1], rtol=0, atol=1e-12)
        if i + 1 < 10:
            assert (out[:, i + 1 :] - base[:, i + 1 :]).abs().max() > 1e-6  # later rows do react
        xs3 = xs.clone()
        xs3[:, i] += 1.0
        assert (m(xs3, ys)[:, i] - base[:, i]).abs().max() > 1e-6  # the query itself matters


def test_multi_dimensional_outputs_and_token_layout() -> None:
    m = small_model("relu", d_x=4, d_y=4)
    xs, ys = torch.randn(2, 6, 4, dtype=torch.float64), torch.randn(2, 6, 4, dtype=torch.float64)
    assert m(xs, ys).shape == (2, 6, 4)
    m1 = small_model("relu", d_x=3, d_y=1)
    xs, ys = torch.randn(2, 4, 3, dtype=torch.float64), torch.randn(2, 4, 1, dtype=torch.float64)
    tok = m1.tokens(xs, ys)
    assert torch.equal(tok[:, 2], xs[:, 1]) and torch.equal(tok[:, 3, :1], ys[:, 1])
    assert torch.all(tok[:, 3, 1:] == 0)


def test_rejects_bad_shapes_and_long_prompts() -> None:
    m = small_model("softmax")
    with pytest.raises(InputError, match="max_points"):
        m(torch.zeros(1, 13, 5, dtype=torch.float64), torch.zeros(1, 13, 1, dtype=torch.float64))
    with pytest.raises(InputError, match="d_x"):
        m(torch.zeros(1, 3, 4, dtype=torch.float64), torch.zeros(1, 3, 1, dtype=torch.float64))
    with pytest.raises(InputError):
        ICLTransformer(5, 1, heads=3, d_model=16)
    with pytest.raises(InputError):
        ICLTransformer(5, 1, attention="linear")  # type: ignore[arg-type]


def test_parameter_count_formula() -> None:
    # Per block: 2 LN (4 C) + qkv (3 C^2 + 3 C) + proj (C^2 + C) + MLP (2 C M + M + C).
    cfg = load_config("cpu-small")
    C, M, L, d = cfg.model.d_model, cfg.model.d_mlp, cfg.model.layers, cfg.task.dim
    block = 4 * C + 4 * C * C + 4 * C + 2 * C * M + M + C
    expected = L * block + (d * C + C) + 2 * cfg.model.max_points * C + 2 * C + (C + 1)
    model = build_model(cfg.model, d, 1)
    assert model.num_params == expected
    assert 200_000 < expected < 215_000  # docs/protocol.md, configurations: ≈ 207k


def test_model_without_positions_is_causal_and_has_only_token_types() -> None:
    """model.positions=none: no position table, an x/y type embedding; predictions use only the prefix."""

    cfg = load_config("tiny", ["model.positions=none"])
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.task.dim, 1)
    names = set(model.state_dict())
    assert "wtype.weight" in names and not any(n.startswith("wpe") for n in names)
    xs, ys = torch.randn(3, 8, cfg.task.dim), torch.randn(3, 8, 1)
    out = model(xs, ys)
    xs2, ys2 = xs.clone(), ys.clone()
    xs2[:, 5:] += 1.0
    ys2[:, 4:] -= 1.0
    out2 = model(xs2, ys2)
    torch.testing.assert_close(out[:, :5], out2[:, :5])
    assert not torch.allclose(out[:, 5:], out2[:, 5:])

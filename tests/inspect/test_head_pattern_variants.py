"""head_pattern and dense_sublayer on every attention-like sublayer of every variant: the sum over heads of
``pattern @ (V_m h)`` (dense V from :func:`icdl.inspect.dense_sublayer`) must reproduce the sublayer's own
update of the residual stream. The rows variant's attention has no 1/T factor, softmax normalises over the
keys, EWML pairs each token with itself only."""

from __future__ import annotations

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task
from icdl.errors import InputError
from icdl.inspect import dense_sublayer, head_pattern, run_with_cache
from icdl.inspect.compiled import sublayer_names
from icdl.nets import NetSpec


def _model(variant: str):
    spec = NetSpec(depth=2, width=3, in_dim=2, out_dim=1)
    model = compile_gd_transformer(spec, lr=0.1, steps=1, n=4, variant=variant, dtype="float64")
    x, y, xq, w0, _ = sample_task(spec, 4, seed=3)
    return model, model.build_prompt(x, y, xq, w0)


@pytest.mark.parametrize("variant", ["rows", "paper", "softmax"])
def test_head_patterns_reproduce_every_attention_sublayer(variant: str) -> None:
    model, H = _model(variant)
    _, cache = run_with_cache(model, H)
    names = sublayer_names(model)
    checked = 0
    for i, (name, m) in enumerate(zip(names, model.block_layers, strict=True)):
        if m.info.kind == "mlp":
            continue
        H_in = cache[0, "prompt"] if i == 0 else cache[0, names[i - 1]]
        d = dense_sublayer(model, name)
        delta, size = torch.zeros_like(H_in), torch.zeros_like(H_in)
        for h in range(d["Q"].shape[0]):
            P = head_pattern(model, H_in, name, h)  # (B, T, T)
            values = H_in @ d["V"][h].T
            delta += P @ values
            size += P.abs() @ values.abs()  # round-off scale (the gate terms reach ~1e9)
        change = cache[0, name] - H_in
        assert float(change.abs().max()) > 0  # the sublayer does something: the check can fail
        torch.testing.assert_close(delta, change, atol=1e-10 * float(size.max()), rtol=0)
        checked += 1
    assert checked >= 1


def test_mlp_has_no_pattern() -> None:
    model, H = _model("rows")
    layers = zip(sublayer_names(model), model.block_layers, strict=True)
    mlp = next(n for n, m in layers if m.info.kind == "mlp")
    with pytest.raises(InputError, match="no attention heads"):
        head_pattern(model, H, mlp, 0)
    assert set(dense_sublayer(model, mlp)) == {"W1", "W2"}

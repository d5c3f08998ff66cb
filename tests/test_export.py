"""icdl.export: ICL transformers and compiled --variant softmax models as TransformerLens bridges.

The reference is the icdl model itself (its own forward pass and hooks); the exported bridge runs
TransformerLens' native architecture, which shares no code with icdl's sparse sublayers.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch

pytest.importorskip("transformer_lens")

from icdl.construct import compile_gd_transformer, sample_task
from icdl.construct.compile import CompiledModel
from icdl.construct.engine.layers import EWML, HeadTable, Role, SoftmaxAttention
from icdl.errors import InputError
from icdl.export import to_transformer_lens
from icdl.icl.models import ICLTransformer
from icdl.nets import NetSpec

N_EX = 5  # examples per prompt


def _compiled(
    activation: str, dtype: str = "float64", gate: float = 64.0, delta: float | None = None, steps: int = 2
) -> CompiledModel:
    spec = NetSpec(2, 3, 2, 1, activation=activation)
    return compile_gd_transformer(
        spec, lr=0.1, steps=steps, n=N_EX, eps=1e-2, radius=4.0, variant="softmax", dtype=dtype, gate=gate,
        delta=delta,
    )  # fmt: skip


def _prompts(model: CompiledModel, seeds: range, assert_nondegenerate):  # type: ignore[no-untyped-def]
    for seed in seeds:
        x, y, xq, w0, _ = sample_task(model.spec, N_EX, seed=seed)
        assert_nondegenerate(model.spec, x, y, w0)
        yield x, y, xq, w0


def _sublayer(model: CompiledModel, name: str) -> Any:
    """The sublayer a compiled hook point belongs to (None for ``hook_prompt``)."""
    if name == "hook_prompt":
        return None
    layers = model.readout_layers if name.startswith("readout.") else model.block_layers
    return {m.info.name: m for m in layers}[name.split(".")[-2]]


def _err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


# The query gate C (Lemma 4; default 1e6) is added to a unit's bias in one dense weight, which costs ulp(C):
# 0.06 in float32, 1.2e-10 in float64. C = 64 exceeds |u| and |p(N)| on these prompts (<= 8), as it must.
# ReLU networks: r' is a step of width delta, which turns the round-off of a pre-activation that is exactly 0
# in icdl's order (a dead unit's products) into round-off / delta in the other order: 1e-17 / 1e-9 = 1e-8 at
# the default delta; delta = 1e-6 (float64) and 1e-2 (float32) keep it under the tolerance.
@pytest.mark.parametrize("activation, delta", [("relu", 1e-6), ("sigmoid", None)])
def test_compiled_softmax_model_float64_every_residual_stream(
    activation, delta, assert_nondegenerate
) -> None:
    """The residual stream after every sublayer (every TL block), the final stream and the prediction agree
    to 1e-10; the steps move w (the comparison is not between two copies of the prompt)."""
    model = _compiled(activation, delta=delta)
    tl = to_transformer_lens(model)
    assert len(tl.block_names) == model.num_sublayers + model.readout_sublayers
    assert tl.ledger is not None and tl.ledger["variant"] == "softmax"  # the ground truth travels along
    assert all(tl.hook_name(p) for p in tl.ledger["points"])  # every ledger point has a bridge name
    for x, y, xq, w0 in _prompts(model, range(3), assert_nondegenerate):
        H = model.build_prompt(x, y, xq, w0)
        out, cache = model.run_with_cache(H)
        with torch.no_grad():
            logits, tl_cache = tl.bridge.run_with_cache(tl.residual_input(x, y, xq, w0), start_at_layer=0)
        assert _err(logits, out) <= 1e-10
        assert _err(tl.predictions(logits), model.read_prediction(out)) <= 1e-10
        for name in model.hook_names():
            if name.endswith("hook_write") and _sublayer(model, name).rewritten_coords().numel():
                with pytest.raises(InputError, match="rewrites coordinates"):
                    tl.hook_name(name)
                continue
            assert _err(tl_cache[tl.hook_name(name)], cache[name]) <= 1e-10, name
        W = model.layout.indices("W")
        assert _err(out[:, -1, W], H[:, -1, W]) > 1e-3  # GD moved w


@pytest.mark.parametrize("activation, delta", [("relu", 1e-2), ("sigmoid", None)])
def test_compiled_softmax_model_float32(activation, delta, assert_nondegenerate) -> None:
    """float32 to 1e-5 (the gate and delta as above)."""
    model = _compiled(activation, dtype="float32", delta=delta)
    tl = to_transformer_lens(model)
    assert next(tl.bridge.parameters()).dtype == torch.float32
    for x, y, xq, w0 in _prompts(model, range(3), assert_nondegenerate):
        out = model(model.build_prompt(x, y, xq, w0))
        with torch.no_grad():
            logits = tl.bridge(tl.residual_input(x, y, xq, w0), start_at_layer=0)
        assert _err(logits, out) <= 1e-5
        assert _err(tl(x, y, xq, w0), model.read_prediction(out)) <= 1e-5


def test_compiled_heads_with_random_scores(assert_nondegenerate) -> None:
    """The update heads' scores are all 0 (uniform attention), which hides the score scale and Q/K; with
    random Q and K tables the exported attention still agrees to 1e-10."""
    base = _compiled("relu", delta=1e-6, steps=1)
    upd = next(m for m in base.block_layers if m.info.role == "update")
    gen = torch.Generator().manual_seed(0)
    tables = {name: getattr(upd, name).clone() for name in upd.TABLES}
    for part in ("q", "k"):
        tables[f"{part}_coef"] = torch.randn(tables[f"{part}_coef"].shape, generator=gen, dtype=torch.float64)
        tables[f"{part}_idx"] = torch.randint(
            0, base.embedding_dim, tables[f"{part}_idx"].shape, generator=gen
        )
    upd = SoftmaxAttention(tables, base.embedding_dim, role=Role("update", "random scores"))
    block = [upd if m.info.role == "update" else m for m in base.block_layers]
    model = CompiledModel(base.config, base.layout, block, list(base.readout_layers), base.terms)
    tl = to_transformer_lens(model)
    for x, y, xq, w0 in _prompts(model, range(2), assert_nondegenerate):
        H = model.build_prompt(x, y, xq, w0)
        _, cache = model.run_with_cache(H)
        with torch.no_grad():
            _, tl_cache = tl.bridge.run_with_cache(H, start_at_layer=0)
        i = tl.block_names.index("steps.0.update")
        pattern = tl_cache[f"blocks.{i}.attn.hook_pattern"][:, : upd.num_heads]
        assert float(pattern.std()) > 1e-2  # not uniform: the scores matter
        assert (
            _err(tl_cache[tl.hook_name("steps.0.update.hook_out")], cache["steps.0.update.hook_out"]) <= 1e-10
        )


def test_hooks_agree_under_intervention() -> None:
    """The same edit at an icdl hook point and at its TransformerLens name gives the same run."""
    model = _compiled("sigmoid")
    tl = to_transformer_lens(model)
    x, y, xq, w0, _ = sample_task(model.spec, N_EX, seed=4)
    H = model.build_prompt(x, y, xq, w0)
    S = model.layout.indices("S", 1)

    def edit(act, hook):  # type: ignore[no-untyped-def]
        act[..., S] = act[..., S] * 1.5
        return act

    name = "steps.-1.backward_mask_1.hook_out"
    out = model.run_with_hooks(H, fwd_hooks=[(name, edit)])
    with torch.no_grad():
        logits = tl.bridge.run_with_hooks(H, start_at_layer=0, fwd_hooks=[(tl.hook_name(name), edit)])
    assert _err(logits, out) <= 1e-10
    assert _err(out, model(H)) > 1e-4  # the edit changed the run
    assert tl.hook_name("hook_prompt") == "blocks.0.hook_resid_pre"
    assert tl.hook_name("readout.readout.hook_out") == f"blocks.{len(tl.block_names) - 1}.hook_resid_post"
    with pytest.raises(InputError):
        tl.hook_name("steps.0.nosuch.hook_out")


def _icl(positions: str, dtype: torch.dtype) -> ICLTransformer:
    torch.manual_seed(0)
    model = ICLTransformer(
        3, 2, layers=3, heads=2, d_model=16, d_mlp=32, max_points=12, positions=positions, attention="softmax"
    )
    with torch.no_grad():  # away from GPT-2's init (LayerNorm 1/0, zero biases): every weight matters
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model.to(dtype).eval()


@pytest.mark.parametrize("positions", ["learned", "none"])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_icl_transformer(positions, dtype, tol) -> None:
    model = _icl(positions, dtype)
    tl = to_transformer_lens(model)
    for seed in range(3):
        gen = torch.Generator().manual_seed(seed)
        xs = torch.randn(4, 9, 3, generator=gen).to(dtype)
        ys = torch.randn(4, 9, 2, generator=gen).to(dtype)
        with torch.no_grad():
            preds, cache = model.run_with_cache(xs, ys)
            logits, tl_cache = tl.bridge.run_with_cache(tl.residual_input(xs, ys), start_at_layer=0)
        assert float(preds.std()) > 0.1  # predictions vary across prompts and points
        assert _err(tl.predictions(logits), preds) <= tol
        for name in ("blocks.0.attn.hook_pattern", "blocks.-1.hook_resid_post", "blocks.1.mlp.hook_post"):
            assert _err(tl_cache[tl.hook_name(name)], cache[name]) <= 10 * tol, name


def test_refusals_say_why_and_what_to_use() -> None:
    spec = NetSpec(2, 2, 2, 1)
    for variant in ("paper", "compact", "no-ewml", "rows"):
        model = compile_gd_transformer(spec, steps=1, n=4, variant=variant)
        with pytest.raises(InputError, match="--variant softmax") as e:
            to_transformer_lens(model)
        assert "\n" not in str(e.value)
        assert "row tokens" in str(e.value) if variant == "rows" else "relu_attention" in str(e.value)
    # an EWML sublayer (Definition 6) in an otherwise exportable model
    soft = _compiled("relu", steps=1)
    heads = HeadTable()
    heads.add(q=[(0, 1.0)], k=[(0, 1.0)], v=[(0, 0, 1.0)])
    ewml = EWML(heads.tensors(), soft.embedding_dim, role=Role("ewml_test"))
    mixed = CompiledModel(
        soft.config, soft.layout, [*soft.block_layers, ewml], list(soft.readout_layers), soft.terms
    )
    with pytest.raises(InputError, match=r"EWML.*--variant softmax"):
        to_transformer_lens(mixed)
    with pytest.raises(InputError, match="attention: softmax"):
        to_transformer_lens(ICLTransformer(2, 1, layers=1, heads=1, d_model=4, d_mlp=4, attention="relu"))
    with pytest.raises(InputError, match="ICLTransformer or a CompiledModel"):
        to_transformer_lens(torch.nn.Linear(2, 2))


def test_missing_transformer_lens_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformer_lens.model_bridge.sources.native", None)
    with pytest.raises(InputError, match=r"pip install 'icdl\[interp\]'"):
        to_transformer_lens(_compiled("sigmoid", steps=1))


def test_too_large_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import icdl.export

    monkeypatch.setattr(icdl.export, "MAX_DENSE_ENTRIES", 1000)
    with pytest.raises(InputError, match="dense weights"):
        to_transformer_lens(_compiled("sigmoid", steps=1))

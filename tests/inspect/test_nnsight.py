"""Both model kinds under nnsight (the ``interp`` extra): a module's output in an nnsight trace is icdl's own
hook point bit for bit, and an nnsight intervention equals the same one through ``run_with_hooks``; the
docs example (docs/how-it-works.md, "Under nnsight") runs as written."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task
from icdl.icl.models import ICLTransformer
from icdl.nets import NetSpec

nnsight = pytest.importorskip("nnsight")

ROOT = Path(__file__).resolve().parents[2]


def icl_model(attention: str) -> ICLTransformer:
    torch.manual_seed(0)
    model = ICLTransformer(
        d_x=3, d_y=1, layers=2, heads=2, d_model=16, d_mlp=32, max_points=8, attention=attention
    )
    return model.double().eval()


def identity(block: int, name: str, act: torch.Tensor) -> torch.Tensor:
    """A pass-through ``hooks`` for ``ICLTransformer.forward``: it takes the explicit attention path that
    icdl's hook points use (the plain forward runs a fused kernel, equal up to round-off)."""
    return act


@pytest.mark.parametrize("attention", ["softmax", "relu"])
@pytest.mark.parametrize("explicit", [True, False], ids=["explicit", "fused"])
def test_trained_model_module_outputs_are_its_hook_points(attention: str, explicit: bool) -> None:
    model = icl_model(attention)
    xs, ys = torch.randn(3, 5, 3, dtype=torch.float64), torch.randn(3, 5, 1, dtype=torch.float64)
    traced = nnsight.NNsight(model)
    saved: dict[str, object] = {}
    with traced.trace(xs, ys, **({"hooks": identity} if explicit else {})):  # requests in forward order
        for i in range(2):
            block = traced.blocks[i]
            saved[f"blocks.{i}.hook_ln1"] = block.ln1.output.save()
            saved[f"blocks.{i}.hook_attn_out"] = block.attn.output.save()
            saved[f"blocks.{i}.hook_ln2"] = block.ln2.output.save()
            saved[f"blocks.{i}.mlp.hook_pre"] = block.mlp.fc.output.save()
            saved[f"blocks.{i}.hook_mlp_out"] = block.mlp.output.save()
            saved[f"blocks.{i}.hook_resid_post"] = block.output.save()
        out = traced.output.save()
    preds, cache = model.run_with_cache(xs, ys)
    for name, act in [*saved.items(), ("preds", out)]:
        ref = preds if name == "preds" else cache[name]
        if explicit:  # the same operations: bit for bit
            assert torch.equal(act, ref), name
        else:  # the fused attention kernel: float64 round-off
            torch.testing.assert_close(act, ref, rtol=1e-12, atol=1e-15, msg=name)


def test_trained_model_intervention_matches_run_with_hooks() -> None:
    model = icl_model("relu")
    xs, ys = torch.randn(3, 5, 3, dtype=torch.float64), torch.randn(3, 5, 1, dtype=torch.float64)
    traced = nnsight.NNsight(model)
    with traced.trace(xs, ys, hooks=identity):
        traced.blocks[0].attn.output[:] = 0
        ablated = traced.output.save()
    hooked = model.run_with_hooks(xs, ys, fwd_hooks=[("blocks.0.hook_attn_out", lambda act, hook: act * 0)])
    assert torch.equal(ablated, hooked)
    assert not torch.allclose(ablated, model(xs, ys))  # the ablation changed the output


@pytest.mark.parametrize("variant", ["paper", "softmax"])
def test_compiled_model_sublayer_outputs_are_its_hook_points(variant: str) -> None:
    spec = NetSpec(depth=2, width=3, in_dim=2, out_dim=1)
    model = compile_gd_transformer(spec, lr=0.1, steps=3, n=5, variant=variant, eps=1e-2)
    x, y, xq, w0, _ = sample_task(spec, 5, seed=2)
    H = model.build_prompt(x, y, xq, w0)
    traced = nnsight.NNsight(model)
    block = [m.info.name for m in model.block_layers]
    streams: list[list[object]] = []
    with traced.trace(H) as tracer:
        for _ in tracer.iter[0:3]:  # the block's modules run once per GD step
            streams.append([traced.block[k].output.save() for k in range(len(block))])
    readout: list[object] = []
    with traced.trace(H):
        readout.extend(traced.readout[k].output.save() for k in range(len(model.readout_layers)))
        out = traced.output.save()
    ref, cache = model.run_with_cache(H)
    assert torch.equal(out, ref)
    for step, acts in enumerate(streams):
        for name, act in zip(block, acts, strict=True):
            assert torch.equal(act, cache[f"steps.{step}.{name}.hook_out"]), (step, name)
    for m, act in zip(model.readout_layers, readout, strict=True):
        assert torch.equal(act, cache[f"readout.{m.info.name}.hook_out"]), m.info.name


def test_compiled_model_intervention_matches_run_with_hooks() -> None:
    spec = NetSpec(depth=2, width=3, in_dim=2, out_dim=1)
    model = compile_gd_transformer(spec, lr=0.1, steps=3, n=5)
    x, y, xq, w0, _ = sample_task(spec, 5, seed=2)
    H = model.build_prompt(x, y, xq, w0)
    block = [m.info.name for m in model.block_layers]
    k = block.index("backward_1")
    traced = nnsight.NNsight(model)
    with traced.trace(H) as tracer:  # step 1's backward_1 adds nothing: its output is its input
        for _ in tracer.iter[1]:
            traced.block[k].output = traced.block[k].input
        ablated = traced.output.save()
    kept: dict[str, torch.Tensor] = {}
    hooked = model.run_with_hooks(
        H,
        fwd_hooks=[
            (f"steps.1.{block[k - 1]}.hook_out", lambda act, hook: kept.update(stream=act.clone())),
            ("steps.1.backward_1.hook_out", lambda act, hook: kept["stream"]),
        ],
    )
    assert torch.equal(ablated, hooked)
    plain = model(H)
    assert not torch.equal(model.read_weights(ablated), model.read_weights(plain))  # the ablation acted
    assert model.read_weights(ablated).abs().max() > 0


def test_docs_example_runs(tmp_path: Path) -> None:
    """The nnsight blocks of docs/how-it-works.md, run as one script (nnsight reads a trace's source)."""
    text = (ROOT / "docs" / "how-it-works.md").read_text()
    section = text.split("## Under nnsight", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]
    assert len(blocks) == 2 and "from nnsight import NNsight" in blocks[0]
    script = tmp_path / "nnsight_example.py"
    script.write_text("\n".join(blocks))
    runpy.run_path(str(script))

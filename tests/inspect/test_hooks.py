"""One hook API on both model kinds, used exactly as TransformerLens code uses it: ``hook_names()``,
``run_with_cache(prompt, names_filter=str | list | callable)``, ``run_with_hooks(prompt,
fwd_hooks=[(name or filter, fn)])`` with ``fn(act, hook)`` returning a new activation or None."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from icdl.construct import compile_gd_transformer, sample_task
from icdl.errors import InputError
from icdl.hooks import ActivationCache, HookPoint
from icdl.icl.models import ICLTransformer
from icdl.inspect import run_with_cache
from icdl.inspect.cache import ActivationCache as ReExported
from icdl.inspect.compiled import sublayer_names
from icdl.nets import NetSpec, reference_gd


@pytest.fixture(scope="module")
def trained() -> tuple[ICLTransformer, Tensor, Tensor]:
    torch.manual_seed(0)
    model = ICLTransformer(3, 1, layers=3, heads=2, d_model=16, d_mlp=32, max_points=8).eval()
    return model, torch.randn(2, 5, 3), torch.randn(2, 5, 1)


@pytest.fixture(scope="module")
def compiled() -> tuple[Any, NetSpec, tuple[Tensor, ...], Tensor]:
    spec = NetSpec(depth=2, width=3, in_dim=2, out_dim=1)
    model = compile_gd_transformer(spec, lr=0.1, steps=4, n=4)
    x, y, xq, w0, _ = sample_task(spec, 4, seed=3)
    return model, spec, (x, y, w0), model.build_prompt(x, y, xq, w0)


def test_cache_class_lives_in_hooks() -> None:
    assert ReExported is ActivationCache


def test_trained_names_filter_forms(trained: Any) -> None:
    model, xs, ys = trained
    names = model.hook_names()
    assert names[0] == "blocks.0.hook_resid_pre" and names[-1] == "blocks.2.hook_resid_post"
    assert "blocks.1.attn.hook_pattern" in names and "blocks.1.mlp.hook_post" in names
    _, full = model.run_with_cache(xs, ys)
    _, one = model.run_with_cache(xs, ys, names_filter="blocks.1.attn.hook_pattern")
    assert one.names() == ["blocks.1.attn.hook_pattern"]
    assert torch.equal(one["blocks.1.attn.hook_pattern"], full["blocks.1.attn.hook_pattern"])
    _, two = model.run_with_cache(
        xs, ys, names_filter=["blocks.-1.hook_resid_post", "blocks.0.hook_resid_pre"]
    )
    assert two.names() == ["blocks.0.hook_resid_pre", "blocks.2.hook_resid_post"]  # forward order
    _, pats = model.run_with_cache(xs, ys, names_filter=lambda name: name.endswith("hook_pattern"))
    assert pats.names() == [f"blocks.{b}.attn.hook_pattern" for b in range(3)]
    assert torch.equal(full["blocks.-1.hook_resid_post"], full["blocks.2.hook_resid_post"])
    assert torch.equal(full[2, "resid_post"], full["blocks.2.hook_resid_post"])  # the old key form
    with pytest.raises(InputError, match="unknown hook"):
        model.run_with_cache(xs, ys, names_filter="blocks.0.hook_nope")


def test_trained_run_with_hooks_conventions(trained: Any) -> None:
    model, xs, ys = trained
    clean = model(xs, ys)
    seen: list[str] = []

    def look(act: Tensor, hook: HookPoint) -> None:
        seen.append(hook.name)

    same = model.run_with_hooks(xs, ys, fwd_hooks=[(lambda name: True, look)])
    assert seen == model.hook_names()
    assert torch.allclose(same, clean, atol=1e-6)

    def zero_in_place(act: Tensor, hook: HookPoint) -> None:
        act.zero_()

    def zero_new(act: Tensor, hook: HookPoint) -> Tensor:
        return torch.zeros_like(act)

    a = model.run_with_hooks(xs, ys, fwd_hooks=[("blocks.-1.hook_mlp_out", zero_in_place)])
    b = model.run_with_hooks(xs, ys, fwd_hooks=[("blocks.2.hook_mlp_out", zero_new)])
    assert torch.equal(a, b) and not torch.allclose(a, clean)
    # Independent reference: without the last block's MLP the output is ln_f/read_out of resid_mid.
    _, cache = model.run_with_cache(xs, ys)
    ref = model.read_out(model.ln_f(cache["blocks.2.hook_resid_mid"][:, 0::2]))
    assert torch.allclose(a, ref, atol=1e-6)


def test_compiled_names_and_filters(compiled: Any) -> None:
    model, _, _, H = compiled
    names = model.hook_names()
    block = sublayer_names(model)
    assert names[0] == "hook_prompt"
    assert names[1 : 1 + 2 * len(block)] == [
        f"steps.0.{n}.{point}" for n in block for point in ("hook_write", "hook_out")
    ]
    assert not any(n.endswith("hook_result") for n in names)  # off unless use_attn_result
    assert names[-1] == f"readout.{model.readout_layers[-1].info.name}.hook_out"
    out, cache = model.run_with_cache(H, names_filter=["hook_prompt", "steps.-1.update.hook_out"])
    assert cache.names() == ["hook_prompt", "steps.3.update.hook_out"]
    assert torch.equal(out, model.run(H)) and torch.equal(cache["hook_prompt"], H)
    _, alias = run_with_cache(model, H, "steps.-1.update.hook_out")
    assert torch.equal(alias["steps.3.update.hook_out"], cache["steps.-1.update.hook_out"])
    w = cache["steps.3.update.hook_out", "W"]
    assert torch.equal(w, cache["steps.3.update.hook_out"][..., model.layout.indices("W")])


def test_compiled_update_ablation_freezes_one_step(compiled: Any) -> None:
    """Ablating the update sublayer of step l (its heads add nothing: the stream after it is the stream
    before it) leaves w unchanged in step l; the other steps still run GD, so the trajectory is reference
    GD with step l repeated."""
    model, spec, (x, y, w0), H = compiled
    block, ablated_step = sublayer_names(model), 1
    before_update = block[block.index("update") - 1]
    saved: dict[str, Tensor] = {}
    weights: list[Tensor] = []

    def keep(act: Tensor, hook: HookPoint) -> None:
        saved["in"] = act.clone()

    def ablate(act: Tensor, hook: HookPoint) -> Tensor:
        return saved["in"]

    def record(act: Tensor, hook: HookPoint) -> None:
        weights.append(act[0, -1, model.layout.indices("W")].clone())

    model.run_with_hooks(
        H,
        fwd_hooks=[
            (f"steps.{ablated_step}.{before_update}.hook_out", keep),
            (f"steps.{ablated_step}.update.hook_out", ablate),
            (lambda name: name.startswith("steps.") and name.endswith(".project.hook_out"), record),
        ],
    )
    ref = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=model.steps)  # (L+1, P)
    frozen = torch.cat([ref[: ablated_step + 1], ref[ablated_step : model.steps]])  # step l repeated
    assert torch.allclose(torch.stack([ref[0], *weights]), frozen, atol=1e-12, rtol=0)
    assert (ref[ablated_step + 1] - ref[ablated_step]).abs().max() > 1e-6  # GD would have moved w


def test_model_takes_its_config_whole() -> None:
    from icdl.config import ModelConfig
    from icdl.icl.models import build_model

    cfg = ModelConfig(layers=2, heads=2, d_model=8, d_mlp=16, max_points=6, attention="softmax")
    torch.manual_seed(1)
    a = ICLTransformer(3, 1, config=cfg)
    torch.manual_seed(1)
    b = ICLTransformer(3, 1, layers=2, heads=2, d_model=8, d_mlp=16, max_points=6, attention="softmax")
    assert a.config == cfg and b.config.model_dump() == cfg.model_dump()
    assert a.state_dict().keys() == b.state_dict().keys()
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    assert build_model(cfg, 3, 1).config == cfg

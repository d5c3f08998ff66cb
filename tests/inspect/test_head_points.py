"""Per-head ``hook_result`` and per-sublayer ``hook_write`` on compiled models: what they hold (checked
against the stream before and after the sublayer, and against the plain dense head formula), that a no-op
hook changes no bit, and that ablating or patching through them does what a TransformerLens user expects."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from icdl.construct import compile_gd_transformer, sample_task
from icdl.errors import InputError
from icdl.export import to_hooked
from icdl.hooks import HookPoint
from icdl.nets import NetSpec

VARIANTS = ("paper", "compact", "no-ewml", "softmax", "rows")
SPEC = NetSpec(depth=3, width=2, in_dim=2, out_dim=1)


def _model(variant: str, steps: int = 2) -> tuple[Any, Tensor, tuple[Tensor, ...]]:
    model = compile_gd_transformer(SPEC, lr=0.2, steps=steps, n=5, variant=variant)
    x, y, xq, w0, _ = sample_task(SPEC, 5, seed=11)
    assert float(y.abs().max()) > 1e-3  # labels carry signal
    return model, model.build_prompt(x, y, xq, w0), (x, y, xq, w0)


def _layers(model: Any) -> dict[str, Any]:
    return {m.info.name: m for m in model.block_layers}


@pytest.mark.parametrize("variant", VARIANTS)
def test_write_and_results_hold_what_the_sublayer_adds(variant: str) -> None:
    model, H, _ = _model(variant)
    model.use_attn_result = True
    out, cache = model.run_with_cache(H)
    assert torch.equal(out, model.run(H))  # caching every point changes no bit
    previous, checked_heads = "hook_prompt", 0
    for name in [n for n in cache if n.endswith(".hook_out") and n.startswith("steps.")]:
        base = name.removesuffix("hook_out")
        m = _layers(model)[name.split(".")[2]]
        before, after, write = cache[previous], cache[name], cache[base + "hook_write"]
        keep = torch.ones(H.shape[-1], dtype=torch.bool)
        keep[m.rewritten_coords()] = False
        # the stream after = the stream before with rewritten coordinates cleared, plus the write
        torch.testing.assert_close(before * keep + write, after, rtol=0, atol=1e-9 * (1 + after.abs().max()))
        if base + "hook_result" in cache:
            R = cache[base + "hook_result"]
            assert R.shape == (*H.shape[:2], m.num_heads, H.shape[-1])
            scale = 1 + R.abs().max()
            assert (R.sum(2) - write).abs().max() <= 1e-6 * scale  # heads add up to the write
            # head 0 against the plain formula, from the dense matrices
            V = m.dense()[2][0]
            torch.testing.assert_close(R[:, :, 0], m.pattern(before, 0) @ (before @ V.T))
            checked_heads += m.num_heads
        previous = name
    assert checked_heads > 0


@pytest.mark.parametrize("variant", VARIANTS)
def test_noop_hooks_change_no_bit(variant: str) -> None:
    model, H, _ = _model(variant)
    model.use_attn_result = True

    def touch(act: Tensor, hook: HookPoint) -> Tensor:
        return act.clone()

    hooked = model.run_with_hooks(H, [(lambda n: not n.endswith("hook_out"), touch)])
    assert torch.equal(hooked, model.run(H))


@pytest.mark.parametrize("variant", ("paper", "compact", "no-ewml", "rows"))
def test_ablating_the_heads_that_write_a_weight_freezes_it(variant: str) -> None:
    """Zeroing, at step 0's update, every head whose value writes weight coordinate c leaves w_c where it
    was, and every other weight moves as without the ablation."""
    model, H, _ = _model(variant, steps=1)
    model.use_attn_result = True
    update = _layers(model)["update"]
    _, clean = model.run_with_cache(H)
    before, after = clean["steps.0.update.hook_write"], clean["steps.0.update.hook_out"]
    c = int(update.v_dst[update.v_coef != 0][0])  # the first coordinate an update head writes
    heads = [h for h in range(update.num_heads) if c in update.head_write_coordinates(h)]
    assert heads and (before[..., c].abs().max() > 1e-6)  # the update moves it

    def ablate(R: Tensor, hook: HookPoint) -> None:
        R[:, :, heads] = 0

    seen: dict[str, Tensor] = {}

    def read(act: Tensor, hook: HookPoint) -> None:
        seen["out"] = act.clone()

    model.run_with_hooks(H, [("steps.0.update.hook_result", ablate), ("steps.0.update.hook_out", read)])
    out = seen["out"]
    start = clean["steps.0.update.hook_out"] - before  # the stream before the update
    scale = 1 + after.abs().max()
    assert (out[..., c] - start[..., c]).abs().max() <= 1e-6 * scale  # frozen
    others = [d for d in range(H.shape[-1]) if not any(d in update.v_dst[h] for h in heads)]
    assert (out[..., others] - after[..., others]).abs().max() <= 1e-6 * scale  # the rest as before


def test_patching_a_rewrite_puts_the_other_prompts_values_there() -> None:
    """``hook_write`` of a sublayer that rewrites coordinates holds the new values, so patching it from a
    corrupted prompt leaves exactly the corrupted values there (a fraction of 1, not 3.685)."""
    model, H, (x, y, xq, w0) = _model("softmax", steps=1)
    corrupt = model.build_prompt(x, -y, xq, w0)
    rewriting = [m for m in model.block_layers if m.rewritten_coords().numel()]
    assert rewriting
    _, cc = model.run_with_cache(corrupt)
    _, clean = model.run_with_cache(H)
    for m in rewriting:
        point = f"steps.0.{m.info.name}"
        rw = m.rewritten_coords()
        if torch.equal(cc[point + ".hook_out"][..., rw], clean[point + ".hook_out"][..., rw]):
            continue  # the labels do not reach this sublayer's rewrite
        seen: dict[str, Tensor] = {}

        def patch(act: Tensor, hook: HookPoint) -> Tensor:
            return cc[hook.name]

        def read(act: Tensor, hook: HookPoint, seen: dict[str, Tensor] = seen) -> None:
            seen["out"] = act.clone()

        model.run_with_hooks(H, [(point + ".hook_write", patch), (point + ".hook_out", read)])
        torch.testing.assert_close(seen["out"][..., rw], cc[point + ".hook_out"][..., rw])


def test_results_are_off_unless_asked_for() -> None:
    model, H, _ = _model("paper", steps=1)
    assert not any(n.endswith("hook_result") for n in model.hook_names())
    with pytest.raises(InputError, match="use_attn_result"):
        model.run_with_cache(H, "steps.0.update.hook_result")
    model.use_attn_result = True
    _, cache = model.run_with_cache(H, "steps.0.update.hook_result")
    assert cache["steps.0.update.hook_result"].shape[2] == _layers(model)["update"].num_heads


def test_a_result_hook_must_keep_the_shape() -> None:
    model, H, _ = _model("paper", steps=1)
    model.use_attn_result = True
    with pytest.raises(InputError, match="keep the shape"):
        model.run_with_hooks(H, [("steps.0.update.hook_result", lambda R, hook: R.sum(2))])


@pytest.mark.parametrize("variant", ("paper", "rows"))
def test_to_hooked_has_the_same_points(variant: str) -> None:
    pytest.importorskip("transformer_lens")
    model, H, _ = _model(variant, steps=1)
    model.use_attn_result = True
    _, ours = model.run_with_cache(H)
    hooked = to_hooked(model)
    assert hooked.ledger["label_circuit"] and hooked.ledger["variant"] == variant  # the labels travel along
    with torch.no_grad():
        out, theirs = hooked.run_with_cache(H)
    assert torch.equal(out, model.run(H))
    assert set(ours) <= set(theirs.keys())
    for name in ours:
        torch.testing.assert_close(theirs[name], ours[name], rtol=0, atol=0)

    _, c = model.run_with_cache(H, "steps.0.update.hook_result")
    loudest = int(c["steps.0.update.hook_result"].abs().amax(dim=(0, 1, 3)).argmax())

    def ablate(R: Tensor, hook: Any) -> Tensor:
        R = R.clone()
        R[:, :, loudest] = 0
        return R

    want = model.run_with_hooks(H, [("steps.0.update.hook_result", ablate)])
    with torch.no_grad():
        got = hooked.run_with_hooks(H, fwd_hooks=[("steps.0.update.hook_result", ablate)])
    assert torch.equal(got, want) and not torch.equal(got, out)

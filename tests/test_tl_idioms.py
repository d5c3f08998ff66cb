"""TransformerLens idioms give the same numbers on an icdl model and on its TransformerLens export.

The idioms are the ones TransformerLens code is written with (head ablation ``z[:, :, h] = 0``,
``cache["pattern", l]``, ``utils.get_act_name``); each is applied unchanged to the icdl model and to the
bridge. The reference for head ablation is independent of both hook APIs: a copy of the model whose head has
a zero value projection.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor

pytest.importorskip("transformer_lens")

from transformer_lens.utilities import get_act_name as tl_get_act_name

from icdl.construct import compile_gd_transformer, sample_task
from icdl.errors import InputError
from icdl.export import to_transformer_lens
from icdl.hooks import HookPoint, get_act_name
from icdl.icl.models import ICLTransformer
from icdl.nets import NetSpec

LAYERS, HEADS, D_MODEL = 3, 2, 16
D_HEAD = D_MODEL // HEADS


@pytest.fixture(scope="module")
def model() -> ICLTransformer:
    torch.manual_seed(0)
    m = ICLTransformer(
        3, 2, layers=LAYERS, heads=HEADS, d_model=D_MODEL, d_mlp=32, max_points=12, attention="softmax"
    )
    with torch.no_grad():  # away from GPT-2's init: every weight matters
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m.double().eval()


@pytest.fixture(scope="module")
def prompt() -> tuple[Tensor, Tensor]:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(4, 7, 3, generator=gen).double(), torch.randn(4, 7, 2, generator=gen).double()


def _err(a: Tensor, b: Tensor) -> float:
    """Largest difference; equal entries (-inf masks too) count as 0."""
    a, b = a.detach(), b.detach()
    return float(torch.where(a == b, torch.zeros_like(a), a - b).abs().max())


@pytest.mark.parametrize(
    "args",
    [("pattern", 0), ("z", 1), ("q", 0), ("k", 2), ("v", 1), ("result", 0), ("attn_scores", 1), ("attn", 2),
     ("key", 0), ("resid_pre", 0), ("resid_mid", 1), ("resid_post", 2), ("attn_out", 0), ("mlp_out", 1),
     ("pre", 0), ("post", 2), ("mlp_post", 1), ("pattern1",), ("z2a",), ("resid_post",), ("normalized",),
     ("scale", 0, "ln1"), ("blocks.0.hook_resid_pre",)],
)  # fmt: skip
def test_get_act_name_is_transformer_lens(args: tuple) -> None:  # type: ignore[type-arg]
    assert get_act_name(*args) == tl_get_act_name(*args)


def test_shapes_are_transformer_lens(model: ICLTransformer, prompt: tuple[Tensor, Tensor]) -> None:
    """q, k, v, z are (batch, pos, head, d_head) on both; the scores are -inf above the diagonal."""
    xs, ys = prompt
    tl = to_transformer_lens(model)
    _, cache = model.run_with_cache(*prompt)
    _, tl_cache = tl.run_with_cache(tl.residual_input(xs, ys))
    T = 2 * xs.shape[1]
    for name in ("q", "k", "v", "z"):
        assert cache[name, 1].shape == tl_cache[name, 1].shape == (4, T, HEADS, D_HEAD)
    assert cache["result", 0].shape == (4, T, HEADS, D_MODEL)
    scores = cache["attn_scores", 0]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    assert torch.all(scores[..., future] == float("-inf")) and torch.isfinite(scores[..., ~future]).all()


def test_cache_keys_give_the_same_numbers(model: ICLTransformer, prompt: tuple[Tensor, Tensor]) -> None:
    """``cache[name, layer]`` on icdl's cache and on TransformerLens' cache of the export agree to 1e-10."""
    tl = to_transformer_lens(model)
    preds, cache = model.run_with_cache(*prompt)
    logits, tl_cache = tl.run_with_cache(tl.residual_input(*prompt))
    assert _err(tl.predictions(logits), preds) <= 1e-10
    names = ("pattern", "q", "k", "v", "z", "resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out",
             "pre", "post")  # fmt: skip
    for layer in range(LAYERS):
        for name in names:
            assert _err(cache[name, layer], tl_cache[name, layer]) <= 1e-10, (name, layer)
            assert torch.equal(cache[name, layer], cache[get_act_name(name, layer)])
    assert torch.equal(cache["pattern", -1], cache["pattern", LAYERS - 1])


def _ablate_head(h: int):  # type: ignore[no-untyped-def]
    def fn(z: Tensor, hook: HookPoint) -> None:
        z[:, :, h] = 0.0  # TransformerLens' idiom: z is (batch, pos, head, d_head)

    return fn


@pytest.mark.parametrize("layer, head", [(0, 0), (1, 1), (2, 0)])
def test_head_ablation_idiom(
    model: ICLTransformer, prompt: tuple[Tensor, Tensor], layer: int, head: int
) -> None:
    """``z[:, :, h] = 0`` at ``get_act_name("z", l)`` gives the same predictions on icdl and on the export,
    and both equal a model whose head h of block l has a zero value projection (z of that head is then 0)."""
    xs, ys = prompt
    tl = to_transformer_lens(model)
    hooks = [(get_act_name("z", layer), _ablate_head(head))]
    ours = model.run_with_hooks(xs, ys, fwd_hooks=hooks)
    with torch.no_grad():
        theirs = tl.predictions(tl.run_with_hooks(tl.residual_input(xs, ys), fwd_hooks=hooks))
    ref = copy.deepcopy(model)
    rows = slice(2 * D_MODEL + head * D_HEAD, 2 * D_MODEL + (head + 1) * D_HEAD)  # head's v rows in qkv
    with torch.no_grad():
        ref.blocks[layer].attn.qkv.weight[rows] = 0.0
        ref.blocks[layer].attn.qkv.bias[rows] = 0.0
        expected = ref(xs, ys)
    assert _err(ours, expected) <= 1e-10
    assert _err(theirs, expected) <= 1e-10
    assert _err(ours, model(xs, ys)) > 1e-3  # the head mattered


def test_result_hook_is_each_heads_write(model: ICLTransformer, prompt: tuple[Tensor, Tensor]) -> None:
    """Zeroing head h's ``hook_result`` equals zeroing its ``hook_z`` (the head adds ``z_h W_O^h``)."""
    xs, ys = prompt

    def zero_result(r: Tensor, hook: HookPoint) -> None:
        r[:, :, 1] = 0.0

    a = model.run_with_hooks(xs, ys, fwd_hooks=[(get_act_name("result", 1), zero_result)])
    b = model.run_with_hooks(xs, ys, fwd_hooks=[(get_act_name("z", 1), _ablate_head(1))])
    assert _err(a, b) <= 1e-12 and _err(a, model(xs, ys)) > 1e-3


def test_old_scores_name_warns_and_resolves(model: ICLTransformer, prompt: tuple[Tensor, Tensor]) -> None:
    _, cache = model.run_with_cache(*prompt)
    with pytest.warns(FutureWarning, match="hook_attn_scores"):
        old = cache["blocks.0.attn.hook_scores"]
    assert torch.equal(old, cache["blocks.0.attn.hook_attn_scores"])
    with pytest.warns(FutureWarning):
        _, one = model.run_with_cache(*prompt, names_filter="blocks.1.attn.hook_scores")
    assert one.names() == ["blocks.1.attn.hook_attn_scores"]


def test_export_is_in_eval_mode_and_runs_like_a_model(
    model: ICLTransformer, prompt: tuple[Tensor, Tensor]
) -> None:
    tl = to_transformer_lens(model)
    assert not tl.bridge.training
    resid = tl.residual_input(*prompt)
    with torch.no_grad():
        assert torch.equal(tl.forward(resid), tl.bridge(resid, start_at_layer=0))
    assert callable(tl.hooks) and callable(tl.reset_hooks)  # the bridge's own verbs
    assert tl.hook_name("blocks.0.hook_ln1") == "blocks.0.ln1.hook_out"
    _, cache = model.run_with_cache(*prompt)
    _, tl_cache = tl.run_with_cache(resid)
    assert _err(cache["blocks.1.hook_ln2"], tl_cache[tl.hook_name("blocks.1.hook_ln2")]) <= 1e-10
    with pytest.raises(InputError, match="no counterpart"):
        tl.hook_name("blocks.0.attn.hook_attn_scores")


def test_a_hook_that_changes_the_shape_is_an_error(
    model: ICLTransformer, prompt: tuple[Tensor, Tensor]
) -> None:
    def drop_token(act: Tensor, hook: HookPoint) -> Tensor:
        return act[:, :-1]

    with pytest.raises(InputError, match="keep the shape"):
        model.run_with_hooks(*prompt, fwd_hooks=[("blocks.0.hook_resid_mid", drop_token)])
    spec = NetSpec(2, 2, 2, 1)
    compiled = compile_gd_transformer(spec, steps=1, n=4)
    x, y, xq, w0, _ = sample_task(spec, 4, seed=0)
    H = compiled.build_prompt(x, y, xq, w0)
    with pytest.raises(InputError, match="keep the shape"):
        compiled.run_with_hooks(H, fwd_hooks=[("steps.0.update.hook_out", drop_token)])


def test_transformer_lens_patching_runs_on_the_residual_input(
    model: ICLTransformer, prompt: tuple[Tensor, Tensor]
) -> None:
    """``patching.generic_activation_patch`` with ``tl.patching_index`` patches every (layer, pos) of
    ``resid_pre``; each entry equals the same patch done with icdl's own hooks on the icdl model (and some
    patches matter)."""
    from transformer_lens import patching

    xs, ys = prompt
    tl = to_transformer_lens(model)
    clean, corrupt = tl.residual_input(xs, ys), tl.residual_input(xs, -ys)
    _, clean_cache = tl.run_with_cache(clean)
    metric = lambda logits: logits[:, -2, 0].sum()  # noqa: E731 - the last point's prediction
    index = tl.patching_index(corrupt, ("layer", "pos"))
    got = patching.generic_activation_patch(
        tl, corrupt, clean_cache, metric, patching.layer_pos_patch_setter, "resid_pre", index_df=index
    )
    assert got.shape == (LAYERS * corrupt.shape[1],)
    _, icdl_clean = model.run_with_cache(xs, ys)
    for row, (layer, pos) in enumerate(index.itertuples(index=False)):

        def put(act: Tensor, hook: HookPoint, layer: int = layer, pos: int = pos) -> None:
            act[:, pos] = icdl_clean["resid_pre", layer][:, pos]

        ref = model.run_with_hooks(xs, -ys, fwd_hooks=[(get_act_name("resid_pre", layer), put)])
        want = float(ref[:, -1, 0].sum().detach())
        assert abs(float(got[row]) - want) <= 1e-6 * max(1.0, abs(want)), (layer, pos)  # TL stores float32
    assert float(got.max() - got.min()) > 1e-3
    with pytest.raises(InputError, match="unknown patching axes"):
        tl.patching_index(corrupt, ("layer", "token"))


# -- every variant under TransformerLens' hook machinery (icdl.export.to_hooked) ----------------------------


@pytest.fixture(scope="module", params=["paper", "compact", "no-ewml", "rows", "softmax"])
def variant(request: pytest.FixtureRequest) -> tuple:  # type: ignore[type-arg]
    spec = NetSpec(depth=2, width=3, in_dim=2, out_dim=1)
    model = compile_gd_transformer(spec, lr=0.1, steps=2, n=4, variant=request.param)
    x, y, xq, w0, _ = sample_task(spec, 4, seed=2)
    return model, spec, (x, y, w0), model.build_prompt(x, y, xq, w0)


def test_every_variant_as_a_hooked_root_module(variant: tuple) -> None:  # type: ignore[type-arg]
    """TransformerLens' run_with_cache on ``to_hooked(model)``: the same hook names as icdl, and the output
    and every cached stream equal icdl's own run (float64, to 1e-12); GD moved w."""
    from transformer_lens import HookedRootModule

    from icdl.export import to_hooked

    model, _, _, H = variant
    hooked = to_hooked(model)
    assert isinstance(hooked, HookedRootModule)
    assert list(hooked.hook_dict) == model.hook_names()
    out, cache = model.run_with_cache(H)
    with torch.no_grad():
        tl_out, tl_cache = hooked.run_with_cache(H)
    assert _err(tl_out, out) <= 1e-12
    for name in model.hook_names():
        assert _err(tl_cache[name], cache[name]) <= 1e-12, name
    w = model.read_weights
    assert _err(w(out), w(H)) > 1e-4


def test_hooked_update_ablation_freezes_w(variant: tuple) -> None:  # type: ignore[type-arg]
    """With TransformerLens' ``hooks()`` context: replacing step 1's update output by its input leaves w
    where step 0 put it (reference GD's w_1; the softmax variant's products are approximate, so 1e-4 there),
    while reference GD moves it in step 1; a backward hook fires on the prompt."""
    from icdl.export import to_hooked
    from icdl.nets import reference_gd

    model, spec, (x, y, w0), H = variant
    hooked = to_hooked(model)
    names = [m.info.name for m in model.block_layers]
    before = f"steps.1.{names[names.index('update') - 1]}.hook_out"
    saved: dict[str, Tensor] = {}

    def keep(act: Tensor, hook: object) -> None:
        saved["in"] = act

    def ablate(act: Tensor, hook: object) -> Tensor:
        return saved["in"]

    got: dict[str, Tensor] = {}

    def after_project(act: Tensor, hook: object) -> None:
        got["w"] = model.read_weights(act)

    fwd = [(before, keep), ("steps.1.update.hook_out", ablate), ("steps.1.project.hook_out", after_project)]
    with torch.no_grad(), hooked.hooks(fwd_hooks=fwd):
        hooked(H)
    ref = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=2)
    tol = 1e-4 if model.config.variant == "softmax" else 1e-9
    assert _err(got["w"][0], ref[1]) <= tol and _err(ref[2], ref[1]) > 10 * tol
    grads: list[Tensor] = []
    Hg = H.clone().requires_grad_(True)
    out = hooked.run_with_hooks(Hg, bwd_hooks=[("hook_prompt", lambda g, hook: grads.append(g))])
    model.read_prediction(out).sum().backward()
    assert len(grads) == 1 and float(grads[0].abs().max()) > 0


def test_relu_icl_model_as_a_hooked_root_module() -> None:
    from icdl.export import to_hooked

    torch.manual_seed(0)
    m = ICLTransformer(3, 1, layers=2, heads=2, d_model=16, d_mlp=32, max_points=8, attention="relu").double()
    xs, ys = torch.randn(2, 5, 3, dtype=torch.float64), torch.randn(2, 5, 1, dtype=torch.float64)
    hooked = to_hooked(m.eval())
    preds, cache = m.run_with_cache(xs, ys)
    with torch.no_grad():
        tl_preds, tl_cache = hooked.run_with_cache(xs, ys)
    assert _err(tl_preds, preds) <= 1e-12
    for name in m.hook_names():
        assert _err(tl_cache[name], cache[name]) <= 1e-12, name
    assert torch.equal(tl_cache[get_act_name("pattern", 1)], cache["pattern", 1])
    with torch.no_grad():
        a = hooked.run_with_hooks(xs, ys, fwd_hooks=[(get_act_name("z", 0), _ablate_head(0))])
    assert _err(a, m.run_with_hooks(xs, ys, fwd_hooks=[(get_act_name("z", 0), _ablate_head(0))])) <= 1e-12
    with pytest.raises(InputError, match="to_hooked takes"):
        to_hooked(torch.nn.Linear(2, 2))


def test_remove_batch_dim(model: ICLTransformer, prompt: tuple[Tensor, Tensor]) -> None:
    xs, ys = prompt
    _, cache = model.run_with_cache(xs[:1], ys[:1])
    one = cache.remove_batch_dim()
    assert torch.equal(one["pattern", 0], cache["pattern", 0][0])
    assert one["blocks.1.attn.hook_z"].shape == cache["blocks.1.attn.hook_z"].shape[1:]
    with pytest.raises(InputError, match="batch of one"):
        model.run_with_cache(xs, ys)[1].remove_batch_dim()

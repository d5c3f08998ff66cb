"""icdl.inspect: named activations of compiled and trained models, head patterns, plots, dense export."""

from __future__ import annotations

import pytest
import torch

from icdl.construct import compile_gd_transformer, sample_task
from icdl.errors import InputError
from icdl.icl.models import HOOK_NAMES, ICLTransformer, hook_name
from icdl.inspect import (
    dense_sublayer,
    head_pattern,
    plot_head_pattern,
    plot_residual,
    plot_slot_trajectory,
    run_with_cache,
    slot_trajectory,
)
from icdl.inspect.compiled import sublayer_names
from icdl.inspect.plots import save_figure
from icdl.nets import NetSpec, reference_gd
from icdl.theory import sublayers_per_step


@pytest.fixture(scope="module")
def compiled():
    spec = NetSpec(depth=3, width=4, in_dim=3, out_dim=2)
    model = compile_gd_transformer(spec, lr=0.1, steps=3, n=5)
    x, y, xq, w0, _ = sample_task(spec, 5, seed=1)
    return spec, model, (x, y, xq, w0), model.build_prompt(x, y, xq, w0)


def test_compiled_cache_names_and_shapes(compiled):
    spec, model, _, H = compiled
    out, cache = run_with_cache(model, H)
    assert torch.equal(out, model.run(H))
    names = sublayer_names(model)
    assert len(names) == sublayers_per_step(spec.depth) == 2 * spec.depth + 4
    assert names[: spec.depth] == [f"forward_{j}" for j in range(1, spec.depth + 1)]
    assert names[-2:] == ["update", "project"]
    steps_keys = [k for k in cache if k.startswith("steps.")]
    points = ("hook_write", "hook_out")
    assert steps_keys == [f"steps.{s}.{n}.{p}" for s in range(model.steps) for n in names for p in points]
    readout = [k for k in cache if k.startswith("readout.")]
    assert readout == [f"readout.{m.info.name}.{p}" for m in model.readout_layers for p in points]
    assert cache.names() == ["hook_prompt", *steps_keys, *readout] == model.hook_names()
    assert torch.equal(cache[readout[-1]], out)  # the last readout sublayer's stream is the output
    assert torch.equal(cache["readout", model.readout_layers[-1].info.name], out)  # the old key form
    assert torch.equal(cache[0, "prompt"], H) and torch.equal(cache["hook_prompt"], H)
    for key in cache:
        assert cache[key].shape == (1, model.n + 1, model.layout.dim)
    # A slot key slices exactly the layout's coordinates.
    w = cache[1, "project", "W"]
    assert w.shape == (1, model.n + 1, spec.num_params)
    assert torch.equal(w, cache[1, "project"][..., model.layout.indices("W")])
    with pytest.raises(InputError, match="unknown slot"):
        cache[1, "project", "nope"]
    with pytest.raises(InputError, match="no activation"):
        cache[99, "project"]


def test_slot_trajectory_matches_reference_gd(compiled):
    spec, model, (x, y, _, w0), H = compiled
    _, cache = run_with_cache(model, H)
    traj = slot_trajectory(cache, model, "W")
    ref = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=model.steps)
    assert traj.shape == (model.steps + 1, 1, spec.num_params)
    assert torch.allclose(traj[:, 0], ref, atol=1e-12, rtol=0)
    assert (traj[-1] - traj[0]).abs().max() > 1e-6  # the trajectory moves: the check can fail


def test_head_pattern_reproduces_the_sublayer(compiled):
    """Sum over heads of pattern @ (V_m h) equals the sublayer's update, for a ReLU-attention sublayer."""
    _, model, _, H = compiled
    _, cache = run_with_cache(model, H)
    d = dense_sublayer(model, "forward_2")
    M = d["Q"].shape[0]
    H_in = cache[0, "forward_1"]
    delta = torch.zeros_like(H_in)
    for m in range(M):
        P = head_pattern(model, H_in, "forward_2", m)  # (B, T, T)
        assert P.shape == (1, model.n + 1, model.n + 1)
        delta += P @ (H_in @ d["V"][m].T)
    assert torch.allclose(H_in + delta, cache[0, "forward_2"], atol=1e-10)
    with pytest.raises(InputError, match="heads"):
        head_pattern(model, H_in, "forward_2", M)


def test_dense_export_size_check(compiled):
    _, model, _, _ = compiled
    mlp = dense_sublayer(model, "loss")
    assert mlp["W1"].shape[1] == model.layout.dim and mlp["W2"].shape[0] == model.layout.dim
    with pytest.raises(InputError, match="entries"):
        dense_sublayer(model, "forward_1", limit=10)
    with pytest.raises(InputError, match="unknown sublayer"):
        dense_sublayer(model, "nope")


def test_dense_size_guard_counts_every_head(compiled):
    """The guard's count is the size of what dense_sublayer returns, heads included: a limit one entry short
    of that is refused, for multi-head attention sublayers as for MLPs."""
    _, model, _, _ = compiled
    multi_head = 0
    for name in sublayer_names(model):
        size = sum(t.numel() for t in dense_sublayer(model, name, limit=10**9).values())
        dense_sublayer(model, name, limit=size)  # exactly at the limit: allowed
        with pytest.raises(InputError, match=f"{size:,} entries"):
            dense_sublayer(model, name, limit=size - 1)
        d = dense_sublayer(model, name, limit=size)
        multi_head += "Q" in d and d["Q"].shape[0] > 1
    assert multi_head >= 2  # the head count matters somewhere in this model


def test_compiled_plots(compiled, tmp_path):
    spec, model, (x, y, _, w0), H = compiled
    _, cache = run_with_cache(model, H)
    fig = plot_residual(cache[0, "backward_1"], model.layout)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [s.label for s in model.layout.slots]
    assert ax.images[0].get_array().shape == (model.n + 1, model.layout.dim)
    assert ax.get_yticklabels()[-1].get_text() == "query"
    P = head_pattern(model, cache[0, "forward_1"], "derivative", 0)
    fig2 = plot_head_pattern(P)
    assert fig2.axes[0].images[0].get_array().shape == (model.n + 1, model.n + 1)
    ref = reference_gd(spec, "squared", w0, x, y, lr=0.1, steps=model.steps)
    fig3 = plot_slot_trajectory(slot_trajectory(cache, model, "W"), ref)
    for suffix in (".png", ".pdf", ".svg"):
        assert save_figure(fig, tmp_path / f"r{suffix}", dpi=50).stat().st_size > 0
    save_figure(fig3, tmp_path / "t.png")
    with pytest.raises(InputError, match="format"):
        save_figure(fig, tmp_path / "r.bmp")


@pytest.mark.parametrize("attention", ["relu", "softmax"])
def test_trained_model_cache(attention):
    torch.manual_seed(0)
    cfg = dict(layers=2, heads=2, d_model=16, d_mlp=32)
    model = ICLTransformer(3, 1, attention=attention, max_points=8, **cfg).eval()
    xs, ys = torch.randn(2, 5, 3), torch.randn(2, 5, 1)
    preds, cache = model.run_with_cache(xs, ys)
    assert torch.allclose(preds, model(xs, ys), atol=1e-5)
    assert cache.names() == model.hook_names() == [hook_name(b, n) for b in range(2) for n in HOOK_NAMES]
    assert "blocks.1.attn.hook_pattern" in cache and "blocks.0.hook_resid_post" in cache
    B, T, dh = 2, 10, cfg["d_model"] // cfg["heads"]
    for b in range(cfg["layers"]):
        for name in ("attn.q", "attn.k", "attn.v", "attn.z"):  # TransformerLens' (batch, pos, head, d_head)
            assert cache[b, name].shape == (B, T, cfg["heads"], dh)
        pat = cache[b, "attn.pattern"]
        assert pat.shape == (B, cfg["heads"], T, T)
        assert torch.all(pat.triu(1) == 0)  # causal: no weight on future tokens
        if attention == "softmax":
            assert torch.allclose(pat.sum(-1), torch.ones(B, cfg["heads"], T), atol=1e-6)
        z = torch.einsum("bhqk,bkhd->bqhd", pat, cache[b, "attn.v"])
        assert torch.allclose(z, cache[b, "attn.z"], atol=1e-6)
        # each head's result is z_h W_O^h; their sum plus the output bias is attn_out
        result = cache[b, "attn.result"]
        assert result.shape == (B, T, cfg["heads"], cfg["d_model"])
        out = result.sum(2) + model.blocks[b].attn.proj.bias
        assert torch.allclose(out, cache[b, "attn_out"], atol=1e-6)
        assert cache[b, "mlp.pre"].shape == (B, T, cfg["d_mlp"])
        for name in ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out"):
            assert cache[b, name].shape == (B, T, cfg["d_model"])
        assert torch.allclose(cache[b, "resid_mid"], cache[b, "resid_pre"] + cache[b, "attn_out"], atol=1e-6)
    assert torch.equal(cache[0, "resid_post"], cache[1, "resid_pre"])
    fig = plot_head_pattern(cache[1, "attn.pattern"][:, 0])
    assert fig.axes[0].images[0].get_array().shape == (T, T)


def test_trained_model_interventions():
    torch.manual_seed(0)
    model = ICLTransformer(3, 1, layers=2, heads=2, d_model=16, d_mlp=32, max_points=8).eval()
    xs, ys = torch.randn(2, 5, 3), torch.randn(2, 5, 1)
    same = model.run_with_hooks(xs, ys, {(0, "attn.pattern"): lambda t: t})
    assert torch.allclose(same, model(xs, ys), atol=1e-5)
    ablated = model.run_with_hooks(xs, ys, {(0, "attn.pattern"): torch.zeros_like})
    assert not torch.allclose(ablated, same)
    with pytest.raises(InputError, match="unknown hook"):
        model.run_with_hooks(xs, ys, {(5, "attn.pattern"): torch.zeros_like})


def test_top_level_entry_points_are_lazy():
    """``import icdl`` loads neither torch nor matplotlib; every advertised name resolves."""
    import os
    import subprocess
    import sys

    code = (
        "import sys, icdl; heavy = [m for m in ('torch', 'matplotlib') if m in sys.modules]; "
        "assert not heavy, heavy; "
        "[getattr(icdl, n) for n in icdl.__all__]; "
        "assert icdl.compile_gd_transformer.__module__ == 'icdl.construct.compile'"
    )
    env = {**os.environ, "PYTHONPATH": str(__import__("pathlib").Path(__file__).parents[2] / "src")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)

"""Looped ICL transformers (issue 28, item 2; Yang et al., ICLR 2024): one weight-tied unit of blocks
applied ``model.loops`` times with input injection, the loss averaged over the last ``loop_window``
passes, a curriculum over loops. References: the blocks applied by hand, and the ordinary model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from icdl.config import ModelConfig, load_config
from icdl.errors import InputError
from icdl.icl.models import ICLTransformer, build_model
from icdl.icl.training.train import load_run, train, train_estimate, training_predictions


def _prompts(B: int = 3, n: int = 6, d: int = 5, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(B, n, d, generator=g, dtype=torch.float64)
    return xs, torch.randn(B, n, 1, generator=g, dtype=torch.float64)


def _looped(loops: int, window: int | None = None, layers: int = 2) -> ICLTransformer:
    torch.manual_seed(0)
    cfg = ModelConfig(
        layers=layers, heads=2, d_model=16, d_mlp=32, max_points=8, loops=loops, loop_window=window
    )
    model = build_model(cfg, 5, 1).double()
    with torch.no_grad():  # weights far from GPT-2's near-identity init, so every pass matters
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    return model


def _by_hand(model: ICLTransformer, xs: torch.Tensor, ys: torch.Tensor, loops: int) -> torch.Tensor:
    """h_0 = 0, h_{t+1} = blocks(h_t + e), read out after the last pass: the blocks called one by one."""
    n = xs.shape[1]
    assert model.wpe is not None
    e = model.read_in(model.tokens(xs, ys)) + model.wpe(torch.arange(2 * n))
    h = torch.zeros_like(e)
    for _ in range(loops):
        h = h + e
        for block in model.blocks:
            h = h + block.attn(block.ln1(h))
            h = h + block.mlp(block.ln2(h))
    return model.read_out(model.ln_f(h[:, 0::2]))


@pytest.mark.parametrize("loops", [1, 2, 5])
def test_looped_forward_is_the_unit_applied_loops_times_with_input_injection(loops: int) -> None:
    model = _looped(4)
    xs, ys = _prompts()
    with torch.no_grad():
        out = model(xs, ys, loops=loops)
        ref = _by_hand(model, xs, ys, loops)
        one, two = model(xs, ys, loops=1), model(xs, ys, loops=2)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert bool((one - two).abs().max() > 1e-3)  # another pass changes the prediction: not vacuous


def test_one_loop_is_the_ordinary_model_and_parameters_do_not_depend_on_loops() -> None:
    model = _looped(3)
    plain = build_model(ModelConfig(layers=2, heads=2, d_model=16, d_mlp=32, max_points=8), 5, 1).double()
    plain.load_state_dict(model.state_dict())
    xs, ys = _prompts()
    with torch.no_grad():
        torch.testing.assert_close(model(xs, ys, loops=1), plain(xs, ys), rtol=0, atol=0)
    assert _looped(1).num_params == _looped(7).num_params == plain.num_params


def test_the_window_stacks_the_last_passes_and_cuts_the_gradient_before_them() -> None:
    model = _looped(4)
    xs, ys = _prompts()
    with torch.no_grad():
        stacked = model(xs, ys, loops=4, window=3)
        for i, t in enumerate((2, 3, 4)):
            torch.testing.assert_close(stacked[i], model(xs, ys, loops=t), rtol=1e-12, atol=1e-12)
    # window=1: the gradient of the last pass alone, the state before it a constant
    w = model.blocks[0].mlp.fc.weight
    (g_win,) = torch.autograd.grad(model(xs, ys, loops=3, window=1).sum(), w)
    n = xs.shape[1]
    assert model.wpe is not None
    e = model.read_in(model.tokens(xs, ys)) + model.wpe(torch.arange(2 * n))
    with torch.no_grad():
        h = torch.zeros_like(e)
        for _ in range(2):
            h = model._pass(h + e, None, 0)
    (g_ref,) = torch.autograd.grad(model._read(model._pass(h + e, None, 0)).sum(), w)
    (g_full,) = torch.autograd.grad(model(xs, ys, loops=3).sum(), w)
    torch.testing.assert_close(g_win, g_ref, rtol=1e-10, atol=1e-12)
    assert bool((g_full - g_win).abs().max() > 1e-6)  # full backpropagation differs: the cut is real


def test_hook_names_are_unrolled_per_pass() -> None:
    model = _looped(3)
    assert model.depth == 6 and model.hook_names()[-1].startswith("blocks.5.")
    xs, ys = _prompts()
    preds, cache = model.run_with_cache(xs, ys)
    torch.testing.assert_close(preds, model(xs, ys).detach())
    first, last = cache["blocks.1.hook_resid_post"], cache["blocks.-1.hook_resid_post"]
    assert not torch.equal(first, last)  # each pass has its own activations
    # zeroing the last pass's MLP output changes the prediction (pass 0's block 1 is another point)
    out = model.run_with_hooks(xs, ys, [("blocks.5.hook_mlp_out", lambda t, hook: t * 0)])
    assert bool((out - preds).abs().max() > 1e-6)


def test_bad_loop_options_are_one_line_errors() -> None:
    model = _looped(3)
    xs, ys = _prompts()
    with pytest.raises(InputError, match="loops must be"):
        model(xs, ys, loops=0)
    with pytest.raises(InputError, match="window"):
        model(xs, ys, loops=2, window=3)
    torch.manual_seed(0)
    plain = build_model(ModelConfig(layers=1, heads=2, d_model=16, d_mlp=32, max_points=8), 5, 1)
    with pytest.raises(InputError, match="looped model"):
        plain(xs.float(), ys.float(), loops=2)
    for over, msg in [
        (["model.loop_window=2"], "needs model.loops"),
        (["model.loops=2", "model.loop_window=3"], "exceeds model.loops"),
        (["train.curriculum.loops={start: 1, end: 2, interval: 5}"], "needs a looped model"),
        (["model.loops=4", "train.curriculum.loops={start: 1, end: 2, interval: 5}"], "must end"),
    ]:
        sets = [arg for o in over for arg in ("--set", o)]
        argv = [sys.executable, "-m", "icdl", "train", "tiny", "--out", "unused", *sets]
        p = subprocess.run(argv, capture_output=True, text=True)
        assert p.returncode == 2 and msg in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_training_loss_averages_the_window_and_the_estimate_counts_the_passes() -> None:
    cfg = load_config("tiny", ["model.loops=3", "model.loop_window=2"])
    model = build_model(cfg.model, 5, 1)
    xs, ys = _prompts()
    xs, ys = xs.float(), ys.float()
    pred = training_predictions(cfg, model, xs, ys, step=0)
    assert pred.shape == (2, *ys.shape)
    loss = torch.nn.functional.mse_loss(pred, ys.expand_as(pred))
    by_pass = [torch.nn.functional.mse_loss(model(xs, ys, loops=t), ys) for t in (2, 3)]
    torch.testing.assert_close(loss, sum(by_pass) / 2)
    ramp = load_config("tiny", ["model.loops=3", "train.curriculum.loops={start: 1, end: 3, interval: 4}"])
    assert training_predictions(ramp, model, xs, ys, step=0).shape[0] == 1  # one pass at the ramp's start
    assert training_predictions(ramp, model, xs, ys, step=8).shape[0] == 3
    plain = train_estimate(load_config("tiny"))
    looped = train_estimate(cfg)
    assert looped.seconds > plain.seconds and looped.bytes > plain.bytes


def test_looped_training_with_a_loop_curriculum_resumes_bit_identically(tmp_path: Path) -> None:
    over = ["model.loops=3", "train.curriculum.loops={start: 1, end: 3, inc: 1, interval: 4}", "train.seed=3",
            "train.log_every=1"]  # fmt: skip
    straight, split = tmp_path / "straight", tmp_path / "split"
    train(load_config("tiny", [*over, "train.steps=12", "train.checkpoint_every=6"]), straight, quiet=True)
    train(load_config("tiny", [*over, "train.steps=6", "train.checkpoint_every=6"]), split, quiet=True)
    train(load_config("tiny", [*over, "train.steps=12", "train.checkpoint_every=6"]), split, quiet=True)
    a, _ = load_run(straight)
    b, _ = load_run(split)
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(p, q), name
    logged = (straight / "metrics.jsonl").read_text()
    assert '"loops": 1' in logged and '"loops": 3' in logged  # the ramp ran


def test_evaluate_runs_the_same_weights_at_other_loop_counts(tmp_path: Path) -> None:
    from icdl.icl.evaluation.evaluate import EvalOptions, evaluate_run

    run = tmp_path / "looped"
    over = ["model.loops=3", "train.steps=4", "train.checkpoint_every=4"]
    train(load_config("tiny", over), run, quiet=True)
    opts = EvalOptions(baselines=("averaging",), loops=(1, 3, 6), cost=False, resamples=10)
    res = evaluate_run(run, prompts=16, options=opts, progress=False)
    preds = res["conditions"]["train"]["predictors"]
    assert preds["icl_loops3"]["r2"] == preds["icl"]["r2"]  # its own loop count: the same predictions
    assert preds["icl_loops1"]["r2"] != preds["icl_loops6"]["r2"]
    assert preds["icl_loops6"]["meta"]["kind"] == "loops" and res["request"]["options"]["loops"] == [1, 3, 6]
    plain = tmp_path / "plain"
    train(load_config("tiny", ["train.steps=2", "train.checkpoint_every=2"]), plain, quiet=True)
    with pytest.raises(InputError, match="looped model"):
        evaluate_run(plain, prompts=16, options=opts, progress=False)

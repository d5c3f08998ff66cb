"""Evaluation suites: serialisation, the intended distributions, and the degenerate weight shift."""

from __future__ import annotations

import pytest
import torch

from icdl.config import load_config
from icdl.errors import InputError
from icdl.icl.evaluation.evaluate import label_diagnostics, parse_baselines
from icdl.icl.suites import EVAL_SEED, Suite, build_suite, depth_ks, eval_points, suite_names
from icdl.icl.tasks import sample_batch


@pytest.fixture(scope="module")
def cfg():  # type: ignore[no-untyped-def]
    return load_config("cpu-small")


@pytest.mark.parametrize("name", suite_names())
def test_suites_round_trip(cfg, name: str) -> None:  # type: ignore[no-untyped-def]
    suite = build_suite(name, cfg, prompts=128)
    again = Suite.from_dict(suite.to_dict())
    assert again == suite
    assert suite.seed != cfg.train.seed and suite.prompts == 128 and suite.conditions
    for c in suite.conditions:
        assert c.points <= cfg.model.max_points


def test_suite_shapes(cfg) -> None:  # type: ignore[no-untyped-def]
    assert eval_points(cfg) == 46  # 30 -> 45 examples, as the paper's 50 -> 75
    mix = build_suite("mixture", cfg)
    assert [c.params["omega1"] for c in mix.conditions] == [1.0, 0.9, 0.7, 0.5]
    assert mix.conditions[1].task.inputs.means == [-2.0, 2.0]
    assert mix.conditions[1].task.inputs.per == "point"
    assert build_suite("mixture-prompt", cfg).conditions[1].task.inputs.per == "prompt"
    ws = build_suite("weight-shift", cfg)
    assert [c.task.weight_mean for c in ws.conditions] == [0.0, -0.5, 0.5]
    assert all(c.task.standardize == "none" for c in ws.conditions)
    assert all(c.task.standardize == "task" for c in build_suite("weight-shift-std", cfg).conditions)
    cen = build_suite("centred", cfg).conditions[0].task
    assert cen.inputs.means == [0.0] and cen.standardize == "task"
    # Everything but the varied field is the training task.
    assert ws.conditions[1].task.model_copy(update={"weight_mean": 0.0}) == cfg.task
    longp = build_suite("long-prompts", cfg)
    assert [c.points for c in longp.conditions] == [31, 46]  # 2x is capped by max_points = 46
    assert longp.notes


def test_depth_ks() -> None:
    assert depth_ks(75) == (15, 30, 45) and depth_ks(45) == (15, 30, 45)
    assert depth_ks(15) == (5, 10, 15)
    assert depth_ks(2) == (1, 2)


def test_mixture_per_point_vs_per_prompt(cfg) -> None:  # type: ignore[no-untyped-def]
    for suite, per_prompt in (("mixture", False), ("mixture-prompt", True)):
        task = build_suite(suite, cfg).conditions[3].task  # ω1 = 0.5
        xs = sample_batch(task, 256, seed=EVAL_SEED, points=46).xs
        comp = xs.mean(-1) > 0  # the component of every point (means -2 and +2, 20 coordinates)
        mixed = (comp.any(1) & ~comp.all(1)).float().mean().item()
        share = comp.float().mean().item()
        assert 0.4 < share < 0.6
        if per_prompt:
            assert mixed == 0.0  # every prompt's points come from one component
        else:
            assert mixed > 0.99


def test_degenerate_weight_shift_is_flagged() -> None:
    cfg = load_config("cpu-small", ["task.depth=4"])
    conds = build_suite("weight-shift", cfg).conditions
    ref = sample_batch(cfg.task, 256, seed=EVAL_SEED, points=46).ys.double().std().item()
    diags = {
        c.name: label_diagnostics(sample_batch(c.task, 256, seed=EVAL_SEED, points=46).ys, ref) for c in conds
    }
    assert not diags["mup0"]["degenerate"]
    neg = diags["mum0_5"]
    assert neg["degenerate"] and neg["zero_fraction"] > 0.9
    pos = diags["mup0_5"]
    assert pos["label_std_ratio"] > 1.5  # the label scale grows with the shift


def test_label_diagnostics_reference() -> None:
    ys = torch.zeros(10, 5, 1)
    ys[0, 0] = 1.0
    d = label_diagnostics(ys, 1.0)
    assert d["degenerate"] and d["zero_fraction"] == pytest.approx(49 / 50)
    assert d["constant_prompt_fraction"] == pytest.approx(0.9)
    ok = label_diagnostics(torch.randn(10, 5, 1, generator=torch.Generator().manual_seed(0)), 1.0)
    assert not ok["degenerate"]


def test_bad_inputs(cfg) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match="unknown suite"):
        build_suite("nope", cfg)
    with pytest.raises(InputError, match="prompts"):
        build_suite("mixture", cfg, prompts=1)
    with pytest.raises(InputError, match="training seed"):
        build_suite("mixture", cfg, seed=cfg.train.seed)
    with pytest.raises(InputError, match="unknown baseline"):
        parse_baselines("averaging,bogus")
    assert parse_baselines("all") == parse_baselines(
        "zero,averaging,least-squares,ridge,knn,mlp,gd,ridge_tuned,kernel,radial,blup,mlp_tuned"
    )
    assert parse_baselines(None) is None and parse_baselines("none") == ()

"""Committed curves over training seeds (icdl.icl.evaluation.curves) and the mlp_tuned wiring of icdl
evaluate."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from icdl.config import load_config
from icdl.errors import InputError
from icdl.icl.evaluation import baseline_runs
from icdl.icl.evaluation.curves import collect, markdown
from icdl.icl.evaluation.evaluate import EvalOptions, evaluate_run
from icdl.icl.training.train import train

ROOT = Path(__file__).resolve().parents[3]
OPTS = EvalOptions(baselines=("averaging", "ridge_tuned", "mlp_tuned"), resamples=20, cost=False,
                   mlp_tuned_prompts=8, mlp_tune_prompts=6, tuned_prompts=16)  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("curves")
    out = []
    for seed in (0, 1):
        rd = root / f"s{seed}"
        train(
            load_config(
                "tiny", ["train.steps=5", f"train.seed={seed}", "task.examples=5", "model.max_points=8"]
            ),
            rd,
            quiet=True,
        )
        evaluate_run(rd, "long-prompts", prompts=16, options=OPTS, progress=False)
        out.append(rd)
    return out


def test_aggregate_equals_a_plain_recomputation(runs: list[Path]) -> None:
    cur = collect("t", runs, ["long-prompts"], command="cmd")
    res = [json.loads((rd / "eval" / "long-prompts.json").read_text()) for rd in runs]
    cond = "x1"
    ranges = res[0]["conditions"][cond]["ranges"]
    for pname in ("icl", "ridge_tuned", "mlp_tuned"):
        got = cur["suites"]["long-prompts"]["conditions"][cond]["predictors"][pname]
        curves = [r["conditions"][cond]["predictors"][pname] for r in res]
        for k in range(1, len(curves[0]["r2"])):
            vals = [c["r2"][k] for c in curves]
            assert got["mean"][k] == pytest.approx(statistics.fmean(vals), abs=1e-4)
            assert got["seed_min"][k] == pytest.approx(min(vals), abs=1e-4)
            assert got["band_low"][k] == pytest.approx(min(c["r2_low"][k] for c in curves), abs=1e-4)
            assert got["band_high"][k] == pytest.approx(max(c["r2_high"][k] for c in curves), abs=1e-4)
        lo, hi = ranges[0]
        per_seed = [statistics.fmean(c["r2"][lo : hi + 1]) for c in curves]
        assert got["ranges"][f"{lo}-{hi}"]["r2"]["mean"] == pytest.approx(
            statistics.fmean(per_seed), abs=1e-4
        )
        skill = [statistics.fmean(c["skill"][lo : hi + 1]) for c in curves]
        assert got["ranges"][f"{lo}-{hi}"]["skill"]["seed_max"] == pytest.approx(max(skill), abs=1e-4)
    icl = cur["suites"]["long-prompts"]["conditions"][cond]["predictors"]["icl"]
    assert icl["seed_min"] != icl["seed_max"]  # two different models
    assert [r["train_seed"] for r in cur["runs"]] == [0, 1]
    text = markdown(cur)
    assert "mlp_tuned" in text and "seed" in text


def test_baselines_are_computed_once_for_all_seeds(runs: list[Path]) -> None:
    res = [json.loads((rd / "eval" / "long-prompts.json").read_text()) for rd in runs]
    a, b = (r["conditions"]["x1"]["predictors"]["mlp_tuned"] for r in res)
    assert a["r2"] == b["r2"] and a["meta"]["settings"] == b["meta"]["settings"]
    assert len(baseline_runs._MEMO) >= 1


def test_tuned_settings_do_not_depend_on_test_labels(runs: list[Path]) -> None:
    from icdl.icl.suites import build_suite
    from icdl.icl.training.train import read_run_config

    cfg = read_run_config(runs[0])
    st = build_suite("long-prompts", cfg, prompts=8)
    cond = st.conditions[0]
    pb = baseline_runs.draw_prompts(cond, 8, st.seed)
    opts = EvalOptions(mlp_tuned_prompts=8, mlp_tune_prompts=6)
    first = baseline_runs._run_mlp_tuned(cond, pb, cfg, st, opts)
    pb.ys.mul_(-5.0).add_(3.0)  # other test labels
    second = baseline_runs._run_mlp_tuned(cond, pb, cfg, st, opts)
    assert first.meta["settings"] == second.meta["settings"]
    assert first.meta["tuning"] == second.meta["tuning"]


def test_missing_or_mismatched_evaluations_are_input_errors(runs: list[Path], tmp_path: Path) -> None:
    with pytest.raises(InputError, match="missing"):
        collect("t", runs, ["in-distribution"])
    with pytest.raises(InputError):
        collect("t", [], ["long-prompts"])


def test_script_writes_json_and_markdown(runs: list[Path], tmp_path: Path) -> None:
    script = str(ROOT / "scripts" / "curves.py")
    cmd = [sys.executable, script, "t", *map(str, runs), "--suites", "long-prompts", "--no-evaluate",
           "--out-dir", str(tmp_path)]  # fmt: skip
    env = {"PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    subprocess.run(cmd, check=True, capture_output=True, env=env, timeout=300)
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["format"] == "icdl-curves-v1" and "--no-evaluate" in data["command"]
    # Absolute run paths (here under a temporary folder, outside the working directory) are recorded
    # as run names: committed curves must not carry the writer's machine paths.
    assert str(tmp_path) not in data["command"] and str(runs[0].parent) not in data["command"]
    assert [r["run_dir"] for r in data["runs"]] == [rd.name for rd in runs]
    assert (tmp_path / "t.md").read_text().startswith("### t: 2 training seed(s)")
    bad = subprocess.run([*cmd[:3], str(tmp_path / "nope"), "--no-evaluate", "--out-dir", str(tmp_path)],
                         capture_output=True, env=env, text=True, timeout=300)  # fmt: skip
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_fill_markers_regenerates_the_docs_tables(runs: list[Path]) -> None:
    from icdl.icl.evaluation.curves import fill_markers, headline

    cur = collect("tiny-x", runs, ["long-prompts"])
    text = (
        "a\n<!-- curves:tiny-x -->\nOLD\n<!-- /curves -->\nb\n<!-- curves:other -->\nKEEP\n<!-- /curves -->\n"
    )
    out = fill_markers(text, cur)
    assert "OLD" not in out and "KEEP" in out and out.startswith("a\n<!-- curves:tiny-x -->\n| predictor")
    assert headline(cur, suite="long-prompts", condition="x1") in out
    assert "| ICL (2 seeds) (16) |" in out and "`mlp_tuned` (8)" in out


def test_fill_markers_selects_a_condition(runs: list[Path]) -> None:
    from icdl.errors import InputError
    from icdl.icl.evaluation.curves import fill_markers, headline

    cur = collect("tiny-x", runs, ["long-prompts"])
    conds = list(cur["suites"]["long-prompts"]["conditions"])
    last = conds[-1]
    text = f"<!-- curves:tiny-x:long-prompts/{last}:short -->\nOLD\n<!-- /curves -->\n"
    out = fill_markers(text, cur)
    assert headline(cur, suite="long-prompts", condition=last, short=True) in out and "OLD" not in out
    if len(conds) > 1:  # the selected condition, not the default one
        assert headline(cur, suite="long-prompts", condition=conds[0], short=True) not in out
    for bad in ("long-prompts/nope", "wide", f"long-prompts/{last}:long-prompts/{last}"):
        with pytest.raises(InputError):
            fill_markers(f"<!-- curves:tiny-x:{bad} -->\nX\n<!-- /curves -->\n", cur)

"""``icdl score`` and the score trainer: a tiny run end to end, JSON output, one-line errors (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from icdl.cli import main
from icdl.diffusion.config import load_score_config
from icdl.diffusion.evaluate import icl_predictor
from icdl.diffusion.task import sample_score_batch
from icdl.diffusion.train import load_score_run, train_score
from icdl.errors import InputError

TINY = [
    "train.steps=4", "train.log_every=2", "train.checkpoint_every=2", "train.batch_size=8", "train.warmup=1",
    "model.layers=1", "model.heads=2", "model.d_model=16", "model.d_mlp=32", "task.examples=6",
    "model.max_points=7",
]  # fmt: skip


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("score") / "run"
    train_score(load_score_config("score-small", TINY), d)
    return d


def test_train_writes_a_loadable_run(tiny_run: Path) -> None:
    model, cfg = load_score_run(tiny_run)
    assert (model.d_x, model.d_y) == (3, 2) and cfg.task.examples == 6
    lines = [json.loads(s) for s in (tiny_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [2, 4] and all(r["loss"] > 0 for r in lines)
    b = sample_score_batch(cfg.task, 3, seed=1, dtype=torch.float64)
    p = icl_predictor(model)(b.xs, b.ys)
    assert p.shape == b.ys.shape and p.dtype == torch.float64 and torch.isfinite(p).all()
    # causal: changing the last label changes no prediction
    ys2 = b.ys.clone()
    ys2[:, -1] += 5
    assert torch.equal(icl_predictor(model)(b.xs, ys2), p)
    with pytest.raises(InputError, match="does not match the run being resumed"):
        train_score(load_score_config("score-small", [*TINY, "task.examples=5"]), tiny_run)


def test_evaluate_and_sample_json(tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "curves.json"
    code, stdout, err = run(
        ["score", "evaluate", str(tiny_run), "--prompts", "8", "--mlp-ks", "3", "--mlp-epochs", "5",
         "--resamples", "20", "--tune-prompts", "6", "--json", "--out", str(out),
         "--plot", str(tmp_path / "c.png")],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    r = json.loads(stdout)
    assert set(r["score_error"]) == {
        "icl", "mlp3x64", "gd3x16_L10", "prior", "population", "gaussian_fit", "empirical", "gd_prior", "kde",
        "mixture_fit",
    }  # fmt: skip
    assert len(r["score_error"]["icl"]["mse"]) == 7 and r["dsm_loss"]["exact"][0] > 0
    assert json.loads(out.read_text())["prompts"] == 8 and (tmp_path / "c.png").stat().st_size > 0
    code, stdout, err = run(
        ["score", "sample", str(tiny_run), "--ks", "2,6", "--prompts", "1", "--samples", "20", "--steps", "3",
         "--mlp-epochs", "2", "--tune-prompts", "6", "--json", "--plot", str(tmp_path / "d.png"),
         "--samples-plot", str(tmp_path / "s.png")],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    r = json.loads(stdout)
    assert r["ks"] == [2, 6] and len(r["sw"]["icl"]) == 2 and r["floor"]["exact_sw"] >= 0
    assert len(r["sw_bands"]["minus_icl"]["kde"]) == 2 and set(r["tuning"]) == {
        "gd_prior",
        "kde",
        "mixture_fit",
    }
    assert (tmp_path / "s.png").stat().st_size > 0


def test_construct_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        ["score", "construct", "-d", "2", "-N", "2", "-K", "4", "-n", "6", "-L", "2", "--json"], capsys
    )
    assert code == 0, err
    r = json.loads(out)
    assert r["passed"] and r["d_x"] == 3 and r["d_y"] == 2 and r["max_abs_err_weights"] < 1e-12


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["score", "train", "nope"], "unknown score preset"),
        (["score", "train", "score-small", "--set", "task.dim=0"], "task.dim"),
        (["score", "evaluate", "/nonexistent/run"], "not a score run"),
        (["score", "evaluate"], "RUN directory"),
        (["score", "sample", "--baselines-only", "score-small", "--ks", "a,b"], "--ks"),
        (["score", "sample", "--baselines-only", "score-small", "--ks", "99"], "ks must lie"),
        (["score", "evaluate", "--baselines-only", "score-small", "--plot", "x.jpg"], ".png"),
        (["score", "construct", "--lr", "-1"], "lr"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(args, capsys)
    assert code == 2 and err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_subprocess_help_and_error() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    for args in (["score", "--help"], ["score", "sample", "--help"]):
        ok = subprocess.run([sys.executable, "-m", "icdl", *args], capture_output=True, text=True, env=env)
        assert ok.returncode == 0 and "Usage" in ok.stdout, ok.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "icdl", "score", "train", "nope"], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    ("attention", "norm"), [("softmax", "causal"), ("relu", "causal"), ("relu", "length")]
)
def test_cached_icl_score_fn_equals_the_full_forward(attention: str, norm: str) -> None:
    from icdl.diffusion.baselines import score_fn
    from icdl.diffusion.evaluate import icl_score_fn
    from icdl.icl.models import ICLTransformer

    torch.manual_seed(0)
    model = ICLTransformer(
        3, 2, layers=2, heads=2, d_model=16, d_mlp=32, max_points=12, attention=attention, relu_norm=norm
    )
    with torch.no_grad():  # make attention matter (GPT-2 init leaves it nearly uniform and small)
        for p in model.parameters():
            p.mul_(8.0 if p.dim() == 2 else 1.0)
    model.eval()
    b = sample_score_batch(load_score_config("score-small").task, 1, seed=2, dtype=torch.float64)
    x = torch.randn(6, 2, dtype=torch.float64)
    for k in (1, 5, 11):
        full = score_fn(icl_predictor(model), b.xs[0, :k], b.ys[0, :k])(x, 0.7)
        cached = icl_score_fn(model, b.xs[0, :k], b.ys[0, :k])(x, 0.7)
        assert float(full.abs().max()) > 0.1
        torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-4)
    with pytest.raises(InputError):
        icl_score_fn(model, b.xs[0, :12], b.ys[0, :12])


def test_non_finite_loss_is_one_line_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Like ``icdl train``: 3 is the documented code for a run stopped on a non-finite loss (1 is a bug)."""
    sets = [a for s in [*TINY, "train.lr=1e30", "train.grad_clip=null"] for a in ("--set", s)]
    code, _, err = run(["score", "train", "score-small", "--out", str(tmp_path / "r"), *sets], capsys)
    assert code == 3 and err.count("\n") == 1 and "non-finite loss" in err


@pytest.mark.parametrize(
    "args",
    [
        ["score", "train", "score-small", "--set", "train.steps=100000000"],
        ["score", "evaluate", "--baselines-only", "score-small", "--mlp-epochs", "1000000000"],
        ["score", "sample", "--baselines-only", "score-small", "--samples", "100000", "--steps", "10000"],
    ],
)
def test_oversized_work_is_refused_with_its_estimate(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run([*args, "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and err.count("\n") == 1 and "would need about" in err and "--yes" in err
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("option", ["--out", "--plot"])
def test_unwritable_outputs_are_refused_before_work(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = str(tmp_path / "missing" / "x.png") if option == "--plot" else str(tmp_path / "f" / "r.json")
    (tmp_path / "f").write_text("a file, not a directory")
    code, _, err = run(["score", "evaluate", "--baselines-only", "score-small", option, target], capsys)
    assert code == 2 and err.count("\n") == 1 and option in err

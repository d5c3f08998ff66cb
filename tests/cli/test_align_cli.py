"""``icdl align`` as a subprocess on a tiny run trained in a temporary folder: the JSON, the plots, the
compiled model's built-in check, and one-line errors for bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from icdl.cli import main
from icdl.config import load_config
from icdl.icl.training.checkpoint import write_run_config
from icdl.icl.training.train import train

SRC = str(Path(__file__).resolve().parents[2] / "src")
SMALL = [
    "--prompts", "8", "--ks", "1,4", "--gd-lrs", "0.1,0.3", "--gd-steps", "1,2", "--gd-inits", "1",
    "--compiled-ks", "3", "--compiled-prompts", "6",
]  # fmt: skip


def _icdl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "icdl", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("align") / "tiny"
    train(
        load_config("tiny", ["train.steps=4", "train.checkpoint_every=4", "train.log_every=2"]),
        run,
        quiet=True,
    )
    return run


def test_align_writes_json_plots_and_table(tiny_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "copy"
    r = _icdl("align", str(tiny_run), *SMALL, "--out", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "compiled compact model of gd_lr" in r.stdout and "ridge_tuned" in r.stdout
    for folder in (tiny_run / "align", out):
        assert {p.name for p in folder.iterdir()} == {"align.json", "align.png", "gd_grid.png"}
    res = json.loads((out / "align.json").read_text())
    assert res["format"] == "icdl-align-v1" and res["ks"] == [1, 4]
    per = res["predictors"]
    assert {"icl", "averaging", "ridge", "ridge_tuned", "kernel", "gd_lr0.3_L2_init1"} <= set(per)
    assert len([n for n in per if per[n]["kind"] == "gd"]) == 4
    assert per["icl"]["r2"] == pytest.approx([1.0, 1.0]) and per["icl"]["cos_x"] == pytest.approx([1.0, 1.0])
    assert all(len(per[n]["r2"]) == 2 for n in per)
    (row,) = res["compiled"]["ks"]
    assert row["k"] == 3 and row["prompts"] == 6
    assert (
        row["vs_gd"]["r2"] > 1 - 1e-9
        and row["vs_gd"]["cos_y"] > 1 - 1e-9
        and row["vs_gd"]["cos_x"] > 1 - 1e-9
    )
    assert row["max_abs_pred_diff"] < 1e-9


def test_align_help(tmp_path: Path) -> None:
    r = _icdl("align", "--help", cwd=tmp_path)
    assert r.returncode == 0 and "--gd-lrs" in r.stdout and "--compiled-ks" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing-run"], "does not exist"),
        (["RUN", "--ks", "1,99"], "exceed the test prompts' longest k"),
        (["RUN", "--baselines", "ridge,nope"], "unknown baseline 'nope'"),
        (["RUN", "--gd-lrs", "0.1,x"], "not a comma-separated list of numbers"),
        (["RUN", "--variant", "nope"], "'nope' is not one of 'paper', 'compact'"),
    ],
)
def test_align_bad_input_is_one_line(
    tiny_run: Path, tmp_path: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [str(tiny_run) if a == "RUN" else str(tmp_path / a) if a == "missing-run" else a for a in args]
    with pytest.raises(SystemExit) as exc:
        main(["align", *args, "--prompts", "4", "--compiled-ks", "none", "-q"])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_unfinished_run_is_refused_unless_partial(tiny_run: Path, tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "unfinished"
    shutil.copytree(tiny_run, run)
    shutil.rmtree(run / "align", ignore_errors=True)
    # As a run killed half way leaves it: a config of 8 steps (sealed, as the trainer writes it), step 4.
    body = (run / "config.yaml").read_text().split("\n", 1)[1]
    write_run_config(run, body.replace("steps: 4\n", "steps: 8\n"))
    r = _icdl("align", str(run), *SMALL, cwd=tmp_path)
    assert r.returncode == 2 and "unfinished" in r.stderr and "--partial" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (run / "align").exists()
    r = _icdl("align", str(run), *SMALL, "--compiled-ks", "none", "--partial", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((run / "align" / "align.json").read_text())["compiled"] is None

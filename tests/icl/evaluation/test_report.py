"""`icdl report`: PNG + markdown with the expected sections, on-demand evaluation, depth sweep, CLI errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from icdl.config import load_config
from icdl.errors import InputError
from icdl.icl.evaluation.evaluate import EvalOptions, evaluate_run, result_path
from icdl.icl.evaluation.report import build_report
from icdl.icl.training.train import train

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
CHEAP = EvalOptions(
    baselines=("zero", "averaging", "mlp"),
    resamples=50,
    mlp_prompts=8,
    mlp_width=8,
    mlp_epochs=3,
    mlp_ks=(1, 10),
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("report")
    out = []
    for layers in (1, 2):
        rd = root / f"l{layers}"
        train(
            load_config(
                "tiny",
                ["train.steps=10", f"model.layers={layers}", "task.depth=4", "task.dim=20", "task.width=64"],
            ),
            rd,
            quiet=True,
        )
        out.append(rd)
    return out


def test_report_sections(runs: list[Path], tmp_path: Path) -> None:
    for rd in runs:
        evaluate_run(rd, "in-distribution", prompts=64, options=CHEAP, progress=False)
    evaluate_run(runs[1], "weight-shift", prompts=64, options=CHEAP, progress=False)
    rep = build_report(
        runs,
        tmp_path / "rep",
        suites=["in-distribution", "weight-shift", "mixture"],
        evaluate="none",
        progress=False,
    )
    text = rep.path.read_text()
    for heading in (
        "# icdl evaluation report",
        "## Summary",
        "## Transformer depth sweep",
        "### Suite `in-distribution`",
        "### Suite `weight-shift`",
        "#### Cost",
        "## Not evaluated",
    ):
        assert heading in text, heading
    assert "paper 1–50" in text and "0.845" in text  # the paper's 4-layer ReLU in-distribution mean (F.1)
    assert "0.790" in text  # the paper's F.2 ReLU N(-0.5, I) ICL mean
    assert "ICL beats **zero**" in text or "ICL matches **zero**" in text or "ICL trails **zero**" in text
    assert "DEGENERATE" in text  # N(-0.5, I) on a 4-layer bias-free ReLU target
    assert f"icdl evaluate {runs[0]} --suite mixture" in text and rep.missing
    assert rep.images and all(p.is_file() and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in rep.images)
    assert (tmp_path / "rep" / "depth_sweep.png").is_file()
    for rd in runs:  # every trained run's loss curve, from its metrics.jsonl
        assert (rd / "metrics.jsonl").is_file()
        assert f"![training loss]({rd.name}__training-loss.png)" in text
        assert (tmp_path / "rep" / f"{rd.name}__training-loss.png") in rep.images
    for p in rep.images:
        assert f"]({p.name})" in text
    svg = build_report(
        runs[:1], tmp_path / "svg", suites=["in-distribution"], evaluate="none", progress=False,
        figure_format="svg",
    )  # fmt: skip
    assert svg.images and all(p.suffix == ".svg" and p.read_bytes()[:5] == b"<?xml" for p in svg.images)
    with pytest.raises(InputError, match="png, pdf or svg"):
        build_report(runs[:1], tmp_path / "bad", evaluate="none", figure_format="bmp")


def test_report_evaluates_missing_on_demand(runs: list[Path], tmp_path: Path) -> None:
    import shutil

    rd = tmp_path / "fresh"
    shutil.copytree(runs[0], rd, ignore=shutil.ignore_patterns("eval"))
    assert not result_path(rd, "in-distribution").exists()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "icdl",
            "report",
            str(rd),
            "--suites",
            "in-distribution",
            "--prompts",
            "32",
            "--baselines",
            "averaging",
            "-q",
        ],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert p.returncode == 0, p.stderr
    assert Path(p.stdout.strip()) == rd / "report" / "report.md"
    assert result_path(rd, "in-distribution").is_file()
    assert "### Suite `in-distribution`" in (rd / "report" / "report.md").read_text()


def test_report_cli_errors(runs: list[Path], tmp_path: Path) -> None:
    for args in (
        [str(tmp_path / "nope")],
        [str(runs[0]), "--suites", "bogus"],
        [str(runs[0]), "--evaluate", "sometimes"],
    ):
        p = subprocess.run(
            [sys.executable, "-m", "icdl", "report", *args], capture_output=True, text=True, env=ENV
        )
        assert p.returncode == 2, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr

"""What a newcomer reads at the end: the demo's closing summary on stdout, ``icdl train``'s result line on
stdout, and a FAIL on the range condition that suggests ``--range auto``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from icdl.cli import main
from icdl.cli.construct import RANGE_HINT, range_hint
from icdl.cli.demo import summary_lines

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_demo_ends_with_a_summary_on_stdout(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "icdl", "demo", "--skip-train"],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    tail = r.stdout.rstrip().split("== Summary ", 1)
    assert len(tail) == 2, r.stdout[-500:]
    summary = tail[1].splitlines()[1:]
    assert [ln.split()[0] for ln in summary] == ["ran", "ran", "ran", "passed", "report"]
    assert "verdict PASS" in summary[3] and "--skip-train" in summary[4]
    assert "Summary" not in r.stderr


def test_summary_names_the_report_and_the_evaluation(tmp_path: Path) -> None:
    lines = summary_lines(["train demo"], tmp_path / "report" / "report.md", tmp_path / "run" / "eval")
    assert lines[-1].startswith("report  ") and str(tmp_path / "report" / "report.md") in lines[-1]
    assert str(tmp_path / "run" / "eval") in lines[-1]


def test_train_result_line_on_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sets = ("train.steps=2", "train.checkpoint_every=2", "train.keep_checkpoints=1")
    code, out, err = _cli(capsys, "train", "tiny", "--out", str(tmp_path / "run"),
                          *(a for s in sets for a in ("--set", s)))  # fmt: skip
    assert code == 0, err
    assert "trained 2 steps (from 0)" in out and "trained 2 steps" not in err


def test_range_hint_only_for_a_range_failure_at_fixed_range() -> None:
    rng = ["(b) range: 1 argument(s) of fitted sums or products outside the range they were fitted on"]
    assert range_hint("FAIL", rng, auto=False)
    assert not range_hint("FAIL", rng, auto=True)
    assert not range_hint("FAIL", ["(c) budget: step 3"], auto=False)
    assert not range_hint("PASS", [], auto=False)


def test_softmax_fail_at_defaults_suggests_range_auto(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "construct", "--variant", "softmax")
    if code == 0:
        pytest.skip("softmax PASSes at the defaults now: nothing to suggest")
    assert code == 5
    assert out.rstrip().endswith(f"hint         {RANGE_HINT}")
    assert "--range auto" in RANGE_HINT


def test_evaluate_summary_explains_its_verdicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """'ICL matches (1-15)' next to two different means is explained once, under the table."""
    run = tmp_path / "run"
    sets = ("train.steps=2", "train.checkpoint_every=2", "train.keep_checkpoints=1")
    code, _, err = _cli(
        capsys, "train", "tiny", "-q", "--out", str(run), *(a for s in sets for a in ("--set", s))
    )
    assert code == 0, err
    code, out, err = _cli(capsys, "evaluate", str(run), "--prompts", "16", "--resamples", "10",
                          "--baselines", "averaging", "--no-cost", "-q")  # fmt: skip
    assert code == 0 and out == "", err  # --quiet: nothing
    code, out, err = _cli(capsys, "evaluate", str(run), "--prompts", "16", "--resamples", "10",
                          "--baselines", "averaging", "--no-cost")  # fmt: skip
    assert code == 0, err
    assert "   ICL " in out and re.search(r"ICL (beats|matches|trails) \(", out), out
    footnote = [ln for ln in out.splitlines() if "paired bootstrap band" in ln]
    assert len(footnote) == 1 and "'matches' means no difference is resolved" in footnote[0]

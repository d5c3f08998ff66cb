"""`icdl construct`: INCONCLUSIVE exits 6, names its steps and remedy in the table and ``--json``, and is
listed in ``--help``; the same command in float64 PASSes (exit 0)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from icdl.cli.construct import EXIT_DEGENERATE, EXIT_FAIL, EXIT_INCONCLUSIVE, verdict_exit_code

# The issue's command: float32 sigmoid at lr 0.001 (step budget 1.05, gradient norm 0.05).
ISSUE = ["--activation", "sigmoid", "--dtype", "float32", "--lr", "0.001"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    src = str(Path(__file__).resolve().parents[2] / "src")  # this checkout's code, not an installed copy
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": src}
    return subprocess.run(
        [sys.executable, "-m", "icdl", "construct", *args], capture_output=True, text=True, env=env
    )


def test_the_exit_codes_are_distinct() -> None:
    assert EXIT_INCONCLUSIVE == 6 and len({EXIT_INCONCLUSIVE, EXIT_FAIL, EXIT_DEGENERATE, 0, 1, 2, 3}) == 7
    assert verdict_exit_code("INCONCLUSIVE") == 6 and verdict_exit_code("PASS") is None


def test_the_issue_command_is_inconclusive_and_exits_6() -> None:
    r = _run(*ISSUE)
    assert r.returncode == EXIT_INCONCLUSIVE, r.stderr
    assert "verdict      INCONCLUSIVE" in r.stdout and r.stderr == ""
    line = next(s for s in r.stdout.splitlines() if s.startswith("inconclusive (i) budget"))
    assert "steps 1-5 (5 of 5)" in line and "float64" in line
    assert r.stdout.count("uncheckable") >= 5
    j = _run(*ISSUE, "--json")
    assert j.returncode == EXIT_INCONCLUSIVE, j.stderr
    d = json.loads(j.stdout)
    assert d["verdict"] == "INCONCLUSIVE" and d["passed"] is False and d["failures"] == []
    assert d["uncheckable_steps"] == [1, 2, 3, 4, 5] and d["inconclusive"][0].startswith("(i) budget")
    assert all(s["budget_l2"] >= 0.5 * s["grad_norm"] for s in d["per_step"])


def test_float64_makes_it_pass() -> None:
    r = _run("--activation", "sigmoid", "--lr", "0.001", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["verdict"] == "PASS" and d["uncheckable_steps"] == [] and d["inconclusive"] == []


def test_help_lists_every_verdict_and_its_exit_code() -> None:
    r = _run("--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    for word in ("PASS 0", "DEGENERATE 4", "FAIL 5", "INCONCLUSIVE 6"):
        assert word in text, word

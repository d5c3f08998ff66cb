"""``icdl`` as a user runs it: a fresh interpreter per call (never the test process's imports).

The in-process CLI tests share pytest's already-imported modules; these catch what only a fresh process
shows (``icdl --help`` once crashed because ``importlib.util`` was used but never imported).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from icdl.cli import COMMANDS

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _icdl() -> list[str]:
    """The console script when installed (the way users run it), else the same entry point via -c."""
    script = shutil.which("icdl")
    if script is not None:
        return [script]
    return [sys.executable, "-c", "import sys; from icdl.cli import main; main(sys.argv[1:])"]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_icdl(), *args], capture_output=True, text=True, env=_env(), timeout=120, cwd=cwd)


def test_help_lists_every_command() -> None:
    r = run("--help")
    assert r.returncode == 0, r.stderr
    for name in COMMANDS:
        assert name in r.stdout
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("name", list(COMMANDS))
def test_subcommand_help(name: str) -> None:
    r = run(name, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Usage: icdl " + name)
    assert r.stderr == ""


def test_version() -> None:
    from icdl import __version__

    r = run("--version")
    assert r.returncode == 0 and __version__ in r.stdout


def test_dash_capital_v_is_version() -> None:
    r, long = run("-V"), run("--version")
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout == long.stdout and r.stdout.strip()


def test_no_arguments_prints_help_exit_2() -> None:
    r = run()
    assert r.returncode == 2
    assert "Usage: icdl" in r.stdout and "Traceback" not in r.stderr


def test_unknown_command_is_one_line_exit_2() -> None:
    r = run("frobnicate")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "frobnicate" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_help_without_importlib_util_preloaded() -> None:
    """The original bug, made deterministic: some environments pre-import ``importlib.util`` at startup
    (site hooks), which hid the missing import; remove it before the CLI is imported."""
    code = (
        "import importlib, sys\n"
        "sys.modules.pop('importlib.util', None)\n"
        "if hasattr(importlib, 'util'): delattr(importlib, 'util')\n"
        "from icdl.cli import main\n"
        "main(['--help'])\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "construct" in r.stdout


def test_python_dash_m() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "icdl", "theory", "--help"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert r.returncode == 0 and "--depth" in r.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["theory", "--depth", "1000000000", "--width", "1000000000", "--in-dim", "2", "--out-dim", "1",
         "--steps", "1"],
        ["approx", "sigmoid", "--eps", "1e-9", "--range", "10"],
        ["construct", "--depth", "3", "--width", "4096", "--steps", "100"],
        ["train", "tiny", "--set", "train.steps=1000000000000"],
    ],
)  # fmt: skip
def test_oversized_work_refused_with_estimate(args: list[str], tmp_path: Path) -> None:
    """Each of these once took tens of GB or ran for hours; now one line with the estimate, exit 2,
    nothing written (run in an empty folder, which stays empty)."""
    r = run(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "would need about" in r.stderr and "--yes" in r.stderr
    assert list(tmp_path.iterdir()) == []

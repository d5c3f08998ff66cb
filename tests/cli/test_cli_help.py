"""Every option of every ``icdl`` command has a help line; suite options name every suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from icdl.cli import COMMANDS, cli
from icdl.icl.suites import suite_names


def _command(name: str) -> click.Command:
    cmd = cli.get_command(click.Context(cli), name)
    assert cmd is not None, name
    return cmd


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_option_has_help(name: str) -> None:
    missing = [p.opts for p in _command(name).params if isinstance(p, click.Option) and not p.help]
    assert not missing, f"icdl {name}: options without a help line: {missing}"


@pytest.mark.parametrize(("name", "option"), [("evaluate", "--suite"), ("report", "--suites")])
def test_suite_help_lists_the_suites(name: str, option: str) -> None:
    (opt,) = [p for p in _command(name).params if option in getattr(p, "opts", ())]
    for suite in suite_names():
        assert suite in (opt.help or ""), (suite, opt.help)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    out = subprocess.run(
        [sys.executable, "-m", "icdl", name, "--help"], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert option in out and "long-prompts" in out  # rendered in a fresh interpreter

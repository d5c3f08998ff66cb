"""A tiny trained run shared by the reliability tests (copied per test before any damage)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from icdl.config import load_config
from icdl.icl.training.train import train

TINY = ["train.steps=20", "train.checkpoint_every=10", "train.threads=1"]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("reliability") / "tiny"
    train(load_config("tiny", TINY), run_dir, quiet=True)
    return run_dir


@pytest.fixture
def run_copy(trained_run: Path, tmp_path: Path) -> Path:
    """A private copy of the trained run, free to damage."""
    rd = tmp_path / "run"
    shutil.copytree(trained_run, rd)
    return rd

"""Strict config types: no bool-as-int, no int-as-bool, no string coercion, no duplicate YAML keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from icdl.cli import main
from icdl.config import load_config


def cli_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``icdl ARGS``; assert exit 2 with one stderr line, and return that line."""
    with pytest.raises(SystemExit) as exc:
        main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    ("setting", "key"),
    [
        ("model.layers=yes", "model.layers"),  # YAML yes is True; True used to train 1 layer
        ("train.steps=true", "train.steps"),  # used to train 1 step
        ("train.steps='5'", "train.steps"),  # a string is not an integer
        ("train.tensorboard=1", "train.tensorboard"),  # an integer is not a boolean
        ("train.lr='0.1'", "train.lr"),  # a string is not a number
        ("train.lr=true", "train.lr"),
    ],
)
def test_coercion_refused(setting: str, key: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = cli_error(["train", "tiny", "--set", setting, "--print-config"], capsys)
    assert key in line and "got" in line


def test_sound_numbers_still_accepted() -> None:
    cfg = load_config(
        "tiny", ["train.lr=1e-3", "train.weight_decay=0", "model.layers=2", "train.tensorboard=false"]
    )
    assert cfg.train.lr == 0.001 and isinstance(cfg.train.lr, float)
    assert cfg.train.weight_decay == 0.0 and cfg.model.layers == 2 and cfg.train.tensorboard is False


def test_duplicate_yaml_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("train:\n  steps: 3\n  lr: 0.1\n  steps: 5\n")
    line = cli_error(["train", str(path), "--print-config"], capsys)
    assert "duplicate key 'steps'" in line and "line 2" in line and "line 4" in line


def test_duplicate_top_level_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("train:\n  steps: 3\nmodel:\n  layers: 2\ntrain:\n  lr: 0.1\n")
    line = cli_error(["train", str(path), "--print-config"], capsys)
    assert "duplicate key 'train'" in line and "line 5" in line


def test_nearest_key_suggestion_kept(capsys: pytest.CaptureFixture[str]) -> None:
    line = cli_error(["train", "tiny", "--set", "train.step=5", "--print-config"], capsys)
    assert "did you mean 'train.steps'" in line

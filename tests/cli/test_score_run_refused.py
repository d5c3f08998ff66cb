"""ICL commands given a score run (``icdl score train``) name it and point to ``icdl score evaluate``."""

from __future__ import annotations

from pathlib import Path

import pytest

from icdl.cli import main
from icdl.diffusion.config import load_score_config
from icdl.diffusion.train import train_score
from icdl.errors import InputError
from icdl.icl.training.train import load_run

TINY = [
    "train.steps=2", "train.log_every=1", "train.checkpoint_every=2", "train.batch_size=4", "train.warmup=1",
    "model.layers=1", "model.heads=2", "model.d_model=8", "model.d_mlp=16", "task.examples=4",
    "model.max_points=5",
]  # fmt: skip


@pytest.fixture(scope="module")
def score_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("score") / "run"
    train_score(load_score_config("score-small", TINY), d)
    return d


@pytest.mark.parametrize("command", [["evaluate"], ["report", "--evaluate", "none"], ["align"]])
def test_cli_names_the_score_run(
    command: list[str], score_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ["--out", str(tmp_path / "rep")] if command[0] == "report" else []
    with pytest.raises(SystemExit) as exc:
        main([*command, str(score_run), *extra])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert "score run" in err and "icdl score evaluate" in err, err
    assert "did you mean" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "rep").exists()


def test_load_run_names_the_score_run(score_run: Path) -> None:
    with pytest.raises(InputError, match=r"score run.*icdl score evaluate"):
        load_run(score_run)

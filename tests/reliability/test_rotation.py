"""Atomic rotation and ``icdl check`` beside a training run (issue 34, item 5).

Rotation renames an old checkpoint away (``checkpoints/.rotated-*``) before deleting it, so a kill during
the delete never leaves a half-deleted ``step_*``; ``icdl check`` ignores such a leftover and the next
start removes it. ``icdl check`` on a run that is training never reports FAIL for a checkpoint rotated
away under it, nor for a pointer that moved.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_bounded import run_cli

import icdl.icl.training.checkpoint as checkpoint
from icdl.cli.check import check_run
from icdl.config import load_config
from icdl.icl.training.train import train

SETS = ["train.steps=20", "train.checkpoint_every=10", "train.keep_checkpoints=1", "train.threads=1"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class Killed(BaseException):
    """Stands for a SIGKILL that lands half way through a delete."""


def test_kill_during_rotation_leaves_no_half_checkpoint(tmp_path: Path, monkeypatch: Any) -> None:
    run = tmp_path / "run"
    train(load_config("tiny", [*SETS, "train.steps=10"]), run, quiet=True)

    def half_rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        (Path(path) / "state.pt").unlink()  # one file gone, then the process dies
        raise Killed

    monkeypatch.setattr(checkpoint.shutil, "rmtree", half_rmtree)
    with pytest.raises(Killed):
        train(load_config("tiny", SETS), run, quiet=True)
    monkeypatch.undo()
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names[0].startswith(".rotated-step_0000010") and names[1:] == ["latest", "step_0000020"]
    code, out, err = run_cli(["check", str(run)])
    assert code == 0, out + err
    assert "FAIL" not in out and ".rotated" not in out
    # The next start removes the leftover.
    train(load_config("tiny", [*SETS, "train.steps=30", "train.schedule=constant"]), run, quiet=True)
    assert not list((run / "checkpoints").glob(".rotated-*"))


def test_check_while_training_never_fails(tmp_path: Path) -> None:
    run = tmp_path / "run"
    sets = ["train.steps=150", "train.checkpoint_every=1", "train.log_every=1", "train.keep_checkpoints=1"]
    args = [sys.executable, "-m", "icdl", "train", "tiny", "--out", str(run), "-q", "--set=train.threads=1"]
    p = subprocess.Popen([*args, *(f"--set={s}" for s in sets)], env=ENV, stderr=subprocess.PIPE, text=True)
    checks, seen = 0, set()
    try:
        while p.poll() is None:
            if not (run / "checkpoints" / "latest").is_file():
                continue
            items = check_run(run)
            failed = [i for i in items if i[0] == "FAIL"]
            assert not failed, failed
            seen.update(i[1] for i in items if "step_" in i[1])
            checks += 1
    finally:
        p.kill()
        p.wait()
    # Non-degenerate: checks ran while checkpoints were being written and rotated.
    assert checks >= 5 and len(seen) >= 3, (checks, seen)

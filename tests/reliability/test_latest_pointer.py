"""A missing or damaged ``checkpoints/latest`` never restarts a run silently (issue 34, item 1).

The pointer is checked, not trusted alone: a run with checkpoints but no valid pointer resumes (or is
evaluated) from the newest checkpoint whose manifest verifies, saying so on stderr, or stops with one
line; ``icdl check`` reports the pointer as FAIL. The same code serves ``icdl score train``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_bounded import assert_one_line_error, run_cli

from icdl.config import load_config
from icdl.diffusion.config import load_score_config
from icdl.diffusion.train import train_score
from icdl.icl.training.checkpoint import find_checkpoint, prepare_run_dir
from icdl.icl.training.train import train

SETS = ["train.steps=30", "train.checkpoint_every=10", "train.keep_checkpoints=2", "train.threads=1"]
SCORE = [
    "model.d_model=8",
    "model.layers=1",
    "model.heads=1",
    "model.d_mlp=8",
    "train.batch_size=4",
    "train.steps=4",
    "train.checkpoint_every=2",
    "train.log_every=2",
    "train.keep_checkpoints=2",
    "train.schedule=constant",
    "train.threads=1",
]


def flip_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) - 9] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("latest") / "run"
    train(load_config("tiny", SETS), run, quiet=True)
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == ["step_0000020", "step_0000030"]
    return run


@pytest.fixture
def run(two_checkpoints: Path, tmp_path: Path) -> Path:
    rd = tmp_path / "run"
    shutil.copytree(two_checkpoints, rd)
    return rd


def damage_pointer(run: Path, how: str) -> None:
    latest = run / "checkpoints" / "latest"
    latest.unlink()
    if how == "directory":
        latest.mkdir()
    elif how == "missing-name":
        latest.write_text("step_0000099\n")
    elif how == "garbage":
        latest.write_text("../../etc\n")


HOW = ["deleted", "directory", "missing-name", "garbage"]


@pytest.mark.parametrize("how", [h for h in HOW if h != "directory"])
def test_resume_uses_newest_verified_checkpoint(run: Path, how: str) -> None:
    damage_pointer(run, how)
    code, _, err = run_cli(["train", "tiny", "--out", str(run), "-q", *(f"--set={s}" for s in SETS[1:]),
                            "--set=train.steps=40"])  # fmt: skip
    assert code == 0, err
    assert "using step_0000030, the newest checkpoint that verifies" in err
    # Resumed, not restarted: step 30 is kept (keep_checkpoints=2), step 40 was written from it.
    names = sorted(p.name for p in (run / "checkpoints").glob("step_*"))
    assert names == ["step_0000030", "step_0000040"]
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_0000040"


def test_pointer_replaced_by_a_directory_refuses_resume(run: Path) -> None:
    damage_pointer(run, "directory")
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    code, _, err = run_cli(["train", "tiny", "--out", str(run), "-q", *(f"--set={s}" for s in SETS)])
    assert_one_line_error(code, err, "is not a file", "step_0000030")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before
    assert find_checkpoint(run) == run / "checkpoints" / "step_0000030"  # readers still find the newest


def test_damaged_newest_is_skipped_by_readers_refused_by_resume(run: Path) -> None:
    damage_pointer(run, "deleted")
    flip_bit(run / "checkpoints" / "step_0000030" / "model.safetensors")
    assert find_checkpoint(run) == run / "checkpoints" / "step_0000020"
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    code, _, err = run_cli(["train", "tiny", "--out", str(run), "-q", *(f"--set={s}" for s in SETS)])
    assert_one_line_error(code, err.split("\n", 1)[-1] if err.startswith("icdl: note") else err,
                          "step_0000030", "newer than step_0000020")  # fmt: skip
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before  # nothing rotated


def test_no_checkpoint_verifies_is_one_line(run: Path) -> None:
    damage_pointer(run, "directory")
    for ck in (run / "checkpoints").glob("step_*"):
        flip_bit(ck / "state.pt")
    code, _, err = run_cli(["evaluate", str(run), "--prompts", "4"])
    assert_one_line_error(code, err, "no checkpoint of the run verifies", "state.pt")


def test_pointer_without_checkpoints_is_refused(run: Path) -> None:
    for ck in (run / "checkpoints").glob("step_*"):
        shutil.rmtree(ck)
    with pytest.raises(Exception, match="no complete checkpoint"):
        prepare_run_dir(run, load_config("tiny", SETS))


@pytest.mark.parametrize("how", HOW)
def test_check_reports_a_damaged_pointer(run: Path, how: str) -> None:
    damage_pointer(run, how)
    code, out, _ = run_cli(["check", str(run)])
    assert code == 2
    line = next(s for s in out.splitlines() if s.split()[1].endswith("latest:"))
    assert line.startswith("FAIL") and "uses step_0000030" in line


def test_newer_checkpoint_than_pointer_is_used(run: Path) -> None:
    # A run killed between publishing step 30 and moving the pointer.
    (run / "checkpoints" / "latest").write_text("step_0000020\n")
    assert find_checkpoint(run) == run / "checkpoints" / "step_0000030"


def test_score_train_resumes_from_newest_verified(tmp_path: Path) -> None:
    run = tmp_path / "score"
    train_score(load_score_config("score-small", SCORE), run)
    damage_pointer(run, "deleted")
    sets = [*SCORE, "train.steps=6"]
    code, _, err = run_cli(["score", "train", "score-small", "--out", str(run), "--quiet",
                            *(f"--set={s}" for s in sets)])  # fmt: skip
    assert code == 0, err
    assert "using step_0000004" in err
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == ["step_0000004", "step_0000006"]
    damage_pointer(run, "directory")
    code, out, _ = run_cli(["check", str(run)])
    assert code == 2 and "FAIL   " + str(run / "checkpoints" / "latest") in out

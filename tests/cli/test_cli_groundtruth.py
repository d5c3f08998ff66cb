"""``icdl groundtruth``: writes labelled models, resumes, and refuses bad input in one line (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from icdl.cli import main


def _run(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


ARGS = ["groundtruth", "--max-depth", "2", "--max-width", "2", "--max-steps", "1", "--prompts", "1"]


def test_writes_and_prints_the_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, [*ARGS, "--count", "3", "--out", str(tmp_path / "gt"), "--json"])
    assert code == 0, err
    index = json.loads(out)
    assert index["count"] == 3 and [m["name"] for m in index["models"]] == [
        "model_0000",
        "model_0001",
        "model_0002",
    ]
    assert all((tmp_path / "gt" / m["name"] / "ledger.json").is_file() for m in index["models"])


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for extra, message in (
        (["--variants", "paper,papr"], "unknown papr"),
        (["--activations", ""], "empty list"),
    ):
        code, _, err = _run(capsys, [*ARGS, *extra, "--out", str(tmp_path / "x")])
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    (tmp_path / "gt").mkdir()
    (tmp_path / "gt" / "something").write_text("x")
    code, _, err = _run(capsys, [*ARGS, "--out", str(tmp_path / "gt")])
    assert code == 2 and "holds something else" in err
    assert not (tmp_path / "x").exists()

"""`icdl check PATH`: one line per item, exit 0 when sound, 2 when anything is damaged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from icdl.cli import main
from icdl.construct import compile_gd_transformer, save
from icdl.icl.evaluation.evaluate import EvalOptions, evaluate_run, result_path
from icdl.icl.training.train import find_checkpoint
from icdl.nets import NetSpec

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def icdl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "icdl", *args], capture_output=True, text=True, env=ENV, timeout=120
    )


def run_check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as exc:
        main(["check", str(path)])
    return int(exc.value.code or 0), capsys.readouterr().out.splitlines()


def test_check_help() -> None:
    p = icdl("check", "--help")
    assert p.returncode == 0 and "run directory" in p.stdout


def test_sound_run_then_flipped_bit(run_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evaluate_run(run_copy, "mixture", prompts=16, options=EvalOptions(baselines=("zero",), cost=False,
                 resamples=20), progress=False)  # fmt: skip
    code, lines = run_check(run_copy, capsys)
    checkpoints = list((run_copy / "checkpoints").glob("step_*"))
    assert code == 0 and len(lines) == 2 + len(checkpoints) + 1
    assert all(line.startswith("ok") for line in lines), lines
    ck = find_checkpoint(run_copy)
    assert ck is not None
    data = bytearray((ck / "state.pt").read_bytes())
    data[len(data) // 2] ^= 1
    (ck / "state.pt").write_bytes(bytes(data))
    code, lines = run_check(run_copy, capsys)
    assert code == 2
    bad = [line for line in lines if line.startswith("FAIL")]
    assert len(bad) >= 1 and "state.pt" in bad[0]


def test_edited_cache_fails(run_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evaluate_run(run_copy, "mixture", prompts=16, options=EvalOptions(baselines=("zero",), cost=False,
                 resamples=20), progress=False)  # fmt: skip
    path = result_path(run_copy, "mixture")
    data = json.loads(path.read_text())
    data["seconds"] = 0.0
    path.write_text(json.dumps(data))
    code, lines = run_check(run_copy, capsys)
    assert code == 2 and any(line.startswith("FAIL") and "mixture.json" in line for line in lines)


def test_saved_construction(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = save(compile_gd_transformer(NetSpec(2, 2, 2, 1), steps=1, n=3), tmp_path / "m")
    code, lines = run_check(d, capsys)
    assert code == 0 and len(lines) == 1 and lines[0].startswith("ok")
    w = bytearray((d / "weights.safetensors").read_bytes())
    w[-2] ^= 1
    (d / "weights.safetensors").write_bytes(bytes(w))
    code, lines = run_check(d, capsys)
    assert code == 2 and lines[0].startswith("FAIL")


def test_not_an_artefact(tmp_path: Path) -> None:
    p = icdl("check", str(tmp_path))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1

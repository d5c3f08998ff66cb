"""Integrity manifests of checkpoints and evaluation caches: a flipped bit is refused, not trusted."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from legacy_runs import make_legacy

from icdl.config import load_config
from icdl.errors import InputError
from icdl.icl.evaluation.evaluate import EvalOptions, evaluate_run, result_path, result_status
from icdl.icl.training.train import find_checkpoint, load_run, train
from icdl.manifest import MANIFEST

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
CHEAP = EvalOptions(baselines=("zero",), resamples=20, cost=False)
MORE = ["train.steps=30", "train.checkpoint_every=10", "train.threads=1"]


def flip_bit(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0x01
    path.write_bytes(bytes(data))


def latest(run: Path) -> Path:
    ck = find_checkpoint(run)
    assert ck is not None
    return ck


def test_checkpoint_has_manifest(run_copy: Path) -> None:
    for ck in (run_copy / "checkpoints").glob("step_*"):
        files = json.loads((ck / MANIFEST).read_text())["files"]
        assert set(files) == {"model.safetensors", "state.pt"}


@pytest.mark.parametrize("name", ["model.safetensors", "state.pt"])
def test_flipped_bit_refused_by_resume_and_nothing_rotated(run_copy: Path, name: str) -> None:
    ck = latest(run_copy)
    flip_bit(ck / name)
    before = sorted(p.name for p in (run_copy / "checkpoints").iterdir())
    with pytest.raises(InputError, match=re.escape(name)):
        train(load_config("tiny", MORE), run_copy, quiet=True)
    assert sorted(p.name for p in (run_copy / "checkpoints").iterdir()) == before
    assert (ck / name).is_file()


def test_flipped_bit_refused_by_load_run(run_copy: Path) -> None:
    flip_bit(latest(run_copy) / "model.safetensors")
    with pytest.raises(InputError, match=r"model\.safetensors"):
        load_run(run_copy)


def test_cli_evaluate_exit_2_naming_file(run_copy: Path) -> None:
    # A bit inside the tensor data (past the header) that safetensors itself cannot notice.
    f = latest(run_copy) / "model.safetensors"
    flip_bit(f, offset=f.stat().st_size - 3)
    p = subprocess.run(
        [sys.executable, "-m", "icdl", "evaluate", str(run_copy), "--suite", "mixture", "--prompts", "16"],
        capture_output=True, text=True, env=ENV, timeout=300,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "model.safetensors" in lines[0]
    assert not (run_copy / "eval").exists()


def test_legacy_checkpoint_without_manifest_loads(run_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_legacy(run_copy)
    model, _ = load_run(run_copy)
    assert model is not None
    assert "no manifest" in capsys.readouterr().err


def test_edited_cache_recomputed(run_copy: Path) -> None:
    first = evaluate_run(run_copy, "mixture", prompts=16, options=CHEAP, progress=False)
    assert first["from_cache"] is False
    path = result_path(run_copy, "mixture")
    data = json.loads(path.read_text())
    for cond in data["conditions"].values():
        icl = cond["predictors"]["icl"]
        icl["r2"] = [0.999 if r is not None else None for r in icl["r2"]]
    path.write_text(json.dumps(data))
    assert result_status(run_copy, "mixture") == "stale"
    again = evaluate_run(run_copy, "mixture", prompts=16, options=CHEAP, progress=False)
    assert again["from_cache"] is False
    for name, cond in again["conditions"].items():
        assert cond["predictors"]["icl"]["r2"] == first["conditions"][name]["predictors"]["icl"]["r2"]


def test_cache_of_rewritten_checkpoint_recomputed(run_copy: Path) -> None:
    evaluate_run(run_copy, "mixture", prompts=16, options=CHEAP, progress=False)
    assert result_status(run_copy, "mixture") == "ok"
    ck = latest(run_copy)
    mtime = (ck / "model.safetensors").stat().st_mtime_ns
    # Rewrite the checkpoint at the same step (another training of it), keeping names and mtime.
    other = run_copy.parent / "other"
    train(load_config("tiny", [*MORE[1:], "train.steps=20", "train.seed=7"]), other, quiet=True)
    for name in ("model.safetensors", "state.pt", MANIFEST):
        (ck / name).write_bytes((latest(other) / name).read_bytes())
        os.utime(ck / name, ns=(mtime, mtime))
    assert result_status(run_copy, "mixture") == "stale"
    again = evaluate_run(run_copy, "mixture", prompts=16, options=CHEAP, progress=False)
    assert again["from_cache"] is False


def test_cache_of_a_newer_legacy_checkpoint_is_stale(run_copy: Path) -> None:
    """Without a manifest the checkpoint hash cannot tell a rewrite; the documented fallback is the time
    stamp: a checkpoint newer than the one the cache recorded makes the cache stale (same name and step)."""
    make_legacy(run_copy)
    evaluate_run(run_copy, "mixture", prompts=16, options=CHEAP, progress=False)
    assert result_status(run_copy, "mixture") == "ok"
    weights = latest(run_copy) / "model.safetensors"
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # rewritten one second later
    assert result_status(run_copy, "mixture") == "stale"
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))  # older than the cache's: not newer
    assert result_status(run_copy, "mixture") == "ok"


def test_report_refuses_damaged_checkpoint(run_copy: Path, tmp_path: Path) -> None:
    evaluate_run(run_copy, "in-distribution", prompts=16, options=CHEAP, progress=False)
    f = latest(run_copy) / "state.pt"
    flip_bit(f)
    out = tmp_path / "report"
    p = subprocess.run(
        [sys.executable, "-m", "icdl", "report", str(run_copy), "--evaluate", "none", "--out", str(out)],
        capture_output=True, text=True, env=ENV, timeout=300,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "state.pt" in p.stderr
    # Nothing is left behind: not even the empty report folder (it did not exist before the command).
    assert not out.exists()

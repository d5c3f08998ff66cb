"""Data parallel: a 2-process gloo torchrun run equals the single-process run with the same global batch.

Tolerance: after 6 AdamW steps of the tiny preset, every weight agrees to ``atol = 1e-5`` (plus
``rtol = 1e-4``) and every logged loss to ``rtol = 1e-5``. The two runs see exactly the same prompts
(each rank draws the global batch of (seed, step) and keeps its half), so the only difference is the
float32 summation order of the gradient all-reduce (measured: max |Δw| ≈ 2e-7 after 10 steps).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from icdl.config import load_config
from icdl.errors import InputError
from icdl.icl.training.train import find_checkpoint, train

OVERRIDES = [
    "train.steps=6",
    "train.log_every=2",
    "train.checkpoint_every=3",
    "train.keep_checkpoints=2",
    "train.threads=1",
]


def test_two_process_gloo_matches_single_process(tmp_path: Path) -> None:
    ddp, single = tmp_path / "ddp", tmp_path / "single"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "icdl", "train", "tiny", "--out", str(ddp), "-q"]  # fmt: skip
    for o in OVERRIDES:
        cmd += ["--set", o]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and "exitcode: -6" in proc.stderr:
        # A worker aborted (SIGABRT) inside the gloo transport; seen once on a heavily loaded 2-core
        # machine and never reproduced alone. One fresh try, so a real failure still fails twice.
        shutil.rmtree(ddp, ignore_errors=True)
        first = proc.stderr
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"failed twice; first: {first[:3000]}\nsecond: {proc.stderr[:3000]}"
    assert proc.returncode == 0, proc.stderr[:3000] + "\n...\n" + proc.stderr[-2000:]
    torch.set_num_threads(1)
    train(load_config("tiny", OVERRIDES), single, quiet=True)

    ck_d, ck_s = find_checkpoint(ddp), find_checkpoint(single)
    assert ck_d is not None and ck_s is not None and ck_d.name == ck_s.name == "step_0000006"
    wd, ws = load_file(str(ck_d / "model.safetensors")), load_file(str(ck_s / "model.safetensors"))
    for k in ws:
        torch.testing.assert_close(wd[k], ws[k], atol=1e-5, rtol=1e-4)
    # The tolerance is meaningful: the last three steps moved the weights far more than it allows.
    w3 = load_file(str(single / "checkpoints" / "step_0000003" / "model.safetensors"))
    assert max((ws[k] - w3[k]).abs().max().item() for k in ws) > 1e-3
    ld = [json.loads(line) for line in (ddp / "metrics.jsonl").read_text().splitlines()]
    ls = [json.loads(line) for line in (single / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in ld] == [r["step"] for r in ls] == [2, 4, 6]  # rank 0 alone wrote metrics
    for a, b in zip(ld, ls, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["y_var"] == pytest.approx(b["y_var"], rel=1e-9)  # the same prompts on both sides
    # Only rank 0 writes: one checkpoint directory, no stray temporary files.
    assert sorted(p.name for p in (ddp / "checkpoints").iterdir()) == [
        "latest",
        "step_0000003",
        "step_0000006",
    ]


def test_global_batch_must_split_evenly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(InputError, match="divisible"):
        train(load_config("tiny"), tmp_path / "r", quiet=True)  # batch 32 over 3 processes
    assert not (tmp_path / "r").exists()
